"""Values the machine returns: triggers, evaluation outcomes, history, error records,
results.

Every domain outcome is a value, never an exception: a false guard, a blocked target, a
failing host callable. The classes are slotted and frozen so that results can be kept,
compared and shared; those made on the hot path are as small as possible.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, NamedTuple, get_args

from phaseflow.spec.model import Phase, Position

__all__ = [
    "MODEL_REQUEST",
    "Blocked",
    "BoundaryResult",
    "ErrorKind",
    "ErrorRecord",
    "GuardTrigger",
    "HistoryRecord",
    "ModelTrigger",
    "ProgrammaticTrigger",
    "Ready",
    "TransitionResult",
    "TransitionTrigger",
    "guard_error",
]


# --- triggers -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GuardTrigger:
    """Taken at a turn boundary because the ``when`` of the current phase's transition
    number ``index`` (0-based, in the order written) held."""

    index: int
    kind: ClassVar[Literal["guard"]] = "guard"

    def __str__(self) -> str:
        return f"guard #{self.index}"


@dataclass(frozen=True, slots=True)
class ModelTrigger:
    """The model asked for a ``model`` transition (see ``PhaseMachine.request``):
    ``index`` is the number of the one taken (0-based, in the order written; a phase may
    have several to the same target with different ``when``). ``None`` where it is not
    known (a version 1 snapshot, a trigger a host builds to move the machine itself)."""

    index: int | None = None
    kind: ClassVar[Literal["model"]] = "model"

    def __str__(self) -> str:
        return "model request"


@dataclass(frozen=True, slots=True)
class ProgrammaticTrigger:
    """The host moved the machine directly; ``source`` says who (e.g. ``"goto"``)."""

    source: str = "host"
    kind: ClassVar[Literal["programmatic"]] = "programmatic"

    def __str__(self) -> str:
        return f"programmatic ({self.source})"


TransitionTrigger = GuardTrigger | ModelTrigger | ProgrammaticTrigger

#: A model trigger whose transition is not known.
MODEL_REQUEST = ModelTrigger()


# --- evaluation outcomes ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ready:
    """Transition ``index`` of the current phase can be taken now, to ``target``."""

    target: str
    index: int


@dataclass(frozen=True, slots=True)
class Blocked:
    """Transition ``index``'s ``when`` holds but ``target`` lacks ``missing`` required
    keys; the target has preparations that may produce them."""

    target: str
    index: int
    missing: tuple[str, ...]


# --- history and error records ---------------------------------------------------------


_RECORD_KEYS = {
    "from": 0, "to": 1, "turn": 2, "at": 3, "trigger": 4, "duration_in_phase": 5,
}


class HistoryRecord(NamedTuple):
    """One transition: ``{from, to, turn, at, trigger, duration_in_phase}``.

    ``at`` is the machine clock's reading when the transition happened and
    ``duration_in_phase`` how long the phase that was left had been current. Indexing by
    the spec's names (``record["from"]``) works too, because ``from`` is a keyword. A named
    tuple: immutable, and the cheapest immutable value to make on the hot path.
    """

    from_phase: str
    to_phase: str
    turn: int
    at: float
    trigger: TransitionTrigger
    duration_in_phase: float

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            try:
                key = _RECORD_KEYS[key]
            except KeyError:
                raise KeyError(key) from None
        return tuple.__getitem__(self, key)

    def as_dict(self) -> dict[str, Any]:
        """The record with the spec's key names; the trigger as its kind and detail."""
        trigger = self.trigger
        detail: dict[str, Any] = {"kind": trigger.kind}
        if isinstance(trigger, GuardTrigger):
            detail["index"] = trigger.index
        elif isinstance(trigger, ProgrammaticTrigger):
            detail["source"] = trigger.source
        return {
            "from": self.from_phase,
            "to": self.to_phase,
            "turn": self.turn,
            "at": self.at,
            "trigger": detail,
            "duration_in_phase": self.duration_in_phase,
        }


#: What went wrong (see :class:`ErrorRecord`).
ErrorKind = Literal["guard_error", "effect_error", "preparation_failed", "template_error"]

#: Every kind of :class:`ErrorRecord`, for readers that check a kind they are given.
ERROR_KINDS: frozenset[str] = frozenset(get_args(ErrorKind))


@dataclass(frozen=True, slots=True)
class ErrorRecord:
    """Something that went wrong without stopping the machine (an entry of the machine's
    ``trace`` and of a result's ``events``).

    ``guard_error``: a guard hit a run-time type error and counted as false.
    ``effect_error``: an effect failed (a ``call`` raised, or names no registered
    callable); the remaining effects still ran. ``preparation_failed``: a preparation
    failed, so its target stayed blocked. ``template_error``: an ``instructions`` or
    ``navigation.template`` failed while rendering (the message says at which line of the
    template; the model got the documented fallback instead). ``phase`` is the phase the
    guard, effect or template belongs to, ``source`` names it (``on_exit[1]``,
    ``transitions[0].when``, ``prepare: load_policy``, ``instructions``) and ``position``
    is where it was written, when known.
    """

    kind: ErrorKind
    phase: str
    turn: int
    message: str
    source: str = ""
    position: Position | None = None

    def format(self) -> str:
        """One line for logs: ``[kind] phase source: message (at file:line:col)``."""
        where = ""
        if self.position is not None:
            p = self.position
            where = f" (at {p.path}:{p.line}:{p.column})"
        src = f" {self.source}" if self.source else ""
        return f"[{self.kind}] {self.phase}{src}: {self.message}{where}"


def guard_error(
    phase: Phase, number: int, target: Phase | None, error: tuple[str, str], turn: int
) -> ErrorRecord:
    """The record of a guard's run-time error met while checking transition ``number`` of
    ``phase`` (to ``target``); ``error`` is :attr:`~phaseflow.spec.edges.EdgeStatus.error`:
    ``("when", message)`` for the transition's ``when``, ``("guard", message)`` for the
    target's entry guard. Shared by the machine and the pytransitions adapter, so both
    report the same error the same way."""
    which, message = error
    if which == "guard" and target is not None:
        source = target.guard.source if target.guard is not None else ""
        return ErrorRecord("guard_error", target.name, turn, f"{source}: {message}", "guard",
                           target.position)
    t = phase.transitions[number]
    source = t.when.source if t.when is not None else ""
    return ErrorRecord("guard_error", phase.name, turn, f"{source}: {message}",
                       f"transitions[{number}].when", t.position)


# --- results ------------------------------------------------------------------------------

class TransitionResult:
    """What a transition did: ``from_phase``, ``to_phase``, ``trigger`` and ``turn`` (read
    from the history ``record``), and the error ``events`` of its effects.

    ``instructions`` is the target's rendered ``instructions`` (``None`` when it has none).
    Rendering a template costs far more than a transition, so it happens on first access,
    against the state as it is then; read it before changing the state again if you need
    the text as of the transition. Treat the object as read-only. (One is made per
    transition, so it stores only the record, the errors and how to render.)
    """

    __slots__ = ("_render", "_text", "events", "record")

    # phaseflow.machine.plan.transition_now and transition_steps make one without this
    # __init__ (they set the four slots themselves): keep the three in step.
    def __init__(
        self,
        record: HistoryRecord,
        events: tuple[ErrorRecord, ...] = (),
        render: Callable[[], str | None] | None = None,
    ) -> None:
        self.record = record
        self.events = events
        #: how to render the instructions; ``None`` once rendered or when there are none
        self._render = render
        self._text: str | None = None

    @property
    def from_phase(self) -> str:
        return self.record.from_phase

    @property
    def to_phase(self) -> str:
        return self.record.to_phase

    @property
    def trigger(self) -> TransitionTrigger:
        return self.record.trigger

    @property
    def turn(self) -> int:
        return self.record.turn

    @property
    def instructions(self) -> str | None:
        render = self._render
        if render is not None:
            self._render = None
            self._text = render()
        return self._text

    @property
    def ok(self) -> bool:
        """True when no effect failed."""
        return not self.events

    def __repr__(self) -> str:
        return (f"TransitionResult(from_phase={self.from_phase!r}, to_phase={self.to_phase!r},"
                f" trigger={self.trigger!r}, turn={self.turn!r}, events={self.events!r})")


Outcome = Literal["transitioned", "blocked", "stayed"]


class BoundaryResult(NamedTuple):
    """What one turn boundary did (an immutable named tuple).

    ``outcome`` is ``"transitioned"`` (``transition`` says from where to where),
    ``"blocked"`` (``target`` could not be entered: ``missing`` are its absent required
    keys after ``preparations`` — the names of those that ran — were tried), or
    ``"stayed"``. ``phase`` is the current phase after the boundary. ``events`` holds
    every guard and effect error of the boundary, including those of the transition.
    """

    outcome: Outcome
    phase: str
    turn: int
    transition: TransitionResult | None = None
    target: str | None = None
    missing: tuple[str, ...] = ()
    preparations: tuple[str, ...] = ()
    events: tuple[ErrorRecord, ...] = ()

    @property
    def transitioned(self) -> bool:
        return self.outcome == "transitioned"

    @property
    def blocked(self) -> bool:
        return self.outcome == "blocked"

    @property
    def stayed(self) -> bool:
        return self.outcome == "stayed"

    @property
    def from_phase(self) -> str:
        """The phase the boundary started in."""
        return self.transition.from_phase if self.transition is not None else self.phase

    @property
    def to_phase(self) -> str:
        """The phase the boundary ended in."""
        return self.phase
