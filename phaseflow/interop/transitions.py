"""Build a `pytransitions <https://github.com/pytransitions/transitions>`_ ``Machine`` from a
compiled phaseflow workflow.

For hosts that already drive their state with pytransitions, or want its diagram
extensions; the test suite also uses it as an independent oracle of
:class:`~phaseflow.machine.PhaseMachine` (the conditions, the order transitions are tried
in, and the enter/exit sequencing are pytransitions' own).

``transitions`` is an optional dependency (``pip install '.[transitions]'``); it is
imported only when a machine is built, and :class:`TransitionsNotInstalled` says so when
it is missing.

What :func:`build_machine` builds
---------------------------------

* ``auto_transitions=False``, ``send_event=True`` (every callback gets an ``EventData``),
  ``ignore_invalid_triggers=True`` (overridable), ``model_attribute="phase"``
  (overridable): the current phase's name is ``model.phase``, so ``model.state`` stays
  free for the phaseflow state.
* One pytransitions state per phase, in the workflow's order; ``initial=workflow.initial``;
  a ``terminal`` phase is a ``final`` state (pytransitions runs the machine's ``on_final``
  callbacks when one is entered).
* For each phase, its transitions in the order written:

  - an ``auto`` transition is added under the trigger :data:`ADVANCE` (``"advance"``);
    pytransitions tries them in that order and takes the first whose conditions hold;
  - a ``model`` transition is added under the trigger ``request_<target>``
    (:func:`request_trigger`).

  The conditions of a transition are, in this order: (auto only, and only when an
  earlier ``auto`` transition of the phase goes to a phase with preparations) no earlier
  ``auto`` transition is *preparable* (phaseflow stops there); then the transition itself
  is ready by :func:`phaseflow.spec.edges.check_edge` (its ``when``, the target's entry
  ``guard``, every key of the target's ``requires`` present: the edge rule phaseflow uses),
  one condition named after those checks (``state.x == 1 and b.guard: ... and
  b.requires: k``), none when the edge is always ready. Guards are the compiled
  :class:`~phaseflow.expr.Guard` objects, evaluated against the tracker's state with a
  :class:`~phaseflow.expr.GuardContext` made from the tracker's counters (``phase`` is the
  current phase, also for entry guards, as in phaseflow). A run-time guard error makes the
  condition false and is recorded as a ``guard_error``
  :class:`~phaseflow.machine.ErrorRecord`, as phaseflow records it.
* Each state's ``on_exit`` runs the phase's ``on_exit`` effects; its ``on_enter`` appends
  a :class:`~phaseflow.machine.HistoryRecord`, restarts the phase's timer and
  ``turns_in_phase``, counts the visit, removes the ``clear_on_enter`` keys and runs the
  phase's ``on_enter`` effects. (phaseflow counts the visit and appends the record after
  the ``on_enter`` effects; effects see only the state, so no effect can tell.) A
  self-transition exits and re-enters.
  ``set``/``unset`` write through the writer; ``call`` runs the registered callable
  through phaseflow's own effect runner (so it gets the same
  :class:`~phaseflow.machine.EffectContext`, its returned mapping is merged, and a failure
  becomes an ``effect_error`` event while the remaining effects still run).

Per-model data lives in one attribute, ``model.phaseflow``: a :class:`Tracker` holding the
state, the writer, ``turn``, ``turns_in_phase``, ``visits``, ``history``, ``events`` and the
last ``blocked`` target. Use a :class:`WorkflowModel` (the default) or pass any object of
your own: it gets ``phaseflow`` plus pytransitions' usual ``advance()``, ``may_advance()``,
``request_<target>()``, ``is_phase_<name>()``, ``trigger()`` methods.

Driving it
----------

* :func:`turn_boundary` (``model.turn_boundary()``) is one turn boundary: count the turn
  (``turn`` + 1, or the number given; ``turns_in_phase`` + 1), run the preparations of a
  blocked target as phaseflow does, then fire ``advance``. It returns whether a transition
  was taken; ``tracker.blocked`` is ``(target, missing)`` when the boundary ended blocked.
* :func:`request` (``model.request(target)``) is the model asking to move: the target's
  preparations run first when only its ``requires`` are absent, then ``request_<target>``
  fires. No turn is counted (as ``take_request``).
* The raw triggers work too: ``model.advance()`` evaluates and moves with the current
  counters *without* counting a turn or running preparations (a blocked target just
  means no move), ``model.request_<target>()`` likewise; ``model.may_advance()`` is a pure
  check (except that guard errors are recorded).

What it does NOT model
----------------------

* Turn counting happens only in :func:`turn_boundary`; the raw ``advance`` trigger and
  pytransitions' ``may_*`` checks do not count turns.
* Preparations run only through :func:`turn_boundary` and :func:`request` (after a
  request's preparations, as in phaseflow, every condition is checked again: a
  preparation may have changed what the ``when`` or the entry guard reads).
  ``BoundaryResult``/``TransitionResult`` values are not produced: triggers return
  booleans, ``tracker.blocked`` holds the blocked target, ``tracker.preparations`` the
  names of the preparations the last boundary or request ran.
* No instructions rendering, navigation block, tool filtering, ``transcript`` (call
  effects get ``transcript=None``).
* Synchronous only: an ``async def`` callable is driven if it never suspends, otherwise
  reported as an error event (as in ``advance_sync``); ``AsyncMachine`` is not supported.
* Moves made behind the adapter's back (``machine.set_state``) skip the enter/exit
  callbacks, so counters and effects are not applied. Transitions a host adds itself
  (``machine.add_transition``) do run the phases' effects and are recorded with a
  :class:`~phaseflow.machine.ProgrammaticTrigger` labelled with the trigger's name.
* ``tracker.events`` does not match phaseflow's trace record for record: a guard error is
  recorded each time a condition hits it (also from pure ``may_*`` checks, which phaseflow's pure
  ``evaluate`` never records), and not when the pre-scan for a blocked target hits it.
* With ``ignore_invalid_triggers`` a raw trigger that is invalid in the current phase
  (``model.advance()`` in a terminal phase) returns False and pytransitions logs a warning;
  :func:`turn_boundary` and :func:`request` never fire an invalid trigger.
"""

from __future__ import annotations

import copy
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from phaseflow.errors import ConfigError, PhaseflowError, install_hint
from phaseflow.expr import Guard, GuardContext
from phaseflow.expr.describe import describe_exception
from phaseflow.machine import (
    HISTORY_LIMIT,
    TRACE_LIMIT,
    ErrorKind,
    ErrorRecord,
    GuardTrigger,
    HistoryRecord,
    ModelTrigger,
    ProgrammaticTrigger,
    State,
    TransitionTrigger,
    Writer,
)
from phaseflow.machine.drivers import run_sync
from phaseflow.machine.effects import Op, compile_effect, effect_steps
from phaseflow.machine.results import guard_error
from phaseflow.machine.state import writer_for
from phaseflow.spec.edges import always_ready, check_edge, missing_keys
from phaseflow.spec.model import (
    CallEffect,
    Effect,
    Phase,
    SetEffect,
    UnsetEffect,
    Workflow,
)

if TYPE_CHECKING:
    from transitions import Machine

__all__ = [
    "ADVANCE",
    "REQUEST_PREFIX",
    "TRACKER_ATTRIBUTE",
    "Tracker",
    "TransitionsNotInstalled",
    "WorkflowModel",
    "build_machine",
    "request",
    "request_trigger",
    "tracker_of",
    "turn_boundary",
]

#: The pytransitions trigger of every ``auto`` transition.
ADVANCE = "advance"
#: ``model`` transitions to ``T`` are under the trigger ``REQUEST_PREFIX + T``.
REQUEST_PREFIX = "request_"
#: The model attribute that holds the :class:`Tracker`.
TRACKER_ATTRIBUTE = "phaseflow"
#: The default ``model_attribute``: the current phase's name is ``model.phase``.
DEFAULT_MODEL_ATTRIBUTE = "phase"

#: Keyword arguments of ``Machine`` that the adapter sets itself.
_RESERVED = frozenset(
    {"states", "initial", "transitions", "model", "send_event", "auto_transitions"}
)


class TransitionsNotInstalled(PhaseflowError, ImportError):
    """The optional dependency ``transitions`` is not installed."""


def _import_transitions() -> Any:
    try:
        import transitions
    except ImportError as exc:
        raise TransitionsNotInstalled(
            "phaseflow.interop.transitions needs the 'transitions' package: "
            + install_hint("transitions")
        ) from exc
    return transitions


def request_trigger(target: str) -> str:
    """The pytransitions trigger of the ``model`` transitions to ``target``."""
    return REQUEST_PREFIX + target


# --- per-model data -------------------------------------------------------------------------


@dataclass(eq=False)
class Tracker:
    """What phaseflow keeps per conversation, for one pytransitions model.

    ``history`` holds at most ``HISTORY_LIMIT`` records and ``events`` at most
    ``TRACE_LIMIT``, as in :class:`~phaseflow.machine.PhaseMachine`. ``visits`` starts with
    the initial phase at 1. ``blocked`` is ``(target, missing)`` when the last turn
    boundary ended blocked, else ``None``; ``preparations`` the names of the preparations
    the last boundary or request ran.
    """

    state: Mapping[str, Any]
    writer: Writer
    clock: Callable[[], float] = field(repr=False)
    machine: Any = field(repr=False)
    entered_at: float
    visits: dict[str, int]
    turn: int = 0
    turns_in_phase: int = 0
    history: deque[HistoryRecord] = field(default_factory=lambda: deque(maxlen=HISTORY_LIMIT))
    events: deque[ErrorRecord] = field(default_factory=lambda: deque(maxlen=TRACE_LIMIT))
    blocked: tuple[str, tuple[str, ...]] | None = None
    preparations: tuple[str, ...] = ()
    _wiring: _Wiring | None = field(default=None, repr=False)

    def guard_context(self, phase: str) -> GuardContext:
        """What guards see while ``phase`` is current."""
        return GuardContext(
            phase,
            self.turn,
            self.turns_in_phase,
            self.clock() - self.entered_at,
            MappingProxyType(self.visits),
        )

    @property
    def wiring(self) -> _Wiring:
        if self._wiring is None:  # pragma: no cover - build_machine always sets it
            raise ConfigError("this tracker is not attached to a machine")
        return self._wiring


def tracker_of(model: object) -> Tracker:
    """The :class:`Tracker` of a model built by :func:`build_machine`."""
    tracker = getattr(model, TRACKER_ATTRIBUTE, None)
    if not isinstance(tracker, Tracker):
        raise ConfigError(
            f"{type(model).__name__} has no phaseflow tracker: build its machine with "
            "phaseflow.interop.transitions.build_machine"
        )
    return tracker


class WorkflowModel:
    """The default pytransitions model. pytransitions adds ``phase`` (the current phase's
    name), ``advance()``, ``request_<target>()``, ``is_phase_<name>()``, ``trigger()``, ..."""

    #: Set by :func:`build_machine`.
    phaseflow: Tracker
    #: The current phase's name, kept by pytransitions (with the default ``model_attribute``).
    phase: str

    @property
    def state(self) -> Mapping[str, Any]:
        """The phaseflow state (guards read it, effects write it)."""
        return self.phaseflow.state

    def turn_boundary(self, turn: int | None = None) -> bool:
        """One turn boundary; see :func:`turn_boundary`."""
        return turn_boundary(self, turn)

    def request(self, target: str, *, turn: int | None = None) -> bool:
        """The model asks to move to ``target``; see :func:`request`."""
        return request(self, target, turn=turn)

    def __repr__(self) -> str:
        return f"<WorkflowModel at {getattr(self, DEFAULT_MODEL_ATTRIBUTE, '?')!r}>"


# --- effects --------------------------------------------------------------------------------

#: ``(effect, compiled call op or None, label)``.
_Step = tuple[Effect, Op | None, str]


def _compile(
    effects: tuple[Effect, ...], where: str, registry: Mapping[str, Callable[..., Any]],
    state_types: Mapping[str, str] | None = None,
) -> tuple[_Step, ...]:
    steps: list[_Step] = []
    for i, effect in enumerate(effects):
        label = f"{where}[{i}]"
        op = (compile_effect(effect, label, registry, state_types)
              if isinstance(effect, CallEffect) else None)
        steps.append((effect, op, label))
    return tuple(steps)


def _run(
    steps: tuple[_Step, ...],
    tracker: Tracker,
    phase: str,
    workflow: str,
    *,
    kind: ErrorKind = "effect_error",
) -> bool:
    """Run ``steps`` in order; failures become events. False if any failed."""
    ok = True
    for effect, op, label in steps:
        failed: list[ErrorRecord] | None = None
        if op is not None:
            failed = run_sync(effect_steps((op,), tracker.state, tracker.writer, phase,
                                           tracker.turn, workflow, kind=kind))
        else:
            try:
                if isinstance(effect, SetEffect):
                    for key, value in effect.values.items():
                        tracker.writer.set(key, copy.deepcopy(value))
                elif isinstance(effect, UnsetEffect):
                    for key in effect.keys:
                        tracker.writer.unset(key)
            except Exception as exc:
                failed = [ErrorRecord(kind, phase, tracker.turn, describe_exception(exc),
                                      label, effect.position)]
        if failed:
            tracker.events.extend(failed)
            ok = False
    return ok


# --- the wiring ---------------------------------------------------------------------------


def _named(fn: Callable[[Any], bool], name: str) -> Callable[[Any], bool]:
    """Name a condition (pytransitions' diagrams label conditions by ``__name__``)."""
    fn.__name__ = fn.__qualname__ = name
    return fn


class _Blocked(NamedTuple):
    """A target phaseflow would prepare, and its absent required keys."""

    target: Phase
    missing: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class _Edge:
    index: int
    when: Guard | None
    target: Phase


@dataclass(frozen=True, slots=True)
class _PhaseWiring:
    phase: Phase
    auto: tuple[_Edge, ...]
    model: Mapping[str, tuple[_Edge, ...]]
    enter: tuple[_Step, ...]
    exit: tuple[_Step, ...]
    prepare: tuple[tuple[str, tuple[str, ...], tuple[_Step, ...]], ...]


class _Wiring:
    """The callbacks of one built machine (shared by its models)."""

    def __init__(self, workflow: Workflow, registry: Mapping[str, Callable[..., Any]]) -> None:
        self.workflow = workflow
        self.name = workflow.name
        self.phases: dict[str, _PhaseWiring] = {}
        self.triggers: dict[Any, TransitionTrigger] = {}
        types = {key: declared.type for key, declared in workflow.state.items()}
        for name, phase in workflow.phases.items():
            auto: list[_Edge] = []
            model: dict[str, list[_Edge]] = {}
            for i, t in enumerate(phase.transitions):
                target = workflow.phases.get(t.to)
                if target is None:
                    raise ConfigError(
                        f"phase {name!r}, transition {i}: target {t.to!r} is not a phase"
                    )
                edge = _Edge(i, t.when, target)
                if t.trigger == "model":
                    model.setdefault(t.to, []).append(edge)
                else:
                    auto.append(edge)
            prepare = tuple(
                (p.name, p.produces, _compile((p.effect,), f"prepare: {p.name}", registry))
                for p in phase.prepare
            )
            self.phases[name] = _PhaseWiring(
                phase,
                tuple(auto),
                MappingProxyType({k: tuple(v) for k, v in model.items()}),
                _compile(phase.on_enter, "on_enter", registry, types),
                _compile(phase.on_exit, "on_exit", registry, types),
                prepare,
            )

    # -- conditions (pytransitions calls them with an EventData) --

    def edge(self, source_phase: str, edge: _Edge) -> Callable[[Any], bool]:
        """The condition of one transition: :func:`~phaseflow.spec.edges.check_edge` says
        it is ready (its ``when``, the target's entry guard, the target's ``requires``, in
        that order). Named after the checks it makes, for pytransitions' diagrams."""
        phase = self.workflow.phases[source_phase]
        target = edge.target

        def ready(ev: Any) -> bool:
            tracker = tracker_of(ev.model)
            status = check_edge(edge.when, target, tracker.state,
                                tracker.guard_context(ev.state.name))
            if status.error is not None:
                tracker.events.append(guard_error(phase, edge.index, target, status.error,
                                                  tracker.turn))
            return status.verdict == "ready"

        parts = [edge.when.source] if edge.when is not None else []
        if target.guard is not None:
            parts.append(f"{target.name}.guard: {target.guard.source}")
        if target.requires:
            parts.append(f"{target.name}.requires: {', '.join(target.requires)}")
        return _named(ready, " and ".join(parts))

    def not_blocked_before(self, earlier: tuple[_Edge, ...]) -> Callable[[Any], bool]:
        def check(ev: Any) -> bool:
            tracker = tracker_of(ev.model)
            return self._first_blocked(tracker, ev.state.name, earlier) is None

        return _named(check, "not blocked: " + ", ".join(e.target.name for e in earlier))

    @staticmethod
    def _first_blocked(
        tracker: Tracker, phase: str, edges: tuple[_Edge, ...]
    ) -> _Blocked | None:
        """Pure: the first of ``edges`` phaseflow would stop at as preparable, if it would
        stop at one before a ready one (:func:`~phaseflow.spec.edges.check_edge`)."""
        state = tracker.state
        ctx = tracker.guard_context(phase)
        for edge in edges:
            status = check_edge(edge.when, edge.target, state, ctx)
            if status.verdict == "ready":
                return None
            if status.verdict == "preparable":
                return _Blocked(edge.target, status.missing)
        return None

    # -- enter / exit --

    def on_exit(self, name: str) -> Callable[[Any], None]:
        steps = self.phases[name].exit

        def exit_(ev: Any) -> None:
            if steps:
                _run(steps, tracker_of(ev.model), name, self.name)

        return exit_

    def on_enter(self, name: str) -> Callable[[Any], None]:
        wiring = self.phases[name]
        clear = wiring.phase.clear_on_enter

        def enter(ev: Any) -> None:
            tracker = tracker_of(ev.model)
            transition = ev.transition
            trigger = self.triggers.get(transition) or ProgrammaticTrigger(ev.event.name)
            now = tracker.clock()
            source = transition.source if transition is not None else name
            tracker.history.append(
                HistoryRecord(source, name, tracker.turn, now, trigger, now - tracker.entered_at)
            )
            tracker.entered_at = now
            tracker.turns_in_phase = 0
            tracker.visits[name] = tracker.visits.get(name, 0) + 1
            for key in clear:
                try:
                    tracker.writer.unset(key)
                except Exception as exc:
                    tracker.events.append(ErrorRecord("effect_error", name, tracker.turn,
                                                      describe_exception(exc),
                                                      "clear_on_enter"))
            if wiring.enter:
                _run(wiring.enter, tracker, name, self.name)

        return enter

    # -- preparations --

    def prepare(self, tracker: Tracker, target: Phase) -> None:
        """Run ``target``'s preparations as phaseflow does: in order, skipping one whose
        ``produces`` are all present, stopping at the first that fails."""
        ran: list[str] = []
        for prep, produces, steps in self.phases[target.name].prepare:
            if produces and not missing_keys(produces, tracker.state):
                continue
            ran.append(prep)
            if not _run(steps, tracker, target.name, self.name, kind="preparation_failed"):
                break
        tracker.preparations = tuple(ran)


# --- building -------------------------------------------------------------------------------


def build_machine(
    workflow: Workflow,
    model: object | None = None,
    *,
    state: Mapping[str, Any] | None = None,
    writer: Writer | None = None,
    registry: Mapping[str, Callable[..., Any]] | None = None,
    clock: Callable[[], float] | None = None,
    machine_cls: type[Any] | None = None,
    **machine_kwargs: Any,
) -> Machine:
    """A pytransitions ``Machine`` for ``workflow`` (see the module docs).

    ``model``: the pytransitions model (default: a new :class:`WorkflowModel`); it gets a
    :class:`Tracker` as ``model.phaseflow``. ``state``: the phaseflow state (default: a
    :class:`~phaseflow.machine.State` with the workflow's declared defaults); ``writer``:
    what effects write through (default: the state itself, as in phaseflow).
    ``registry``: the callables of ``call`` effects (default: the workflow's). ``clock``:
    the source of ``seconds_in_phase`` (default ``time.monotonic``). ``machine_cls``: a
    ``Machine`` subclass, e.g. ``transitions.extensions.GraphMachine``. Any other keyword
    goes to the machine (``name``, ``ignore_invalid_triggers``, ``model_attribute``,
    ``on_final``, ``graph_engine``, ...), except those the adapter sets itself: ``states``,
    ``initial``, ``transitions``, ``model``, ``send_event``, ``auto_transitions``.

    Raises :class:`TransitionsNotInstalled` without pytransitions, and
    :class:`~phaseflow.errors.ConfigError` for a workflow whose initial phase or a
    transition's target is not a phase, or for a reserved keyword.
    """
    transitions = _import_transitions()
    reserved = sorted(_RESERVED.intersection(machine_kwargs))
    if reserved:
        raise ConfigError(f"build_machine sets {', '.join(reserved)} itself")
    if workflow.initial not in workflow.phases:
        raise ConfigError(f"initial phase {workflow.initial!r} is not a phase")
    wiring = _Wiring(workflow, workflow.registry if registry is None else registry)
    if model is None:
        model = WorkflowModel()
    attribute = machine_kwargs.setdefault("model_attribute", DEFAULT_MODEL_ATTRIBUTE)
    if attribute in (TRACKER_ATTRIBUTE, "state") and isinstance(model, WorkflowModel):
        raise ConfigError(f"model_attribute {attribute!r} is taken by WorkflowModel")
    machine_kwargs.setdefault("ignore_invalid_triggers", True)

    if state is None:
        state = State(workflow.defaults())
    clock_ = clock if clock is not None else time.monotonic
    tracker = Tracker(
        state=state,
        writer=writer_for(state, writer),
        clock=clock_,
        machine=None,
        entered_at=clock_(),
        visits={workflow.initial: 1},
        _wiring=wiring,
    )
    setattr(model, TRACKER_ATTRIBUTE, tracker)

    states = [
        transitions.State(
            name,
            on_enter=[wiring.on_enter(name)],
            on_exit=[wiring.on_exit(name)],
            final=phase.terminal,
        )
        for name, phase in workflow.phases.items()
    ]
    cls = machine_cls if machine_cls is not None else transitions.Machine
    machine = cls(
        model=model,
        states=states,
        initial=workflow.initial,
        auto_transitions=False,
        send_event=True,
        **machine_kwargs,
    )
    tracker.machine = machine

    for name, pw in wiring.phases.items():
        prepared: list[_Edge] = []  # earlier auto edges whose target has preparations
        for edge in pw.auto:
            conditions: list[Callable[[Any], bool]] = []
            if prepared:
                conditions.append(wiring.not_blocked_before(tuple(prepared)))
            conditions.extend(_conditions(wiring, name, edge))
            _add(machine, wiring, ADVANCE, name, edge, conditions, GuardTrigger(edge.index))
            if edge.target.prepare:
                prepared.append(edge)
        for target, edges in pw.model.items():
            for edge in edges:
                _add(machine, wiring, request_trigger(target), name, edge,
                     _conditions(wiring, name, edge), ModelTrigger(edge.index))
    return cast("Machine", machine)


def _conditions(wiring: _Wiring, source: str, edge: _Edge) -> list[Callable[[Any], bool]]:
    """No condition for an edge that is always ready, else the edge's one condition."""
    if always_ready(edge.when, edge.target):
        return []
    return [wiring.edge(source, edge)]


def _add(
    machine: Any,
    wiring: _Wiring,
    trigger: str,
    source: str,
    edge: _Edge,
    conditions: list[Callable[[Any], bool]],
    label: TransitionTrigger,
) -> None:
    machine.add_transition(trigger, source, edge.target.name, conditions=conditions)
    added = machine.events[trigger].transitions[source][-1]
    wiring.triggers[added] = label


# --- driving --------------------------------------------------------------------------------


def _current(tracker: Tracker, model: object) -> str:
    return str(getattr(model, tracker.machine.model_attribute))


def turn_boundary(model: object, turn: int | None = None) -> bool:
    """One turn boundary for ``model``: count the turn (``turn``, default the previous
    turn + 1) and ``turns_in_phase``; when phaseflow would be blocked on a target with
    preparations, run them; then fire :data:`ADVANCE`. True when a transition was taken;
    otherwise ``tracker.blocked`` says whether a target stayed blocked."""
    tracker = tracker_of(model)
    wiring = tracker.wiring
    tracker.turn = tracker.turn + 1 if turn is None else turn
    tracker.turns_in_phase += 1
    tracker.blocked = None
    tracker.preparations = ()
    phase = _current(tracker, model)
    pw = wiring.phases.get(phase)
    if pw is None or pw.phase.terminal or not pw.auto:
        return False
    blocked = wiring._first_blocked(tracker, phase, pw.auto)
    if blocked is not None:
        wiring.prepare(tracker, blocked.target)
    moved = bool(tracker.machine.events[ADVANCE].trigger(model))
    if not moved and blocked is not None:
        again = wiring._first_blocked(tracker, phase, pw.auto)
        if again is not None:
            tracker.blocked = (again.target.name, again.missing)
    return moved


def request(model: object, target: str, *, turn: int | None = None) -> bool:
    """The model asks to move to ``target`` (``turn``, when given, becomes the current
    turn; no turn is counted). When a ``model`` transition to it has a true ``when``, its
    entry guard holds and only ``requires`` keys are absent, the target's preparations run
    first; then ``request_<target>`` fires. True when the move was taken."""
    tracker = tracker_of(model)
    wiring = tracker.wiring
    if turn is not None:
        tracker.turn = turn
    tracker.preparations = ()
    phase = _current(tracker, model)
    pw = wiring.phases.get(phase)
    edges = pw.model.get(target) if pw is not None and not pw.phase.terminal else None
    if not edges:
        return False
    dest = edges[0].target
    event = tracker.machine.events[request_trigger(target)]
    ctx = tracker.guard_context(phase)
    if any(check_edge(e.when, dest, tracker.state, ctx).verdict == "preparable" for e in edges):
        wiring.prepare(tracker, dest)
        # as phaseflow: after the preparations everything is checked again
    return bool(event.trigger(model))
