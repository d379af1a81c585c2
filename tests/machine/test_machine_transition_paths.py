"""A transition that calls nothing runs without a generator; it must be the same transition.

``phaseflow.machine.plan`` has two ways to carry out a transition: ``transition_steps``, the
generator a driver runs (any effects), and ``transition_now``, a plain function for the
common case where the phase left and the phase entered have only plain effects (scalar
``set``s). These properties run both on twin machines, for random plain effect lists,
``clear_on_enter`` keys, writers that fail (with an ``Exception``, or with a
``BaseException`` that must propagate) and both answers (a transition's and a turn
boundary's): same answer, same state and change log, same writes through a host writer,
same position, visits, history and trace.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phaseflow.machine import PhaseMachine, State
from phaseflow.machine.drivers import run_sync
from phaseflow.machine.plan import transition_now, transition_steps
from phaseflow.machine.results import GuardTrigger
from phaseflow.spec.model import Phase, SetEffect, Transition, Workflow

KEYS = ["a", "b", "c", "d"]
SCALARS = st.sampled_from([None, 0, 1, 2.5, True, "s"])
PLAIN_LIST = st.lists(st.dictionaries(st.sampled_from(KEYS), SCALARS, min_size=1, max_size=3),
                      max_size=3)


class Stop(BaseException):
    """A request to stop (not an ``Exception``): it must propagate from both paths."""


class HostWriter:
    """A host's writer over a dict that logs every call and fails on the keys it is told."""

    def __init__(self, data: dict[str, Any], fail: dict[str, type[BaseException]]) -> None:
        self.data = data
        self.fail = fail
        self.calls: list[tuple[str, str, Any]] = []

    def _check(self, key: str) -> None:
        error = self.fail.get(key)
        if error is not None:
            raise error(f"refused {key}")

    def set(self, key: str, value: Any) -> None:
        self.calls.append(("set", key, value))
        self._check(key)
        self.data[key] = value

    def unset(self, key: str) -> None:
        self.calls.append(("unset", key, None))
        self._check(key)
        self.data.pop(key, None)


def _workflow(on_exit: list[dict[str, Any]], on_enter: list[dict[str, Any]],
              clear: list[str]) -> Workflow:
    phases = [
        Phase("p0", on_exit=[SetEffect(v) for v in on_exit],
              transitions=[Transition("p1", "state.go")]),
        Phase("p1", on_enter=[SetEffect(v) for v in on_enter], clear_on_enter=clear),
    ]
    return Workflow(name="paths", initial="p0", phases={p.name: p for p in phases},
                    machine_factory=PhaseMachine.from_workflow)


def _run(path: str, wf: Workflow, start: dict[str, Any], fail: dict[str, type[BaseException]],
         host: bool, preparations: tuple[str, ...] | None) -> tuple[Any, ...]:
    """One transition p0 -> p1 by ``path``; everything it left behind."""
    m = wf.machine(clock=iter(range(0, 100, 7)).__next__)
    state: Any
    if host:
        data = dict(start)
        state, writer = data, HostWriter(data, fail)
    else:
        state = writer = State(start)
    tinfo = m._index.info("p1")
    assert tinfo is not None
    m._info()
    trigger = GuardTrigger(0)
    raised: str | None = None
    answer: Any = None
    try:
        if path == "now":
            info = m._info()
            assert info is not None and info.exit_plain is not None
            assert tinfo.enter_plain is not None
            answer = transition_now(m, tinfo, state, writer, 3, trigger, None, preparations)
        else:
            answer = run_sync(transition_steps(m, tinfo, state, writer, 3, trigger, None, None,
                                               preparations))
    except Stop as exc:
        raised = str(exc)
    seen: Any = type(answer)  # a TransitionResult is compared by its parts below
    if preparations is not None and answer is not None:
        seen = answer._replace(transition=None)
        answer = answer.transition
    result = None if answer is None else (answer.record, answer.events, answer.instructions)
    written = (writer.data, writer.calls) if host else (state.to_dict(), state.take_changes())
    return (raised, seen, result, written, m.current, m._busy, m.turns_in_phase,
            dict(m.visits), m.history, m.trace)


@settings(max_examples=300, deadline=None)
@given(
    on_exit=PLAIN_LIST,
    on_enter=PLAIN_LIST,
    clear=st.lists(st.sampled_from(KEYS), max_size=2, unique=True),
    start=st.dictionaries(st.sampled_from(KEYS), SCALARS, max_size=3),
    fail=st.dictionaries(st.sampled_from(KEYS), st.sampled_from([ValueError, Stop]),
                         max_size=2),
    host=st.booleans(),
    boundary=st.booleans(),
)
def test_a_transition_that_calls_nothing_is_the_same_by_both_paths(
    on_exit: list[dict[str, Any]], on_enter: list[dict[str, Any]], clear: list[str],
    start: dict[str, Any], fail: dict[str, type[BaseException]], host: bool, boundary: bool,
) -> None:
    wf = _workflow(on_exit, on_enter, clear)
    preparations = ("prep",) if boundary else None
    now = _run("now", wf, {**start, "go": True}, fail if host else {}, host, preparations)
    steps = _run("steps", wf, {**start, "go": True}, fail if host else {}, host, preparations)
    assert now == steps


def test_a_boundary_takes_the_plain_path_only_when_both_lists_are_plain() -> None:
    """The rule that picks the path: plain on both sides; a ``set`` of a list (copied) on
    either side goes through the steps, and gives the same state."""
    for on_exit, on_enter in (([{"a": 1}], [{"b": 2}]), ([{"a": [1]}], [{"b": 2}]),
                              ([{"a": 1}], [{"b": [2]}])):
        wf = _workflow(on_exit, on_enter, [])
        m = wf.machine()
        s = State({"go": True})
        result = m.advance_sync(s, turn=1)
        assert result.transitioned and result.phase == "p1"
        assert s.to_dict() == {"go": True, **on_exit[0], **on_enter[0]}
        plain = all(not isinstance(v, list) for d in on_exit + on_enter for v in d.values())
        info = m._index.info("p0")
        tinfo = m._index.info("p1")
        assert info is not None and tinfo is not None
        assert (info.exit_plain is not None and tinfo.enter_plain is not None) is plain


@pytest.mark.parametrize("path", ["now", "steps"])
def test_a_stop_after_the_switch_keeps_the_history(path: str) -> None:
    wf = _workflow([], [{"a": 1}], [])
    outcome = _run(path, wf, {"go": True}, {"a": Stop}, True, None)
    raised, _, _, _, current, busy, _, visits, history, _ = outcome
    assert raised == "refused a"
    assert current == "p1" and not busy and visits == {"p0": 1, "p1": 1}
    assert [(r.from_phase, r.to_phase) for r in history] == [("p0", "p1")]
