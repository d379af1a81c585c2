"""Every move of the machine, written once: a plan, and the steps a driver carries out.

A move - a turn boundary, a model's request, a transition, a target's preparations - is
planned by a plain function (``plan_*``): it refuses a call made in the middle of another
move, takes the move's pure first step (which edge, which target) and returns the move's
answer when nothing has to run, else the move's *steps*: a generator (``*_steps``) that
does the rest in the spec's order, yields a :class:`~phaseflow.machine.drivers.Call` for
each host callable to run (a ``call`` effect, a preparation) and, last, the move's
answer. The parts of a move that may call (``effect_steps``, ``prepare_steps``) return
their value to it through ``yield from``. The public methods of
:class:`~phaseflow.machine.machine.PhaseMachine` hand a plan to a driver
(:mod:`phaseflow.machine.drivers`): the ``*_sync`` ones to :func:`run_sync`, which calls,
the coroutines to :func:`run_async`, which awaits. So the two flavours share every rule
and every fast path:

- a boundary that stays, and a move refused before it starts, make no generator;
- an effect list made only of scalar ``set``s (most of them) is written inline, never
  through :func:`~phaseflow.machine.effects.effect_steps`, and into a
  :class:`~phaseflow.machine.state.State` with one ``dict.update`` and one
  ``list.extend`` (what ``State.set`` does for each key);
- a transition whose effect lists are plain (most of them) calls nothing, so it makes no
  generator either (:func:`transition_now`); one that may call makes one, and yields the
  move's answer instead of returning it (no ``StopIteration`` to make and catch);
- guards read the :class:`~phaseflow.machine.state.State`'s dict directly, and an edge
  that only its ``when`` decides is checked inline (``MachineCore._scan``).

The machine is *busy* while a move runs host code (effects, preparations, the writer):
a call back into it then raises :class:`~phaseflow.machine.core.ReentrantCallError`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from functools import partial
from typing import Any, overload

from phaseflow.expr.describe import describe_exception
from phaseflow.machine.core import (
    HISTORY_LIMIT,
    MachineCore,
    joined,
    new_object,
    new_tuple,
    refuse,
)
from phaseflow.machine.drivers import Calls, Plan, Steps
from phaseflow.machine.effects import effect_steps
from phaseflow.machine.index import AutoEdge, PhaseInfo, Plain
from phaseflow.machine.results import (
    BoundaryResult,
    ErrorRecord,
    HistoryRecord,
    ModelTrigger,
    TransitionResult,
    TransitionTrigger,
)
from phaseflow.machine.state import State, Writer, writer_for
from phaseflow.spec.edges import READY, missing_keys
from phaseflow.spec.model import Phase

__all__ = [
    "boundary_steps",
    "plan_boundary",
    "plan_preparations",
    "plan_request",
    "plan_transition",
    "prepare_steps",
    "request_steps",
    "transition_steps",
]


# -- the pieces of a transition that call nothing ---------------------------------------------

def write_plain(
    plain: Plain, writer: Writer, phase: str, turn: int, errors: list[ErrorRecord] | None
) -> list[ErrorRecord] | None:
    """Run an effect list made only of scalar ``set``s (no call, no copy, no dispatch)
    through ``writer``, a key at a time; returns ``errors`` with its failures added.
    (:func:`transition_now` writes a ``State`` with ``plain.values`` and ``plain.log``
    instead: the same writes in two calls.)"""
    for key, value, label, position in plain.writes:
        try:
            writer.set(key, value)
        except Exception as exc:
            errors = joined(errors, [ErrorRecord(
                "effect_error", phase, turn, describe_exception(exc), label, position)])
    return errors


def clear_keys(
    target: Phase, writer: Writer, turn: int, errors: list[ErrorRecord] | None
) -> list[ErrorRecord] | None:
    """Remove the target's ``clear_on_enter`` keys; returns ``errors`` with the failures
    added."""
    for key in target.clear_on_enter:
        try:
            writer.unset(key)
        except Exception as exc:
            errors = joined(errors, [ErrorRecord(
                "effect_error", target.name, turn, describe_exception(exc),
                "clear_on_enter")])
    return errors


# -- transitions ---------------------------------------------------------------------------

def plan_transition(
    m: MachineCore,
    target: str,
    state: Mapping[str, Any],
    writer: Writer | None,
    turn: int,
    trigger: TransitionTrigger,
    transcript: Any,
    method: str,
) -> Plan[TransitionResult | None]:
    """A transition to ``target`` (no condition checked); ``None`` if it is not a phase."""
    if m._busy:
        refuse(m, method)
    tinfo = m._index.info(target)
    if tinfo is None:
        return None
    m._turn = turn
    return transition_plan(m, tinfo, state, writer_for(state, writer), turn, trigger,
                           transcript, None)


def transition_plan(
    m: MachineCore,
    tinfo: PhaseInfo,
    state: Mapping[str, Any],
    writer: Writer,
    turn: int,
    trigger: TransitionTrigger,
    transcript: Any,
    errors: list[ErrorRecord] | None,
) -> Plan[TransitionResult]:
    """A transition to ``tinfo``'s phase: its answer, made by :func:`transition_now`, when
    the current phase's ``on_exit`` and the target's ``on_enter`` are both plain (only
    scalar ``set``s, or empty: nothing to call), else its steps (:func:`transition_steps`).
    (``plan_boundary`` applies the same rule inline.)"""
    info = m._cur or m._info()
    if (info is None or info.exit_plain is not None) and tinfo.enter_plain is not None:
        return transition_now(m, tinfo, state, writer, turn, trigger, errors)
    return transition_steps(m, tinfo, state, writer, turn, trigger, transcript, errors)


@overload
def transition_now(
    m: MachineCore, tinfo: PhaseInfo, state: Mapping[str, Any], writer: Writer, turn: int,
    trigger: TransitionTrigger, errors: list[ErrorRecord] | None, preparations: None = None,
) -> TransitionResult: ...


@overload
def transition_now(
    m: MachineCore, tinfo: PhaseInfo, state: Mapping[str, Any], writer: Writer, turn: int,
    trigger: TransitionTrigger, errors: list[ErrorRecord] | None,
    preparations: tuple[str, ...],
) -> BoundaryResult: ...


def transition_now(
    m: MachineCore,
    tinfo: PhaseInfo,
    state: Mapping[str, Any],
    writer: Writer,
    turn: int,
    trigger: TransitionTrigger,
    errors: list[ErrorRecord] | None,
    preparations: tuple[str, ...] | None = None,
) -> TransitionResult | BoundaryResult:
    """:func:`transition_steps` for a transition that calls nothing: the current phase's
    ``on_exit`` and the target's ``on_enter`` are plain (``PhaseInfo.exit_plain`` and
    ``enter_plain`` are not ``None``), so every step runs here and the answer is returned,
    without the generator and the driver's two resumptions of it (about 7% of a turn
    boundary's instructions). The same order, the same bookkeeping, the same answer:
    ``tests/machine/test_machine_transition_paths.py`` holds the two to each other."""
    m._busy = True
    record: HistoryRecord | None = None
    try:
        info = m._cur or m._info()
        if info is not None and info.exit_ops:
            plain = info.exit_plain
            assert plain is not None  # the caller's rule
            if type(writer) is State:  # what State.set does for each key, in two calls
                writer._data.update(plain.values)
                writer._changes.extend(plain.log)
            else:
                errors = write_plain(plain, writer, m._current, turn, errors)
        now = m._clock()
        target = tinfo.phase
        name = target.name
        record = new_tuple(HistoryRecord, (
            m._current, name, turn, now, trigger, now - m._entered_at))
        m._current = name
        m._cur = tinfo
        m._entered_at = now
        m._turns_in_phase = 0
        if target.clear_on_enter:
            errors = clear_keys(target, writer, turn, errors)
        if tinfo.enter_ops:
            plain = tinfo.enter_plain
            assert plain is not None  # the caller's rule
            if type(writer) is State:
                writer._data.update(plain.values)
                writer._changes.extend(plain.log)
            else:
                errors = write_plain(plain, writer, name, turn, errors)
    finally:
        m._busy = False
        if record is not None:  # entered, even when a BaseException propagates: count it
            visits = m._visits
            visits[name] = visits.get(name, 0) + 1
            history = m._history
            if history is None:
                history = m._history = deque(maxlen=HISTORY_LIMIT)
            history.append(record)
            events = m._record(errors) if errors else ()
    result: TransitionResult = new_object(TransitionResult)  # its __init__, inline
    result.record = record
    result.events = events
    result._render = (partial(m._render, target, state, turn)
                      if target.instructions is not None else None)
    result._text = None
    if preparations is None:
        return result
    moved: BoundaryResult = new_tuple(BoundaryResult, (
        "transitioned", name, turn, result, None, (), preparations, events))
    return moved


@overload
def transition_steps(
    m: MachineCore, tinfo: PhaseInfo, state: Mapping[str, Any], writer: Writer, turn: int,
    trigger: TransitionTrigger, transcript: Any, errors: list[ErrorRecord] | None,
    preparations: None = None,
) -> Steps[TransitionResult]: ...


@overload
def transition_steps(
    m: MachineCore, tinfo: PhaseInfo, state: Mapping[str, Any], writer: Writer, turn: int,
    trigger: TransitionTrigger, transcript: Any, errors: list[ErrorRecord] | None,
    preparations: tuple[str, ...],
) -> Steps[BoundaryResult]: ...


def transition_steps(
    m: MachineCore,
    tinfo: PhaseInfo,
    state: Mapping[str, Any],
    writer: Writer,
    turn: int,
    trigger: TransitionTrigger,
    transcript: Any,
    errors: list[ErrorRecord] | None,
    preparations: tuple[str, ...] | None = None,
) -> Steps[TransitionResult] | Steps[BoundaryResult]:
    """A transition to ``tinfo``'s phase, the spec's order: the current phase's
    ``on_exit``; switch (the target becomes current, its timer and turn counter restart);
    the target's ``clear_on_enter``; its ``on_enter``; count the visit, append the history
    record and the errors to the trace. Its answer is the :class:`TransitionResult`, or, for a
    turn boundary (``preparations``: the names of those it ran), the
    :class:`BoundaryResult`.

    The machine is busy meanwhile. A ``BaseException`` that is not an ``Exception``
    propagates; raised after the switch, the visit and history record are kept first, so
    the history always ends at the current phase. The result's instructions are rendered
    on first access. (:func:`transition_now` is this transition when both effect lists
    are plain: change one, change the other.)"""
    m._busy = True
    record: HistoryRecord | None = None
    try:
        info = m._cur or m._info()
        if info is not None and info.exit_ops:
            if info.exit_plain is None:
                errors = joined(errors, (yield from effect_steps(
                    info.exit_ops, state, writer, m._current, turn, m._index.name,
                    transcript)))
            else:
                errors = write_plain(info.exit_plain, writer, m._current, turn, errors)
        now = m._clock()
        target = tinfo.phase
        record = new_tuple(HistoryRecord, (
            m._current, target.name, turn, now, trigger, now - m._entered_at))
        m._current = target.name
        m._cur = tinfo
        m._entered_at = now
        m._turns_in_phase = 0
        if target.clear_on_enter:
            errors = clear_keys(target, writer, turn, errors)
        if tinfo.enter_ops:
            if tinfo.enter_plain is None:
                errors = joined(errors, (yield from effect_steps(
                    tinfo.enter_ops, state, writer, target.name, turn, m._index.name,
                    transcript)))
            else:
                errors = write_plain(tinfo.enter_plain, writer, target.name, turn, errors)
    finally:
        m._busy = False
        if record is not None:  # entered, even when a BaseException propagates: count it
            visits = m._visits
            visits[target.name] = visits.get(target.name, 0) + 1
            history = m._history
            if history is None:
                history = m._history = deque(maxlen=HISTORY_LIMIT)
            history.append(record)
            events = m._record(errors) if errors else ()
    result: TransitionResult = new_object(TransitionResult)  # its __init__, inline
    result.record = record
    result.events = events
    result._render = (partial(m._render, target, state, turn)
                      if target.instructions is not None else None)
    result._text = None
    if preparations is None:
        yield result
    else:
        moved: BoundaryResult = new_tuple(BoundaryResult, (
            "transitioned", target.name, turn, result, None, (), preparations, events))
        yield moved


# -- preparations --------------------------------------------------------------------------

def plan_preparations(
    m: MachineCore, target: str, state: Mapping[str, Any], writer: Writer | None, method: str,
    transcript: Any = None,
) -> Plan[bool]:
    """``target``'s preparations, then: are its ``requires`` all present? (False when it is
    not a phase.)"""
    if m._busy:
        refuse(m, method)
    tinfo = m._index.info(target)
    if tinfo is None:
        return False
    return _preparations_recorded(m, tinfo, state, writer_for(state, writer), transcript)


def _preparations_recorded(
    m: MachineCore, tinfo: PhaseInfo, state: Mapping[str, Any], writer: Writer,
    transcript: Any = None,
) -> Steps[bool]:
    errors: list[ErrorRecord] = []
    ready = yield from prepare_steps(m, tinfo, state, writer, m._turn, [], errors, transcript)
    m._record(errors)
    yield ready


def prepare_steps(
    m: MachineCore,
    tinfo: PhaseInfo,
    state: Mapping[str, Any],
    writer: Writer,
    turn: int,
    ran: list[str],
    errors: list[ErrorRecord],
    transcript: Any = None,
) -> Calls[bool]:
    """Run the target's preparations that still have something to produce, in order, each
    checked just before it runs (an earlier one may have produced its keys; the name of
    each one run is appended to ``ran``); stop at the first that fails (False). Then: are
    the target's ``requires`` all present? The machine is busy meanwhile."""
    m._busy = True
    try:
        for prep in tinfo.prepare:
            if prep.produces and not missing_keys(prep.produces, state):
                continue
            ran.append(prep.name)
            failed = yield from effect_steps(
                (prep.op,), state, writer, tinfo.phase.name, turn, m._index.name,
                transcript, kind="preparation_failed")
            if failed:
                errors.extend(failed)
                return False
    finally:
        m._busy = False
    return not missing_keys(tinfo.phase.requires, state)


# -- model requests ------------------------------------------------------------------------

def plan_request(
    m: MachineCore,
    target: str,
    state: Mapping[str, Any],
    writer: Writer | None,
    turn: int,
    transcript: Any,
    method: str,
) -> Plan[TransitionResult | None]:
    """The model's request to move to ``target``: ``None`` (refused, errors recorded)
    unless a ``model`` edge to it is ready or preparable."""
    if m._busy:
        refuse(m, method)
    m._turn = turn
    errors: list[ErrorRecord] = []
    found = m._request_target(target, state, errors)
    if found is None:
        m._record(errors)
        return None
    tinfo, status, number = found
    writer = writer_for(state, writer)
    if status.missing:
        return request_steps(m, tinfo, state, writer, turn, transcript, errors)
    return transition_plan(m, tinfo, state, writer, turn, ModelTrigger(number), transcript,
                           errors)


def request_steps(
    m: MachineCore,
    tinfo: PhaseInfo,
    state: Mapping[str, Any],
    writer: Writer,
    turn: int,
    transcript: Any,
    errors: list[ErrorRecord],
) -> Steps[TransitionResult | None]:
    """A request whose target's required keys are absent: the target's preparations run
    and everything is checked again, as at a turn boundary (a preparation may have
    changed what the guards read; the edge may now be another); then the transition,
    with a model trigger."""
    if not (yield from prepare_steps(m, tinfo, state, writer, turn, [], errors, transcript)):
        m._record(errors)
        yield None
        return
    found = m._request_target(tinfo.phase.name, state, errors)
    if found is None or found[1].verdict != "ready":
        m._record(errors)
        yield None
        return
    yield from transition_steps(m, tinfo, state, writer, turn, ModelTrigger(found[2]),
                                transcript, errors)


# -- the turn boundary ---------------------------------------------------------------------

def plan_boundary(
    m: MachineCore,
    state: Mapping[str, Any],
    writer: Writer | None,
    turn: int,
    counted: bool,
    method: str,
    transcript: Any = None,
) -> Plan[BoundaryResult]:
    """One turn boundary: count it (unless not ``counted``), then find the first ``auto``
    edge that is ready or preparable; the boundary's result when there is none
    (stayed), else its steps."""
    if m._busy:
        refuse(m, method)
    view = state._data if type(state) is State else state  # guards read the dict
    m._turn = turn
    if counted:
        m._turns_in_phase += 1
    info = m._cur or m._info()
    if info is None or not info.auto or info.phase.terminal:
        return BoundaryResult("stayed", m._current, turn)
    errors: list[ErrorRecord] = []
    found = m._scan(info, view, m._live or m._ctx(), errors)
    if found is None:
        stayed: BoundaryResult = new_tuple(BoundaryResult, (
            "stayed", m._current, turn, None, None, (), (),
            m._record(errors) if errors else ()))
        return stayed
    if writer is None:
        writer = state if type(state) is State else writer_for(state, None)
    edge, status = found
    if status is not READY:  # preparable: absent required keys stand in the way
        return boundary_steps(m, edge, view, state, writer, turn, errors, transcript)
    tinfo = m._index.entries.get(edge.to) or m._index.info(edge.to)
    assert tinfo is not None  # an edge that is not closed has a target
    if info.exit_plain is not None and tinfo.enter_plain is not None:  # transition_plan's rule
        return transition_now(m, tinfo, state, writer, turn, edge.trigger, errors, ())
    return transition_steps(m, tinfo, state, writer, turn, edge.trigger, transcript, errors, ())


def boundary_steps(
    m: MachineCore,
    edge: AutoEdge,
    view: Mapping[str, Any],
    state: Mapping[str, Any],
    writer: Writer,
    turn: int,
    errors: list[ErrorRecord],
    transcript: Any = None,
) -> Steps[BoundaryResult]:
    """A boundary that found ``edge`` preparable: prepare its target and evaluate once
    more (a guard error the first evaluation reported is not reported twice), which may
    stay or be blocked, else take the edge found then."""
    ran: list[str] = []
    tinfo = m._index.info(edge.to)
    assert tinfo is not None  # an edge that is not closed has a target
    yield from prepare_steps(m, tinfo, view, writer, turn, ran, errors, transcript)
    info = m._cur
    assert info is not None  # the boundary was planned from it
    again: list[ErrorRecord] = []
    found = m._scan(info, view, m._ctx(), again)
    errors.extend(e for e in again if e not in errors)
    if found is None:
        yield BoundaryResult("stayed", m._current, turn, preparations=tuple(ran),
                             events=m._record(errors))
        return
    edge, status = found
    if status.missing:
        yield BoundaryResult("blocked", m._current, turn, None, edge.to, status.missing,
                             tuple(ran), m._record(errors))
        return
    tinfo = m._index.info(edge.to)
    assert tinfo is not None
    yield from transition_steps(m, tinfo, state, writer, turn, edge.trigger, transcript,
                                errors, tuple(ran))
