"""Property and stateful tests of the machine's invariants.

A random workflow is driven by random state changes, turn boundaries, requests and gotos.
Alongside the machine under test (``advance``) runs a second machine driven by the spec's
definition of a turn boundary composed from the public pure/async members
(``evaluate_for_transition``, ``prepare_target``, ``transition``); both must agree.

A third machine runs the same workflow with an async registry (``async def`` callables
that really suspend, so the async driver, ``phaseflow.machine.drivers.run_async``, awaits
every call the steps yield) and is driven only through the coroutines; every result, the
state, the history, the visits and the trace must be identical to the sync machine's.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import itertools
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from phaseflow.machine import (
    Blocked,
    GuardTrigger,
    ModelTrigger,
    PhaseMachine,
    Ready,
    State,
    TransitionResult,
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

KEYS = ["a", "b", "c"]
WHENS = [None, "state.a", "not state.b", "state.c > 1", "turns_in_phase >= 2",
         "visits.p0 < 3", "state.a and state.c", "state.c < 'x'"]  # the last one can error
VALUES = st.sampled_from([None, 0, 1, 2, 3, True, "s"])


def _effect(draw: Any) -> Any:
    kind = draw(st.sampled_from(["set", "unset", "call", "failcall"]))
    key = draw(st.sampled_from(KEYS))
    if kind == "set":
        return SetEffect({key: draw(VALUES)})
    if kind == "unset":
        return UnsetEffect([key])
    return CallEffect("bump" if kind == "call" else "fail", {"key": key})


def _bump(ctx: Any, key: str) -> dict[str, Any]:
    v = ctx.state.get(key)
    return {key: (v + 1) if type(v) is int else 1}


def _fail(ctx: Any, key: str) -> None:
    raise RuntimeError(key)


async def _async_bump(ctx: Any, key: str) -> dict[str, Any]:
    await asyncio.sleep(0)  # really suspends: only the awaiting path can run it
    return _bump(ctx, key)


async def _async_fail(ctx: Any, key: str) -> None:
    await asyncio.sleep(0)
    _fail(ctx, key)


ASYNC_REGISTRY = {"bump": _async_bump, "fail": _async_fail}


@st.composite
def workflows(draw: Any) -> Workflow:
    n = draw(st.integers(2, 6))
    names = [f"p{i}" for i in range(n)]
    phases = []
    for name in names:
        terminal = name != "p0" and draw(st.booleans()) and draw(st.booleans())
        transitions = [] if terminal else [
            Transition(draw(st.sampled_from(names)), draw(st.sampled_from(WHENS)),
                       trigger=draw(st.sampled_from(["auto", "auto", "model"])))
            for _ in range(draw(st.integers(0, 3)))
        ]
        requires = draw(st.lists(st.sampled_from(KEYS), max_size=2, unique=True))
        prepare = []
        for i in range(draw(st.integers(0, 2))):
            produces = draw(st.sampled_from(KEYS))
            effect = SetEffect({produces: 1}) if draw(st.booleans()) else _effect(draw)
            prepare.append(Preparation(f"prep{i}", effect, [produces]))
        phases.append(Phase(
            name, goal=f"Goal of {name}.", requires=requires, prepare=prepare,
            guard=draw(st.sampled_from([None, None, "state.b != 3", "visits.p1 < 2"])),
            on_enter=[_effect(draw) for _ in range(draw(st.integers(0, 2)))],
            on_exit=[_effect(draw) for _ in range(draw(st.integers(0, 2)))],
            clear_on_enter=draw(st.lists(st.sampled_from(KEYS), max_size=1)),
            terminal=terminal, transitions=transitions,
        ))
    return Workflow(name="gen", initial="p0", phases={p.name: p for p in phases},
                    registry={"bump": _bump, "fail": _fail},
                    machine_factory=PhaseMachine.from_workflow)


def _snapshot(m: PhaseMachine) -> Any:
    return (m.current, m.history, dict(m.visits), m.turns_in_phase, m.turn, m.trace)


def _history(m: PhaseMachine) -> list[Any]:
    return [(r.from_phase, r.to_phase, r.turn, r.trigger) for r in m.history]


def _result(r: Any) -> Any:
    """Everything a boundary or transition result says, comparable."""
    if r is None:
        return None
    if isinstance(r, TransitionResult):
        return (r.from_phase, r.to_phase, r.trigger, r.turn, r.record, r.events, r.ok)
    return (r.outcome, r.phase, r.turn, r.target, r.missing, r.preparations, r.events,
            _result(r.transition))


async def _reference_boundary(m: PhaseMachine, s: State, turn: int) -> None:
    """The spec's turn boundary, composed from the public members."""
    m.begin_boundary(turn)
    phase = m.current_phase
    if phase is None or phase.terminal:
        return
    found = m.evaluate_for_transition(s)
    if isinstance(found, Blocked):
        await m.prepare_target(found.target, s, s)
        found = m.evaluate_for_transition(s)
    if isinstance(found, Ready):
        await m.transition(found.target, s, s, turn=turn, trigger=GuardTrigger(found.index))


def _spec_evaluate(m: PhaseMachine, wf: Workflow, s: State) -> Ready | Blocked | None:
    """``evaluate_for_transition`` written from the spec's text, independently of the
    machine's own scan: only the public guard API and the workflow's phases."""
    phase = wf.phases.get(m.current)
    if phase is None or phase.terminal:
        return None
    ctx = m.guard_context()
    for index, t in enumerate(phase.transitions):
        if t.trigger != "auto":
            continue
        if t.when is not None and not t.when(s, ctx):
            continue
        target = wf.phases.get(t.to)
        if target is None:
            continue
        if target.guard is not None and not target.guard(s, ctx):
            continue
        missing = tuple(k for k in target.requires if s.get(k) is None)
        if not missing:
            return Ready(t.to, index)
        if target.prepare:
            return Blocked(t.to, index, missing)
    return None


class MachineInvariants(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.turn = 0
        self.transitions = 0

    @initialize(wf=workflows())
    def start(self, wf: Workflow) -> None:
        self.wf = wf
        self.clock = FakeClock()
        self.m = wf.machine(clock=self.clock)
        self.ref = wf.machine(clock=self.clock)
        self.s = State(wf.defaults())
        self.rs = State(wf.defaults())
        self.am = dataclasses.replace(wf, registry=ASYNC_REGISTRY).machine(clock=self.clock)
        self.as_ = State(wf.defaults())

    def _same_as_async(self, r: Any, ar: Any) -> None:
        """The async-registry machine did exactly what the sync one did."""
        assert _result(ar) == _result(r)
        assert self.am.current == self.m.current
        assert self.am.history == self.m.history
        assert dict(self.am.visits) == dict(self.m.visits)
        assert self.am.trace == self.m.trace
        assert (self.am.turn, self.am.turns_in_phase) == (self.m.turn, self.m.turns_in_phase)
        assert dict(self.as_) == dict(self.s)

    @rule(key=st.sampled_from(KEYS), value=VALUES)
    def set_key(self, key: str, value: Any) -> None:
        self.s.set(key, value)
        self.rs.set(key, copy.deepcopy(value))
        self.as_.set(key, copy.deepcopy(value))

    @rule(key=st.sampled_from(KEYS))
    def unset_key(self, key: str) -> None:
        self.s.unset(key)
        self.rs.unset(key)
        self.as_.unset(key)

    @rule(seconds=st.sampled_from([0, 1, 30]))
    def wait(self, seconds: int) -> None:
        self.clock.advance(seconds)

    @rule(use_async=st.booleans())
    def boundary(self, use_async: bool) -> None:
        self.turn += 1
        before = self.m.current
        before_visits = sum(self.m.visits.values())
        was_terminal = self.m.current_phase is not None and self.m.current_phase.terminal
        r = (asyncio.run(self.m.advance(self.s, turn=self.turn)) if use_async
             else self.m.advance_sync(self.s, turn=self.turn))
        asyncio.run(_reference_boundary(self.ref, self.rs, self.turn))
        self._same_as_async(r, asyncio.run(self.am.advance(self.as_, turn=self.turn)))
        moved = sum(self.m.visits.values()) - before_visits
        assert moved <= 1  # at most one transition per boundary
        assert moved == (1 if r.transitioned else 0)
        if was_terminal:
            assert r.stayed and self.m.current == before
        if r.transitioned:
            assert r.transition is not None and r.transition.from_phase == before
            assert self.m.history[-1].to_phase == self.m.current == r.phase
        else:
            assert self.m.current == before == r.phase
        if r.blocked:
            assert r.missing and all(self.s.get(k) is None for k in r.missing)
        # advance == the spec's composition
        assert self.m.current == self.ref.current
        assert _history(self.m) == _history(self.ref)
        assert dict(self.s) == dict(self.rs)
        assert dict(self.m.visits) == dict(self.ref.visits)

    @rule(name=st.sampled_from([f"p{i}" for i in range(6)]))
    def model_request(self, name: str) -> None:
        self.turn += 1
        before = self.m.current
        allowed = self.m.request(name, self.s)
        r = self.m.take_request_sync(name, self.s, turn=self.turn)
        r2 = self.ref.take_request_sync(name, self.rs, turn=self.turn)
        assert self.am.request(name, self.as_) == allowed
        self._same_as_async(r, asyncio.run(self.am.take_request(name, self.as_,
                                                                turn=self.turn)))
        if allowed:
            assert r is not None and self.m.current == name
        if r is not None:  # only a model transition of the phase asked in can be taken
            assert any(t.trigger == "model" and t.to == name
                       for t in self.wf.phases[before].transitions)
            trigger = self.m.history[-1].trigger  # naming the model transition it took
            assert isinstance(trigger, ModelTrigger) and trigger.index is not None
            taken = self.wf.phases[before].transitions[trigger.index]
            assert taken.trigger == "model" and taken.to == name
            assert self.m.history[-1].from_phase == before
        else:
            assert self.m.current == before
        assert (r is None) == (r2 is None)

    @rule(name=st.sampled_from([f"p{i}" for i in range(6)]))
    def goto(self, name: str) -> None:
        self.turn += 1
        r = self.m.goto_sync(name, self.s, turn=self.turn)
        self.ref.goto_sync(name, self.rs, turn=self.turn)
        assert (r is None) == (name not in self.wf.phases)
        self._same_as_async(r, asyncio.run(self.am.goto(name, self.as_, turn=self.turn)))

    @rule(name=st.sampled_from([f"p{i}" for i in range(6)]))
    def prepare(self, name: str) -> None:
        ok = self.m.prepare_target_sync(name, self.s)
        self.ref.prepare_target_sync(name, self.rs)
        assert asyncio.run(self.am.prepare_target(name, self.as_)) == ok
        self._same_as_async(None, None)

    @rule()
    def evaluate_matches_the_spec(self) -> None:
        expected = _spec_evaluate(self.m, self.wf, self.s)
        assert self.m.evaluate_for_transition(self.s) == expected
        assert self.m.evaluate(self.s) == (
            (expected.target, expected.index) if isinstance(expected, Ready) else None)

    @rule()
    def evaluate_is_pure(self) -> None:
        before_state, before_changes = dict(self.s), self.s.changes
        before = _snapshot(self.m)
        self.m.evaluate_for_transition(self.s)
        self.m.evaluate(self.s)
        self.m.describe_navigation(self.s)
        for p in self.wf.phases:
            self.m.request(p, self.s)
        assert dict(self.s) == before_state and self.s.changes == before_changes
        assert _snapshot(self.m) == before

    @invariant()
    def history_is_bounded_and_consistent(self) -> None:
        if not hasattr(self, "m"):
            return
        h = self.m.history
        assert len(h) <= 100
        if h:
            assert h[-1].to_phase == self.m.current
        for a, b in itertools.pairwise(h):
            assert a.to_phase == b.from_phase and a.turn <= b.turn
        assert self.m.current in self.wf.phases
        if len(h) < 100:  # nothing dropped: every visit but the initial one is a record
            counts: dict[str, int] = {self.wf.initial: 1}
            for r in h:
                counts[r.to_phase] = counts.get(r.to_phase, 0) + 1
            assert dict(self.m.visits) == counts


MachineInvariants.TestCase.settings = settings(
    max_examples=60, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestMachineInvariants = MachineInvariants.TestCase


@settings(max_examples=30, deadline=None)
@given(wf=workflows(), steps=st.integers(101, 140))
def test_history_never_exceeds_100(wf: Workflow, steps: int) -> None:
    m = wf.machine(clock=FakeClock())
    s = State()
    for t in range(steps):
        m.goto_sync(f"p{t % len(wf.phases)}", s, turn=t)
    assert len(m.history) == 100
    assert m.history[-1].to_phase == m.current
