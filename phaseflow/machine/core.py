"""A machine's per-conversation values, and what every move does to them.

:class:`MachineCore` holds one conversation's position (current phase, entry time, turn
counters, visits, history, trace) over a shared
:class:`~phaseflow.machine.index.MachineIndex`, and the operations on those values that
run no host code: reading the edges as the edge rule says
(:func:`phaseflow.spec.edges.check_edge`), recording errors, switching phases, counting
a visit. The moves that put them together are written once in
:mod:`phaseflow.machine.plan`; :class:`~phaseflow.machine.machine.PhaseMachine`, the
public class, is a ``MachineCore``.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

from phaseflow.errors import PhaseflowError
from phaseflow.expr import GuardContext
from phaseflow.machine.index import AutoEdge, MachineIndex, PhaseInfo, index_for, state_types
from phaseflow.machine.results import (
    ErrorRecord,
    HistoryRecord,
    guard_error,
)
from phaseflow.spec.edges import READY, EdgeStatus, check_edge
from phaseflow.spec.model import Phase, Position, Workflow

__all__ = [
    "HISTORY_LIMIT", "TRACE_LIMIT", "Clock", "MachineCore", "ReentrantCallError", "refuse",
]

#: A source of time in seconds; only differences matter (default ``time.monotonic``).
Clock = Callable[[], float]

#: How many history records a machine keeps (the oldest is dropped).
HISTORY_LIMIT = 100
#: How many error records the machine's trace keeps.
TRACE_LIMIT = 100

#: ``tuple.__new__``: makes a named tuple from a tuple without the Python-level ``__new__``
#: frame (the hot path makes two per transition).
new_tuple: Any = tuple.__new__
#: ``object.__new__``: makes a slotted object whose slots the caller then sets, without
#: the ``__init__`` frame (the hot path makes a ``TransitionResult`` per transition).
new_object: Any = object.__new__


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


def refuse(machine: MachineCore, method: str) -> NoReturn:
    """Raise the :class:`ReentrantCallError` for ``method`` of a busy ``machine``."""
    raise ReentrantCallError(
        f"{method}() was called while this machine is in the middle of a move (at phase "
        f"{machine._current!r}): a callable or writer called back into the machine that "
        "runs it, or two tasks use one machine at once. To change the state, return a "
        "mapping from the callable; to move the machine, call it after the move returns."
    )


def joined(
    errors: list[ErrorRecord] | None, more: list[ErrorRecord] | None
) -> list[ErrorRecord] | None:
    """``errors`` with ``more`` added (either may be ``None``: most moves have none)."""
    if not more:
        return errors
    return more if errors is None else errors + more


class LiveContext(GuardContext):
    """The machine's guard context, read live from the machine.

    A boundary evaluates guards many times per second across conversations; a fresh
    frozen ``GuardContext`` per evaluation would be most of a boundary's cost. This view
    is made once per machine and answers each name from the machine's current values, so
    evaluating a guard allocates nothing. It never escapes: ``guard_context()`` returns a
    snapshot.
    """

    __slots__ = ("_m",)
    _m: MachineCore

    def __init__(self, machine: MachineCore) -> None:
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

    @property
    def returned(self) -> str | None:
        return self._m._returned


class MachineCore:
    """One conversation's position in a set of phases, and the bookkeeping of its moves
    (see the module docstring)."""

    __slots__ = (
        "__weakref__",
        "_back",
        "_busy",
        "_clock",
        "_composes",
        "_cur",
        "_current",
        "_entered_at",
        "_history",
        "_index",
        "_initial",
        "_live",
        "_owns_index",
        "_returned",
        "_route",
        "_settled",
        "_stack",
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
                state_types=state_types(workflow),
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
        self._live: LiveContext | None = None
        #: True while a move runs host code (effects, preparations, the writer): the one
        #: attribute every move checks first (see :class:`ReentrantCallError`)
        self._busy = False
        #: the terminal phase the last call ended in (what guards read as ``returned``)
        self._returned: str | None = None
        #: the calls this conversation is inside, outermost first (``None``: none; see
        #: :mod:`phaseflow.machine.calls`)
        self._stack: list[Any] | None = None
        #: the hand-offs taken, each the names that lead from the outermost workflow to
        #: the one handed to (``None``: none)
        self._route: list[list[str]] | None = None
        #: ``(phase, visit)``: the visit of a calling phase whose call is done
        self._back: tuple[str, int] | None = None
        #: does this conversation compose workflows (then each move settles)
        self._composes = workflow is not None and bool(workflow.uses)
        #: when a list (a test runner's), the moves settling takes after a call returns:
        #: ``(workflow, TransitionResult)``
        self._settled: list[Any] | None = None

    def _info(self) -> PhaseInfo | None:
        """The current phase's entry (cached until the next move)."""
        info = self._cur
        if info is None:
            info = self._cur = self._index.info(self._current)
        return info

    def _ctx(self) -> LiveContext:
        live = self._live
        if live is None:
            live = self._live = LiveContext(self)
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

    # -- bookkeeping -------------------------------------------------------------------------

    def _record(self, errors: list[ErrorRecord] | None) -> tuple[ErrorRecord, ...]:
        """Append ``errors`` to the trace; returns them as a tuple."""
        if not errors:
            return ()
        trace = self._trace
        if trace is None:
            trace = self._trace = deque(maxlen=TRACE_LIMIT)
        trace.extend(errors)
        return tuple(errors)

    def _render(self, phase: Phase, state: Mapping[str, Any], turn: int) -> str | None:
        """``phase``'s instructions rendered for ``state``; a failing template gives its
        fallback text and a ``template_error`` in the trace."""
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
