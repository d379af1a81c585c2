"""`phaseflow test`: runs workflow test files; exact summary line, readable failures."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.commands import ROOT, run_cli

WORKFLOW = """\
phaseflow: 1
name: mini
initial: ask
state:
  answer: {type: string}
  policy: {type: object}
phases:
  ask:
    goal: Ask.
    tools: [search]
    transitions:
      - {to: check, when: state.answer}
      - {to: gone, trigger: model}
  check:
    goal: Check.
    requires: [policy]
    prepare:
      - {name: load, produces: [policy], call: load_policy}
    on_enter:
      - call: notify
    transitions:
      - {to: gone, when: seconds_in_phase >= 60}
  gone:
    goal: Done.
    terminal: true
"""

TESTS = """\
phaseflow-test: 1
workflow: mini.yaml
mocks:
  load_policy: {returns: {policy: {name: std}}}
  notify: {}
scenarios:
  - name: answers and times out
    steps:
      - expect: {phase: ask, tools: [search]}
      - tool: search
      - tool: other
        expect: refused
      - set: {answer: yes}
      - expect: {phase: check, called: [load_policy, notify], state: {policy: {name: std}}}
      - wait: 59
      - expect: {phase: check}
      - wait: 1
      - expect: {phase: gone, terminal: true, history: [check, gone]}
  - name: a failing preparation leaves the target blocked
    mocks:
      load_policy: {raises: down}
    steps:
      - set: {answer: "no"}
      - expect: {phase: ask, missing: [policy], called: [load_policy]}
  - name: the model leaves
    steps:
      - request: gone
      - expect: {phase: gone}
"""


def _setup(tmp_path: Path, tests: str = TESTS) -> Path:
    (tmp_path / "mini.yaml").write_text(WORKFLOW)
    path = tmp_path / "mini.test.yaml"
    path.write_text(tests)
    return path


def test_passing_file_with_coverage(tmp_path: Path) -> None:
    _setup(tmp_path)
    proc = run_cli("test", str(tmp_path), "--coverage")
    assert proc.returncode == 0, proc.stdout
    lines = proc.stdout.splitlines()
    assert lines[-1] == "3 passed, 0 failed"
    assert "phases 3/3, transitions 3/3 (100% of phases and transitions)" in proc.stdout


def test_failure_names_scenario_line_expected_and_found(tmp_path: Path) -> None:
    broken = TESTS.replace("- expect: {phase: check}", "- expect: {phase: gone}")
    path = _setup(tmp_path, broken)
    proc = run_cli("test", str(path))
    assert proc.returncode == 1
    assert proc.stdout.splitlines()[-1] == "2 passed, 1 failed"
    assert "FAIL answers and times out" in proc.stdout
    line = broken.splitlines().index("      - expect: {phase: gone}") + 1
    assert f"mini.test.yaml:{line}: expect failed:" in proc.stdout
    assert "phase: expected 'gone', found 'check'" in proc.stdout


def test_unmocked_call_fails_the_scenario(tmp_path: Path) -> None:
    path = _setup(tmp_path, TESTS.replace("  notify: {}\n", ""))
    proc = run_cli("test", str(path))
    assert proc.returncode == 1
    assert "called notify, which the test file does not mock" in proc.stdout


def test_coverage_lists_what_was_not_exercised(tmp_path: Path) -> None:
    only_first = TESTS.split("  - name: a failing")[0]
    path = _setup(tmp_path, only_first)
    proc = run_cli("test", str(path), "--coverage")
    assert proc.returncode == 0
    assert "not exercised: transition ask -> gone (#2, model)" in proc.stdout


def test_mistakes_in_the_test_file_name_their_line(tmp_path: Path) -> None:
    path = _setup(tmp_path, TESTS.replace("- tool: search", "- tool: search\n        expekt: x"))
    proc = run_cli("test", str(path))
    assert proc.returncode == 1
    assert re.search(
        r"mini\.test\.yaml:\d+:\d+: unknown step 'expekt'; did you mean 'expect'\?", proc.stdout
    )
    assert proc.stdout.splitlines()[-1] == "0 passed, 1 failed"


def test_usage_errors_and_empty_folders(tmp_path: Path) -> None:
    assert run_cli("test", str(tmp_path / "missing")).returncode == 2
    empty = run_cli("test", str(tmp_path))
    # a folder without test files is a usage error (a CI job pointed at the wrong folder)
    assert empty.returncode == 2
    assert f"no workflow test files ('phaseflow-test: 1') in {tmp_path}" in empty.stderr


def test_bundled_workflow_tests_pass_with_full_coverage() -> None:
    proc = run_cli("test", str(ROOT / "workflows"), "--coverage", timeout=300)
    assert proc.returncode == 0, proc.stdout
    assert re.fullmatch(r"\d+ passed, 0 failed", proc.stdout.splitlines()[-1])
    reports = [line for line in proc.stdout.splitlines() if line.startswith("coverage ")]
    assert len(reports) >= 4
    assert all("(100% of phases and transitions)" in line for line in reports), reports


def test_the_conversations_run_in_either_request_layout() -> None:
    path = str(ROOT / "workflows" / "refund-desk.test.yaml")
    # the block in the system message: every check holds (navigation: reads both)
    system = run_cli("test", path, "--context-position", "system", timeout=300)
    assert system.returncode == 0, system.stdout
    assert re.fullmatch(r"\d+ passed, 0 failed", system.stdout.splitlines()[-1])
    # every tool of the workflow in every request: an 'offered:' check sees them all
    every = run_cli("test", path, "--offer-tools", "workflow", timeout=300)
    assert every.returncode == 1
    assert ("offered: expected [crm.lookup_customer, crm.verify_identity, go_to_phase], "
            "found [approvals.check_status, crm.lookup_customer, crm.verify_identity, "
            "go_to_phase, orders.search, orders.select, payments.issue_refund, record]"
            ) in every.stdout
