"""Unit tests of the pytransitions adapter: structure, wiring, and a YAML workflow driven
through both engines side by side."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

pytest.importorskip("transitions")

from transitions.extensions import GraphMachine

import phaseflow
from phaseflow.errors import ConfigError, PhaseflowError
from phaseflow.interop.transitions import (
    ADVANCE,
    Tracker,
    TransitionsNotInstalled,
    WorkflowModel,
    build_machine,
    request,
    request_trigger,
    tracker_of,
    turn_boundary,
)
from phaseflow.machine import (
    GuardTrigger,
    ModelTrigger,
    PhaseMachine,
    ProgrammaticTrigger,
    State,
)
from phaseflow.spec.model import (
    CallEffect,
    Phase,
    Preparation,
    SetEffect,
    Transition,
    UnsetEffect,
    Workflow,
)
from tests.support.machines import FakeClock

REFUND_DESK = """
phaseflow: 1
name: refund-desk
initial: greet
state:
  customer_id: {type: string}
  order_id:    {type: string}
  amount:      {type: number}
  refund_id:   {type: string}
  policy:      {type: object}
  attempts:    {type: integer, default: 0}
  note:        {type: string}
phases:
  greet:
    goal: Learn who the customer is.
    on_exit: [{set: {note: left greet}}]
    transitions:
      - to: locate_order
        when: state.customer_id
  locate_order:
    goal: Identify the order.
    requires: [customer_id]
    clear_on_enter: [order_id, amount]
    on_enter: [{set: {note: locating}}]
    transitions:
      - to: refund
        when: state.amount <= 500
      - to: escalate
        when: state.amount > 500
      - to: escalate
        trigger: model
      - to: greet
        trigger: model
        when: turns_in_phase >= 3
  refund:
    goal: Issue the refund.
    requires: [order_id, amount, policy]
    prepare:
      - name: load_policy
        produces: [policy]
        call: fetch_refund_policy
    on_exit:
      - call: notify_customer
        with: {channel: email}
      - unset: [note]
    transitions:
      - to: done
        when: state.refund_id
  escalate:
    goal: Hand over to a human.
    terminal: true
  done:
    goal: Close politely.
    terminal: true
"""


def _registry(calls: list[str]) -> dict[str, Any]:
    def fetch_refund_policy(ctx: Any) -> dict[str, Any]:
        calls.append(f"fetch:{ctx.phase}")
        return {"policy": {"name": "standard"}}

    def notify_customer(ctx: Any, channel: str) -> None:
        calls.append(f"notify:{ctx.phase}:{channel}")

    return {"fetch_refund_policy": fetch_refund_policy, "notify_customer": notify_customer}


def _pair(text: str = REFUND_DESK) -> tuple[Any, Any, Any, Any, list[str], list[str], FakeClock]:
    calls_m: list[str] = []
    calls_t: list[str] = []
    wf_m = phaseflow.load_workflow_text(text, registry=_registry(calls_m))
    wf_t = phaseflow.load_workflow_text(text, registry=_registry(calls_t))
    clock = FakeClock()
    machine = wf_m.machine(clock=clock)
    state = State(wf_m.defaults())
    tm = build_machine(wf_t, clock=clock)
    return machine, state, tm, tm.models[0], calls_m, calls_t, clock


def _same(machine: Any, state: State, model: Any) -> None:
    tracker = tracker_of(model)
    assert model.phase == machine.current
    assert tracker.state == state
    assert tuple(tracker.history) == machine.history
    assert dict(tracker.visits) == dict(machine.visits)
    assert tracker.turns_in_phase == machine.turns_in_phase


# --- the YAML workflow through both engines --------------------------------------------------


def test_refund_desk_small_refund_side_by_side() -> None:
    machine, state, _, model, calls_m, calls_t, clock = _pair()
    s2 = model.state
    steps: list[dict[str, Any]] = [
        {},
        {"customer_id": "C-1"},
        {"order_id": "O-9", "amount": 120},
        {},
        {"refund_id": "R-1"},
        {},
    ]
    for turn, update in enumerate(steps, start=1):
        clock.now += 1.5
        for k, v in update.items():
            state.set(k, v)
            s2.set(k, v)
        result = machine.advance_sync(state, turn=turn)
        moved = model.turn_boundary(turn)
        assert moved == result.transitioned
        assert tracker_of(model).preparations == result.preparations
        _same(machine, state, model)
    assert model.phase == "done"
    assert [r.to_phase for r in machine.history] == ["locate_order", "refund", "done"]
    assert calls_m == calls_t == ["fetch:refund", "notify:refund:email"]
    assert s2["policy"] == {"name": "standard"}
    assert "note" not in s2
    assert model.is_phase_done()


def test_refund_desk_escalation_and_requests() -> None:
    machine, state, _, model, *_ = _pair()
    s2 = model.state
    for s in (state, s2):
        s.set("customer_id", "C-1")
    machine.advance_sync(state, turn=1)
    model.turn_boundary(1)
    _same(machine, state, model)
    # a model request whose `when` is false is refused by both
    assert machine.take_request_sync("greet", state, turn=1) is None
    assert model.request("greet", turn=1) is False
    assert not model.may_trigger(request_trigger("greet"))
    # ... and becomes possible after three boundaries in the phase
    for turn in (2, 3, 4):
        assert machine.request("greet", state) is False
        machine.advance_sync(state, turn=turn)
        model.turn_boundary(turn)
    assert machine.request("greet", state) is True
    assert model.may_request_greet() is True
    assert model.request("greet", turn=4) is True
    assert machine.take_request_sync("greet", state, turn=4) is not None
    _same(machine, state, model)
    assert machine.workflow is not None
    back = next(i for i, t in enumerate(machine.workflow.phases["locate_order"].transitions)
                if t.to == "greet" and t.trigger == "model")
    assert tracker_of(model).history[-1].trigger == ModelTrigger(back)
    # unknown or unavailable targets are refused, without errors
    assert model.request("nowhere") is False
    assert model.request("done") is False
    assert model.phase == "greet"


def test_refund_desk_blocked_by_a_failing_preparation() -> None:
    text = REFUND_DESK
    calls: list[str] = []
    registry = _registry(calls)

    def broken(ctx: Any) -> None:
        raise RuntimeError("policy service down")

    registry["fetch_refund_policy"] = broken
    wf = phaseflow.load_workflow_text(text, registry=registry)
    machine = wf.machine()
    state = State(wf.defaults())
    tm = build_machine(wf)
    model = tm.models[0]
    for s in (state, model.state):
        s.set("customer_id", "C-1")
    machine.advance_sync(state, turn=1)
    model.turn_boundary(1)
    for s in (state, model.state):
        s.set("order_id", "O-1")
        s.set("amount", 10)
    result = machine.advance_sync(state, turn=2)
    assert model.turn_boundary(2) is False
    assert result.blocked
    tracker = tracker_of(model)
    assert tracker.blocked == (result.target, result.missing) == ("refund", ("policy",))
    assert tracker.preparations == result.preparations == ("load_policy",)
    assert [e.kind for e in tracker.events] == ["preparation_failed"]
    assert "policy service down" in tracker.events[0].message
    # the raw trigger does not run preparations: blocked means no move, and the later
    # `escalate` transition is not taken either (phaseflow stops at the blocked one)
    model.state.set("amount", 10)
    assert model.advance() is False
    assert model.phase == "locate_order"


# --- structure -------------------------------------------------------------------------------


def _small() -> Workflow:
    return Workflow(machine_factory=PhaseMachine.from_workflow,
        name="small",
        initial="a",
        phases={
            "a": Phase("a", transitions=[
                Transition("b", "state.x == 1"),
                Transition("c", "state.x >= 1"),
                Transition("c", trigger="model"),
            ]),
            "b": Phase("b", terminal=True),
            "c": Phase("c", transitions=[Transition("c", "state.again")],
                       on_enter=[SetEffect({"entered": True})],
                       on_exit=[UnsetEffect(("again",))]),
        },
    )


def test_structure() -> None:
    m = build_machine(_small())
    model = m.models[0]
    assert isinstance(model, WorkflowModel)
    assert list(m.states) == ["a", "b", "c"]
    assert model.phase == "a"
    assert m.get_state("b").final and not m.get_state("a").final
    assert sorted(m.events) == [ADVANCE, "request_c"]
    assert not hasattr(model, "to_b")  # auto_transitions off
    assert m.get_triggers("a") == [ADVANCE, "request_c"]
    assert m.get_triggers("b") == []
    first = m.events[ADVANCE].transitions["a"][0]
    names = [getattr(c.func, "__name__", None) for c in first.conditions]
    assert names == ["state.x == 1"]


def test_invalid_triggers_are_ignored() -> None:
    m = build_machine(_small())
    model = m.models[0]
    model.state.set("x", 1)
    assert model.advance() is True
    assert model.phase == "b"
    assert model.advance() is False  # terminal: the trigger is invalid here, ignored
    assert model.turn_boundary() is False
    assert model.request("c") is False


def test_first_transition_that_holds_wins() -> None:
    m = build_machine(_small())
    model = m.models[0]
    model.state.set("x", 2)
    assert turn_boundary(model) is True
    assert model.phase == "c"
    record = tracker_of(model).history[-1]
    assert (record.from_phase, record.to_phase, record.trigger) == ("a", "c", GuardTrigger(1))
    assert model.state["entered"] is True


def test_self_transition_exits_and_enters() -> None:
    m = build_machine(_small())
    model = m.models[0]
    model.state.set("x", 3)
    model.turn_boundary()
    model.state.set("again", True)
    model.state.set("entered", False)
    assert model.turn_boundary() is True
    assert model.phase == "c"
    tracker = tracker_of(model)
    assert tracker.visits == {"a": 1, "c": 2}
    assert "again" not in model.state  # on_exit ran
    assert model.state["entered"] is True  # on_enter ran
    assert tracker.turns_in_phase == 0


def test_entry_guard_requires_and_clear_on_enter() -> None:
    log: list[str] = []

    def hook(ctx: Any) -> dict[str, Any]:
        log.append(f"{ctx.phase}:{dict(ctx.state)}")
        return {"hooked": ctx.turn}

    wf = Workflow(
        name="w",
        initial="a",
        phases={
            "a": Phase("a", on_exit=[SetEffect({"k": 1})], transitions=[
                Transition("b"),
                Transition("c"),
            ]),
            "b": Phase("b", guard="state.open", terminal=True),
            "c": Phase("c", requires=["need"], clear_on_enter=["k", "need"],
                       on_enter=[CallEffect("hook"), SetEffect({"after": True})],
                       terminal=True),
        },
        registry={"hook": hook},
    )
    m = build_machine(wf)
    model = m.models[0]
    assert model.turn_boundary() is False
    model.state.set("need", "yes")
    assert model.turn_boundary(7) is True
    assert model.phase == "c"
    # on_exit set k, clear_on_enter removed it before on_enter ran
    assert log == ["c:{}"]
    assert model.state.to_dict() == {"hooked": 7, "after": True}


def test_guard_context_counters_and_clock() -> None:
    clock = FakeClock()
    wf = Workflow(
        name="w",
        initial="a",
        phases={
            "a": Phase("a", transitions=[
                Transition("b", "turns_in_phase >= 2 and seconds_in_phase >= 10"),
            ]),
            "b": Phase("b", transitions=[Transition("a", "visits.b >= 2 or turn >= 9")]),
        },
    )
    model = build_machine(wf, clock=clock).models[0]
    assert model.turn_boundary() is False
    clock.now = 10
    assert model.turn_boundary() is True
    tracker = tracker_of(model)
    assert tracker.history[-1].duration_in_phase == 10
    assert tracker.guard_context("b").visits == {"a": 1, "b": 1}
    assert model.turn_boundary(9) is True
    assert model.phase == "a"


def test_guard_errors_are_recorded_and_false() -> None:
    wf = Workflow(machine_factory=PhaseMachine.from_workflow, name="w", initial="a", phases={
        "a": Phase("a", transitions=[Transition("b", "state.x < 1")]),
        "b": Phase("b", terminal=True),
    })
    model = build_machine(wf).models[0]
    model.state.set("x", "text")
    assert model.turn_boundary() is False
    (event,) = tracker_of(model).events
    assert event.kind == "guard_error" and event.source == "transitions[0].when"


def test_failing_call_effect_is_an_event_and_the_rest_runs() -> None:
    def boom(ctx: Any) -> None:
        raise ValueError("nope")

    wf = Workflow(machine_factory=PhaseMachine.from_workflow, name="w", initial="a", phases={
        "a": Phase("a", transitions=[Transition("b")]),
        "b": Phase("b", terminal=True,
                   on_enter=[CallEffect("boom"), CallEffect("missing"), SetEffect({"ok": 1})]),
    }, registry={"boom": boom})
    model = build_machine(wf).models[0]
    assert model.turn_boundary() is True
    kinds = [(e.kind, e.source) for e in tracker_of(model).events]
    assert kinds == [("effect_error", "on_enter[0]"), ("effect_error", "on_enter[1]")]
    assert model.state["ok"] == 1


def test_registry_argument_overrides_the_workflow_registry() -> None:
    wf = Workflow(machine_factory=PhaseMachine.from_workflow, name="w", initial="a", phases={
        "a": Phase("a", transitions=[Transition("b")]),
        "b": Phase("b", terminal=True, on_enter=[CallEffect("hook", {"v": [1]})]),
    }, registry={"hook": lambda ctx, v: {"from": "workflow"}})
    model = build_machine(wf, registry={"hook": lambda ctx, v: {"from": "arg", "v": v}}).models[0]
    model.turn_boundary()
    assert model.state.to_dict() == {"from": "arg", "v": [1]}


def test_model_request_runs_preparations() -> None:
    wf = Workflow(machine_factory=PhaseMachine.from_workflow, name="w", initial="a", phases={
        "a": Phase("a", transitions=[Transition("b", "state.go", trigger="model")]),
        "b": Phase("b", requires=["k"], terminal=True,
                   prepare=[Preparation("make_k", SetEffect({"k": 5}), produces=("k",))]),
    })
    machine = wf.machine()
    s1 = State()
    model = build_machine(wf).models[0]
    assert request(model, "b") is False
    assert tracker_of(model).preparations == ()  # `when` false: nothing ran
    for s in (s1, model.state):
        s.set("go", True)
    assert machine.take_request_sync("b", s1, turn=0) is not None
    assert request(model, "b") is True
    assert tracker_of(model).preparations == ("make_k",)
    assert model.state == s1 == {"go": True, "k": 5}


def test_own_model_object_and_writer() -> None:
    class Host:
        pass

    data: dict[str, Any] = {}
    host = Host()
    m = build_machine(_small(), host, state=data, name="host")
    assert m.models == [host]
    assert isinstance(tracker_of(host), Tracker)
    data["x"] = 1
    assert turn_boundary(host) is True
    assert host.phase == "b"  # type: ignore[attr-defined]


def test_programmatic_transitions_run_effects_and_are_labelled() -> None:
    m = build_machine(_small())
    model = m.models[0]
    m.add_transition("jump", "a", "c")
    assert model.jump() is True
    assert tracker_of(model).history[-1].trigger == ProgrammaticTrigger("jump")
    assert model.state["entered"] is True


def test_graph_machine_diagram() -> None:
    m = build_machine(_small(), machine_cls=GraphMachine, graph_engine="mermaid",
                      show_conditions=True)
    text = m.models[0].get_graph().draw(None)
    assert "a --> b: advance [state.x == 1]" in text
    assert "request_c" in text


def test_errors() -> None:
    with pytest.raises(ConfigError, match="auto_transitions"):
        build_machine(_small(), auto_transitions=True)
    with pytest.raises(ConfigError, match="not a phase"):
        build_machine(Workflow(name="w", initial="zz", phases={"a": Phase("a")}))
    with pytest.raises(ConfigError, match="not a phase"):
        build_machine(Workflow(machine_factory=PhaseMachine.from_workflow, name="w", initial="a",
                               phases={"a": Phase("a", transitions=[Transition("q")])}))
    with pytest.raises(ConfigError, match="model_attribute"):
        build_machine(_small(), model_attribute="state")
    with pytest.raises(ConfigError, match="no phaseflow tracker"):
        turn_boundary(object())


def test_missing_dependency_is_a_clear_phaseflow_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "transitions", None)  # `import transitions` fails
    with pytest.raises(PhaseflowError, match=r"pip install '\.\[transitions\]'") as exc:
        build_machine(_small())
    assert isinstance(exc.value, TransitionsNotInstalled)
    assert isinstance(exc.value, ImportError)


def test_importing_the_adapter_does_not_import_transitions() -> None:
    code = (
        "import sys; sys.modules['transitions'] = None\n"
        "import phaseflow.interop\n"
        "from phaseflow.interop import build_machine, TransitionsNotInstalled\n"
        "from phaseflow.spec.model import Phase, Workflow\n"
        "try:\n"
        "    build_machine(Workflow(name='w', initial='a', phases={'a': Phase('a')}))\n"
        "except TransitionsNotInstalled as exc:\n"
        "    print('ok', exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.startswith("ok phaseflow.interop.transitions needs")
