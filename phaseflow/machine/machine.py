"""The phase machine: where one conversation is in a workflow, and how it moves.

A machine holds only per-conversation data (current phase, entry time, turn counters,
visit counts, history, trace: :class:`~phaseflow.machine.core.MachineCore`); the phases
and everything derived from them live in a shared
:class:`~phaseflow.machine.index.MachineIndex`. That is what makes ``workflow.machine()``
O(1) for any workflow size.

Every move comes in two flavours with identical semantics: ``advance``/``transition``/...
are coroutines for hosts with async hooks, and ``advance_sync``/``transition_sync``/... run
without an event loop. Each move is written once, in :mod:`phaseflow.machine.plan`, as a
plan whose steps yield the host callables to run; a ``*_sync`` method hands the plan to
the driver that calls them, its coroutine twin to the one that awaits them
(:mod:`phaseflow.machine.drivers`). The coroutines run synchronously (no task) unless a
callable returns an awaitable that suspends. Which transition may be taken is decided by
:func:`phaseflow.spec.edges.check_edge`, the edge rule written once.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from phaseflow.errors import ConfigError
from phaseflow.expr import GuardContext
from phaseflow.expr.describe import did_you_mean
from phaseflow.machine.calls import (
    CALL_KEYS,
    call_scope,
    calls_snapshot,
    mark_calls,
    model_handoff,
    model_handoff_edge,
    path_names,
    restore_calls,
    settle_steps,
    take_handoff,
)
from phaseflow.machine.core import (
    HISTORY_LIMIT,
    TRACE_LIMIT,
    Clock,
    MachineCore,
    ReentrantCallError,
    refuse,
)
from phaseflow.machine.drivers import run_async, run_sync
from phaseflow.machine.index import MachineIndex
from phaseflow.machine.navigation import Whereabouts, describe, facts
from phaseflow.machine.plan import (
    plan_boundary,
    plan_preparations,
    plan_request,
    plan_transition,
)
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
)
from phaseflow.machine.snapshot import restore_snapshot, take_snapshot
from phaseflow.machine.state import Writer
from phaseflow.spec.edges import READY, EdgeStatus, check_edge
from phaseflow.spec.model import Phase, Workflow

__all__ = ["HISTORY_LIMIT", "TRACE_LIMIT", "Clock", "PhaseMachine", "ReentrantCallError"]


class PhaseMachine(MachineCore):
    """One conversation's position in a set of phases.

    Build it with ``workflow.machine()`` (or :meth:`from_workflow`), or in code with
    ``PhaseMachine(initial)`` and :meth:`add_phase`. The initial phase counts as visited
    once from the start (``visits.<initial>`` is 1), because the conversation is in it.
    The constructor's keywords: ``clock``, ``workflow`` (it supplies the phases, shared
    and copied only if you add a phase, the call registry, the tool catalogue and the
    navigation settings) and ``registry`` (the callables for ``call`` effects of a machine
    built in code).
    """

    __slots__ = ()

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
                state_types=index.state_types,
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


    def move_status(self, target: str, state: Mapping[str, Any]) -> EdgeStatus | None:
        """Pure: how the model's request to move to ``target`` stands now, checked as
        :meth:`request` checks it (the first ``model`` edge to it whose ``when`` holds;
        when none does, the first one's status, stopped by ``when``). ``None`` when the
        current phase has no ``model`` transition to ``target`` (or is terminal)."""
        if self._composes and model_handoff(self, target, state) is not None:
            return READY
        found = self._move_edge(target, state, None)
        return None if found is None else found[1]

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


    # -- moves (each a plan of phaseflow.machine.plan, run by a driver) -----------------------

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
        result = run_sync(plan_transition(self, target, state, writer, turn, trigger,
                                          transcript, "transition_sync"))
        if self._composes:
            self._settle_sync(state, writer, turn)
        return result

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
        result = await run_async(plan_transition(self, target, state, writer, turn, trigger,
                                                 transcript, "transition"))
        if self._composes:
            await self._settle(state, writer, turn)
        return result

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
        result = run_sync(plan_transition(self, target, state, writer, turn,
                                          ProgrammaticTrigger(source), transcript, "goto_sync"))
        if self._composes:
            self._settle_sync(state, writer, turn)
        return result

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
        result = await run_async(plan_transition(self, target, state, writer, turn,
                                                 ProgrammaticTrigger(source), transcript,
                                                 "goto"))
        if self._composes:
            await self._settle(state, writer, turn)
        return result

    def prepare_target_sync(
        self, target: str, state: Mapping[str, Any], writer: Writer | None = None
    ) -> bool:
        """:meth:`prepare_target` without an event loop."""
        return run_sync(plan_preparations(self, target, state, writer, "prepare_target_sync"))

    async def prepare_target(
        self, target: str, state: Mapping[str, Any], writer: Writer | None = None, *,
        transcript: Any = None,
    ) -> bool:
        """Run ``target``'s preparations in order, then say whether its ``requires`` are
        all present. A preparation whose ``produces`` are all present already is skipped
        (it has nothing to add); the first one that fails stops the rest and leaves the
        target blocked (False). ``transcript``: what the preparations receive (see
        ``EffectContext``)."""
        return await run_async(plan_preparations(self, target, state, writer,
                                                 "prepare_target", transcript))

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
        if self._composes:
            handed = self._handoff_request(target, state, writer, turn)
            if handed is not None:
                self._settle_sync(state, writer, turn)
                return handed
        result = run_sync(plan_request(self, target, state, writer, turn, transcript,
                                       "take_request_sync"))
        if self._composes:
            self._settle_sync(state, writer, turn)
        return result

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
        if self._composes:
            handed = self._handoff_request(target, state, writer, turn)
            if handed is not None:
                await self._settle(state, writer, turn)
                return handed
        result = await run_async(plan_request(self, target, state, writer, turn, transcript,
                                              "take_request"))
        if self._composes:
            await self._settle(state, writer, turn)
        return result

    def begin_boundary(self, turn: int) -> None:
        """Count one turn boundary (``turn`` is the session's turn number). ``advance``
        calls it; a host that runs the steps of a boundary itself calls it first."""
        if self._busy:
            refuse(self, "begin_boundary")
        self._turn = turn
        self._turns_in_phase += 1

    def advance_sync(
        self, state: Mapping[str, Any], writer: Writer | None = None, *, turn: int,
        counted: bool = True, transcript: Any = None,
    ) -> BoundaryResult:
        """One turn boundary without an event loop (see :meth:`advance`). An ``async def``
        callable still works if it never suspends; one that does is reported as an error
        record."""
        if self._composes and self._stack is None and self._back is None:
            self._settle_sync(state, writer, turn)  # a calling initial phase: enter it first
        plan = plan_boundary(self, state, writer, turn, counted, "advance_sync", transcript)
        # the answer itself when nothing has to run (most boundaries): no driver frame
        result = plan if type(plan) is BoundaryResult else run_sync(plan)
        if self._composes:
            self._settle_sync(state, writer, turn)
        return result

    async def advance(
        self, state: Mapping[str, Any], writer: Writer | None = None, *, turn: int,
        counted: bool = True, transcript: Any = None,
    ) -> BoundaryResult:
        """One turn boundary: evaluate; when Blocked, prepare the target and evaluate
        once more; when Ready, transition with a guard trigger. At most one transition.
        Without a writer the state is its own writer. Runs synchronously unless a
        callable it runs returns an awaitable that suspends.

        ``counted=False`` is a boundary inside a turn (a session's, after a tool group):
        it moves like any boundary but does not count as a turn in the phase, because
        ``turns_in_phase`` counts user turns, not model requests. ``transcript``: what
        its ``call`` effects and preparations receive (see ``EffectContext``)."""
        if self._composes and self._stack is None and self._back is None:
            await self._settle(state, writer, turn)  # a calling initial phase: enter it first
        result = await run_async(plan_boundary(self, state, writer, turn, counted, "advance",
                                                transcript))
        if self._composes:
            await self._settle(state, writer, turn)
        return result

    # -- composition (phaseflow.machine.calls) -----------------------------------------------

    def _unsettled(self) -> bool:
        """Might the current phase call, return or hand off? (Most moves of a workflow
        that composes land on a phase that does none: no generator for them.)"""
        info = self._cur or self._info()
        if info is None:
            return False
        phase = info.phase
        return (phase.call is not None or bool(info.handoffs)
                or (phase.terminal and self._stack is not None))

    def _settle_sync(self, state: Mapping[str, Any], writer: Writer | None, turn: int) -> None:
        if not self._unsettled():
            return
        steps = settle_steps(self, state, writer, turn)
        try:
            plan = steps.send(None)
            while True:
                plan = steps.send(run_sync(plan))
        except StopIteration:
            return

    async def _settle(self, state: Mapping[str, Any], writer: Writer | None, turn: int) -> None:
        if not self._unsettled():
            return
        steps = settle_steps(self, state, writer, turn)
        try:
            plan = steps.send(None)
            while True:
                plan = steps.send(await run_async(plan))
        except StopIteration:
            return

    def _handoff_request(self, target: str, state: Mapping[str, Any], writer: Writer | None,
                         turn: int) -> TransitionResult | None:
        """The model's request for a hand-off to ``target``, taken; ``None`` when the
        current phase offers none to it."""
        found = model_handoff_edge(self, target, state)
        if found is None:
            return None
        from_phase, entered = self._current, self._entered_at
        from phaseflow.machine.state import writer_for

        if not take_handoff(self, found[1], state, writer_for(state, writer), turn):
            return None
        now = self._clock()
        return TransitionResult(HistoryRecord(from_phase, self._current, turn, now,
                                              ModelTrigger(found[0]), now - entered))

    @property
    def path(self) -> tuple[str, ...]:
        """Where the conversation is, outermost first: each workflow's name and the phase
        it is in (``("refund-desk", "verify", "identity-check", "ask")``)."""
        return tuple(path_names(self))

    @property
    def returned(self) -> str | None:
        """The terminal phase the last call ended in (``None`` before one returns)."""
        return self._returned

    def mark_calls(self, messages: int) -> None:
        """Note ``messages`` (the conversation's length now) as the start of each call
        entered since the last note (a session calls it after each move)."""
        mark_calls(self, messages)

    def call_scope(self) -> tuple[str, int, str] | None:
        """What the innermost call's model requests carry: ``(history, mark, workflow)``
        for ``history: since_call`` or ``summary``; ``None`` otherwise."""
        return call_scope(self)

    @property
    def call_depth(self) -> int:
        """How many calls the conversation is inside (0 at the top)."""
        return len(self._stack or ())

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
        if self._stack:
            text = self._call_lines() + text
        return text

    def _call_lines(self) -> str:
        """What the navigation block says inside a call: the path, what the caller waits
        for and what returns to it."""
        assert self._stack
        frame = self._stack[-1]
        workflow = self._workflow
        ends = sorted(n for n, p in workflow.phases.items() if p.terminal) if workflow else []
        lines = [f"Path: {' › '.join(self.path)}",
                 f"You are inside a call from phase '{frame.caller._current}': it resumes "
                 f"when this workflow reaches {' or '.join(ends) or 'a terminal phase'}."]
        if frame.call.returns:
            lines.append(f"What returns to it: {', '.join(frame.call.returns.values())}.")
        return "\n".join(lines) + "\n"

    def navigation_facts(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """The structured facts the navigation block is rendered from (what a
        ``navigation.template`` sees)."""
        return facts(self.whereabouts(), state)

    # -- saving and resuming ---------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """This conversation's position as plain JSON (phase, time in it, turn counters,
        visits, history, trace; times relative, never clock readings), for :meth:`restore`.
        The state is the host's: save it beside the snapshot."""
        snapshot = take_snapshot(self)
        return calls_snapshot(self, snapshot) if self._composes else snapshot

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
        if type(data) is dict and any(k in data for k in CALL_KEYS):
            restored = restore_calls(cls, workflow, data, HISTORY_LIMIT, TRACE_LIMIT, clock)
            assert isinstance(restored, PhaseMachine)
            return restored
        return restore_snapshot(cls.from_workflow(workflow, clock), workflow, data,
                                HISTORY_LIMIT, TRACE_LIMIT)

    def __repr__(self) -> str:
        return f"<PhaseMachine {self._index.name or 'in-code'} at {self._current!r}>"
