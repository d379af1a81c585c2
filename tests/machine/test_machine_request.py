"""request / take_request: the model asks to move."""

from __future__ import annotations

import asyncio
from typing import Any

from phaseflow.machine import EffectContext, ModelTrigger, State
from phaseflow.spec.model import CallEffect, Phase, Preparation, SetEffect, Transition
from tests.support.machines import refund_desk, workflow


def test_request_allowed_for_a_model_transition() -> None:
    m = refund_desk().machine()
    s = State({"customer_id": "C"})
    assert m.request("escalate", s) is False  # greet has no model transition
    m.advance_sync(s, turn=1)
    assert m.request("escalate", s) is True
    assert m.request("refund", s) is False  # auto transitions cannot be requested
    assert m.request("nowhere", s) is False
    assert m.current == "locate_order" and s.changes == ()  # pure


def test_request_needs_when_guard_and_requires() -> None:
    wf = workflow([
        Phase("a", transitions=[Transition("b", "state.ok", trigger="model")]),
        Phase("b", guard="state.open", requires=["k"]),
    ])
    m = wf.machine()
    assert not m.request("b", {"open": 1, "k": 1})
    assert not m.request("b", {"ok": 1, "k": 1})
    assert not m.request("b", {"ok": 1, "open": 1})
    assert m.request("b", {"ok": 1, "open": 1, "k": 1})


def test_request_any_of_several_model_transitions() -> None:
    wf = workflow([
        Phase("a", transitions=[Transition("b", "state.x == 1", trigger="model"),
                                Transition("b", "state.x == 2", trigger="model")]),
        Phase("b"),
    ])
    m = wf.machine()
    assert m.request("b", {"x": 2}) and not m.request("b", {"x": 3})
    # the trigger names the transition taken: the second, whose `when` holds
    r = m.take_request_sync("b", State({"x": 2}), turn=1)
    assert r is not None and r.trigger == ModelTrigger(1) and str(r.trigger) == "model request"


def test_request_from_terminal_is_refused() -> None:
    wf = workflow([Phase("a", terminal=True, transitions=[Transition("b", trigger="model")]),
                   Phase("b")])
    assert not wf.machine().request("b", {})


def test_take_request_transitions_with_a_model_trigger() -> None:
    m = refund_desk().machine()
    s = State({"customer_id": "C"})
    m.advance_sync(s, turn=1)
    assert asyncio.run(m.take_request("done", s, turn=2)) is None
    r = asyncio.run(m.take_request("escalate", s, turn=2))
    escalate = next(i for i, t in enumerate(refund_desk().phases["locate_order"].transitions)
                    if t.to == "escalate" and t.trigger == "model")
    assert r is not None and r.trigger == ModelTrigger(escalate) and m.current == "escalate"
    assert m.history[-1].trigger.kind == "model" and m.turns_in_phase == 0


def test_take_request_runs_preparations_when_only_requires_are_absent() -> None:
    wf = workflow([
        Phase("a", transitions=[Transition("b", trigger="model")]),
        Phase("b", requires=["k"], prepare=[Preparation("p", SetEffect({"k": 1}), ["k"])],
              on_enter=[SetEffect({"in": 1})]),
    ])
    m = wf.machine()
    s = State()
    assert not m.request("b", s)
    r = m.take_request_sync("b", s, turn=1)
    assert r is not None and m.current == "b" and s["k"] == 1 and s["in"] == 1


def test_take_request_checks_when_again_after_preparations() -> None:
    """A preparation can change what the request's ``when`` reads: like a turn boundary,
    the request is evaluated again after preparing, and refused if it no longer holds."""
    wf = workflow([
        Phase("a", transitions=[Transition("b", when="not state.k2", trigger="model")]),
        Phase("b", requires=["k"],
              prepare=[Preparation("p", SetEffect({"k": 1, "k2": True}), ["k"])]),
    ])
    m = wf.machine()
    s = State()
    assert m.take_request_sync("b", s, turn=1) is None
    assert m.current == "a" and s["k"] == 1
    m2 = wf.machine()
    assert asyncio.run(m2.take_request("b", State(), turn=1)) is None and m2.current == "a"


def test_the_trigger_names_the_edge_that_holds_after_preparations() -> None:
    """Two model edges to the same phase: the first holds before the preparation, which
    then makes only the second hold. The move stands on the second, and says so."""
    wf = workflow([
        Phase("a", transitions=[Transition("b", when="not state.k2", trigger="model"),
                                Transition("b", when="state.k2", trigger="model")]),
        Phase("b", requires=["k"],
              prepare=[Preparation("p", SetEffect({"k": 1, "k2": True}), ["k"])]),
    ])
    for take in ("sync", "async"):
        m = wf.machine()
        s = State()
        r = (m.take_request_sync("b", s, turn=1) if take == "sync"
             else asyncio.run(m.take_request("b", s, turn=1)))
        assert r is not None and r.trigger == ModelTrigger(1), take
        assert m.snapshot()["history"][-1]["trigger"] == {"kind": "model", "index": 1}


def test_take_request_refused_when_preparation_fails() -> None:
    def boom(ctx: EffectContext) -> None:
        raise RuntimeError

    wf = workflow([
        Phase("a", transitions=[Transition("b", trigger="model")]),
        Phase("b", requires=["k"], prepare=[Preparation("p", CallEffect("boom"), ["k"])]),
    ], registry={"boom": boom})
    m = wf.machine()
    assert m.take_request_sync("b", State(), turn=1) is None
    assert asyncio.run(m.take_request("b", State(), turn=1)) is None
    assert m.current == "a" and [e.kind for e in m.trace] == ["preparation_failed"] * 2


def test_take_request_with_async_effects() -> None:
    async def hook(ctx: EffectContext) -> dict[str, Any]:
        await asyncio.sleep(0)
        return {"x": 1}

    wf = workflow([Phase("a", transitions=[Transition("b", trigger="model")]),
                   Phase("b", on_enter=[CallEffect("hook")])], registry={"hook": hook})
    m = wf.machine()
    s = State()
    assert asyncio.run(m.take_request("b", s, turn=1)) is not None and s["x"] == 1


def test_guard_errors_met_by_a_request_are_recorded_in_the_trace() -> None:
    """A run-time type error in a model transition's `when` (or the target's entry guard)
    refuses the request and is an event, as at a turn boundary; the pure `request` records
    nothing."""
    wf = workflow([
        Phase("a", transitions=[Transition("b", when="state.n < 1", trigger="model"),
                                Transition("c", trigger="model")]),
        Phase("b", terminal=True),
        Phase("c", guard="state.n > 1", terminal=True),
    ])
    m = wf.machine()
    s = State({"n": "text"})
    assert not m.request("b", s) and m.trace == ()
    assert m.take_request_sync("b", s, turn=1) is None
    assert asyncio.run(m.take_request("c", s, turn=1)) is None
    kinds = [(e.kind, e.phase, e.source) for e in m.trace]
    assert kinds == [("guard_error", "a", "transitions[0].when"), ("guard_error", "c", "guard")]
    assert m.current == "a"
