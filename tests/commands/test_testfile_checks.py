"""Mistakes in a workflow test file, found before a scenario runs: a request, tool or
goto naming what the workflow does not have is an error (an `expect: refused` must not
pass on a typo); every error of the file is reported at once with file:line:column;
mocks no scenario calls and undeclared state keys are warnings, failing only `--strict`."""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.commands import run_cli

WORKFLOW = """\
phaseflow: 1
name: desk
initial: greet
state:
  customer_id: {type: string}
  amount: {type: number}
tools:
  lookup_customer: {writes: [customer_id]}
  issue_refund: {}
phases:
  greet:
    goal: Greet.
    tools: [lookup_customer]
    on_exit:
      - call: notify_customer
    transitions:
      - {to: refund, when: state.customer_id}
      - {to: escalate, trigger: model, when: state.amount}
  refund:
    goal: Refund.
    tools: [issue_refund]
    on_enter:
      - call: audit
    transitions:
      - {to: escalate, trigger: model}
  escalate:
    goal: Hand over.
    terminal: true
"""

HEAD = """\
phaseflow-test: 1
workflow: desk.yaml
mocks:
  notify_customer: {}
  audit: {}
scenarios:
"""

GOOD_SCENARIO = """\
  - name: refund
    steps:
      - request: escalate
        expect: refused
      - set: {customer_id: C-1}
      - expect: {phase: refund, called: [notify_customer, audit]}
"""


def _setup(tmp_path: Path, body: str, head: str = HEAD, workflow: str = WORKFLOW) -> Path:
    (tmp_path / "desk.yaml").write_text(workflow)
    path = tmp_path / "desk.test.yaml"
    path.write_text(head + body)
    return path


def _at(text: str, needle: str, occurrence: int = 0) -> str:
    """``line:column`` of the ``occurrence``-th ``needle`` in ``text`` (1-based)."""
    index = -1
    for _ in range(occurrence + 1):
        index = text.index(needle, index + 1)
    line = text.count("\n", 0, index) + 1
    column = index - (text.rfind("\n", 0, index) + 1) + 1
    return f"{line}:{column}"


def test_the_good_file_passes(tmp_path: Path) -> None:
    proc = run_cli("test", str(_setup(tmp_path, GOOD_SCENARIO)))
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout.splitlines()[-1] == "1 passed, 0 failed"


def test_a_refused_request_for_a_phase_that_does_not_exist_is_an_error(tmp_path: Path) -> None:
    body = GOOD_SCENARIO.replace("request: escalate", "request: escalat")
    path = _setup(tmp_path, body)
    proc = run_cli("test", str(path))
    assert proc.returncode == 1
    where = _at(HEAD + body, "escalat\n")
    assert (
        f"ERROR {path}:{where}: request: the workflow has no phase 'escalat'; "
        "did you mean 'escalate'?"
    ) in proc.stdout
    assert proc.stdout.splitlines()[-1] == "0 passed, 1 failed"


def test_a_refused_tool_that_is_not_in_the_catalogue_is_an_error(tmp_path: Path) -> None:
    body = GOOD_SCENARIO + "      - tool: isue_refund\n        expect: refused\n"
    path = _setup(tmp_path, body)
    proc = run_cli("test", str(path))
    assert proc.returncode == 1
    where = _at(HEAD + body, "isue_refund")
    assert (
        f"{path}:{where}: tool: the workflow's tools have no 'isue_refund'; "
        "did you mean 'issue_refund'?"
    ) in proc.stdout


def test_without_a_catalogue_any_tool_name_may_be_asked_about(tmp_path: Path) -> None:
    workflow = WORKFLOW.replace(
        "tools:\n  lookup_customer: {writes: [customer_id]}\n  issue_refund: {}\n", ""
    )
    body = GOOD_SCENARIO + "      - tool: web_search\n        expect: refused\n"
    proc = run_cli("test", str(_setup(tmp_path, body, workflow=workflow)))
    assert proc.returncode == 0, proc.stdout


def test_goto_expect_phase_history_and_called_are_checked(tmp_path: Path) -> None:
    body = """\
  - name: typos
    steps:
      - goto: refnd
      - expect: {phase: refnd, history: [refnd], called: [notfy_customer]}
"""
    path = _setup(tmp_path, body)
    proc = run_cli("test", str(path))
    text = HEAD + body
    assert proc.returncode == 1
    assert f"{path}:{_at(text, 'refnd')}: goto: the workflow has no phase 'refnd'" in proc.stdout
    assert f"{path}:{_at(text, 'refnd', 1)}: expect phase: the workflow has no phase" in (
        proc.stdout
    )
    assert f"{path}:{_at(text, 'refnd', 2)}: expect history: the workflow has no phase" in (
        proc.stdout
    )
    assert (
        f"{path}:{_at(text, 'notfy')}: expect called: the workflow never calls 'notfy_customer'; "
        "did you mean 'notify_customer'?"
    ) in proc.stdout


def test_every_error_of_the_file_is_reported_at_once(tmp_path: Path) -> None:
    body = """\
  - name: many mistakes
    steps:
      - expekt: {phase: greet}
      - request: nowhere
      - turns: -1
      - tool: nothing
      - expect: {phaze: greet}
  - name: more
    steps:
      - wait: soon
      - set: 3
"""
    path = _setup(tmp_path, body)
    proc = run_cli("test", str(path))
    assert proc.returncode == 1
    errors = [line for line in proc.stdout.splitlines() if line.startswith("  ERROR ")]
    assert len(errors) == 7, proc.stdout
    assert all(re.match(rf"  ERROR {re.escape(str(path))}:\d+:\d+: ", e) for e in errors)
    lines = [int(e.split(":")[1]) for e in errors]
    assert lines == sorted(lines)
    assert "unknown key 'phaze' in expect; did you mean 'phase'?" in proc.stdout


def test_mocks_never_used_are_warnings_that_do_not_fail(tmp_path: Path) -> None:
    head = HEAD.replace("  audit: {}\n", "  audit: {}\n  audt: {}\n")
    body = """\
  - name: only greets
    mocks:
      audit: {returns: {amount: 3}}
    steps:
      - request: escalate
        expect: refused
"""
    path = _setup(tmp_path, body, head=head)
    proc = run_cli("test", str(path))
    text = head + body
    assert proc.returncode == 0, proc.stdout
    out = proc.stdout
    assert (
        f"{path}:{_at(text, 'audt')}: warning: mock 'audt': the workflow never calls 'audt'; "
        "did you mean 'audit'?"
    ) in out
    assert f"{path}:{_at(text, 'notify_customer')}: warning: mock 'notify_customer' is never " \
        "called by any scenario" in out
    assert f"{path}:{_at(text, 'audit', 1)}: warning: mock 'audit' is never called by " \
        "scenario 'only greets'" in out
    assert out.splitlines()[-1] == "1 passed, 0 failed"
    strict = run_cli("test", "--strict", str(path))
    assert strict.returncode == 1
    assert "FAIL 4 warning(s) in the test file (--strict)" in strict.stdout
    assert strict.stdout.splitlines()[-1] == "1 passed, 1 failed"


def test_undeclared_state_keys_are_warnings(tmp_path: Path) -> None:
    body = """\
  - name: typos in keys
    state: {custmer_id: C-1}
    steps:
      - set: {amout: 3, customer_id: C-2}
      - unset: [amont]
      - expect: {phase: refund, state: {custome_id: null}, called: [notify_customer, audit]}
"""
    path = _setup(tmp_path, body)
    proc = run_cli("test", str(path))
    text = HEAD + body
    assert proc.returncode == 0, proc.stdout
    for needle, what in (("custmer_id", "scenario 'typos in keys' state"), ("amout", "set"),
                         ("amont", "unset"), ("custome_id", "expect state")):
        assert (
            f"{path}:{_at(text, needle)}: warning: {what}: '{needle}' is not a state key the "
            "workflow declares; did you mean"
        ) in proc.stdout, needle
    assert "customer_id' is not" not in proc.stdout
    assert run_cli("test", "--strict", str(path)).returncode == 1


def test_no_key_warnings_when_the_workflow_declares_no_state(tmp_path: Path) -> None:
    workflow = WORKFLOW.replace(
        "state:\n  customer_id: {type: string}\n  amount: {type: number}\n", ""
    )
    body = GOOD_SCENARIO.replace("{customer_id: C-1}", "{customer_id: C-1, anything: 1}")
    proc = run_cli("test", "--strict", str(_setup(tmp_path, body, workflow=workflow)))
    assert proc.returncode == 0, proc.stdout
    assert ": warning:" not in proc.stdout


# a leading letter outside YAML's keywords keeps `null`, `true`... out; the known names
# are added so that some steps name what the workflow has
NAMES = st.one_of(
    st.text("abcdefghijklmnopqrstuvwxyz_", max_size=8).map(lambda s: "q" + s),
    st.sampled_from(["greet", "refund", "escalate", "lookup_customer", "issue_refund"]),
)


@settings(max_examples=10, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["request", "goto", "tool"]), NAMES), min_size=1,
                max_size=6))
def test_every_unknown_name_is_reported_with_its_position(steps: list[tuple[str, str]]) -> None:
    import tempfile

    phases = {"greet", "refund", "escalate"}
    tools = {"lookup_customer", "issue_refund"}
    body = "  - name: random\n    steps:\n" + "".join(
        f"      - {{{kind}: {name}}}\n" for kind, name in steps
    )
    with tempfile.TemporaryDirectory() as folder:
        path = _setup(Path(folder), body)
        proc = run_cli("test", str(path))
    unknown = [
        (kind, name) for kind, name in steps if name not in (tools if kind == "tool" else phases)
    ]
    errors = [line for line in proc.stdout.splitlines() if line.startswith("  ERROR ")]
    assert len(errors) == len(unknown), proc.stdout
    if unknown:
        assert proc.returncode == 1
    for index, (kind, _name) in enumerate(steps):
        line = HEAD.count("\n") + 3 + index
        if (kind, _name) in unknown:
            assert any(f":{line}:" in e and f" {kind}: " in e for e in errors), (line, errors)


YAMLISH = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from(
        ["greet", "refund", "escalat", "audit", "x", "", "null", "issue_refund"])),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(
            ["steps", "name", "state", "mocks", "set", "unset", "turns", "wait", "request",
             "tool", "goto", "expect", "phase", "called", "history", "returns", "raises",
             "customer_id", "audit", "bogus"]), inner, max_size=4),
    ),
    max_leaves=12,
)


@settings(max_examples=60, deadline=None)
@given(scenarios=st.lists(YAMLISH, max_size=3), mocks=YAMLISH)
def test_any_test_file_gives_a_result_never_an_exception(
    scenarios: list[object], mocks: object
) -> None:
    """In process, so that many shapes are tried quickly: whatever a test file holds,
    running it gives passes, failures or located errors."""
    import json
    import tempfile

    from phaseflow.testing import run_test_file

    text = json.dumps({"phaseflow-test": 1, "workflow": "desk.yaml", "mocks": mocks,
                       "scenarios": scenarios})
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "desk.yaml").write_text(WORKFLOW)
        path = Path(folder) / "t.test.yaml"
        path.write_text(text)
        result = run_test_file(str(path))
    if result.error is not None:
        for line in result.error.splitlines():
            assert re.match(r".+:\d+:\d+: |.+: workflow ", line), line
    assert result.passed + result.failed >= 1 or result.error is None
