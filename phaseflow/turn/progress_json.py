"""The plain-JSON form of :class:`~phaseflow.turn.progress.TurnProgress` (part 2).

Kept apart from the value so each module has one job: ``progress`` says what may happen
in a turn, this module says how a turn's progress is written down and read back.

This module sits *below* ``progress`` and never imports it (``progress`` imports this
one, for ``to_json`` / ``from_json``): writing follows the one rule of
:func:`~phaseflow.turn.jsonio.fields_to_json` (a value's fields by name); reading builds
values through the constructors ``progress`` hands over as :class:`ProgressClasses`.
Reading goes through the shape readers of :mod:`~phaseflow.turn.jsonio`, which raise
``Malformed`` on the first wrong shape; ``TurnProgress.from_json`` turns that into a
rejection and then checks the invariants (``validate``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, NamedTuple, Protocol, TypeVar

from phaseflow.turn import jsonio as j
from phaseflow.turn.jsonio import JsonValue, Malformed
from phaseflow.turn.messages import ToolCall, ToolOutcome

__all__ = ["ProgressClasses", "decode_progress", "progress_to_json"]

T = TypeVar("T")


# --- what writing reads by name ------------------------------------------------------


class _TurnProgress(Protocol):
    @property
    def stage(self) -> object: ...
    @property
    def last_turn_id(self) -> int: ...


# --- what reading builds values with ----------------------------------------------------


class ProgressClasses(NamedTuple, Generic[T]):
    """The classes of ``progress`` that reading builds values with (``T``: the value).

    Handed over by ``progress``, which this module must not import. A constructor whose
    arguments are values of ``progress`` is typed ``...``: each constructor reads every
    argument itself (as for any caller), and a refusal is a wrong shape.
    """

    TurnProgress: Callable[..., T]
    Idle: Callable[[], object]
    Generating: Callable[..., object]
    ExecutingTools: Callable[..., object]
    Compacting: Callable[..., object]
    Cancelling: Callable[..., object]
    SubPhase: Callable[[str], object]
    CompactionTrigger: Callable[[str], object]


# --- writing ---------------------------------------------------------------------------


def progress_to_json(progress: _TurnProgress) -> dict[str, JsonValue]:
    """The stage is written by the one rule of :func:`~phaseflow.turn.jsonio.fields_to_json`
    (its kind, then its fields by name)."""
    return {"last_turn_id": progress.last_turn_id, "stage": j.fields_to_json(progress.stage)}


# --- reading ---------------------------------------------------------------------------


def decode_progress(data: object, classes: ProgressClasses[T]) -> T:
    """Read a progress value's shape; raises ``Malformed`` (run it through ``j.decode``)."""
    w = "turn progress"
    d = j.obj(data, w)
    stage = _decode_stage(j.field(d, "stage", w), classes)
    return classes.TurnProgress(stage, j.integer(d, "last_turn_id", w))


def _opt_outcome(data: object) -> ToolOutcome | None:
    return None if data is None else ToolOutcome.decode(data)


def _decode_stage(data: object, make: ProgressClasses[T]) -> object:
    w = "turn stage"
    d = j.obj(data, w)
    kind = j.string(d, "kind", w)
    if kind == "idle":
        return make.Idle()
    turn = j.integer(d, "turn_id", w)  # a ``TurnId`` (a plain int at run time)
    if kind == "generating":
        return make.Generating(
            turn,
            j.string(d, "text", w),
            j.string(d, "reasoning", w),
            j.integer(d, "token_estimate", w),
            j.enum(d, "sub_phase", w, make.SubPhase),
            j.items(d, "pending_tool_calls", w, ToolCall.decode),
            j.boolean(d, "continuation", w),
        )
    if kind == "executing_tools":
        return make.ExecutingTools(
            turn, j.items(d, "calls", w, ToolCall.decode), j.items(d, "outcomes", w, _opt_outcome)
        )
    if kind == "compacting":
        return make.Compacting(
            turn,
            j.enum(d, "trigger", w, make.CompactionTrigger),
            j.boolean(d, "resume_continuation", w),
        )
    if kind == "cancelling":
        return make.Cancelling(
            turn,
            j.number(d, "since", w),
            j.items(d, "calls", w, ToolCall.decode),
            j.items(d, "outcomes", w, ToolOutcome.decode),
        )
    raise Malformed(f"turn stage: unknown kind {kind!r}")
