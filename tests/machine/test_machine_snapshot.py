"""Saving a machine as JSON and resuming it: ``snapshot()`` and ``PhaseMachine.restore``.

What a host relies on: the JSON is plain and lossless (restoring and snapshotting again
gives the same JSON), and a restored machine continues exactly, bit for bit, as one that
never stopped whose clock moved by the same amounts. What ``restore`` refuses is in
``test_machine_snapshot_refusals.py``.
"""

from __future__ import annotations

import asyncio
import copy
import gc
import json
import math
import re
import weakref
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phaseflow.machine import (
    HISTORY_LIMIT,
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
from tests.support.bundled import bundled_workflows
from tests.support.machines import FakeClock, chain, refund_desk
from tests.support.snapshots import assert_plain_json, bundled, through_json

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


BUNDLED = [p.stem for p in bundled_workflows()]

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
        m = PhaseMachine.restore(wf, through_json(saved), clock=clock)
        assert m.snapshot() == saved
        assert m.snapshot() == saved  # twice: snapshot() changes nothing
        d = Drive(wf, m, State(through_json(dict(d.s))), clock)
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
        restored = PhaseMachine.restore(workflow, through_json(saved), clock=FakeClock(3.7))
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
    restored = PhaseMachine.restore(wf, through_json(saved))
    assert restored.trace == m.trace
    assert [r[:3] + r[4:] for r in restored.history] == [r[:3] + r[4:] for r in m.history]
    assert restored.history[-1].trigger == ModelTrigger(handoff)
    # a version 1 snapshot (no index recorded) still restores, the index unknown
    older = through_json(saved)
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
    r = PhaseMachine.restore(wf, through_json(saved), clock=FakeClock(1e9 + 0.1))
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
    r = PhaseMachine.restore(wf, through_json(m.snapshot()), clock=clock)
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
    r = PhaseMachine.restore(wf, through_json(m.snapshot()), clock=FakeClock())
    s.set("refund_id", "R")
    result = asyncio.run(r.advance(s, turn=3))
    assert result.transitioned and result.events == () and r.current == "done"
    assert [h.to_phase for h in r.history] == ["locate_order", "refund", "done"]


def test_restore_keeps_nothing_of_the_data() -> None:
    wf = refund_desk()
    m = wf.machine(clock=FakeClock())
    m.goto_sync("locate_order", State(), turn=1)
    data = through_json(m.snapshot())
    r = PhaseMachine.restore(wf, data, clock=FakeClock())
    data["visits"]["greet"] = 99
    data["history"].clear()
    assert dict(r.visits) == {"greet": 1, "locate_order": 1} and len(r.history) == 1


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
