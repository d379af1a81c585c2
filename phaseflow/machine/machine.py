"""The phase machine: where one conversation is in a workflow, and how it moves.

A machine holds only per-conversation data (current phase, entry time, turn counters,
visit counts, history, trace); the phases and everything derived from them live in a
shared :class:`~phaseflow.machine.index.MachineIndex`. That is what makes
``workflow.machine()`` O(1) for any workflow size.

Every move comes in two flavours with identical semantics: ``advance``/``transition``/...
are coroutines for hosts with async hooks, and ``advance_sync``/``transition_sync``/... run
without an event loop. The coroutines themselves run synchronously (no await, no task)
unless an effect they are about to run calls an ``async def`` callable. Each coroutine is
the sync flavour's sequence of steps, the same non-awaiting helpers, with ``await`` only
where an effect list or a preparation may call an ``async def`` callable; which transition
may be taken is decided by :func:`phaseflow.spec.edges.check_edge`, the edge rule written
once.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from functools import partial
from types import MappingProxyType
from typing import Any, NoReturn

from phaseflow.errors import ConfigError, PhaseflowError
from phaseflow.expr import GuardContext
from phaseflow.expr.describe import describe_exception, did_you_mean
from phaseflow.machine.effects import Op, run_async, run_sync
from phaseflow.machine.index import AutoEdge, MachineIndex, PhaseInfo, Plain, Prep, index_for
from phaseflow.machine.navigation import Whereabouts, describe, facts
from phaseflow.machine.results import (
    Blocked,
    BoundaryResult,
    ErrorRecord,
    HistoryRecord,
    ModelTrigger,
    ProgrammaticTrigger,
    Ready,
    TransitionResult,
    TransitionTrigger,
    guard_error,
)
from phaseflow.machine.snapshot import restore_snapshot, take_snapshot
from phaseflow.machine.state import State, Writer, writer_for
from phaseflow.spec.edges import READY, EdgeStatus, check_edge, missing_keys
from phaseflow.spec.model import Phase, Position, Workflow

__all__ = ["HISTORY_LIMIT", "TRACE_LIMIT", "Clock", "PhaseMachine", "ReentrantCallError"]

#: A source of time in seconds; only differences matter (default ``time.monotonic``).
Clock = Callable[[], float]

#: How many history records a machine keeps (the oldest is dropped).
HISTORY_LIMIT = 100
#: How many error records the machine's trace keeps.
TRACE_LIMIT = 100


class ReentrantCallError(PhaseflowError):
    """A move was asked of a machine that is in the middle of one.

    A host callable (or a writer) that calls back into the machine running it - ``goto``,
    ``advance``, ``transition``, ``take_request``, ``prepare_target`` or
    ``begin_boundary``, sync or async - would start a second move inside the first: the
    outer boundary's result would name one phase while the machine is in another, and the
    history would be out of order. The inner call raises this instead, to the callable that
    made it; uncaught, it becomes that effect's ``effect_error`` and the outer move
    completes normally. Two tasks driving one machine at once get it too. Reading the
    machine (``current``, ``evaluate``, ``request``, ``describe_navigation``...) is allowed.
    """


def _joined(
    errors: list[ErrorRecord] | None, more: list[ErrorRecord] | None
) -> list[ErrorRecord] | None:
    """``errors`` with ``more`` added (either may be ``None``: most moves have none)."""
    if not more:
        return errors
    return more if errors is None else errors + more


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


def _refuse(machine: PhaseMachine, method: str) -> NoReturn:
    """Raise the :class:`ReentrantCallError` for ``method`` of a busy ``machine``."""
    raise ReentrantCallError(
        f"{method}() was called while this machine is in the middle of a move (at phase "
        f"{machine.current!r}): a callable or writer called back into the machine that runs "
        "it, or two tasks use one machine at once. To change the state, return a mapping "
        "from the callable; to move the machine, call it after the move returns."
    )


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
        "_busy",
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
        #: True while a move runs host code (effects, preparations, the writer): the one
        #: attribute every move checks first (see :class:`ReentrantCallError`)
        self._busy = False

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

    # -- the edge rule (phaseflow.spec.edges.check_edge) --------------------------------------

    def _scan(
        self,
        info: PhaseInfo,
        state: Mapping[str, Any],
        ctx: GuardContext,
        errors: list[ErrorRecord] | None,
    ) -> tuple[AutoEdge, EdgeStatus] | None:
        """The first ``auto`` edge of ``info``'s phase that is ready or preparable, in the
        order written, with its :func:`~phaseflow.spec.edges.check_edge` status. ``errors``,
        when given, collects the guard run-time errors met on the way (pure callers pass
        ``None``).

        The hot path: an edge that only its ``when`` decides (``edge.by_when``, most edges)
        is checked here without the call; ``tests/machine/test_machine_edges.py`` holds
        this loop to ``check_edge`` on random phases, guards and states.
        """
        for edge in info.auto:
            if edge.by_when:
                when = edge.when
                if when is None:
                    return edge, READY
                r = when.evaluate(state, ctx)
                if r.value:
                    return edge, READY
                if r.error is not None and errors is not None:
                    errors.append(guard_error(info.phase, edge.number, edge.target,
                                              ("when", r.error), self._turn))
                continue
            status = check_edge(edge.when, edge.target, state, ctx)
            if status.verdict != "closed":
                return edge, status
            if status.error is not None and errors is not None:
                errors.append(guard_error(info.phase, edge.number, edge.target, status.error,
                                          self._turn))
        return None

    def _request_target(
        self, target: str, state: Mapping[str, Any], errors: list[ErrorRecord] | None
    ) -> tuple[PhaseInfo, EdgeStatus, int] | None:
        """The target, the status of the current phase's first ``model`` edge to it whose
        ``when`` holds and that edge's number, when it is ready or preparable; else
        ``None``. Guard run-time errors go to ``errors`` when given."""
        found = self._move_edge(target, state, errors)
        tinfo = self._index.info(target)
        if found is None or found[1].verdict == "closed" or tinfo is None:
            return None
        return tinfo, found[1], found[0]

    def move_status(self, target: str, state: Mapping[str, Any]) -> EdgeStatus | None:
        """Pure: how the model's request to move to ``target`` stands now, checked as
        :meth:`request` checks it (the first ``model`` edge to it whose ``when`` holds;
        when none does, the first one's status, stopped by ``when``). ``None`` when the
        current phase has no ``model`` transition to ``target`` (or is terminal)."""
        found = self._move_edge(target, state, None)
        return None if found is None else found[1]

    def _move_edge(self, target: str, state: Mapping[str, Any],
                   errors: list[ErrorRecord] | None) -> tuple[int, EdgeStatus] | None:
        """The one rule for which ``model`` edge a request for ``target`` stands on: the
        first to it whose ``when`` holds, else the first to it (stopped by ``when``);
        its number and status."""
        info = self._info()
        if self._index.info(target) is None or info is None or info.phase.terminal:
            return None
        ctx = self._ctx()
        first: tuple[int, EdgeStatus] | None = None
        for edge in info.model:
            if edge.to != target:
                continue
            status = check_edge(edge.when, edge.target, state, ctx)
            if status.error is not None and errors is not None:
                errors.append(guard_error(info.phase, edge.number, edge.target, status.error,
                                          self._turn))
            if status.stopped_by != "when":
                return edge.number, status
            first = first or (edge.number, status)
        return first

    # -- pure evaluation -------------------------------------------------------------------

    def evaluate_for_transition(self, state: Mapping[str, Any]) -> Ready | Blocked | None:
        """Pure: the first ``auto`` transition of the current phase that is ``Ready``, or
        ``Blocked`` only by absent required keys of a target that has preparations.

        ``None`` when the current phase is unknown or terminal, or nothing applies. Each
        transition is checked by :func:`phaseflow.spec.edges.check_edge`: ``when`` false ->
        skip; target's entry ``guard`` false -> skip; target's ``requires`` present ->
        Ready; absent and the target has preparations -> Blocked; absent and none -> skip.
        """
        info = self._info()
        if info is None or info.phase.terminal:
            return None
        found = self._scan(info, state, self._ctx(), None)
        if found is None:
            return None
        edge, status = found
        if status.missing:
            return Blocked(edge.to, edge.number, status.missing)
        return Ready(edge.to, edge.number)

    def evaluate(self, state: Mapping[str, Any]) -> tuple[str, int] | None:
        """Pure: ``(target, transition_index)`` of the first ``auto`` transition that is
        ready, or ``None``. Same order of checks as :meth:`evaluate_for_transition`: when
        the first applicable transition is Blocked the answer is ``None``, not a later
        ready one (a boundary prepares that target rather than skipping it)."""
        found = self.evaluate_for_transition(state)
        return (found.target, found.index) if isinstance(found, Ready) else None

    def model_moves(self, state: Mapping[str, Any]) -> tuple[tuple[str, EdgeStatus], ...]:
        """Pure: every ``model`` transition of the current phase, in the order written, with
        what :func:`~phaseflow.spec.edges.check_edge` says of it now: what a session
        offers the model as ``go_to_phase`` targets (those not stopped by ``when``) and
        how it explains a refused move. Empty in a terminal or unknown phase."""
        info = self._info()
        if info is None or info.phase.terminal:
            return ()
        ctx = self._ctx()
        return tuple((edge.to, check_edge(edge.when, edge.target, state, ctx))
                     for edge in info.model)

    def request(self, target: str, state: Mapping[str, Any]) -> bool:
        """Pure: may the model move to ``target`` now? True when the current phase has a
        ``model`` transition to it whose ``when`` holds and the target can be entered
        (entry guard true, every required key present)."""
        found = self._request_target(target, state, None)
        if found is None:
            return False
        return found[1].verdict == "ready"

    # -- bookkeeping shared by both flavours ------------------------------------------------

    def _record(self, errors: list[ErrorRecord] | None) -> tuple[ErrorRecord, ...]:
        if not errors:
            return ()
        trace = self._trace
        if trace is None:
            trace = self._trace = deque(maxlen=TRACE_LIMIT)
        trace.extend(errors)
        return tuple(errors)

    def _effects(
        self,
        ops: tuple[Op, ...],
        plain: Plain | None,
        state: Mapping[str, Any],
        writer: Writer,
        phase: str,
        turn: int,
        transcript: Any,
        errors: list[ErrorRecord] | None,
    ) -> list[ErrorRecord] | None:
        """Run an effect list that calls no ``async def`` callable; returns ``errors`` with
        its failures added. The one fast path: a list of scalar ``set``s is written inline
        (no call, no copy, no dispatch)."""
        if plain is None:
            failed = run_sync(ops, state, writer, phase, turn, self._index.name, transcript)
            return _joined(errors, failed)
        for key, value, label, position in plain:
            try:
                writer.set(key, value)
            except Exception as exc:
                errors = _joined(errors, [ErrorRecord(
                    "effect_error", phase, turn, describe_exception(exc), label, position)])
        return errors

    def _switch(self, tinfo: PhaseInfo, turn: int, trigger: TransitionTrigger) -> HistoryRecord:
        """The middle of a transition, after the ``on_exit`` effects: make ``tinfo``'s phase
        current and restart its timer and turn counter. Returns the history record, which
        :meth:`_entered` appends (with the visit) once the target's ``clear_on_enter`` keys
        are removed (:meth:`_clear`) and its ``on_enter`` effects ran: the spec's order."""
        now = self._clock()
        target = tinfo.phase.name
        record: HistoryRecord = _new_tuple(HistoryRecord, (
            self._current, target, turn, now, trigger, now - self._entered_at
        ))
        self._current = target
        self._cur = tinfo
        self._entered_at = now
        self._turns_in_phase = 0
        return record

    @staticmethod
    def _clear(
        target: Phase, writer: Writer, turn: int, errors: list[ErrorRecord] | None
    ) -> list[ErrorRecord] | None:
        """Remove the target's ``clear_on_enter`` keys; returns ``errors`` with the failures
        added."""
        for key in target.clear_on_enter:
            try:
                writer.unset(key)
            except Exception as exc:
                errors = _joined(errors, [ErrorRecord(
                    "effect_error", target.name, turn, describe_exception(exc),
                    "clear_on_enter")])
        return errors

    def _entered(
        self,
        tinfo: PhaseInfo,
        record: HistoryRecord,
        state: Mapping[str, Any],
        errors: list[ErrorRecord] | None,
    ) -> TransitionResult:
        """The end of a transition: count the visit, append the history record, and make
        the result (its instructions are rendered on first access)."""
        visits = self._visits
        target = record.to_phase
        visits[target] = visits.get(target, 0) + 1
        history = self._history
        if history is None:
            history = self._history = deque(maxlen=HISTORY_LIMIT)
        history.append(record)
        phase = tinfo.phase
        turn = record.turn
        render = partial(self._render, phase, state, turn) if phase.instructions else None
        return TransitionResult(record, self._record(errors) if errors else (), render)

    def _render(self, phase: Phase, state: Mapping[str, Any], turn: int) -> str | None:
        template = phase.instructions
        if template is None:
            return None
        index = self._index
        outcome = template.render_checked({
            "state": state,
            "phase": {"name": phase.name, "goal": phase.goal},
            "workflow": {"name": index.name, "description": index.description},
            "turn": turn,
        })
        if outcome.error is not None:
            where = template.line_position(outcome.line)
            position = Position(*where) if where is not None else phase.position
            self._record([ErrorRecord("template_error", phase.name, turn, outcome.error,
                                      "instructions", position)])
        return outcome.text

    # -- transitions -----------------------------------------------------------------------

    def _do_transition(
        self,
        tinfo: PhaseInfo,
        state: Mapping[str, Any],
        writer: Writer,
        turn: int,
        trigger: TransitionTrigger,
        transcript: Any,
        errors: list[ErrorRecord] | None,
    ) -> TransitionResult:
        """A transition, the spec's order: the current phase's ``on_exit``; switch
        (:meth:`_switch`); ``clear_on_enter``; the target's ``on_enter``; count and record
        (:meth:`_entered`).

        The machine is busy meanwhile (a callable calling back into it is refused). A
        ``BaseException`` that is not an ``Exception`` (``KeyboardInterrupt``, cancellation)
        propagates; raised after the switch, the visit and history record are kept first,
        so the history always ends at the current phase."""
        self._busy = True
        record: HistoryRecord | None = None
        try:
            info = self._cur or self._info()
            if info is not None and info.exit_ops:
                errors = self._effects(info.exit_ops, info.exit_plain, state, writer,
                                       self._current, turn, transcript, errors)
            record = self._switch(tinfo, turn, trigger)
            if tinfo.phase.clear_on_enter:
                errors = self._clear(tinfo.phase, writer, turn, errors)
            if tinfo.enter_ops:
                errors = self._effects(tinfo.enter_ops, tinfo.enter_plain, state, writer,
                                       record.to_phase, turn, transcript, errors)
            result = self._entered(tinfo, record, state, errors)
            record = None
            return result
        finally:
            self._busy = False
            if record is not None:  # propagating after the switch: keep the bookkeeping
                self._entered(tinfo, record, state, errors)

    async def _do_transition_async(
        self,
        tinfo: PhaseInfo,
        state: Mapping[str, Any],
        writer: Writer,
        turn: int,
        trigger: TransitionTrigger,
        transcript: Any,
        errors: list[ErrorRecord] | None,
    ) -> TransitionResult:
        """:meth:`_do_transition` awaiting the effect lists that call ``async def``
        callables (the others run as in the sync flavour); busy and bookkeeping alike."""
        self._busy = True
        record: HistoryRecord | None = None
        try:
            info = self._cur or self._info()
            if info is not None and info.exit_ops:
                errors = (_joined(errors, await run_async(
                    info.exit_ops, state, writer, info.phase.name, turn, self._index.name,
                    transcript)) if info.exit_async else self._effects(
                    info.exit_ops, info.exit_plain, state, writer, info.phase.name, turn,
                    transcript, errors))
            record = self._switch(tinfo, turn, trigger)
            if tinfo.phase.clear_on_enter:
                errors = self._clear(tinfo.phase, writer, turn, errors)
            if tinfo.enter_ops:
                errors = (_joined(errors, await run_async(
                    tinfo.enter_ops, state, writer, record.to_phase, turn, self._index.name,
                    transcript)) if tinfo.enter_async else self._effects(
                    tinfo.enter_ops, tinfo.enter_plain, state, writer, record.to_phase, turn,
                    transcript, errors))
            result = self._entered(tinfo, record, state, errors)
            record = None
            return result
        finally:
            self._busy = False
            if record is not None:  # propagating after the switch: keep the bookkeeping
                self._entered(tinfo, record, state, errors)

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
        if self._busy:
            _refuse(self, "transition_sync")
        tinfo = self._index.info(target)
        if tinfo is None:
            return None
        self._turn = turn
        return self._do_transition(tinfo, state, writer_for(state, writer), turn, trigger,
                                   transcript, None)

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
        record. ``None`` if ``target`` is not a phase. Failing effects become error
        records."""
        if self._busy:
            _refuse(self, "transition")
        tinfo = self._index.info(target)
        if tinfo is None:
            return None
        self._turn = turn
        return await self._do_transition_async(tinfo, state, writer_for(state, writer), turn,
                                               trigger, transcript, None)

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
        if self._busy:
            _refuse(self, "goto_sync")
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
        if self._busy:
            _refuse(self, "goto")
        return await self.transition(target, state, writer, turn=turn,
                                     trigger=ProgrammaticTrigger(source), transcript=transcript)

    # -- preparations ----------------------------------------------------------------------

    @staticmethod
    def _pending(
        tinfo: PhaseInfo, state: Mapping[str, Any], ran: list[str]
    ) -> Iterator[Prep]:
        """The target's preparations that still have something to produce, in order, each
        checked just before it runs (an earlier one may have produced its keys); the name
        of each one yielded is appended to ``ran``."""
        for prep in tinfo.prepare:
            if prep.produces and not missing_keys(prep.produces, state):
                continue
            ran.append(prep.name)
            yield prep

    def _prepare_sync(
        self, tinfo: PhaseInfo, state: Mapping[str, Any], writer: Writer, turn: int,
        ran: list[str], errors: list[ErrorRecord],
    ) -> bool:
        """Run the preparations that still have something to produce; stop at the first
        that fails (False). Then: are the target's ``requires`` all present? The machine
        is busy meanwhile."""
        self._busy = True
        try:
            for prep in self._pending(tinfo, state, ran):
                failed = run_sync((prep.op,), state, writer, tinfo.phase.name, turn,
                                  self._index.name, kind="preparation_failed")
                if failed:
                    errors.extend(failed)
                    return False
        finally:
            self._busy = False
        return not missing_keys(tinfo.phase.requires, state)

    async def _prepare_async(
        self, tinfo: PhaseInfo, state: Mapping[str, Any], writer: Writer, turn: int,
        ran: list[str], errors: list[ErrorRecord],
    ) -> bool:
        """:meth:`_prepare_sync`, awaiting async callables."""
        self._busy = True
        try:
            for prep in self._pending(tinfo, state, ran):
                failed = await run_async((prep.op,), state, writer, tinfo.phase.name, turn,
                                         self._index.name, kind="preparation_failed")
                if failed:
                    errors.extend(failed)
                    return False
        finally:
            self._busy = False
        return not missing_keys(tinfo.phase.requires, state)

    def prepare_target_sync(
        self, target: str, state: Mapping[str, Any], writer: Writer | None = None
    ) -> bool:
        """:meth:`prepare_target` without an event loop."""
        if self._busy:
            _refuse(self, "prepare_target_sync")
        tinfo = self._index.info(target)
        if tinfo is None:
            return False
        errors: list[ErrorRecord] = []
        ok = self._prepare_sync(tinfo, state, writer_for(state, writer), self._turn, [], errors)
        self._record(errors)
        return ok

    async def prepare_target(
        self, target: str, state: Mapping[str, Any], writer: Writer | None = None
    ) -> bool:
        """Run ``target``'s preparations in order, then say whether its ``requires`` are
        all present. A preparation whose ``produces`` are all present already is skipped
        (it has nothing to add); the first one that fails stops the rest and leaves the
        target blocked (False)."""
        if self._busy:
            _refuse(self, "prepare_target")
        tinfo = self._index.info(target)
        if tinfo is None:
            return False
        errors: list[ErrorRecord] = []
        ok = await self._prepare_async(tinfo, state, writer_for(state, writer), self._turn, [],
                                       errors)
        self._record(errors)
        return ok

    # -- model requests --------------------------------------------------------------------

    def _open_request(
        self, target: str, state: Mapping[str, Any], writer: Writer | None, turn: int
    ) -> tuple[PhaseInfo, EdgeStatus, int, Writer, list[ErrorRecord]] | None:
        """The first step of a request, shared by both flavours: the target, its edge's
        status and number when it may be asked for, else ``None`` (refused; errors
        recorded)."""
        self._turn = turn
        errors: list[ErrorRecord] = []
        found = self._request_target(target, state, errors)
        if found is None:
            self._record(errors)
            return None
        tinfo, status, number = found
        return tinfo, status, number, writer_for(state, writer), errors

    def _still_requestable(
        self, target: str, state: Mapping[str, Any], errors: list[ErrorRecord]
    ) -> int | None:
        """After a request's preparations ran: may the model still move (``when``, entry
        guard and ``requires`` all hold now)? Checked again because a preparation may have
        changed what they read, exactly as a turn boundary evaluates again: the number of
        the edge it moves on (which may be another than before), or ``None`` (errors
        recorded)."""
        found = self._request_target(target, state, errors)
        if found is not None:
            _tinfo, status, number = found
            if status.verdict == "ready":
                return number
        self._record(errors)
        return None

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
        if self._busy:
            _refuse(self, "take_request_sync")
        opened = self._open_request(target, state, writer, turn)
        if opened is None:
            return None
        tinfo, status, number, w, errors = opened
        if status.missing:
            if not self._prepare_sync(tinfo, state, w, turn, [], errors):
                self._record(errors)
                return None
            again = self._still_requestable(target, state, errors)
            if again is None:
                return None
            number = again
        return self._do_transition(tinfo, state, w, turn, ModelTrigger(number), transcript,
                                   errors)

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
        if self._busy:
            _refuse(self, "take_request")
        opened = self._open_request(target, state, writer, turn)
        if opened is None:
            return None
        tinfo, status, number, w, errors = opened
        if status.missing:
            if not await self._prepare_async(tinfo, state, w, turn, [], errors):
                self._record(errors)
                return None
            again = self._still_requestable(target, state, errors)
            if again is None:
                return None
            number = again
        return await self._do_transition_async(tinfo, state, w, turn, ModelTrigger(number),
                                               transcript, errors)

    # -- the turn boundary -----------------------------------------------------------------

    def begin_boundary(self, turn: int) -> None:
        """Count one turn boundary (``turn`` is the session's turn number). ``advance``
        calls it; a host that runs the steps of a boundary itself calls it first."""
        if self._busy:
            _refuse(self, "begin_boundary")
        self._turn = turn
        self._turns_in_phase += 1

    def _open_boundary(
        self, view: Mapping[str, Any], turn: int, errors: list[ErrorRecord], counted: bool = True
    ) -> tuple[AutoEdge, EdgeStatus] | BoundaryResult:
        """The first step of a boundary, shared by both flavours: count it, then find the
        first ``auto`` edge that is ready or preparable (``view``: the state as guards read
        it; guard errors go to ``errors``). Returns the boundary's result when there is
        none (stayed)."""
        self._turn = turn
        if counted:
            self._turns_in_phase += 1
        info = self._cur or self._info()
        if info is None or not info.auto or info.phase.terminal:
            return BoundaryResult("stayed", self._current, turn)
        found = self._scan(info, view, self._live or self._ctx(), errors)
        if found is None:
            stayed: BoundaryResult = _new_tuple(BoundaryResult, (
                "stayed", self._current, turn, None, None, (), (),
                self._record(errors) if errors else ()))
            return stayed
        return found

    def _reopen_boundary(
        self, view: Mapping[str, Any], errors: list[ErrorRecord], ran: list[str]
    ) -> tuple[AutoEdge, EdgeStatus] | BoundaryResult:
        """The step after a boundary's preparations, shared by both flavours: evaluate once
        more (a guard error the first evaluation reported is not reported twice). Returns
        the edge to take, or the boundary's result (stayed or blocked)."""
        info = self._cur
        assert info is not None  # the boundary was opened from it
        again: list[ErrorRecord] = []
        found = self._scan(info, view, self._ctx(), again)
        errors.extend(e for e in again if e not in errors)
        if found is None:
            return BoundaryResult("stayed", self._current, self._turn,
                                  preparations=tuple(ran), events=self._record(errors))
        edge, status = found
        if status.missing:
            return BoundaryResult("blocked", self._current, self._turn, None, edge.to,
                                  status.missing, tuple(ran), self._record(errors))
        return found

    @staticmethod
    def _moved(result: TransitionResult, ran: list[str] | None) -> BoundaryResult:
        """The result of a boundary that took a transition."""
        record = result.record
        moved: BoundaryResult = _new_tuple(BoundaryResult, (
            "transitioned", record.to_phase, record.turn, result, None, (),
            tuple(ran) if ran else (), result.events))
        return moved

    def advance_sync(
        self, state: Mapping[str, Any], writer: Writer | None = None, *, turn: int,
        counted: bool = True,
    ) -> BoundaryResult:
        """One turn boundary without an event loop (see :meth:`advance`). An ``async def``
        callable still works if it never suspends; one that does is reported as an error
        record."""
        if self._busy:
            _refuse(self, "advance_sync")
        view = state._data if type(state) is State else state  # guards read the dict
        errors: list[ErrorRecord] = []
        opened = self._open_boundary(view, turn, errors, counted)
        if isinstance(opened, BoundaryResult):
            return opened
        edge, status = opened
        if writer is None:
            writer = state if type(state) is State else writer_for(state, None)
        ran: list[str] | None = None
        if status.missing:
            ran = []
            tinfo = self._index.info(edge.to)
            assert tinfo is not None  # an edge that is not closed has a target
            self._prepare_sync(tinfo, view, writer, turn, ran, errors)
            again = self._reopen_boundary(view, errors, ran)
            if isinstance(again, BoundaryResult):
                return again
            edge, status = again
        tinfo = self._index.entries.get(edge.to) or self._index.info(edge.to)
        assert tinfo is not None  # an edge that is not closed has a target
        return self._moved(self._do_transition(tinfo, state, writer, turn, edge.trigger, None,
                                               errors), ran)

    async def advance(
        self, state: Mapping[str, Any], writer: Writer | None = None, *, turn: int,
        counted: bool = True,
    ) -> BoundaryResult:
        """One turn boundary: evaluate; when Blocked, prepare the target and evaluate
        once more; when Ready, transition with a guard trigger. At most one transition.
        Without a writer the state is its own writer. Runs synchronously unless an effect
        it runs calls an ``async def`` callable.

        ``counted=False`` is a boundary inside a turn (a session's, after a tool group):
        it moves like any boundary but does not count as a turn in the phase, because
        ``turns_in_phase`` counts user turns, not model requests."""
        if self._busy:
            _refuse(self, "advance")
        info = self._info()
        if info is None or not self._boundary_may_await(info):
            return self.advance_sync(state, writer, turn=turn, counted=counted)
        errors: list[ErrorRecord] = []
        opened = self._open_boundary(state, turn, errors, counted)
        if isinstance(opened, BoundaryResult):
            return opened
        edge, status = opened
        w = writer_for(state, writer)
        ran: list[str] | None = None
        if status.missing:
            ran = []
            tinfo = self._index.info(edge.to)
            assert tinfo is not None  # an edge that is not closed has a target
            await self._prepare_async(tinfo, state, w, turn, ran, errors)
            again = self._reopen_boundary(state, errors, ran)
            if isinstance(again, BoundaryResult):
                return again
            edge, status = again
        tinfo = self._index.info(edge.to)
        assert tinfo is not None
        return self._moved(await self._do_transition_async(tinfo, state, w, turn, edge.trigger,
                                                           None, errors), ran)

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
        none): what the model is told to do here. It changes neither the state nor where
        the conversation is; a template that fails gives the documented fallback text (the
        empty string) and a ``template_error`` in the trace, never an exception."""
        info = self._info()
        if info is None:
            return None
        return self._render(info.phase, state, self._turn)

    def whereabouts(self) -> Whereabouts:
        """Where the conversation is now, as a frozen value: what the navigation block is
        built from."""
        index = self._index
        return Whereabouts(
            current=self._current,
            phase=index.phases.get(self._current),
            phases=index.phases,
            history=self.history,
            tools=self.active_tools(),
            context=self.guard_context(),
            turn=self._turn,
            navigation=index.navigation,
            workflow_name=index.name,
            workflow_description=index.description,
        )

    def describe_navigation(self, state: Mapping[str, Any]) -> str:
        """The navigation block for ``state`` (the workflow's ``navigation.template`` if it
        has one, else the default block). A navigation template that fails gives the
        default block instead and a ``template_error`` in the trace."""
        text, error = describe(self.whereabouts(), state)
        if error is not None:
            self._record([ErrorRecord("template_error", self._current, self._turn, error,
                                      "navigation.template")])
        return text

    def navigation_facts(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """The structured facts the navigation block is rendered from (what a
        ``navigation.template`` sees)."""
        return facts(self.whereabouts(), state)

    # -- saving and resuming ---------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """This conversation's position as plain JSON (phase, time in it, turn counters,
        visits, history, trace; times relative, never clock readings), for :meth:`restore`.
        The state is the host's: save it beside the snapshot."""
        return take_snapshot(self)

    @classmethod
    def restore(cls, workflow: Workflow, data: object, *, clock: Clock | None = None
                ) -> PhaseMachine:
        """A machine of ``workflow`` where ``snapshot()`` left one, on ``clock`` (the system
        clock by default); :class:`~phaseflow.machine.snapshot.SnapshotError`, naming the
        field, for a snapshot that is malformed, unreachable or of another workflow;
        :class:`ConfigError` when ``workflow`` is not a ``Workflow`` or ``clock`` is not a
        callable that gives a finite number."""
        if not isinstance(workflow, Workflow):
            raise ConfigError(f"restore expects a Workflow, got {type(workflow).__name__}")
        if clock is not None and not callable(clock):
            raise ConfigError(f"restore expects a clock (a callable), got {type(clock).__name__}")
        return restore_snapshot(cls.from_workflow(workflow, clock), workflow, data,
                                HISTORY_LIMIT, TRACE_LIMIT)

    def __repr__(self) -> str:
        return f"<PhaseMachine {self._index.name or 'in-code'} at {self._current!r}>"
