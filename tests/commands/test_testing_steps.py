"""The workflow test runner, in process: every step and expect key of the spec's
"Workflow test files" section, turn counting, the clock, mocks and their overrides."""

from __future__ import annotations

from pathlib import Path

import pytest

from phaseflow.testing import run_test_file
from tests.support.commands import run_cli

WORKFLOW = """\
phaseflow: 1
name: steps
initial: start
state:
  x: {type: any}
  y: {type: any, default: 7}
  p: {type: any}
  flag: {type: any}
phases:
  start:
    goal: Start.
    tools: [t_one, t_two]
    needs: [x, p]
    transitions:
      - {to: first_turn, when: "turn == 1 and turns_in_phase == 1 and state.x == 'first'"}
      - {to: counted, when: "turns_in_phase == 3"}
      - {to: timed, when: "seconds_in_phase >= 10"}
      - {to: prepared, when: "state.x == 'prep'"}
      - {to: asked, trigger: model, when: "state.flag"}
      - {to: asked, trigger: model}
  first_turn:
    goal: Entered on the first boundary.
    tools: []
    transitions:
      - {to: start, when: "turns_in_phase == 1 and turn == 2 and state.x == null"}
  counted:
    goal: Three boundaries in start.
    terminal: true
  timed:
    goal: Ten seconds in start.
    terminal: true
  prepared:
    goal: Prepared.
    requires: [p]
    prepare:
      - {name: load, produces: [p], call: load_p}
    on_enter:
      - call: hello
    terminal: true
  asked:
    goal: Asked.
    terminal: true
"""


def _run(tmp_path: Path, tests: str) -> list[str | None]:
    (tmp_path / "steps.yaml").write_text(WORKFLOW)
    path = tmp_path / "steps.test.yaml"
    path.write_text("phaseflow-test: 1\nworkflow: steps.yaml\n" + tests)
    result = run_test_file(str(path))
    assert result.error is None, result.error
    return [s.failure for s in result.scenarios]


def test_turns_are_counted_from_1_and_turns_in_phase_includes_the_current_boundary(
    tmp_path: Path,
) -> None:
    failures = _run(tmp_path, """\
mocks: {}
scenarios:
  - name: first boundary is turn 1 and sees turns_in_phase 1
    state: {x: first}
    steps:
      - expect: {phase: start, state: {y: 7, x: first}}
      - turns: 1
      - expect: {phase: first_turn, history: [first_turn], tools: []}
      - unset: [x]
      - expect: {phase: start, history: [first_turn, start], state: {x: null}}
  - name: turns N counts N boundaries
    steps:
      - turns: 2
      - expect: {phase: start}
      - turns: 1
      - expect: {phase: counted, terminal: true}
  - name: the clock starts at 0 and moves only when told
    steps:
      - wait: 9.5
      - expect: {phase: start}
      - wait: 0.5
      - expect: {phase: timed}
""")
    assert failures == [None, None, None]


def test_expect_keys_and_their_failures(tmp_path: Path) -> None:
    failures = _run(tmp_path, """\
mocks:
  load_p: {returns: {p: 1}}
  hello: {}
scenarios:
  - name: everything that holds
    steps:
      - expect:
          phase: start
          terminal: false
          tools: [t_two, t_one]
          needs: [p, x]
          navigation: ["Current phase: start", "Still needed: x, p"]
          called: []
          history: []
      - tool: t_one
      - tool: other
        expect: refused
      - set: {x: prep}
      - expect: {phase: prepared, called: [load_p, hello], state: {p: 1}, missing: []}
  - name: a wrong expectation names the line, what was expected and what was found
    steps:
      - expect: {phase: start, tools: all, needs: [x], state: {y: 8}, navigation: [nope]}
""")
    assert failures[0] is None
    text = failures[1]
    assert text is not None
    assert "steps.test.yaml:24: expect failed:" in text
    assert "tools: expected all, found [t_one, t_two]" in text
    assert "needs: expected [x], found [p, x]" in text
    assert "state.y: expected 8, found 7" in text
    assert "navigation: expected to contain 'nope'" in text


def test_missing_is_the_absent_requires_of_the_blocked_target(tmp_path: Path) -> None:
    failures = _run(tmp_path, """\
mocks:
  load_p: {returns: {}}
  hello: {}
scenarios:
  - name: blocked
    steps:
      - set: {x: prep}
      - expect: {phase: start, missing: [p], called: [load_p]}
      - turns: 1
      - expect: {missing: [p], called: [load_p]}
  - name: a scenario's mock replaces the file's
    mocks:
      load_p: {returns: {p: 2}}
    steps:
      - set: {x: prep}
      - expect: {phase: prepared, state: {p: 2}, missing: []}
""")
    assert failures == [None, None]


def test_requests_and_gotos(tmp_path: Path) -> None:
    failures = _run(tmp_path, """\
mocks: {hello: {}}
scenarios:
  - name: a request is taken or refused
    steps:
      - request: counted
        expect: refused
      - request: asked
      - expect: {phase: asked, history: [asked]}
      - request: start
        expect: refused
  - name: goto ignores guards and requires
    steps:
      - goto: prepared
      - expect: {phase: prepared, history: [prepared], navigation: ["Blocked until"]}
  - name: a wrong request expectation
    steps:
      - request: asked
        expect: refused
""")
    assert failures[:2] == [None, None]
    assert failures[2] is not None
    assert "request asked: expected refused, found taken (asked in phase 'start')" in failures[2]


def test_an_unmocked_call_fails_the_scenario_naming_it(tmp_path: Path) -> None:
    failures = _run(tmp_path, """\
mocks:
  load_p: {returns: {p: 1}}
scenarios:
  - name: hello is not mocked
    steps:
      - set: {x: prep}
      - expect: {phase: prepared}
""")
    assert failures[0] is not None
    assert "steps.test.yaml:8: the workflow called hello" in failures[0]


def test_coverage_credits_the_model_transition_that_was_taken(tmp_path: Path) -> None:
    (tmp_path / "steps.yaml").write_text(WORKFLOW)
    path = tmp_path / "steps.test.yaml"
    path.write_text("""\
phaseflow-test: 1
workflow: steps.yaml
scenarios:
  - name: without flag the unconditional model transition is taken
    steps:
      - request: asked
""")
    result = run_test_file(str(path))
    assert result.coverage is not None
    assert ("start", 5) in result.coverage.seen_transitions
    assert ("start", 4) not in result.coverage.seen_transitions


@pytest.mark.parametrize("args", [["--bogus"], ["nothing-here"]])
def test_usage_errors_exit_2(tmp_path: Path, args: list[str]) -> None:
    assert run_cli("test", *args, cwd=tmp_path).returncode == 2


def test_coverage_is_per_workflow_and_merged_across_files(tmp_path: Path) -> None:
    (tmp_path / "steps.yaml").write_text(WORKFLOW)
    head = "phaseflow-test: 1\nworkflow: steps.yaml\nscenarios:\n"
    (tmp_path / "a.test.yaml").write_text(head + "  - steps: [{turns: 3}]\n")
    (tmp_path / "b.test.yaml").write_text(head + "  - steps: [{wait: 10}]\n")
    proc = run_cli("test", str(tmp_path), "--coverage")
    assert proc.returncode == 0, proc.stdout
    reports = [line for line in proc.stdout.splitlines() if line.startswith("coverage ")]
    assert len(reports) == 1 and "phases 3/6, transitions 2/7" in reports[0]
    assert proc.stdout.splitlines()[-1] == "2 passed, 0 failed"


def test_validate_folder_search_skips_test_files(tmp_path: Path) -> None:
    (tmp_path / "steps.yaml").write_text(WORKFLOW)
    (tmp_path / "steps.test.yaml").write_text(
        "phaseflow-test: 1\nworkflow: steps.yaml\nscenarios:\n  - steps: [{turns: 1}]\n")
    proc = run_cli("validate", str(tmp_path))
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout.splitlines()[-1].startswith("1 files checked")
