"""Saving a machine as JSON and resuming it: ``snapshot()`` and ``PhaseMachine.restore``.

What a host relies on: the JSON is plain and lossless (restoring and snapshotting again
gives the same JSON), a restored machine continues exactly, bit for bit, as one that never
stopped whose clock moved by the same amounts, and no snapshot, however hostile, gets
anything out of ``restore`` but a machine or a ``SnapshotError`` that names the field.
"""

from __future__ import annotations

import asyncio
import copy
import gc
import json
import math
import re
import weakref
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import phaseflow
from phaseflow.errors import ConfigError, PhaseflowError
from phaseflow.machine import (
    HISTORY_LIMIT,
    SNAPSHOT_VERSION,
    TRACE_LIMIT,
    ModelTrigger,
    PhaseMachine,
    SnapshotError,
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
from tests.support.machines import FakeClock, chain, refund_desk

WORKFLOWS = Path(__file__).resolve().parents[2] / "workflows"

# --- workflows and random drives ----------------------------------------------------------

KEYS = ["a", "b", "c"]
WHENS = [None, None, None, "state.a", "not state.b", "state.c > 1", "turns_in_phase >= 2",
         "visits.p0 < 3", "seconds_in_phase > 5", "seconds_in_phase >= 30 and state.a",
         "state.c < 'x'"]  # the last one is a run-time type error for a number: guard_error


def _bump(ctx: Any, key: str) -> dict[str, Any]:
    v = ctx.state.get(key)
    return {key: (v + 1) if type(v) is int else 1}


def _fail(ctx: Any, **kw: Any) -> None:
    raise RuntimeError("no key")


@st.composite
def _effects(draw: Any) -> Any:
    kind = draw(st.sampled_from(["set", "unset", "call", "fail"]))
    key = draw(st.sampled_from(KEYS))
    if kind == "set":
        return SetEffect({key: draw(st.sampled_from([None, 1, 2, 3, True, "s"]))})
    if kind == "unset":
        return UnsetEffect([key])
    return CallEffect("bump" if kind == "call" else "fail", {"key": key})


@st.composite
def generated_workflows(draw: Any) -> Workflow:
    n = draw(st.integers(2, 5))
    names = [f"p{i}" for i in range(n)]
    phases = []
    for name in names:
        terminal = name != "p0" and draw(st.booleans()) and draw(st.booleans())
        transitions = [] if terminal else [
            Transition(draw(st.sampled_from(names)), draw(st.sampled_from(WHENS)),
                       trigger=draw(st.sampled_from(["auto", "auto", "model"])))
            for _ in range(draw(st.integers(0, 3)))
        ]
        prepare = [
            Preparation(f"prep{i}", draw(_effects()), [draw(st.sampled_from(KEYS))])
            for i in range(draw(st.integers(0, 1)))
        ]
        phases.append(Phase(
            name, goal=f"Goal of {name}.",
            requires=draw(st.sampled_from([[], [], ["a"], ["c"]])),
            prepare=prepare,
            guard=draw(st.sampled_from([None, None, "state.b != 3", "seconds_in_phase < 100"])),
            on_enter=draw(st.lists(_effects(), max_size=2)),
            on_exit=draw(st.lists(_effects(), max_size=2)),
            tools=draw(st.sampled_from([None, ["t1"], []])),
            terminal=terminal, transitions=transitions,
        ))
    return Workflow(name="gen", initial="p0", phases={p.name: p for p in phases},
                    registry={"bump": _bump, "fail": _fail},
                    machine_factory=PhaseMachine.from_workflow)


@cache
def bundled(name: str) -> Workflow:
    """A bundled workflow, loaded without a registry: its ``call`` effects fail at run
    time, which puts positioned ``effect_error`` events in the trace."""
    return phaseflow.load_workflow(WORKFLOWS / f"{name}.yaml")


BUNDLED = sorted(p.stem for p in WORKFLOWS.glob("*.yaml") if not p.stem.endswith(".test"))

#: Workflows to drive, by family (hypothesis' ``one_of`` would favour the simpler one).
FAMILIES = {
    "generated": generated_workflows(),
    "bundled": st.one_of(st.sampled_from(BUNDLED).map(bundled),
                         st.just(None).map(lambda _: refund_desk())),
}

#: JSON values a host may write into the state.
VALUES = [None, 0, 1, 2, 3, 600, 0.005, "x", True, False, {"name": "standard"}, [1]]

#: One step of a drive. Indices are taken modulo the workflow's phases / state keys.
_advance = st.tuples(st.just("advance"))
_goto = st.tuples(st.just("goto"), st.integers(0, 30))
_set = st.tuples(st.just("set"), st.integers(0, 30), st.integers(0, len(VALUES) - 1))
ops = st.one_of(
    _advance, _advance, _advance, _goto, _goto, _set, _set,
    st.tuples(st.just("unset"), st.integers(0, 30)),
    st.tuples(st.just("wait"), st.sampled_from([0, 0.5, 1, 5, 30, 300, 1200, 3600])),
    st.tuples(st.just("request"), st.integers(0, 30)),
)


def _keys(wf: Workflow) -> list[str]:
    """The state keys a drive writes: those declared, else every key the phases read."""
    if wf.state:
        return sorted(wf.state)
    keys = set(KEYS)
    for p in wf.phases.values():
        keys.update(p.requires, p.needs)
        for g in (p.guard, *(t.when for t in p.transitions)):
            if g is not None:
                keys.update(g.reads)
    return sorted(keys)


def _observe_transition(r: Any) -> Any:
    if r is None:
        return None
    rec = r.record
    return (r.from_phase, r.to_phase, r.trigger, r.turn, r.events, r.instructions,
            (rec.from_phase, rec.to_phase, rec.turn, rec.trigger, rec.duration_in_phase))


class Drive:
    """A machine, its state and its clock, moved one op at a time; every op returns what
    a host could see of it."""

    def __init__(self, wf: Workflow, m: PhaseMachine, s: State, clock: FakeClock) -> None:
        self.wf, self.m, self.s, self.clock = wf, m, s, clock
        self.phases = sorted(wf.phases)
        self.keys = _keys(wf)
        self.turn = m.turn

    def do(self, op: tuple[Any, ...]) -> Any:
        m, s = self.m, self.s
        kind = op[0]
        if kind == "wait":
            self.clock.advance(op[1])
            return None
        if kind == "set":  # as a tool call would, then the turn ends
            s.set(self.keys[op[1] % len(self.keys)], copy.deepcopy(VALUES[op[2]]))
        elif kind == "unset":
            s.unset(self.keys[op[1] % len(self.keys)])
            return None
        self.turn += 1
        if kind in ("advance", "set"):
            r = m.advance_sync(s, turn=self.turn)
            return (r.outcome, r.phase, r.turn, r.target, r.missing, r.preparations, r.events,
                    _observe_transition(r.transition))
        target = self.phases[op[1] % len(self.phases)]
        if kind == "goto":
            return _observe_transition(m.goto_sync(target, s, turn=self.turn, source="host"))
        allowed = m.request(target, s)
        return allowed, _observe_transition(m.take_request_sync(target, s, turn=self.turn))

    def seen(self) -> Any:
        """Everything observable about the machine now (pure members only)."""
        m, s = self.m, self.s
        ctx = m.guard_context()
        return (
            m.current, dict(m.visits), m.turn, m.turns_in_phase, m.trace,
            [(r.from_phase, r.to_phase, r.turn, r.trigger, r.duration_in_phase)
             for r in m.history],
            m.evaluate(s), m.evaluate_for_transition(s), m.describe_navigation(s),
            [m.request(p, s) for p in self.phases], m.active_tools(),
            (ctx.phase, ctx.turn, ctx.turns_in_phase, ctx.seconds_in_phase, dict(ctx.visits)),
            m.current_phase_duration(), m.snapshot(), dict(s), s.take_changes(),
        )


def _walk(value: Any) -> Iterator[Any]:
    yield value
    if isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from _walk(v)
    elif isinstance(value, list):
        for v in value:
            yield from _walk(v)


def assert_plain_json(snapshot: Any) -> None:
    for v in _walk(snapshot):
        assert type(v) in (dict, list, str, int, float, bool, type(None)), type(v)
        if type(v) is float:
            assert math.isfinite(v)
    json.dumps(snapshot, allow_nan=False)


def _through_json(value: Any) -> Any:
    return json.loads(json.dumps(value, allow_nan=False))


SETTINGS = settings(max_examples=80, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# --- lossless round trip ------------------------------------------------------------------


#: Clock readings binary floating point cannot represent exactly (tenths). Times taken on
#: a clock near 0 carry more fraction bits than a clock near 1e9 can add to its readings,
#: so rebuilding them on the other clock rounds.
messy = st.floats(0, 1000).map(lambda x: x + 0.1)
far = st.floats(1e8, 1e9).map(lambda x: x + 0.1)


@pytest.mark.parametrize("family", sorted(FAMILIES))
@SETTINGS
@given(data=st.data(),
       steps=st.lists(st.one_of(ops, st.just(("save",))), min_size=4, max_size=40),
       start=messy, restart=far, waits=st.lists(messy, min_size=1, max_size=5))
def test_restore_then_snapshot_gives_the_same_json(
    family: str, data: st.DataObject, steps: list[tuple[Any, ...]], start: float,
    restart: float, waits: list[float],
) -> None:
    """On a clock with arbitrary float readings, saving and resuming at any point gives
    back exactly the JSON saved, however many times the conversation is resumed."""
    wf = data.draw(FAMILIES[family])
    clock = FakeClock(start)
    d = Drive(wf, wf.machine(clock=clock), State(wf.defaults()), clock)
    for i, op in enumerate(steps):
        if op[0] == "wait":
            op = ("wait", waits[i % len(waits)])
        if op[0] != "save":
            d.do(op)
            continue
        d.clock.advance(waits[-i % len(waits)])  # a time in the phase with a fraction
        saved = d.m.snapshot()
        assert_plain_json(saved)
        clock = FakeClock(restart + i)
        m = PhaseMachine.restore(wf, _through_json(saved), clock=clock)
        assert m.snapshot() == saved
        assert m.snapshot() == saved  # twice: snapshot() changes nothing
        d = Drive(wf, m, State(_through_json(dict(d.s))), clock)
    d.clock.advance(waits[0])
    final = d.m.snapshot()
    assert_plain_json(final)
    assert PhaseMachine.restore(wf, final, clock=FakeClock(restart)).snapshot() == final


def test_times_are_given_back_exactly_on_a_clock_that_rounds() -> None:
    wf = chain(3, when="state.go")
    clock = FakeClock(1_000_000.1)
    m = wf.machine(clock=clock)
    s = State({"go": True})
    for t in range(1, 6):
        clock.advance(0.7)
        m.advance_sync(s, turn=t)
    clock.advance(0.3)
    saved = m.snapshot()
    assert saved["history"][0]["at"] != -2.8  # the arithmetic did round
    r = PhaseMachine.restore(wf, saved, clock=FakeClock(7_777_777.7))
    assert r.snapshot() == saved


def test_a_full_history_and_trace_round_trip() -> None:
    wf = chain(3, when="state.go")
    clock = FakeClock(10.1)
    m = wf.machine(clock=clock)
    s = State({"go": True})
    for t in range(1, 160):
        clock.advance(0.3)
        m.advance_sync(s, turn=t)
    wf2 = refund_desk({"notify_customer": _fail})
    m2 = wf2.machine(clock=clock)
    s2 = State({"customer_id": "C", "order_id": "O", "amount": 1, "policy": {}})
    for t in range(1, 400):
        m2.goto_sync("refund", s2, turn=t)  # on_exit of refund fails each time
    for machine, workflow in ((m, wf), (m2, wf2)):
        saved = machine.snapshot()
        assert len(saved["history"]) == HISTORY_LIMIT
        assert_plain_json(saved)
        restored = PhaseMachine.restore(workflow, _through_json(saved), clock=FakeClock(3.7))
        assert restored.snapshot() == saved
        assert restored.history[-1].to_phase == restored.current
    assert len(m2.snapshot()["trace"]) == TRACE_LIMIT
    assert m2.snapshot()["trace"][0] == {
        "kind": "effect_error", "phase": "refund", "turn": 300,
        "message": m2.trace[0].message, "source": "on_exit[0]", "position": None}
    assert "RuntimeError: no key" in m2.trace[0].message


def test_the_json_fields() -> None:
    """The format a host stores, field by field (times relative, never clock readings)."""
    wf = refund_desk()
    clock = FakeClock(5000.0)
    m = wf.machine(clock=clock)
    s = State()
    clock.advance(2)
    s.set("customer_id", "C-1")
    m.advance_sync(s, turn=1)
    clock.advance(3)
    m.goto_sync("greet", s, turn=2, source="supervisor")
    clock.advance(1.5)
    m.take_request_sync("escalate", s, turn=3)  # refused: no model transition from greet
    m.begin_boundary(4)
    clock.advance(4)
    assert m.snapshot() == {
        "format": "phaseflow.machine",
        "version": 2,
        "workflow": "refund-desk",
        "phase": "greet",
        "elapsed": 5.5,
        "turn": 4,
        "turns_in_phase": 1,
        "visits": {"greet": 2, "locate_order": 1},
        "history": [
            {"from": "greet", "to": "locate_order", "turn": 1, "at": -3.0,
             "trigger": {"kind": "guard", "index": 0}, "duration_in_phase": 2.0},
            {"from": "locate_order", "to": "greet", "turn": 2, "at": 0.0,
             "trigger": {"kind": "programmatic", "source": "supervisor"},
             "duration_in_phase": 3.0},
        ],
        "trace": [],
    }


def test_a_model_trigger_and_positioned_events_round_trip() -> None:
    wf = bundled("refund-desk")
    m = wf.machine(clock=FakeClock())
    s = State(wf.defaults())
    for p in sorted(wf.phases):  # every phase, so on_enter/on_exit calls fail somewhere
        m.goto_sync(p, s, turn=1)
    m.goto_sync("locate_order", s, turn=2)
    assert m.take_request_sync("handoff", s, turn=3) is not None
    saved = m.snapshot()
    assert any(e["position"] is not None for e in saved["trace"])
    handoff = next(i for i, t in enumerate(wf.phases["locate_order"].transitions)
                   if t.to == "handoff" and t.trigger == "model")
    assert saved["history"][-1]["trigger"] == {"kind": "model", "index": handoff}
    restored = PhaseMachine.restore(wf, _through_json(saved))
    assert restored.trace == m.trace
    assert [r[:3] + r[4:] for r in restored.history] == [r[:3] + r[4:] for r in m.history]
    assert restored.history[-1].trigger == ModelTrigger(handoff)
    # a version 1 snapshot (no index recorded) still restores, the index unknown
    older = _through_json(saved)
    older["version"] = 1
    older["history"][-1]["trigger"] = {"kind": "model"}
    assert PhaseMachine.restore(wf, older).history[-1].trigger == ModelTrigger(None)
    older["history"][-1]["trigger"] = {"kind": "model", "index": -1}
    with pytest.raises(SnapshotError, match=r"trigger.index"):
        PhaseMachine.restore(wf, older)


def test_a_fresh_machine_snapshot() -> None:
    wf = refund_desk()
    m = wf.machine(clock=FakeClock(7.0))
    saved = m.snapshot()
    assert saved["phase"] == "greet" and saved["visits"] == {"greet": 1}
    assert saved["history"] == [] and saved["trace"] == [] and saved["elapsed"] == 0.0
    r = PhaseMachine.restore(wf, saved, clock=FakeClock(1.0))
    assert r.history == () and r.trace == () and r.current == "greet"


# --- the elapsed time -----------------------------------------------------------------------


def test_right_after_restore_every_time_is_the_saved_one() -> None:
    """The reviewer's case: 0.1 + 0.2 s in a phase on a clock from 0, resumed on a clock
    reading 1e9 + 0.1 (too coarse to hold the saved time as a reading): snapshot(),
    guard_context(), current_phase_duration() and a time guard all see the saved
    0.30000000000000004, and the guard decides as on the machine that never stopped."""
    wf = chain(3, when="seconds_in_phase >= 0.3")
    clock = FakeClock(0.0)
    m = wf.machine(clock=clock)
    clock.advance(0.1)
    clock.advance(0.2)
    saved = m.snapshot()
    assert saved["elapsed"] == 0.30000000000000004
    r = PhaseMachine.restore(wf, _through_json(saved), clock=FakeClock(1e9 + 0.1))
    assert r.snapshot() == saved
    assert r.guard_context().seconds_in_phase == 0.30000000000000004
    assert r.current_phase_duration() == 0.30000000000000004
    assert m.advance_sync(State(), turn=1).transitioned
    assert r.advance_sync(State(), turn=1).transitioned
    assert r.history[-1].duration_in_phase == m.history[-1].duration_in_phase
    assert r.snapshot() == m.snapshot()


def test_on_the_same_clock_a_restored_machine_is_the_original() -> None:
    """Resumed in the same process on the same clock, the saved times land on that clock
    exactly: the restored machine's history readings are the original's. (The saved
    times must be exact differences of the readings, which they are for readings within
    a factor of two of each other; from 0.1 to 2.3 some would round.)"""
    wf = chain(3, when="state.go")
    clock = FakeClock(1000.1)
    m = wf.machine(clock=clock)
    for t in range(1, 4):
        clock.advance(0.7)
        m.advance_sync(State({"go": True}), turn=t)
    clock.advance(0.2)
    r = PhaseMachine.restore(wf, _through_json(m.snapshot()), clock=clock)
    assert r.history == m.history
    clock.advance(1234.5678)
    assert r.current_phase_duration() == m.current_phase_duration()
    assert r.snapshot() == m.snapshot()


def test_set_clock_after_restore_restarts_the_timer() -> None:
    wf = refund_desk()
    saved = wf.machine(clock=FakeClock()).snapshot() | {"elapsed": 40.0}
    r = PhaseMachine.restore(wf, saved, clock=FakeClock(9.0))
    r.set_clock(FakeClock(9.0))
    assert r.snapshot()["elapsed"] == 0.0


def test_a_time_guard_fires_after_the_same_total_time() -> None:
    """``seconds_in_phase > 60``: 50 s before saving and 11 s after resuming is 61 s."""
    wf = Workflow(name="timer", initial="wait", machine_factory=PhaseMachine.from_workflow,
                  phases={"wait": Phase("wait", transitions=[
                      Transition("late", "seconds_in_phase > 60")]),
                      "late": Phase("late", terminal=True)})
    clock = FakeClock(1_000_000.0)
    m = wf.machine(clock=clock)
    clock.advance(50)
    saved = json.dumps(m.snapshot())
    later = FakeClock(3.0)  # another process: its clock means nothing to the first
    r = PhaseMachine.restore(wf, json.loads(saved), clock=later)
    later.advance(10)
    assert r.advance_sync(State(), turn=1).stayed
    later.advance(1)
    result = r.advance_sync(State(), turn=2)
    assert result.transitioned and r.current == "late"
    assert r.history[-1].duration_in_phase == 61.0


# --- continuing a restored machine ----------------------------------------------------------

#: Readings far from 0 with arbitrary fractions: the original's clock in [2**29, 2**30)
#: (steps of 2**-23 s), the restored one's either finer, in [2**26, 2**27), or much coarser,
#: in [2**50, 2**51) (steps of 0.25 s: too coarse to place the saved times on, so the
#: restored machine reads it shifted), or the original's own clock. No drive moves a
#: clock out of its binade, so every difference of two readings is exact.
original_start = st.floats(2.0**29 + 2.0**20, 2.0**30 - 2.0**22).map(lambda x: x + 0.1)
RESTARTS: dict[str, Any] = {
    "finer": st.floats(2.0**26, 2.0**27 - 2.0**22).map(lambda x: x + 0.1),
    "coarser": st.floats(2.0**50, 2.0**51 - 2.0**40).map(lambda x: x + 0.1),
    "same clock": st.none(),
}


class LinkedClocks:
    """Two clocks moved by the same amounts: the one with the coarser readings takes the
    requested wait (and rounds it to what it can hold), the other moves by exactly the
    amount the first one moved. That is what "the same clock increments" means for
    clocks whose readings differ in magnitude."""

    def __init__(self, first: FakeClock, second: FakeClock) -> None:
        self.clocks = (first, second) if first is not second else (first,)

    def advance(self, seconds: float) -> None:
        if len(self.clocks) == 1:
            self.clocks[0].advance(seconds)
            return
        lead, follow = sorted(self.clocks, key=lambda c: -abs(c.now))
        before, old = lead.now, follow.now
        lead.advance(seconds)
        step = lead.now - before
        follow.now = old + step
        assert math.fsum((lead.now, -before, -step)) == 0.0  # both moved by exactly step
        assert math.fsum((follow.now, -old, -step)) == 0.0


def _messy(op: tuple[Any, ...]) -> tuple[Any, ...]:
    """A drive's wait with a fraction binary floating point does not hold."""
    return ("wait", op[1] + 0.1) if op[0] == "wait" and op[1] else op


@pytest.mark.parametrize("restart_kind", sorted(RESTARTS))
@pytest.mark.parametrize("family", sorted(FAMILIES))
@settings(SETTINGS, max_examples=40)  # six combinations: 240 drives in all
@given(data=st.data(), before=st.lists(ops, min_size=3, max_size=30),
       after=st.lists(ops, min_size=5, max_size=30), start=original_start)
def test_a_restored_machine_continues_like_one_that_never_stopped(
    family: str, restart_kind: str, data: st.DataObject, before: list[tuple[Any, ...]],
    after: list[tuple[Any, ...]], start: float,
) -> None:
    """Bit for bit, compared with ``==``: every time a host or a guard can see
    (``seconds_in_phase``, ``current_phase_duration()``, ``duration_in_phase``, every
    later snapshot), and so every time guard's decision."""
    wf = data.draw(FAMILIES[family])
    clock = FakeClock(start)
    original = Drive(wf, wf.machine(clock=clock), State(wf.defaults()), clock)
    for op in before:
        original.do(_messy(op))
    original.s.clear_changes()
    stored = json.dumps({"machine": original.m.snapshot(), "state": dict(original.s)},
                        allow_nan=False)
    loaded = json.loads(stored)
    restart = data.draw(RESTARTS[restart_kind])
    other = clock if restart is None else FakeClock(restart)
    resumed = Drive(wf, PhaseMachine.restore(wf, loaded["machine"], clock=other),
                    State(loaded["state"]), other)
    link = LinkedClocks(clock, other)
    assert resumed.seen() == original.seen()
    for op in map(_messy, after):
        if op[0] == "wait":
            link.advance(op[1])
        else:
            assert resumed.do(op) == original.do(op), op
        assert resumed.seen() == original.seen(), op


def test_a_restored_machine_keeps_no_one_alive() -> None:
    """A clock that is a bound method of the object holding the machine makes a reference
    cycle, freed by the garbage collector like any other (nothing global remembers a
    restored machine), whether the clock is read as it is or shifted."""
    wf = chain(3, when="state.go")
    clock = FakeClock(0.0)
    m = wf.machine(clock=clock)
    clock.advance(0.1)
    clock.advance(0.2)
    saved = m.snapshot()

    class Host:
        def __init__(self, now: float) -> None:
            self.now = now
            self.machine = PhaseMachine.restore(wf, saved, clock=self.clock)

        def clock(self) -> float:
            return self.now

    gc.collect()
    for now in (5.0, 1e9 + 0.1):  # the first keeps the clock as it is, the second shifts it
        hosts = [Host(now) for _ in range(200)]
        assert hosts[0].machine.current_phase_duration() == saved["elapsed"]
        refs = [weakref.ref(h) for h in hosts] + [weakref.ref(h.machine) for h in hosts]
        del hosts
        gc.collect()
        assert all(r() is None for r in refs)


async def _async_noop(ctx: Any, **kw: Any) -> None:
    await asyncio.sleep(0)


def test_a_restored_machine_runs_async_effects() -> None:
    wf = refund_desk({"notify_customer": _async_noop})
    clock = FakeClock()
    m = wf.machine(clock=clock)
    s = State({"customer_id": "C", "order_id": "O", "amount": 10})
    asyncio.run(m.advance(s, turn=1))
    asyncio.run(m.advance(s, turn=2))
    assert m.current == "refund"
    r = PhaseMachine.restore(wf, _through_json(m.snapshot()), clock=FakeClock())
    s.set("refund_id", "R")
    result = asyncio.run(r.advance(s, turn=3))
    assert result.transitioned and result.events == () and r.current == "done"
    assert [h.to_phase for h in r.history] == ["locate_order", "refund", "done"]


def test_restore_keeps_nothing_of_the_data() -> None:
    wf = refund_desk()
    m = wf.machine(clock=FakeClock())
    m.goto_sync("locate_order", State(), turn=1)
    data = _through_json(m.snapshot())
    r = PhaseMachine.restore(wf, data, clock=FakeClock())
    data["visits"]["greet"] = 99
    data["history"].clear()
    assert dict(r.visits) == {"greet": 1, "locate_order": 1} and len(r.history) == 1


# --- refusals -------------------------------------------------------------------------------


def _saved() -> dict[str, Any]:
    """A valid snapshot of the refund desk with history, model/guard/programmatic
    triggers and trace events (with and without positions)."""
    wf = bundled("refund-desk")
    clock = FakeClock(100.0)
    m = wf.machine(clock=clock)
    s = State(wf.defaults())
    for i, p in enumerate(["greet", *sorted(wf.phases), "greet"]):
        clock.advance(1.25)
        m.goto_sync(p, s, turn=i + 1)
    s.set("customer_id", "C-1")
    m.advance_sync(s, turn=20)
    saved = _through_json(m.snapshot())
    assert saved["history"] and saved["trace"]
    return saved


def _refusal(wf: Workflow, data: Any) -> str:
    with pytest.raises(SnapshotError) as info:
        PhaseMachine.restore(wf, data)
    message = str(info.value)
    assert message.startswith("snapshot") and len(message) < 400
    return message


def test_another_workflows_snapshot_is_refused_naming_it() -> None:
    saved = _saved()
    assert _refusal(chain(3), saved) == (
        "snapshot.workflow: 'refund-desk' is not workflow 'chain'")


def test_only_the_current_phase_must_exist_in_an_edited_workflow() -> None:
    """A conversation resumes against an edited workflow as long as its current phase is
    still there; the past (history, visits, trace) may name phases the edit removed."""
    wf = bundled("refund-desk")
    m = wf.machine(clock=FakeClock())
    m.goto_sync("refund", State(), turn=1)
    fewer = Workflow(name="refund-desk", initial=wf.initial,
                     phases={k: v for k, v in wf.phases.items() if k != "refund"})
    assert _refusal(fewer, m.snapshot()) == (
        "snapshot.phase: 'refund' is not a phase of workflow 'refund-desk'")
    m.goto_sync("greet", State(), turn=2)
    saved = _through_json(m.snapshot())
    r = PhaseMachine.restore(fewer, saved, clock=FakeClock(2.0))
    assert r.snapshot() == saved and [h.to_phase for h in r.history] == ["refund", "greet"]
    assert r.guard_context().visits["refund"] == 1
    bad = _saved()
    bad["history"][3]["to"] = "nope"
    assert _refusal(wf, bad) == (
        "snapshot.history[4].from: 'greet' does not follow snapshot.history[3].to ('nope')")


def test_a_machine_built_in_code_restores_into_a_workflow_of_its_phases() -> None:
    m = PhaseMachine("p0", clock=FakeClock(5.0))
    for phase in chain(2).phases.values():
        m.add_phase(phase)
    m.goto_sync("p1", State(), turn=1)
    saved = m.snapshot()
    assert saved["workflow"] is None
    restored = PhaseMachine.restore(chain(2), saved, clock=FakeClock(9.0))
    assert restored.current == "p1"
    assert restored.snapshot() == {**saved, "workflow": "chain"}
    lone = PhaseMachine("a")
    lone.add_phase(Phase("a"))
    assert _refusal(chain(2), lone.snapshot()) == (
        "snapshot.phase: 'a' is not a phase of workflow 'chain'")


def test_too_long_a_history_or_trace_is_refused() -> None:
    saved = _saved()
    wf = bundled("refund-desk")
    long_history = copy.deepcopy(saved)
    record = {"from": saved["phase"], "to": saved["phase"], "turn": 1, "at": 0.0,
              "trigger": {"kind": "model"}, "duration_in_phase": 0.0}
    long_history["history"] = [record] * (HISTORY_LIMIT + 1)
    assert _refusal(wf, long_history) == (
        "snapshot.history: 101 entries, more than the 100 a machine keeps")
    long_history["history"] = [record] * HISTORY_LIMIT
    long_history["visits"][saved["phase"]] = HISTORY_LIMIT  # each record was a visit
    assert len(PhaseMachine.restore(wf, long_history).history) == HISTORY_LIMIT
    long_trace = copy.deepcopy(saved)
    long_trace["trace"] = [saved["trace"][0]] * (TRACE_LIMIT + 1)
    assert _refusal(wf, long_trace).startswith("snapshot.trace: 101 entries")


WRONG_VALUES: list[tuple[tuple[Any, ...], Any, str]] = [
    (("format",), "phaseflow.turn", "snapshot.format: expected 'phaseflow.machine', got "
     "'phaseflow.turn'"),
    (("version",), 3, "snapshot.version: this phaseflow reads versions 1 and 2, got 3"),
    (("version",), True, "snapshot.version: this phaseflow reads versions 1 and 2, got true"),
    (("turn",), True, "snapshot.turn: expected an integer, got true"),
    (("turn",), -1, "snapshot.turn: expected an integer from 0 to 2**63-1, got -1"),
    (("turn",), 10**5000, "snapshot.turn: expected an integer from 0 to 2**63-1, got an "
     "integer of 16610 bits"),
    (("turns_in_phase",), 1.0, "snapshot.turns_in_phase: expected an integer, got 1.0"),
    (("elapsed",), math.nan, "snapshot.elapsed: expected a finite number of seconds up to "
     "2**53, got nan"),
    (("elapsed",), -math.inf, "snapshot.elapsed: expected a finite number of seconds up to "
     "2**53, got -inf"),
    (("elapsed",), -1, "snapshot.elapsed: expected seconds >= 0, got -1"),
    (("elapsed",), 10**400, "snapshot.elapsed: an integer of 1329 bits is out of range"),
    (("elapsed",), "3", "snapshot.elapsed: expected a number of seconds, got '3'"),
    (("visits",), [], "snapshot.visits: expected an object, got an array"),
    (("visits", "greet"), -3, "snapshot.visits['greet']: expected an integer from 1 to "
     "2**63-1, got -3"),
    (("history", 0, "trigger"), {"kind": "guard"}, "snapshot.history[0].trigger: missing "
     "key 'index'"),
    (("history", 0, "trigger", "kind"), "timer", "snapshot.history[0].trigger.kind: "
     "expected 'guard', 'model' or 'programmatic', got 'timer'"),
    (("history", 1, "from"), "x" * 5000, "snapshot.history[1].from: "
     f"{'x' * 60!r}... (5000 chars) does not follow snapshot.history[0].to ('greet')"),
    (("history", 1, "from"), 5, "snapshot.history[1].from: expected a phase name, got 5"),
    (("trace", 0, "kind"), "oops", "snapshot.trace[0].kind: expected one of effect_error, "
     "guard_error, preparation_failed, template_error, got 'oops'"),
    (("trace", 0, "position"), {"path": "x", "line": 1}, "snapshot.trace[0].position: "
     "missing key 'column'"),
    (("trace", 0, "position"), {"path": "x", "line": -1, "column": 0},
     "snapshot.trace[0].position.line: expected an integer from 0 to 2**63-1, got -1"),
    (("trace", 0, "phase"), ["nope"], "snapshot.trace[0].phase: expected a phase name, "
     "got an array"),
    (("trace", 0, "turn"), -1, "snapshot.trace[0].turn: expected an integer from 0 to "
     "2**63-1, got -1"),
    (("history", 0, "duration_in_phase"), -0.5, "snapshot.history[0].duration_in_phase: "
     "expected seconds >= 0, got -0.5"),
    (("history", 0, "at"), math.inf, "snapshot.history[0].at: expected a finite number of "
     "seconds up to 2**53, got inf"),
    (("history", 0, "turn"), 2**63, "snapshot.history[0].turn: expected an integer from 0 "
     "to 2**63-1, got 9223372036854775808"),
    (("history", 0, "trigger"), {"kind": "guard", "index": -1}, "snapshot.history[0]"
     ".trigger.index: expected an integer from 0 to 2**63-1, got -1"),
]


@pytest.mark.parametrize(("path", "value", "message"), WRONG_VALUES,
                         ids=[f"{i}-{'.'.join(map(str, c[0]))}"
                              for i, c in enumerate(WRONG_VALUES)])
def test_wrong_values_are_refused_naming_the_field(
    path: tuple[Any, ...], value: Any, message: str
) -> None:
    saved = _saved()
    node: Any = saved
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value
    assert _refusal(bundled("refund-desk"), saved) == message


def test_missing_and_extra_keys_are_refused() -> None:
    saved = _saved()
    del saved["trace"]
    assert _refusal(bundled("refund-desk"), saved) == "snapshot: missing key 'trace'"
    saved = _saved()
    saved["history"][2]["note"] = 1
    assert _refusal(bundled("refund-desk"), saved) == (
        "snapshot.history[2]: unexpected key 'note'")


def test_a_broken_chain_of_records_is_refused() -> None:
    saved = _saved()
    saved["history"][2]["from"] = saved["history"][2]["to"] = "greet"
    if saved["history"][1]["to"] != "greet":
        assert "does not follow snapshot.history[1].to" in _refusal(
            bundled("refund-desk"), saved)
    saved = _saved()
    others = sorted(set(bundled("refund-desk").phases) - {saved["phase"]})
    saved["phase"] = others[0]
    assert _refusal(bundled("refund-desk"), saved).startswith(
        f"snapshot.phase: {others[0]!r} is not where snapshot.history[")


def test_deep_nesting_is_refused_without_recursing() -> None:
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    saved = _saved()
    saved["history"][0] = deep
    assert _refusal(bundled("refund-desk"), saved) == (
        "snapshot.history[0]: expected an object, got an array")
    assert _refusal(bundled("refund-desk"), deep) == "snapshot: expected an object, got an array"


def test_the_error_is_a_phaseflow_error() -> None:
    assert issubclass(SnapshotError, PhaseflowError)


# --- states no machine reaches, values of other types, misuse --------------------------------


def test_states_no_machine_reaches_are_refused() -> None:
    wf = bundled("refund-desk")
    saved = _saved()
    phase = saved["phase"]
    cases = [
        ({"visits": {}}, f"snapshot.phase: {phase!r} is current but was never entered (it is "
         "not in snapshot.visits)"),
        ({"visits": {**saved["visits"], phase: 0}}, f"snapshot.visits[{phase!r}]: expected an "
         "integer from 1 to 2**63-1, got 0"),
        ({"visits": {**saved["visits"], phase: 1}}, f"snapshot.history[8].to: 3 kept records "
         f"enter {phase!r}, more than snapshot.visits[{phase!r}] (1)"),
    ]
    kept = next(saved["history"][k:] for k in range(len(saved["history"]))
                if saved["history"][k]["from"] not in {phase} | {
                    r["to"] for r in saved["history"][k:]})
    first = kept[0]["from"]
    cases.append(({"history": kept, "visits": {k: v for k, v in saved["visits"].items()
                                               if k != first}},
                  f"snapshot.history[0].from: {first!r} was current but was never entered "
                  "(it is not in snapshot.visits)"))
    for change, message in cases:
        assert _refusal(wf, saved | change) == message


def test_turn_numbers_are_the_hosts_and_are_kept_as_given() -> None:
    """A machine records the turn numbers it is told, in any order: such states are
    reachable, so restore keeps them."""
    wf = chain(3, when="state.go")
    m = wf.machine(clock=FakeClock())
    m.goto_sync("p1", State(), turn=9)
    m.goto_sync("p2", State(), turn=2)
    for _ in range(5):
        m.advance_sync(State(), turn=0)
    saved = m.snapshot()
    assert saved["turn"] == 0 and saved["turns_in_phase"] == 5
    assert [h["turn"] for h in saved["history"]] == [9, 2]
    assert PhaseMachine.restore(wf, saved, clock=FakeClock(1.0)).snapshot() == saved


class _HostileStr(str):
    def __hash__(self) -> int:
        raise RuntimeError("hash")

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("eq")


class _CollidingKey(str):
    """Hashes as the plain string it spells, then raises when compared."""

    def __hash__(self) -> int:
        return hash(str(self))

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("eq")


class _HostileDict(dict):  # type: ignore[type-arg]
    def __len__(self) -> int:
        raise RuntimeError("len")


class _HostileList(list):  # type: ignore[type-arg]
    def __len__(self) -> int:
        raise RuntimeError("len")


class _MyInt(int):
    pass


def test_values_of_other_types_are_refused_by_their_type() -> None:
    """Only the exact types json.loads makes are read: a subclass is refused before any
    of its methods runs, so one whose methods raise gets a SnapshotError too."""
    wf = bundled("refund-desk")
    saved = _saved()
    phase = saved["phase"]
    keyed = {(_CollidingKey(k) if k == "format" else k): v for k, v in saved.items()}
    cases: list[tuple[Any, str]] = [
        (_HostileDict(saved), "snapshot: expected an object, got a _HostileDict"),
        (saved | {"phase": _HostileStr(phase)}, "snapshot.phase: expected a phase name, got a "
         "_HostileStr"),
        (saved | {"format": _HostileStr("phaseflow.machine")}, "snapshot.format: expected "
         "'phaseflow.machine', got a _HostileStr"),
        (saved | {"workflow": _HostileStr("refund-desk")}, "snapshot.workflow: a _HostileStr is "
         "not workflow 'refund-desk'"),
        (keyed, "snapshot: a key is a _CollidingKey, not a string"),
        (saved | {"history": _HostileList(saved["history"])}, "snapshot.history: expected an "
         "array, got a _HostileList"),
        (saved | {"turn": _MyInt(3)}, "snapshot.turn: expected an integer, got a _MyInt"),
        (saved | {"visits": {_CollidingKey(phase): 1}}, "snapshot.visits: a key is a "
         "_CollidingKey, not a string"),
    ]
    record = copy.deepcopy(saved["history"][0])
    record["trigger"] = {"kind": _HostileStr("guard"), "index": 0}
    cases.append((saved | {"history": [record, *saved["history"][1:]]},
                  "snapshot.history[0].trigger.kind: expected 'guard', 'model' or "
                  "'programmatic', got a _HostileStr"))
    event = copy.deepcopy(saved["trace"][0])
    event["phase"] = _HostileStr("greet")
    cases.append((saved | {"trace": [event]}, "snapshot.trace[0].phase: expected a phase "
                  "name, got a _HostileStr"))
    for data, message in cases:
        assert _refusal(wf, data) == message


def test_misuse_of_restore_is_a_config_error() -> None:
    saved = _saved()
    wf = bundled("refund-desk")
    with pytest.raises(ConfigError) as info:
        PhaseMachine.restore(None, saved)  # type: ignore[arg-type]
    assert str(info.value) == "restore expects a Workflow, got NoneType"
    with pytest.raises(ConfigError) as info:
        PhaseMachine.restore(wf, saved, clock=3.0)  # type: ignore[arg-type]
    assert str(info.value) == "restore expects a clock (a callable), got float"
    for reading, shown in [(math.nan, "nan"), (math.inf, "inf"), ("x", "a str"),
                           (None, "a NoneType"), (10**400, "an integer of 1329 bits")]:
        with pytest.raises(ConfigError) as info:
            PhaseMachine.restore(wf, saved, clock=lambda r=reading: r)
        assert str(info.value) == (f"restore: the clock gave {shown}, not a finite number of "
                                   "seconds")


def test_integer_times_come_back_as_equal_floats() -> None:
    """The machine writes floats and gets the same JSON text back; integer times written by
    hand are read as the equal float."""
    wf = refund_desk()
    saved = wf.machine(clock=FakeClock()).snapshot() | {"elapsed": 5}
    again = PhaseMachine.restore(wf, saved, clock=FakeClock(3.0)).snapshot()
    assert again == saved and again["elapsed"] == 5.0 and type(again["elapsed"]) is float
    assert _refusal(wf, saved | {"elapsed": 2**53 + 1}) == (
        "snapshot.elapsed: expected a finite number of seconds up to 2**53, got "
        "9007199254740993")


def test_a_clock_reading_far_from_zero_restores() -> None:
    wf = refund_desk()
    saved = _through_json(wf.machine(clock=FakeClock()).snapshot()) | {"elapsed": 0.1}
    for reading in (1.7e308, -1.7e308, 5e-324):
        r = PhaseMachine.restore(wf, saved, clock=FakeClock(reading))
        assert r.snapshot() == saved and r.current_phase_duration() == 0.1


# --- hostile JSON ---------------------------------------------------------------------------


def _deep(depth: int, make: Any) -> Any:
    value: Any = None
    for _ in range(depth):
        value = make(value)
    return value


#: Replacement values: wrong types, out-of-range numbers, names of no phase, junk.
HOSTILE: list[Any] = [
    True, False, None, 0, 1, -1, 7, 2**63, -(2**63), 10**5000, 0.0, -0.0, 1.5, -2.5, 1e300,
    math.nan, math.inf, -math.inf, "", "nope", "greet", "locate_order", "guard", "model",
    "programmatic", "effect_error", "x" * 10_000, "\ud800", [], [1, "a"], [{}], {},
    {"kind": "guard"}, {"kind": "guard", "index": 0}, {"kind": "model"},
    {"path": "f", "line": 1, "column": 2}, _deep(50_000, lambda v: [v]),
    _deep(50_000, lambda v: {"k": v}),
]


def _nodes(value: Any, path: str, trail: tuple[Any, ...]) -> Iterator[tuple[str, tuple[Any, ...]]]:
    """Every node of a snapshot with its path as the messages spell it."""
    yield path, trail
    if isinstance(value, dict):
        for k, v in value.items():
            sub = f"{path}[{k!r}]" if path == "snapshot.visits" else f"{path}.{k}"
            yield from _nodes(v, sub, (*trail, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _nodes(v, f"{path}[{i}]", (*trail, i))


def _ancestors(path: str) -> list[str]:
    """``path`` and the paths of the nodes that contain it, the root excluded."""
    found = [path]
    while True:
        cut = max(path.rfind("."), path.rfind("["))
        if cut <= 0:
            break
        path = path[:cut]
        found.append(path)
    return [p for p in found if p != "snapshot"] or ["snapshot"]


def _restores_or_names(wf: Workflow, data: Any, paths: list[str]) -> None:
    try:
        m = PhaseMachine.restore(wf, data, clock=FakeClock(1.0))
    except SnapshotError as exc:
        message = str(exc)
        assert len(message) < 400
        assert any(re.search(rf"(^| ){re.escape(p)}(?=[:.\[ )]|$)", message)
                   for p in paths), (message, paths)
        return
    again = m.snapshot()
    # a snapshot of a machine built in code (workflow: null) now belongs to wf; one of
    # version 1 is written again as the current version
    assert again == {**data, "workflow": wf.name, "version": SNAPSHOT_VERSION}
    assert_plain_json(again)
    assert PhaseMachine.restore(wf, _through_json(again), clock=FakeClock(2.0)).snapshot() \
        == again


@cache
def _base() -> tuple[dict[str, Any], list[tuple[str, tuple[Any, ...]]]]:
    saved = _saved()
    return saved, list(_nodes(saved, "snapshot", ()))


def _at(data: Any, trail: tuple[Any, ...]) -> Any:
    for step in trail:
        data = data[step]
    return data


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(node=st.integers(0, 10_000), action=st.sampled_from(["replace", "delete", "add"]),
       pick=st.integers(0, len(HOSTILE) - 1), key=st.sampled_from(["nope", "greet", "kind",
                                                                    "index", "at", ""]))
def test_a_mutated_snapshot_restores_or_names_the_field(
    node: int, action: str, pick: int, key: str
) -> None:
    base, nodes = _base()
    path, trail = nodes[node % len(nodes)]
    data = copy.deepcopy(base)
    paths = _ancestors(path)
    if action == "replace":
        if not trail:
            data = HOSTILE[pick]
        else:
            _at(data, trail[:-1])[trail[-1]] = HOSTILE[pick]
    else:
        target = _at(data, trail)
        if not isinstance(target, dict | list):
            return
        if action == "delete":
            if not target:
                return
            if isinstance(target, dict):
                del target[next(iter(target))]
            else:
                del target[-1]
        elif isinstance(target, dict):
            target[key] = HOSTILE[pick]
        else:
            target.append(HOSTILE[pick])
            paths.append(f"{path}[{len(target) - 1}]")
        paths.append("snapshot.phase")  # a shortened history may leave the phase unexplained
    _restores_or_names(bundled("refund-desk"), data, paths)


def test_every_field_replaced_by_every_hostile_value_restores_or_names_the_field() -> None:
    base, nodes = _base()
    wf = bundled("refund-desk")
    for path, trail in nodes[1:]:
        for value in HOSTILE:
            data = copy.deepcopy(base)
            _at(data, trail[:-1])[trail[-1]] = value
            _restores_or_names(wf, data, _ancestors(path))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
    | st.sampled_from(["phaseflow.machine", "refund-desk", "greet", "guard"]),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.sampled_from(["format", "version", "workflow", "phase", "elapsed",
                                       "turn", "turns_in_phase", "visits", "history", "trace",
                                       "kind", "index", "from", "to", "x"]), inner,
                      max_size=10),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None)
@given(data=json_values, top=st.dictionaries(
    st.sampled_from(["format", "version", "workflow", "phase", "elapsed", "turn",
                     "turns_in_phase", "visits", "history", "trace", "extra"]),
    json_values, max_size=11))
def test_arbitrary_json_restores_or_raises_a_snapshot_error(data: Any, top: Any) -> None:
    wf = bundled("refund-desk")
    for value in (data, top, copy.deepcopy(_base()[0]) | top):
        try:
            m = PhaseMachine.restore(wf, value, clock=FakeClock())
        except SnapshotError as exc:
            assert str(exc).startswith("snapshot") and len(str(exc)) < 400
        else:
            # a snapshot of a machine built in code (workflow: null) now belongs to wf
            assert m.snapshot() == {**value, "workflow": wf.name,
                                    "version": SNAPSHOT_VERSION}


# --- the documentation ----------------------------------------------------------------------


def test_the_embedding_guide_resumes_a_conversation(capsys: pytest.CaptureFixture[str]) -> None:
    """docs/embedding.md's section on saving and resuming prints what it says it prints."""
    doc = Path(__file__).resolve().parents[2] / "docs" / "embedding.md"
    text = doc.read_text(encoding="utf-8")
    assert "## Saving and resuming a conversation" in text
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    exec(compile("\n".join(blocks), str(doc), "exec"), {"__name__": "embedding_doc"})
    lines = capsys.readouterr().out.splitlines()
    at = lines.index("locate_order ['locate_order']")
    assert lines[at + 1: at + 3] == [
        "True", "snapshot.phase: 'nope' is not a phase of workflow 'refund-desk'"]
