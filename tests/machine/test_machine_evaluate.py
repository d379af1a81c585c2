"""evaluate / evaluate_for_transition: the spec's order of checks, purity, guard context."""

from __future__ import annotations

from phaseflow.expr import GuardContext
from phaseflow.machine import Blocked, PhaseMachine, Ready, State
from phaseflow.spec.model import Phase, Preparation, SetEffect, Transition
from tests.support.machines import FakeClock, refund_desk, workflow


def _machine(*phases: Phase, clock: FakeClock | None = None) -> PhaseMachine:
    return workflow(phases).machine(clock=clock or FakeClock())


def test_none_when_terminal() -> None:
    m = _machine(Phase("a", terminal=True), Phase("b"))
    assert m.evaluate_for_transition({}) is None
    assert m.evaluate({}) is None


def test_when_false_is_skipped_and_first_true_wins() -> None:
    m = _machine(
        Phase("a", transitions=[Transition("b", "state.x == 1"), Transition("c", "state.x == 2"),
                                Transition("d", "state.x >= 2")]),
        Phase("b"), Phase("c"), Phase("d"),
    )
    assert m.evaluate_for_transition({"x": 2}) == Ready("c", 1)
    assert m.evaluate({"x": 2}) == ("c", 1)
    assert m.evaluate({"x": 0}) is None


def test_absent_when_means_always() -> None:
    m = _machine(Phase("a", transitions=[Transition("b")]), Phase("b"))
    assert m.evaluate_for_transition({}) == Ready("b", 0)


def test_model_transitions_are_not_evaluated() -> None:
    m = _machine(Phase("a", transitions=[Transition("b", None, trigger="model"),
                                         Transition("c", "state.y")]),
                 Phase("b"), Phase("c"))
    assert m.evaluate_for_transition({}) is None
    assert m.evaluate_for_transition({"y": 1}) == Ready("c", 1)


def test_entry_guard_false_skips_to_the_next_transition() -> None:
    m = _machine(
        Phase("a", transitions=[Transition("b"), Transition("c")]),
        Phase("b", guard="state.vip"), Phase("c"),
    )
    assert m.evaluate_for_transition({}) == Ready("c", 1)
    assert m.evaluate_for_transition({"vip": True}) == Ready("b", 0)


def test_entry_guard_is_checked_before_requires() -> None:
    prep = Preparation("p", SetEffect({"k": 1}), ["k"])
    m = _machine(
        Phase("a", transitions=[Transition("b"), Transition("c")]),
        Phase("b", guard="state.open", requires=["k"], prepare=[prep]), Phase("c"),
    )
    # guard false: skipped even though it would be Blocked otherwise
    assert m.evaluate_for_transition({}) == Ready("c", 1)
    assert m.evaluate_for_transition({"open": True}) == Blocked("b", 0, ("k",))


def test_requires_absent_with_preparations_is_blocked() -> None:
    prep = Preparation("p", SetEffect({"k": 1}), ["k"])
    m = _machine(Phase("a", transitions=[Transition("b"), Transition("c")]),
                 Phase("b", requires=["j", "k"], prepare=[prep]), Phase("c"))
    assert m.evaluate_for_transition({"j": 1}) == Blocked("b", 0, ("k",))
    assert m.evaluate_for_transition({"j": None}) == Blocked("b", 0, ("j", "k"))
    assert m.evaluate({"j": 1}) is None  # a blocked transition is not ready
    assert m.evaluate_for_transition({"j": 1, "k": 0}) == Ready("b", 0)


def test_requires_absent_without_preparations_is_skipped() -> None:
    m = _machine(Phase("a", transitions=[Transition("b"), Transition("c")]),
                 Phase("b", requires=["k"]), Phase("c"))
    assert m.evaluate_for_transition({}) == Ready("c", 1)
    assert m.evaluate_for_transition({"k": False}) == Ready("b", 0)  # false is present


def test_null_counts_as_absent() -> None:
    m = _machine(Phase("a", transitions=[Transition("b")]), Phase("b", requires=["k"]))
    assert m.evaluate_for_transition({"k": None}) is None


def test_evaluate_is_pure() -> None:
    wf = refund_desk()
    m = wf.machine(clock=FakeClock())
    s = State({"customer_id": "C-1"})
    before = (m.current, m.history, dict(m.visits), m.turns_in_phase, m.trace)
    assert m.evaluate_for_transition(s) == Ready("locate_order", 0)
    assert (m.current, m.history, dict(m.visits), m.turns_in_phase, m.trace) == before
    assert s.changes == () and dict(s) == {"customer_id": "C-1"}


def test_guard_context_values() -> None:
    clock = FakeClock(100.0)
    m = _machine(Phase("a", transitions=[Transition("b", "turns_in_phase >= 2")]),
                 Phase("b", transitions=[Transition("a", "seconds_in_phase > 5")]),
                 clock=clock)
    ctx = m.guard_context()
    assert ctx == GuardContext("a", 0, 0, 0.0, {"a": 1})
    clock.advance(3)
    assert m.advance_sync({}, turn=1).stayed  # turns_in_phase == 1
    assert m.guard_context().turns_in_phase == 1
    assert m.guard_context().seconds_in_phase == 3
    assert m.guard_context().turn == 1
    assert m.advance_sync({}, turn=2).transitioned  # turns_in_phase == 2
    ctx = m.guard_context()
    assert (ctx.phase, ctx.turns_in_phase, ctx.seconds_in_phase) == ("b", 0, 0.0)
    assert dict(ctx.visits) == {"a": 1, "b": 1}
    assert m.advance_sync({}, turn=3).stayed
    clock.advance(6)
    assert m.advance_sync({}, turn=4).transitioned
    assert m.visits == {"a": 2, "b": 1}


def test_first_boundary_after_entering_sees_turns_in_phase_1() -> None:
    m = _machine(Phase("a", transitions=[Transition("b", "turns_in_phase == 1")]),
                 Phase("b", transitions=[Transition("a", "turns_in_phase == 1")]))
    assert m.advance_sync({}, turn=1).transitioned
    assert m.advance_sync({}, turn=2).transitioned  # first boundary in b sees 1
    assert m.current == "a"


def test_visits_guard_counts_initial_as_one() -> None:
    m = _machine(Phase("a", transitions=[Transition("b", "visits.a == 1 and visits.b == 0")]),
                 Phase("b", transitions=[Transition("a", "visits.b == 1")]))
    assert m.evaluate({}) == ("b", 0)


def test_entry_guard_sees_the_current_phase_context() -> None:
    m = _machine(Phase("a", transitions=[Transition("b")]),
                 Phase("b", guard="phase == 'a' and visits.b == 0"))
    assert m.evaluate({}) == ("b", 0)


def test_phase_and_turn_in_guards() -> None:
    m = _machine(Phase("a", transitions=[Transition("b", "phase == 'a' and turn >= 3")]),
                 Phase("b"))
    assert m.advance_sync({}, turn=1).stayed
    assert m.advance_sync({}, turn=3).transitioned


def test_guard_type_error_is_false_and_an_event_at_a_boundary() -> None:
    m = _machine(Phase("a", transitions=[Transition("b", "state.x < 1"), Transition("c")]),
                 Phase("b"), Phase("c"))
    assert m.evaluate_for_transition({"x": "a"}) == Ready("c", 1)
    assert m.trace == ()  # pure evaluation records nothing
    r = m.advance_sync({"x": "a"}, turn=1)
    assert r.transitioned and r.phase == "c"
    assert [e.kind for e in r.events] == ["guard_error"]
    assert r.events[0].source == "transitions[0].when"
    assert "state.x < 1" in r.events[0].message
    assert m.trace == r.events


def test_a_guard_error_is_reported_once_when_a_boundary_evaluates_twice() -> None:
    import asyncio

    from phaseflow.spec.model import CallEffect

    async def fetch(ctx: object) -> dict[str, int]:  # async: advance takes its async path
        return {"j": 1}

    for prep in (SetEffect({"j": 1}), CallEffect("fetch")):
        wf = workflow(
            [Phase("a", transitions=[Transition("c", "state.x < 1"), Transition("b")]),
             Phase("b", requires=["k"], prepare=[Preparation("p", prep, ["j"])]),
             Phase("c")],
            registry={"fetch": fetch})
        for run in ("sync", "async"):
            m = wf.machine()
            r = (m.advance_sync(State({"x": "s"}), turn=1) if run == "sync"
                 else asyncio.run(m.advance(State({"x": "s"}), turn=1)))
            assert r.blocked and r.preparations == ("p",)
            assert [e.source for e in r.events] == ["transitions[0].when"], (prep, run)
            assert m.trace == r.events
