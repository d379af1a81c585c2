"""The phase machine: where one conversation is in a workflow, and how it moves.

A machine holds only per-conversation data (current phase, entry time, turn counters,
visit counts, history, trace); the phases and everything derived from them live in a
shared :class:`~phaseflow.machine.index.MachineIndex`. That is what makes
``workflow.machine()`` O(1) for any workflow size.

Every move comes in two flavours with identical semantics: ``advance``/``transition``/...
are coroutines for hosts with async hooks, and ``advance_sync``/``transition_sync``/... run
without an event loop. The coroutines themselves run synchronously (no await, no task)
unless an effect they are about to run calls an ``async def`` callable.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping
from functools import partial
from types import MappingProxyType
from typing import Any, NamedTuple

from phaseflow.errors import ConfigError
from phaseflow.expr import GuardContext
from phaseflow.machine.effects import run_async, run_sync
from phaseflow.machine.index import AutoEdge, MachineIndex, PhaseInfo, index_for
from phaseflow.machine.results import (
    MODEL_REQUEST,
    Blocked,
    BoundaryResult,
    ErrorRecord,
    HistoryRecord,
    ProgrammaticTrigger,
    Ready,
    TransitionResult,
    TransitionTrigger,
)
from phaseflow.machine.state import State, Writer, writer_for
from phaseflow.spec.diagnostics import did_you_mean
from phaseflow.spec.model import Phase, Position, Workflow

__all__ = ["HISTORY_LIMIT", "TRACE_LIMIT", "Clock", "PhaseMachine"]

#: A source of time in seconds; only differences matter (default ``time.monotonic``).
Clock = Callable[[], float]

#: How many history records a machine keeps (the oldest is dropped).
HISTORY_LIMIT = 100
#: How many events the machine's trace keeps.
TRACE_LIMIT = 100

class _Scan(NamedTuple):
    """The internal form of Ready (``missing == ()``) and Blocked."""

    edge: AutoEdge
    missing: tuple[str, ...]


class _LiveContext(GuardContext):
    """The machine's guard context, read live from the machine.

    A boundary evaluates guards many times per second across conversations; a fresh
    frozen ``GuardContext`` per evaluation would be most of a boundary's cost. This view
    is made once per machine and answers each name from the machine's current values, so
    evaluating a guard allocates nothing. It never escapes: ``guard_context()`` returns a
    snapshot.
    """

    __slots__ = ("_m",)
    _m: PhaseMachine

    def __init__(self, machine: PhaseMachine) -> None:
        object.__setattr__(self, "_m", machine)

    @property
    def phase(self) -> str:
        return self._m._current

    @property
    def turn(self) -> int:
        return self._m._turn

    @property
    def turns_in_phase(self) -> int:
        return self._m._turns_in_phase

    @property
    def seconds_in_phase(self) -> float:
        m = self._m
        return m._clock() - m._entered_at

    @property
    def visits(self) -> Mapping[str, int]:
        return self._m._visits


#: ``tuple.__new__``: makes a named tuple from a tuple without the Python-level ``__new__``
#: frame (the hot path makes two per transition).
_new_tuple: Any = tuple.__new__


class PhaseMachine:
    """One conversation's position in a set of phases.

    Build it with ``workflow.machine()`` (or :meth:`from_workflow`), or in code with
    ``PhaseMachine(initial)`` and :meth:`add_phase`. The initial phase counts as visited
    once from the start (``visits.<initial>`` is 1), because the conversation is in it.
    """

    __slots__ = (
        "__weakref__",
        "_clock",
        "_cur",
        "_current",
        "_entered_at",
        "_history",
        "_index",
        "_initial",
        "_live",
        "_owns_index",
        "_trace",
        "_turn",
        "_turns_in_phase",
        "_visits",
        "_workflow",
    )

    def __init__(
        self,
        initial: str,
        *,
        clock: Clock | None = None,
        workflow: Workflow | None = None,
        registry: Mapping[str, Callable[..., Any]] | None = None,
    ) -> None:
        """``workflow`` supplies the phases (shared, copied only if you add a phase), the
        call registry, the tool catalogue and the navigation settings; ``registry``
        supplies the callables for ``call`` effects of a machine built in code."""
        self._initial = initial
        self._workflow = workflow
        if workflow is not None and registry is None:
            self._index = index_for(workflow)
            self._owns_index = False
        elif workflow is not None:
            self._index = MachineIndex(
                workflow.phases,
                registry=registry,
                catalogue=workflow.tools,
                navigation=workflow.navigation,
                name=workflow.name,
                description=workflow.description,
            )
            self._owns_index = True
        else:
            self._index = MachineIndex({}, registry=dict(registry or {}))
            self._owns_index = True
        self._clock: Clock = clock if clock is not None else time.monotonic
        self._current = initial
        self._entered_at = self._clock()
        self._history: deque[HistoryRecord] | None = None
        self._trace: deque[ErrorRecord] | None = None
        self._visits: dict[str, int] = {initial: 1}
        self._turn = 0
        self._turns_in_phase = 0
        self._cur: PhaseInfo | None = None  # the current phase's entry, once looked up
        self._live: _LiveContext | None = None

    @classmethod
    def from_workflow(cls, workflow: Workflow, clock: Clock | None = None) -> PhaseMachine:
        """A new machine at ``workflow.initial``. O(1): the workflow is assumed valid
        (the loader checked it); only the initial phase is looked up."""
        if workflow.initial not in workflow.phases:
            raise ConfigError(f"initial phase {workflow.initial!r} is not a phase")
        return cls(workflow.initial, clock=clock, workflow=workflow)

    # -- building in code ------------------------------------------------------------------

    def add_phase(self, phase: Phase) -> None:
        """Register ``phase``, replacing a phase of the same name."""
        if not isinstance(phase, Phase):
            raise ConfigError(f"add_phase expects a Phase, got {type(phase).__name__}")
        index = self._index
        if not self._owns_index or not isinstance(index.phases, dict):
            index = MachineIndex(
                dict(index.phases),
                registry=index.registry,
                catalogue=index.catalogue,
                navigation=index.navigation,
                name=index.name,
                description=index.description,
            )
            self._index = index
            self._owns_index = True
        phases = index.phases
        assert isinstance(phases, dict)
        phases[phase.name] = phase
        index.forget()
        self._cur = None

    def validate(self) -> None:
        """Raise :class:`ConfigError` if the phases cannot run: none registered, the
        initial phase missing, or a transition to a phase that is not registered."""
        phases = self._index.phases
        if not phases:
            raise ConfigError("the machine has no phases")
        if self._initial not in phases:
            raise ConfigError(
                f"initial phase {self._initial!r} is not registered"
                f"{did_you_mean(self._initial, phases)}"
            )
        for phase in phases.values():
            for i, t in enumerate(phase.transitions):
                if t.to not in phases:
                    raise ConfigError(
                        f"phase {phase.name!r}, transition {i}: target {t.to!r} is not "
                        f"registered{did_you_mean(t.to, phases)}"
                    )

    # -- where we are --------------------------------------------------------------------

    @property
    def current(self) -> str:
        """The current phase's name."""
        return self._current

    @property
    def current_phase(self) -> Phase | None:
        """The current phase, or ``None`` if no phase of that name is registered."""
        return self._index.phases.get(self._current)

    @property
    def initial(self) -> str:
        return self._initial

    @property
    def workflow(self) -> Workflow | None:
        return self._workflow

    @property
    def phases(self) -> Mapping[str, Phase]:
        """The registered phases (read-only)."""
        return MappingProxyType(self._index.phases)

    @property
    def history(self) -> tuple[HistoryRecord, ...]:
        """Transition records, oldest first, at most :data:`HISTORY_LIMIT`."""
        return tuple(self._history) if self._history is not None else ()

    @property
    def trace(self) -> tuple[ErrorRecord, ...]:
        """The last :data:`TRACE_LIMIT` error events (guard and effect failures)."""
        return tuple(self._trace) if self._trace is not None else ()

    @property
    def visits(self) -> Mapping[str, int]:
        """How many times each phase was entered (the initial phase starts at 1)."""
        return MappingProxyType(self._visits)

    @property
    def turn(self) -> int:
        """The last turn number the machine was told about (0 before the first)."""
        return self._turn

    @property
    def turns_in_phase(self) -> int:
        """Turn boundaries since the current phase was entered, the last one included."""
        return self._turns_in_phase

    def set_clock(self, clock: Clock) -> None:
        """Read time from ``clock`` from now on; the current phase's timer restarts at the
        new clock's now (readings of two clocks cannot be compared)."""
        self._clock = clock
        self._entered_at = clock()

    def current_phase_duration(self) -> float:
        """Seconds since the current phase was entered, by the machine's clock."""
        return self._clock() - self._entered_at

    def active_tools(self) -> tuple[str, ...] | None:
        """The current phase's allowed tools: ``None`` when every tool is allowed,
        otherwise the names, with glob patterns expanded against the workflow's tool
        catalogue when there is one (kept as written when there is none)."""
        info = self._info()
        return None if info is None else info.tools

    def tool_allowed(self, name: str) -> bool:
        """May the model use tool ``name`` in the current phase? Without a catalogue, a
        pattern in the phase's list matches names too."""
        info = self._info()
        if info is None or info.tool_set is None:
            return True
        if name in info.tool_set:
            return True
        from fnmatch import fnmatchcase

        return any(fnmatchcase(name, p) for p in info.tool_patterns)

    def guard_context(self) -> GuardContext:
        """What guards see now: phase, turn, turns_in_phase, seconds_in_phase, visits.

        Entry guards (a target phase's ``guard``) are evaluated with this same context,
        the current phase's: the target has not been entered, and "where do we come from,
        how long have we been here" is what an entry condition can usefully ask.
        """
        return GuardContext(
            self._current,
            self._turn,
            self._turns_in_phase,
            self._clock() - self._entered_at,
            MappingProxyType(dict(self._visits)),
        )

    def _info(self) -> PhaseInfo | None:
        """The current phase's entry (cached until the next move)."""
        info = self._cur
        if info is None:
            info = self._cur = self._index.info(self._current)
        return info

    def _ctx(self) -> _LiveContext:
        live = self._live
        if live is None:
            live = self._live = _LiveContext(self)
        return live

    # -- pure evaluation -------------------------------------------------------------------

    def _scan(
        self,
        info: PhaseInfo,
        state: Mapping[str, Any],
        ctx: GuardContext,
        events: list[ErrorRecord] | None,
    ) -> _Scan | None:
        """The spec's order of checks over the current phase's ``auto`` transitions.

        ``events``, when given, collects guard run-time errors (pure callers pass None).
        """
        for edge in info.auto:
            when = edge.when
            if when is not None:
                r = when.evaluate(state, ctx)
                if not r.value:
                    if r.error is not None and events is not None:
                        events.append(self._guard_event(info, edge.number, r.error))
                    continue
            target = edge.target
            if target is None:
                continue
            guard = target.guard
            if guard is not None:
                r = guard.evaluate(state, ctx)
                if not r.value:
                    if r.error is not None and events is not None:
                        events.append(self._entry_guard_event(target, r.error))
                    continue
            requires = target.requires
            if requires:
                missing = tuple(k for k in requires if state.get(k) is None)
                if missing:
                    if target.prepare:
                        return _Scan(edge, missing)
                    continue
            return _Scan(edge, ())
        return None

    def _rescan(
        self, info: PhaseInfo, state: Mapping[str, Any], ctx: GuardContext,
        events: list[ErrorRecord],
    ) -> _Scan | None:
        """The second evaluation of a boundary (after preparations): a guard error that the
        first one already reported is not reported twice."""
        again: list[ErrorRecord] = []
        found = self._scan(info, state, ctx, again)
        events.extend(e for e in again if e not in events)
        return found

    def _guard_event(self, info: PhaseInfo, index: int, error: str) -> ErrorRecord:
        t = info.phase.transitions[index]
        return ErrorRecord("guard_error", info.phase.name, self._turn,
                     f"{t.when.source if t.when else ''}: {error}",
                     f"transitions[{index}].when", t.position)

    def _entry_guard_event(self, target: Phase, error: str) -> ErrorRecord:
        source = target.guard.source if target.guard else ""
        return ErrorRecord("guard_error", target.name, self._turn, f"{source}: {error}", "guard",
                     target.position)

    def evaluate_for_transition(self, state: Mapping[str, Any]) -> Ready | Blocked | None:
        """Pure: the first ``auto`` transition of the current phase that is ``Ready``, or
        ``Blocked`` only by absent required keys of a target that has preparations.

        ``None`` when the current phase is unknown or terminal, or nothing applies. Order
        of checks per transition: ``when`` false -> skip; target's entry ``guard`` false ->
        skip; target's ``requires`` present -> Ready; absent and the target has
        preparations -> Blocked; absent and none -> skip.
        """
        info = self._info()
        if info is None or info.phase.terminal:
            return None
        found = self._scan(info, state, self._ctx(), None)
        if found is None:
            return None
        edge, missing = found
        if missing:
            return Blocked(edge.to, edge.number, missing)
        return Ready(edge.to, edge.number)

    def evaluate(self, state: Mapping[str, Any]) -> tuple[str, int] | None:
        """Pure: ``(target, transition_index)`` of the first ``auto`` transition that is
        ready, or ``None``. Same order of checks as :meth:`evaluate_for_transition`: when
        the first applicable transition is Blocked the answer is ``None``, not a later
        ready one (a boundary prepares that target rather than skipping it)."""
        found = self.evaluate_for_transition(state)
        return (found.target, found.index) if isinstance(found, Ready) else None

    def _model_edges(
        self,
        target: str,
        state: Mapping[str, Any],
        ctx: GuardContext,
        events: list[ErrorRecord] | None = None,
    ) -> bool:
        """Is there a ``model`` transition of the current phase to ``target`` whose
        ``when`` holds? ``events``, when given, collects guard run-time errors."""
        info = self._info()
        if info is None or info.phase.terminal:
            return False
        for index, when, to, _ in info.model:
            if to != target:
                continue
            if when is None:
                return True
            r = when.evaluate(state, ctx)
            if r.value:
                return True
            if r.error is not None and events is not None:
                events.append(self._guard_event(info, index, r.error))
        return False

    def _enterable(
        self,
        target: Phase,
        state: Mapping[str, Any],
        ctx: GuardContext,
        events: list[ErrorRecord] | None = None,
    ) -> tuple[str, ...] | None:
        """``None`` when the entry guard is false, else the absent required keys."""
        if target.guard is not None:
            r = target.guard.evaluate(state, ctx)
            if not r.value:
                if r.error is not None and events is not None:
                    events.append(self._entry_guard_event(target, r.error))
                return None
        return tuple(k for k in target.requires if state.get(k) is None)

    def request(self, target: str, state: Mapping[str, Any]) -> bool:
        """Pure: may the model move to ``target`` now? True when the current phase has a
        ``model`` transition to it whose ``when`` holds and the target can be entered
        (entry guard true, every required key present)."""
        phase = self._index.phases.get(target)
        if phase is None:
            return False
        ctx = self._ctx()
        if not self._model_edges(target, state, ctx):
            return False
        return self._enterable(phase, state, ctx) == ()

    # -- bookkeeping shared by both flavours ------------------------------------------------

    def _record(self, events: list[ErrorRecord] | None) -> tuple[ErrorRecord, ...]:
        if not events:
            return ()
        trace = self._trace
        if trace is None:
            trace = self._trace = deque(maxlen=TRACE_LIMIT)
        trace.extend(events)
        return tuple(events)

    def _switch(self, tinfo: PhaseInfo, turn: int, trigger: TransitionTrigger) -> HistoryRecord:
        """Make ``tinfo``'s phase current and restart its timer and turn counter. Returns
        the history record, which :meth:`_count` appends (with the visit) once the target's
        ``on_enter`` effects ran: the spec's order."""
        now = self._clock()
        record: HistoryRecord = _new_tuple(HistoryRecord, (
            self._current, tinfo.phase.name, turn, now, trigger, now - self._entered_at
        ))
        self._current = tinfo.phase.name
        self._cur = tinfo
        self._entered_at = now
        self._turns_in_phase = 0
        return record

    def _count(self, record: HistoryRecord) -> None:
        """Count the visit of the phase entered and append its history record."""
        visits = self._visits
        target = record.to_phase
        visits[target] = visits.get(target, 0) + 1
        history = self._history
        if history is None:
            history = self._history = deque(maxlen=HISTORY_LIMIT)
        history.append(record)

    def _render(self, phase: Phase, state: Mapping[str, Any], turn: int) -> str | None:
        template = phase.instructions
        if template is None:
            return None
        index = self._index
        return template.render({
            "state": state,
            "phase": {"name": phase.name, "goal": phase.goal},
            "workflow": {"name": index.name, "description": index.description},
            "turn": turn,
        })

    @staticmethod
    def _clear(keys: tuple[str, ...], writer: Writer, phase: str, turn: int) -> list[ErrorRecord]:
        events: list[ErrorRecord] = []
        for key in keys:
            try:
                writer.unset(key)
            except Exception as exc:
                events.append(ErrorRecord("effect_error", phase, turn,
                                    f"{type(exc).__name__}: {exc}", "clear_on_enter"))
        return events

    def _result(
        self,
        source: str,
        tinfo: PhaseInfo,
        record: HistoryRecord,
        state: Mapping[str, Any],
        turn: int,
        trigger: TransitionTrigger,
        events: list[ErrorRecord] | None,
    ) -> TransitionResult:
        phase = tinfo.phase
        render = partial(self._render, phase, state, turn) if phase.instructions else None
        return TransitionResult(
            source, phase.name, trigger, turn, record, self._record(events), render
        )

    # -- transitions -----------------------------------------------------------------------

    def transition_sync(
        self,
        target: str,
        state: Mapping[str, Any],
        writer: Writer | None = None,
        *,
        turn: int,
        trigger: TransitionTrigger,
        transcript: Any = None,
    ) -> TransitionResult | None:
        """Perform a transition to ``target`` without an event loop (see
        :meth:`transition`)."""
        tinfo = self._index.info(target)
        if tinfo is None:
            return None
        self._turn = turn
        return self._do_transition(tinfo, state, writer_for(state, writer), turn, trigger,
                                   transcript, None)

    def _do_transition(
        self,
        tinfo: PhaseInfo,
        state: Mapping[str, Any],
        writer: Writer,
        turn: int,
        trigger: TransitionTrigger,
        transcript: Any,
        events: list[ErrorRecord] | None,
    ) -> TransitionResult:
        source = self._current
        info = self._info()
        if info is not None and info.exit_ops:
            plain = info.exit_plain
            if plain is not None:  # only scalar sets: no call, no copy, no dispatch
                for key, value, label, position in plain:
                    try:
                        writer.set(key, value)
                    except Exception as exc:
                        events = self._write_failed(events, source, turn, exc, label, position)
            else:
                failed = run_sync(info.exit_ops, state, writer, source, turn, self._index.name,
                                  transcript)
                if failed:
                    events = (events or []) + failed
        target = tinfo.phase
        record = self._switch(tinfo, turn, trigger)
        if target.clear_on_enter:
            failed = self._clear(target.clear_on_enter, writer, target.name, turn)
            if failed:
                events = (events or []) + failed
        if tinfo.enter_ops:
            plain = tinfo.enter_plain
            if plain is not None:
                for key, value, label, position in plain:
                    try:
                        writer.set(key, value)
                    except Exception as exc:
                        events = self._write_failed(events, target.name, turn, exc, label,
                                                    position)
            else:
                failed = run_sync(tinfo.enter_ops, state, writer, target.name, turn,
                                  self._index.name, transcript)
                if failed:
                    events = (events or []) + failed
        self._count(record)
        return self._result(source, tinfo, record, state, turn, trigger, events)

    @staticmethod
    def _write_failed(
        events: list[ErrorRecord] | None, phase: str, turn: int, exc: Exception, label: str,
        position: Position | None,
    ) -> list[ErrorRecord]:
        event = ErrorRecord("effect_error", phase, turn, f"{type(exc).__name__}: {exc}", label,
                      position)
        return [*(events or ()), event]

    async def _do_transition_async(
        self,
        tinfo: PhaseInfo,
        state: Mapping[str, Any],
        writer: Writer,
        turn: int,
        trigger: TransitionTrigger,
        transcript: Any,
        events: list[ErrorRecord] | None,
    ) -> TransitionResult:
        source = self._current
        info = self._info()
        name = self._index.name
        if info is not None and info.exit_ops:
            failed = await run_async(info.exit_ops, state, writer, source, turn, name,
                                     transcript)
            if failed:
                events = (events or []) + failed
        target = tinfo.phase
        record = self._switch(tinfo, turn, trigger)
        if target.clear_on_enter:
            failed = self._clear(target.clear_on_enter, writer, target.name, turn)
            if failed:
                events = (events or []) + failed
        if tinfo.enter_ops:
            failed = await run_async(tinfo.enter_ops, state, writer, target.name, turn, name,
                                     transcript)
            if failed:
                events = (events or []) + failed
        self._count(record)
        return self._result(source, tinfo, record, state, turn, trigger, events)

    def _needs_async(self, tinfo: PhaseInfo) -> bool:
        info = self._info()
        return (info is not None and info.exit_async) or tinfo.enter_async

    async def transition(
        self,
        target: str,
        state: Mapping[str, Any],
        writer: Writer | None = None,
        *,
        turn: int,
        trigger: TransitionTrigger,
        transcript: Any = None,
    ) -> TransitionResult | None:
        """Perform a transition to ``target`` (no condition is checked): run the current
        phase's ``on_exit``; make the target current and restart its timer; remove its
        ``clear_on_enter`` keys; run its ``on_enter``; count the visit; append the history
        record. ``None`` if ``target`` is not a phase. Failing effects become events."""
        tinfo = self._index.info(target)
        if tinfo is None:
            return None
        self._turn = turn
        w = writer_for(state, writer)
        if self._needs_async(tinfo):
            return await self._do_transition_async(tinfo, state, w, turn, trigger, transcript,
                                                   None)
        return self._do_transition(tinfo, state, w, turn, trigger, transcript, None)

    def goto_sync(
        self,
        target: str,
        state: Mapping[str, Any],
        writer: Writer | None = None,
        *,
        turn: int,
        source: str = "goto",
        transcript: Any = None,
    ) -> TransitionResult | None:
        """A programmatic move (no guard consulted), labelled ``source``."""
        return self.transition_sync(target, state, writer, turn=turn,
                                    trigger=ProgrammaticTrigger(source), transcript=transcript)

    async def goto(
        self,
        target: str,
        state: Mapping[str, Any],
        writer: Writer | None = None,
        *,
        turn: int,
        source: str = "goto",
        transcript: Any = None,
    ) -> TransitionResult | None:
        """A programmatic move (no guard consulted), labelled ``source``."""
        return await self.transition(target, state, writer, turn=turn,
                                     trigger=ProgrammaticTrigger(source), transcript=transcript)

    # -- preparations ----------------------------------------------------------------------

    def _prepare_sync(
        self, tinfo: PhaseInfo, state: Mapping[str, Any], writer: Writer, turn: int,
        ran: list[str], events: list[ErrorRecord],
    ) -> bool:
        """Run the preparations that still have something to produce; False on failure."""
        name = self._index.name
        target = tinfo.phase.name
        for prep, op, produces in tinfo.prepare:
            if produces and all(state.get(k) is not None for k in produces):
                continue
            ran.append(prep)
            failed = run_sync((op,), state, writer, target, turn, name,
                              kind="preparation_failed")
            if failed:
                events.extend(failed)
                return False
        return all(state.get(k) is not None for k in tinfo.phase.requires)

    async def _prepare_async(
        self, tinfo: PhaseInfo, state: Mapping[str, Any], writer: Writer, turn: int,
        ran: list[str], events: list[ErrorRecord],
    ) -> bool:
        name = self._index.name
        target = tinfo.phase.name
        for prep, op, produces in tinfo.prepare:
            if produces and all(state.get(k) is not None for k in produces):
                continue
            ran.append(prep)
            failed = await run_async((op,), state, writer, target, turn, name,
                                     kind="preparation_failed")
            if failed:
                events.extend(failed)
                return False
        return all(state.get(k) is not None for k in tinfo.phase.requires)

    def prepare_target_sync(
        self, target: str, state: Mapping[str, Any], writer: Writer | None = None
    ) -> bool:
        """:meth:`prepare_target` without an event loop."""
        tinfo = self._index.info(target)
        if tinfo is None:
            return False
        events: list[ErrorRecord] = []
        ok = self._prepare_sync(tinfo, state, writer_for(state, writer), self._turn, [], events)
        self._record(events)
        return ok

    async def prepare_target(
        self, target: str, state: Mapping[str, Any], writer: Writer | None = None
    ) -> bool:
        """Run ``target``'s preparations in order, then say whether its ``requires`` are
        all present. A preparation whose ``produces`` are all present already is skipped
        (it has nothing to add); the first one that fails stops the rest and leaves the
        target blocked (False)."""
        tinfo = self._index.info(target)
        if tinfo is None:
            return False
        events: list[ErrorRecord] = []
        w = writer_for(state, writer)
        if tinfo.prepare_async:
            ok = await self._prepare_async(tinfo, state, w, self._turn, [], events)
        else:
            ok = self._prepare_sync(tinfo, state, w, self._turn, [], events)
        self._record(events)
        return ok

    # -- model requests --------------------------------------------------------------------

    def _request_target(
        self, target: str, state: Mapping[str, Any], events: list[ErrorRecord] | None = None
    ) -> tuple[PhaseInfo, tuple[str, ...]] | None:
        """The target and its absent required keys when the model may ask for it (with
        preparations to run if keys are absent), else ``None``. Guard run-time errors go
        to ``events`` when given."""
        tinfo = self._index.info(target)
        if tinfo is None:
            return None
        ctx = self._ctx()
        if not self._model_edges(target, state, ctx, events):
            return None
        missing = self._enterable(tinfo.phase, state, ctx, events)
        if missing is None or (missing and not tinfo.prepare):
            return None
        return tinfo, missing

    def take_request_sync(
        self,
        target: str,
        state: Mapping[str, Any],
        writer: Writer | None = None,
        *,
        turn: int,
        transcript: Any = None,
    ) -> TransitionResult | None:
        """:meth:`take_request` without an event loop."""
        self._turn = turn
        events: list[ErrorRecord] = []
        found = self._request_target(target, state, events)
        if found is None:
            self._record(events)
            return None
        tinfo, missing = found
        w = writer_for(state, writer)
        if missing and (
            not self._prepare_sync(tinfo, state, w, turn, [], events)
            or not self._still_requestable(target, state, events)
        ):
            self._record(events)
            return None
        return self._do_transition(tinfo, state, w, turn, MODEL_REQUEST, transcript, events)

    def _still_requestable(
        self, target: str, state: Mapping[str, Any], events: list[ErrorRecord]
    ) -> bool:
        """After a request's preparations ran: may the model still move (``when``, entry
        guard and ``requires`` all hold now)? Checked again because a preparation may have
        changed what they read, exactly as a turn boundary evaluates again."""
        found = self._request_target(target, state, events)
        if found is None:
            return False
        _tinfo, missing = found
        return not missing

    async def take_request(
        self,
        target: str,
        state: Mapping[str, Any],
        writer: Writer | None = None,
        *,
        turn: int,
        transcript: Any = None,
    ) -> TransitionResult | None:
        """Carry out the model's request to move to ``target``: ``None`` (refused) unless
        :meth:`request` allows it; when only required keys are absent and the target has
        preparations, they run first and everything is checked again, as at a turn
        boundary. Taken with a model trigger."""
        self._turn = turn
        events: list[ErrorRecord] = []
        found = self._request_target(target, state, events)
        if found is None:
            self._record(events)
            return None
        tinfo, missing = found
        w = writer_for(state, writer)
        if missing:
            ok = (await self._prepare_async(tinfo, state, w, turn, [], events)
                  if tinfo.prepare_async else
                  self._prepare_sync(tinfo, state, w, turn, [], events))
            if not ok or not self._still_requestable(target, state, events):
                self._record(events)
                return None
        if self._needs_async(tinfo):
            return await self._do_transition_async(tinfo, state, w, turn, MODEL_REQUEST,
                                                   transcript, events)
        return self._do_transition(tinfo, state, w, turn, MODEL_REQUEST, transcript, events)

    # -- the turn boundary -----------------------------------------------------------------

    def begin_boundary(self, turn: int) -> None:
        """Count one turn boundary (``turn`` is the session's turn number). ``advance``
        calls it; a host that runs the steps of a boundary itself calls it first."""
        self._turn = turn
        self._turns_in_phase += 1

    def advance_sync(
        self, state: Mapping[str, Any], writer: Writer | None = None, *, turn: int
    ) -> BoundaryResult:
        """One turn boundary without an event loop (see :meth:`advance`). An ``async def``
        callable still works if it never suspends; one that does is reported as an event."""
        self._turn = turn
        self._turns_in_phase += 1
        info = self._cur
        if info is None:
            info = self._info()
            if info is None:
                return BoundaryResult("stayed", self._current, turn)
        if not info.auto or info.phase.terminal:
            return BoundaryResult("stayed", self._current, turn)
        view = state._data if type(state) is State else state
        events: list[ErrorRecord] = []
        ctx = self._live or self._ctx()
        found = self._scan(info, view, ctx, events)
        if found is None:
            stayed: BoundaryResult = _new_tuple(BoundaryResult, (
                "stayed", self._current, turn, None, None, (), (),
                self._record(events) if events else ()))
            return stayed
        if writer is None:
            writer = state if type(state) is State else writer_for(state, None)
        assert writer is not None
        ran: list[str] | None = None
        if found.missing:
            ran = []
            tinfo = self._index.info(found.edge.to)
            assert tinfo is not None
            self._prepare_sync(tinfo, view, writer, turn, ran, events)
            found = self._rescan(info, view, ctx, events)
            if found is None:
                return BoundaryResult("stayed", self._current, turn,
                                      preparations=tuple(ran), events=self._record(events))
            if found.missing:
                return BoundaryResult("blocked", self._current, turn, None, found.edge.to,
                                      found.missing, tuple(ran), self._record(events))
        edge = found.edge
        tinfo = self._index.info(edge.to)
        assert tinfo is not None
        result = self._do_transition(tinfo, state, writer, turn, edge.trigger, None, events)
        moved: BoundaryResult = _new_tuple(BoundaryResult, (
            "transitioned", tinfo.phase.name, turn, result, None, (),
            tuple(ran) if ran else (), result.events))
        return moved

    async def advance(
        self, state: Mapping[str, Any], writer: Writer | None = None, *, turn: int
    ) -> BoundaryResult:
        """One turn boundary: evaluate; when Blocked, prepare the target and evaluate
        once more; when Ready, transition with a guard trigger. At most one transition.
        Without a writer the state is its own writer. Runs synchronously unless an effect
        it runs calls an ``async def`` callable."""
        info = self._info()
        if info is None or not self._boundary_may_await(info):
            return self.advance_sync(state, writer, turn=turn)
        self._turn = turn
        self._turns_in_phase += 1
        if info.phase.terminal or not info.auto:
            return BoundaryResult("stayed", self._current, turn)
        events: list[ErrorRecord] = []
        found = self._scan(info, state, self._ctx(), events)
        if found is None:
            return BoundaryResult("stayed", self._current, turn, events=self._record(events))
        w = writer_for(state, writer)
        ran: list[str] = []
        if found.missing:
            tinfo = self._index.info(found.edge.to)
            assert tinfo is not None
            await self._prepare_async(tinfo, state, w, turn, ran, events)
            found = self._rescan(info, state, self._ctx(), events)
            if found is None:
                return BoundaryResult("stayed", self._current, turn,
                                      preparations=tuple(ran), events=self._record(events))
            if found.missing:
                return BoundaryResult("blocked", self._current, turn, None, found.edge.to,
                                      found.missing, tuple(ran), self._record(events))
        edge = found.edge
        tinfo = self._index.info(edge.to)
        assert tinfo is not None
        result = await self._do_transition_async(tinfo, state, w, turn, edge.trigger, None, events)
        return BoundaryResult("transitioned", tinfo.phase.name, turn, result,
                              preparations=tuple(ran), events=result.events)

    def _boundary_may_await(self, info: PhaseInfo) -> bool:
        """Could a boundary from this phase run an async callable (its on_exit, or a
        target's on_enter or preparations)? Cached per phase in the shared index."""
        index = self._index
        name = info.phase.name
        cached = index.boundary_async.get(name)
        if cached is None:
            cached = info.exit_async
            for edge in info.auto:
                tinfo = index.info(edge.to)
                if tinfo is not None and (tinfo.enter_async or tinfo.prepare_async):
                    cached = True
            index.boundary_async[name] = cached
        return cached

    # -- navigation ------------------------------------------------------------------------

    def render_instructions(self, state: Mapping[str, Any]) -> str | None:
        """The current phase's ``instructions`` rendered for ``state`` (``None`` when it has
        none): what the model is told to do here. Pure; a template error is returned as
        bracketed text, never raised."""
        info = self._info()
        if info is None:
            return None
        return self._render(info.phase, state, self._turn)

    def describe_navigation(self, state: Mapping[str, Any]) -> str:
        """The navigation block for ``state`` (the workflow's ``navigation.template`` if it
        has one, else the default block). Pure."""
        from phaseflow.machine.navigation import describe

        return describe(self, state)

    def navigation_facts(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """The structured facts the navigation block is rendered from (what a
        ``navigation.template`` sees)."""
        from phaseflow.machine.navigation import facts

        return facts(self, state)

    @property
    def index(self) -> MachineIndex:
        """The shared lookups (internal; for the navigation renderer and tooling)."""
        return self._index

    def __repr__(self) -> str:
        return f"<PhaseMachine {self._index.name or 'in-code'} at {self._current!r}>"
