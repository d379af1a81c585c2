"""The plain-JSON form of :class:`~phaseflow.turn.progress.TurnProgress` (part 2).

Kept apart from the value so each module has one job: ``progress`` says what may happen
in a turn, this module says how a turn's progress is written down and read back. Reading
goes through the shape readers of :mod:`~phaseflow.turn.jsonio`, which raise ``Malformed``
on the first wrong shape; ``TurnProgress.from_json`` turns that into a rejection and then
checks the invariants (``validate``).
"""

from __future__ import annotations

from phaseflow.turn import jsonio as j
from phaseflow.turn.jsonio import JsonValue, Malformed
from phaseflow.turn.messages import ToolCall, ToolOutcome
from phaseflow.turn.progress import (
    Cancelling,
    Compacting,
    CompactionTrigger,
    ExecutingTools,
    Generating,
    Idle,
    SubPhase,
    TurnId,
    TurnProgress,
    TurnStage,
)

__all__ = ["decode_progress", "progress_to_json"]


def progress_to_json(progress: TurnProgress) -> dict[str, JsonValue]:
    return {"last_turn_id": progress.last_turn_id, "stage": _stage_to_json(progress.stage)}


def _calls_json(calls: tuple[ToolCall, ...]) -> list[JsonValue]:
    return [c.to_json() for c in calls]


def _stage_to_json(s: TurnStage) -> dict[str, JsonValue]:
    if isinstance(s, Idle):
        return {"kind": "idle"}
    if isinstance(s, Generating):
        return {
            "kind": s.kind,
            "turn_id": s.turn_id,
            "text": s.text,
            "reasoning": s.reasoning,
            "token_estimate": s.token_estimate,
            "sub_phase": s.sub_phase.value,
            "pending_tool_calls": _calls_json(s.pending_tool_calls),
            "continuation": s.continuation,
        }
    if isinstance(s, ExecutingTools):
        return {
            "kind": s.kind,
            "turn_id": s.turn_id,
            "calls": _calls_json(s.calls),
            "outcomes": [None if o is None else o.to_json() for o in s.outcomes],
        }
    if isinstance(s, Compacting):
        return {
            "kind": s.kind,
            "turn_id": s.turn_id,
            "trigger": s.trigger.value,
            "resume_continuation": s.resume_continuation,
        }
    return {
        "kind": s.kind,
        "turn_id": s.turn_id,
        "since": s.since,
        "calls": _calls_json(s.calls),
        "outcomes": [o.to_json() for o in s.outcomes],
    }


def _opt_outcome(data: object) -> ToolOutcome | None:
    return None if data is None else ToolOutcome.decode(data)


def _decode_stage(data: object) -> TurnStage:
    w = "turn stage"
    d = j.obj(data, w)
    kind = j.string(d, "kind", w)
    if kind == "idle":
        return Idle()
    turn = TurnId(j.integer(d, "turn_id", w))
    if kind == "generating":
        return Generating(
            turn,
            j.string(d, "text", w),
            j.string(d, "reasoning", w),
            j.integer(d, "token_estimate", w),
            j.enum(d, "sub_phase", w, SubPhase),
            j.items(d, "pending_tool_calls", w, ToolCall.decode),
            j.boolean(d, "continuation", w),
        )
    if kind == "executing_tools":
        return ExecutingTools(
            turn, j.items(d, "calls", w, ToolCall.decode), j.items(d, "outcomes", w, _opt_outcome)
        )
    if kind == "compacting":
        return Compacting(
            turn, j.enum(d, "trigger", w, CompactionTrigger), j.boolean(d, "resume_continuation", w)
        )
    if kind == "cancelling":
        return Cancelling(
            turn,
            j.number(d, "since", w),
            j.items(d, "calls", w, ToolCall.decode),
            j.items(d, "outcomes", w, ToolOutcome.decode),
        )
    raise Malformed(f"turn stage: unknown kind {kind!r}")


def decode_progress(data: object) -> TurnProgress:
    """Read a progress value's shape; raises ``Malformed`` (run it through ``j.decode``)."""
    w = "turn progress"
    d = j.obj(data, w)
    return TurnProgress(_decode_stage(j.field(d, "stage", w)), j.integer(d, "last_turn_id", w))
