"""transition(): effect order, clear_on_enter, visits, history, triggers, clock."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

from phaseflow.machine import (
    HISTORY_LIMIT,
    MODEL_REQUEST,
    GuardTrigger,
    ModelTrigger,
    ProgrammaticTrigger,
    State,
    TransitionResult,
)
from phaseflow.spec.model import CallEffect, Phase, SetEffect, Transition, UnsetEffect
from tests.support.machines import FakeClock, LogWriter, chain, workflow


def test_effect_order_exit_clear_enter() -> None:
    log: list[Any] = []

    def hook(ctx: Any, **kw: Any) -> None:
        log.append(("call", ctx.phase, kw["tag"]))

    wf = workflow(
        [
            Phase("a", on_exit=[SetEffect({"x": 1}), CallEffect("hook", {"tag": "exit"})],
                  transitions=[Transition("b")]),
            Phase("b", clear_on_enter=["old", "x"],
                  on_enter=[CallEffect("hook", {"tag": "enter"}), UnsetEffect(["y"]),
                            SetEffect({"z": [1]})]),
        ],
        registry={"hook": hook},
    )
    m = wf.machine(clock=FakeClock())
    data: dict[str, Any] = {"old": 1, "y": 2}
    w = LogWriter(data, log)
    r = asyncio.run(m.transition("b", data, w, turn=4, trigger=GuardTrigger(0)))
    assert isinstance(r, TransitionResult)
    assert log == [
        ("set", "x", 1), ("call", "a", "exit"),
        ("unset", "old"), ("unset", "x"),
        ("call", "b", "enter"), ("unset", "y"), ("set", "z", [1]),
    ]
    assert data == {"z": [1]}
    assert (r.from_phase, r.to_phase, r.turn, r.trigger) == ("a", "b", 4, GuardTrigger(0))
    assert m.current == "b" and m.visits == {"a": 1, "b": 1}


def test_transition_to_unknown_target_is_none_and_changes_nothing() -> None:
    m = chain(3).machine()
    assert asyncio.run(m.transition("zz", State(), turn=1, trigger=MODEL_REQUEST)) is None
    assert m.transition_sync("zz", State(), turn=1, trigger=MODEL_REQUEST) is None
    assert m.current == "p0" and m.history == ()


def test_history_record_fields() -> None:
    clock = FakeClock(10)
    m = chain(3).machine(clock=clock)
    clock.advance(2.5)
    r = m.transition_sync("p2", State(), turn=7, trigger=ProgrammaticTrigger("admin"))
    assert r is not None
    rec = m.history[-1]
    assert rec is r.record
    assert (rec.from_phase, rec.to_phase, rec.turn, rec.at, rec.duration_in_phase) == (
        "p0", "p2", 7, 12.5, 2.5)
    assert rec.trigger == ProgrammaticTrigger("admin")
    assert rec["from"] == "p0" and rec["to"] == "p2"
    assert rec.as_dict() == {
        "from": "p0", "to": "p2", "turn": 7, "at": 12.5,
        "trigger": {"kind": "programmatic", "source": "admin"}, "duration_in_phase": 2.5,
    }
    with pytest.raises(KeyError):
        rec["nope"]


def test_history_is_capped_at_100_oldest_dropped() -> None:
    m = chain(7, effects=False).machine(clock=FakeClock())
    s = State({"go": True})
    for turn in range(1, 131):
        assert m.advance_sync(s, turn=turn).transitioned
    h = m.history
    assert len(h) == HISTORY_LIMIT == 100
    assert h[0].turn == 31 and h[-1].turn == 130
    assert h[-1].to_phase == m.current
    assert all(a.to_phase == b.from_phase for a, b in itertools.pairwise(h))


def test_self_transition_runs_exit_and_enter_and_counts_a_visit() -> None:
    wf = workflow([Phase("a", on_exit=[SetEffect({"e": 1})], on_enter=[SetEffect({"n": 1})],
                         transitions=[Transition("a", "state.loop")])])
    m = wf.machine()
    s = State({"loop": True})
    assert m.advance_sync(s, turn=1).transitioned
    assert m.visits == {"a": 2} and s["e"] == 1 and s["n"] == 1


def test_triggers_are_typed() -> None:
    assert GuardTrigger(2).kind == "guard" and str(GuardTrigger(2)) == "guard #2"
    assert ModelTrigger() == MODEL_REQUEST and MODEL_REQUEST.kind == "model"
    assert ProgrammaticTrigger("x").kind == "programmatic"


def test_goto_is_programmatic_and_ignores_guards() -> None:
    wf = workflow([Phase("a", transitions=[Transition("b", "false")]),
                   Phase("b", guard="false", requires=["k"])])
    m = wf.machine()
    r = m.goto_sync("b", State(), turn=3, source="test")
    assert r is not None and m.current == "b"
    assert m.history[-1].trigger == ProgrammaticTrigger("test")
    r2 = asyncio.run(m.goto("a", State(), turn=4))
    assert r2 is not None and r2.trigger == ProgrammaticTrigger("goto")


def test_instructions_are_rendered_lazily_against_the_state() -> None:
    wf = workflow([
        Phase("a", transitions=[Transition("b")]),
        Phase("b", goal="Bee.", instructions=(
            "{{ phase.name }}/{{ phase.goal }}/{{ workflow.name }}/{{ turn }}/{{ state.x }}")),
    ], name="wf")
    m = wf.machine()
    s = State({"x": 5})
    r = m.advance_sync(s, turn=9).transition
    assert r is not None
    assert r.instructions == "b/Bee./wf/9/5"
    s.set("x", 6)
    assert r.instructions == "b/Bee./wf/9/5"  # rendered once


def test_no_instructions_is_none() -> None:
    m = chain(2).machine()
    r = m.advance_sync(State({"go": 1}), turn=1).transition
    assert r is not None and r.instructions is None and r.ok


def test_set_clock_restarts_timer_and_duration() -> None:
    a, b = FakeClock(5), FakeClock(1000)
    m = chain(2).machine(clock=a)
    a.advance(4)
    assert m.current_phase_duration() == 4
    m.set_clock(b)
    assert m.current_phase_duration() == 0
    b.advance(1.5)
    assert m.current_phase_duration() == 1.5
    assert m.guard_context().seconds_in_phase == 1.5
    m.advance_sync(State({"go": 1}), turn=1)
    assert m.history[-1].at == 1001.5 and m.history[-1].duration_in_phase == 1.5
    assert m.current_phase_duration() == 0


def test_default_clock_is_monotonic_seconds() -> None:
    m = chain(2).machine()
    d = m.current_phase_duration()
    assert 0 <= d < 5


def test_set_literals_are_copied_into_the_state() -> None:
    wf = workflow([Phase("a", transitions=[Transition("b")]),
                   Phase("b", on_enter=[SetEffect({"items": [1, 2], "meta": {"k": [3]}})])])
    s1, s2 = State(), State()
    wf.machine().advance_sync(s1, turn=1)
    s1["items"].append(99)
    s1["meta"]["k"].append(4)
    wf.machine().advance_sync(s2, turn=1)
    assert s2["items"] == [1, 2] and s2["meta"] == {"k": [3]}


def test_visit_and_history_are_recorded_after_on_enter_in_the_spec_order() -> None:
    """transition: on_exit; target current, timer restarted; clear_on_enter; on_enter;
    count the visit; append the history record. A callable that can see the machine (a
    host's closure) observes each step in that order."""
    seen: list[Any] = []
    holder: dict[str, Any] = {}

    def probe(ctx: Any, **kw: Any) -> None:
        m = holder["m"]
        seen.append((kw["tag"], m.current, dict(m.visits), len(m.history),
                     m.current_phase_duration(), "old" in ctx.state))

    wf = workflow(
        [Phase("a", on_exit=[CallEffect("probe", {"tag": "exit"})],
               transitions=[Transition("b")]),
         Phase("b", clear_on_enter=["old"], on_enter=[CallEffect("probe", {"tag": "enter"})])],
        registry={"probe": probe},
    )
    for run in ("sync", "async"):
        seen.clear()
        clock = FakeClock()
        m = holder["m"] = wf.machine(clock=clock)
        clock.advance(5)
        s = State({"old": 1})
        if run == "sync":
            m.transition_sync("b", s, turn=1, trigger=GuardTrigger(0))
        else:
            asyncio.run(m.transition("b", s, turn=1, trigger=GuardTrigger(0)))
        assert seen == [
            ("exit", "a", {"a": 1}, 0, 5.0, True),   # still in a, its timer running
            ("enter", "b", {"a": 1}, 0, 0.0, False),  # b current, timer restarted, cleared
        ], run
        assert dict(m.visits) == {"a": 1, "b": 1} and len(m.history) == 1
