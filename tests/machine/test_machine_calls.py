"""The machine's stack of calls: enter, return, hand off, snapshot and restore inside."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

import phaseflow
from phaseflow.machine import PhaseMachine
from phaseflow.machine.snapshot import SnapshotError
from phaseflow.machine.state import State

IDENTITY = """\
phaseflow: 1
name: identity-check
initial: ask
state:
  email: {type: string}
  customer_id: {type: string}
  scratch: {type: string}
tools:
  crm.lookup: {description: Find a customer, writes: [customer_id]}
phases:
  ask:
    goal: Ask for the email.
    tools: [crm.lookup]
    on_exit:
      - set: {scratch: inner}
    transitions:
      - {to: verified, when: state.customer_id}
      - {to: failed, when: "state.email == 'bad'"}
  verified: {goal: Verified., terminal: true}
  failed: {goal: Failed., terminal: true}
"""

DESK = """\
phaseflow: 1
name: refund-desk
initial: start
uses:
  identity: identity.yaml
  billing: billing.yaml
state:
  email: {type: string}
  customer_id: {type: string}
  note: {type: string}
tools:
  refund: {description: Refund}
phases:
  start:
    goal: Greet.
    tools: [refund]
    transitions: [{to: verify, when: state.email}]
  verify:
    goal: Verify.
    call: identity
    with: {email: state.email}
    returns: {customer_id: customer_id}
    transitions:
      - {to: refund, when: "returned == 'verified'"}
      - {to: escalate, when: "returned == 'failed'"}
  refund:
    goal: Refund.
    transitions:
      - {handoff: billing, with: {customer_id: state.customer_id}, trigger: model}
      - {to: done, when: "state.note == 'ok'"}
  escalate: {goal: Escalate., terminal: true}
  done: {goal: Done., terminal: true}
"""

BILLING = """\
phaseflow: 1
name: billing
initial: invoices
state:
  customer_id: {type: string}
phases:
  invoices:
    goal: Invoices.
    transitions: [{to: closed, when: "turns_in_phase > 5"}]
  closed: {goal: Closed., terminal: true}
"""


@pytest.fixture
def desk(tmp_path: Path) -> phaseflow.Workflow:
    (tmp_path / "identity.yaml").write_text(IDENTITY)
    (tmp_path / "billing.yaml").write_text(BILLING)
    (tmp_path / "desk.yaml").write_text(DESK)
    return phaseflow.load_workflow(tmp_path / "desk.yaml")


def test_a_call_enters_the_callee_with_its_own_state_and_returns_what_is_declared(
    desk: phaseflow.Workflow,
) -> None:
    machine = desk.machine()
    state = State({"email": "a@b.c", "note": "kept"})
    machine.advance_sync(state, turn=1)
    assert machine.path == ("refund-desk", "verify", "identity-check", "ask")
    assert dict(state) == {"email": "a@b.c"}  # only 'with' crossed
    assert machine.active_tools() == ("crm.lookup",)  # the innermost phase's tools
    nav = machine.describe_navigation(state)
    assert "Path: refund-desk › verify › identity-check › ask" in nav
    assert "failed or verified" in nav and "What returns to it: customer_id." in nav
    state.set("customer_id", "C-1")
    machine.advance_sync(state, turn=2)
    # returned, the outputs copied, the caller's transition on 'returned' taken at once
    assert machine.path == ("refund-desk", "refund")
    assert machine.returned == "verified"
    assert dict(state) == {"email": "a@b.c", "note": "kept", "customer_id": "C-1"}
    assert "scratch" not in state  # the callee's own keys stay there
    assert machine.active_tools() is None


def test_the_caller_branches_on_the_terminal_phase_the_call_ended_in(
    desk: phaseflow.Workflow,
) -> None:
    machine = desk.machine()
    state = State({"email": "bad"})
    machine.advance_sync(state, turn=1)
    machine.advance_sync(state, turn=2)
    assert machine.current == "escalate" and machine.returned == "failed"


def test_a_snapshot_inside_a_call_restores_there_and_returns_as_if_nothing_happened(
    desk: phaseflow.Workflow,
) -> None:
    machine = desk.machine()
    state = State({"email": "a@b.c", "note": "kept"})
    machine.advance_sync(state, turn=1)
    saved = json.loads(json.dumps(machine.snapshot()))  # what a store keeps
    saved_state = dict(state)
    # the process dies; another restores the machine and the state
    again = PhaseMachine.restore(desk, saved)
    state2 = State(saved_state)
    assert again.path == machine.path and again.call_depth == 1
    state2.set("customer_id", "C-1")
    again.advance_sync(state2, turn=2)
    assert again.path == ("refund-desk", "refund")
    assert dict(state2) == {"email": "a@b.c", "note": "kept", "customer_id": "C-1"}
    # and after the return the snapshot says the call is done (no second call)
    back = PhaseMachine.restore(desk, json.loads(json.dumps(again.snapshot())))
    assert back.returned == "verified" and back.current == "refund"


def test_a_snapshot_naming_a_call_that_is_not_there_is_refused(
    desk: phaseflow.Workflow,
) -> None:
    machine = desk.machine()
    state = State({"email": "a@b.c"})
    machine.advance_sync(state, turn=1)
    saved = machine.snapshot()
    caller = saved["calls"][0]["caller"]
    caller.update(phase="start", history=[], visits={"start": 1})
    with pytest.raises(SnapshotError, match="calls no loaded workflow"):
        PhaseMachine.restore(desk, saved)
    saved["calls"] = "x"
    with pytest.raises(SnapshotError, match=r"snapshot\.calls"):
        PhaseMachine.restore(desk, saved)


def test_a_model_hand_off_goes_on_in_the_other_workflow_for_good(
    desk: phaseflow.Workflow,
) -> None:
    machine = desk.machine()
    state = State({"email": "a@b.c", "customer_id": "C-1"})
    machine.advance_sync(state, turn=1)  # into the call (only the email crosses)
    state.set("customer_id", "C-1")
    machine.advance_sync(state, turn=1)  # back, and on to refund
    assert machine.current == "refund"
    moves = dict(machine.model_moves(state))
    assert "billing" in moves and moves["billing"].stopped_by != "when"
    assert machine.move_status("billing", state) is not None
    taken = machine.take_request_sync("billing", state, turn=2)

    assert taken is not None and taken.to_phase == "invoices"
    assert machine.path == ("billing", "invoices")
    assert dict(state) == {"customer_id": "C-1"}
    restored = PhaseMachine.restore(desk, json.loads(json.dumps(machine.snapshot())))
    assert restored.path == ("billing", "invoices")


def test_calls_nest_three_deep_and_unwind(tmp_path: Path) -> None:
    for depth in range(4):
        uses = f"uses: {{inner: w{depth + 1}.yaml}}\n" if depth < 3 else ""
        call = "    call: inner\n" if depth < 3 else ""
        (tmp_path / f"w{depth}.yaml").write_text(
            f"phaseflow: 1\nname: w{depth}\ninitial: a\n{uses}phases:\n  a:\n    goal: a\n{call}"
            "    transitions: [{to: b, when: \"state.go\"}]\n  b: {goal: b, terminal: true}\n")
    workflow = phaseflow.load_workflow(tmp_path / "w0.yaml")
    machine = workflow.machine()
    state = State({})
    machine.advance_sync(state, turn=1)
    assert machine.path == ("w0", "a", "w1", "a", "w2", "a", "w3", "a")
    for depth in (2, 1, 0):
        state.set("go", True)  # each workflow's state is its own: set in each
        machine.advance_sync(state, turn=5 - depth)
        assert machine.call_depth == depth and machine.returned == "b"
        assert "go" not in state  # the caller's state came back, without the callee's key
    state.set("go", True)
    machine.advance_sync(state, turn=9)
    assert machine.path == ("w0", "b")


def test_the_async_moves_settle_the_same_way(desk: phaseflow.Workflow) -> None:
    async def run() -> None:
        machine = desk.machine()
        state = State({"email": "a@b.c"})
        await machine.advance(state, turn=1)
        assert machine.call_depth == 1
        state.set("customer_id", "C-1")
        await machine.advance(state, turn=2)
        assert machine.current == "refund"

    asyncio.run(run())


def test_a_workflow_that_composes_nothing_never_settles(tmp_path: Path) -> None:
    (tmp_path / "w.yaml").write_text(BILLING)
    machine = phaseflow.load_workflow(tmp_path / "w.yaml").machine()
    assert machine._composes is False
    assert "calls" not in machine.snapshot() and machine.path == ("billing", "invoices")


def test_a_thousand_deep_chain_of_calls_runs_without_recursion(tmp_path: Path) -> None:
    depth = 1000
    for i in range(depth):
        last = i == depth - 1
        uses = "" if last else f"uses: {{next: w{i + 1}.yaml}}\n"
        call = "" if last else "    call: next\n"
        (tmp_path / f"w{i}.yaml").write_text(
            f"phaseflow: 1\nname: w{i}\ninitial: a\n{uses}phases:\n  a:\n    goal: a\n{call}"
            "    transitions: [{to: b, when: \"state.go or returned == 'b'\"}]\n"
            "  b: {goal: b, terminal: true}\n")
    workflow = phaseflow.load_workflow(tmp_path / "w0.yaml")
    machine = workflow.machine()
    state = State({})
    machine.advance_sync(state, turn=1)  # the initial phase calls: entered at once, nested
    assert machine.call_depth == depth - 1 and machine.path[-2:] == (f"w{depth - 1}", "a")
    restored = PhaseMachine.restore(workflow, json.loads(json.dumps(machine.snapshot())))
    assert restored.call_depth == depth - 1
    state.set("go", True)
    restored.advance_sync(state, turn=2)  # the innermost ends; every caller returns at once
    assert restored.path == ("w0", "b") and restored.returned == "b"


def test_a_callee_calls_the_hosts_callables_registered_with_the_caller(tmp_path: Path) -> None:
    (tmp_path / "inner.yaml").write_text(
        "phaseflow: 1\nname: inner\ninitial: x\nphases:\n  x:\n    goal: x\n"
        "    on_exit: [{call: notify, with: {what: left}}]\n    transitions: [{to: y}]\n"
        "  y: {goal: y, terminal: true}\n")
    (tmp_path / "outer.yaml").write_text(
        "phaseflow: 1\nname: outer\ninitial: a\nuses: {inner: inner.yaml}\nphases:\n"
        "  a:\n    goal: a\n    call: inner\n    returns: {noted: noted}\n"
        "    transitions: [{to: b, when: \"returned == 'y'\"}]\n"
        "  b: {goal: b, terminal: true}\n")
    seen: list[dict[str, str]] = []

    def notify(context: object, **args: str) -> dict[str, bool]:
        seen.append(args)
        return {"noted": True}

    workflow = phaseflow.load_workflow(tmp_path / "outer.yaml", registry={"notify": notify})
    machine = workflow.machine()
    state = State({})
    machine.advance_sync(state, turn=1)
    machine.advance_sync(state, turn=2)
    assert seen == [{"what": "left"}] and machine.trace == ()
    assert machine.path == ("outer", "b") and dict(state) == {"noted": True}
