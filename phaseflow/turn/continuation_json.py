"""The plain-JSON form of :class:`~phaseflow.turn.continuation.Continuation` (part 3).

Kept apart from the value so each module has one job: ``continuation`` keeps the exact
history and the tool ledger, this module writes them down and reads them back. The
request and the checkpoint store only the messages they add to the history before them,
so the JSON is linear in the history; reading restores the sharing. Reading goes through
the shape readers of :mod:`~phaseflow.turn.jsonio` (``Malformed`` on the first wrong
shape); ``Continuation.from_json`` turns that into a rejection and then checks every
invariant (``validate``).
"""

from __future__ import annotations

from phaseflow.turn import jsonio as j
from phaseflow.turn.continuation import (
    ActiveRequest,
    Branch,
    Continuation,
    EffectState,
    HistoryMark,
    Provenance,
    ToolCheckpoint,
    ToolEffect,
)
from phaseflow.turn.jsonio import JsonValue, Malformed
from phaseflow.turn.messages import History, ToolCall, ToolOutcome
from phaseflow.turn.progress import TurnId

__all__ = ["continuation_to_json", "decode_continuation"]


# --- writing ---------------------------------------------------------------------------


def continuation_to_json(c: Continuation) -> dict[str, JsonValue]:
    request: JsonValue = None
    if c.request is not None:
        r = c.request
        request = {
            "id": r.id,
            "turn_id": r.turn_id,
            "revision": r.revision,
            "added": History(r.messages.after(len(c.messages))).to_json(),
        }
    checkpoint: JsonValue = None
    if c.checkpoint is not None and c.request is not None:
        cp = c.checkpoint
        checkpoint = {
            "id": cp.id,
            "request_id": cp.request_id,
            "added": History(cp.messages.after(len(c.request.messages))).to_json(),
            "effects": [_effect_to_json(e) for e in cp.effects],
        }
    return {
        "messages": c.messages.to_json(),
        "revision": c.revision,
        "durable_revision": c.durable_revision,
        "provenance": c.provenance.value,
        "request": request,
        "marks": [_mark_to_json(m) for m in c.marks],
        "branches": [
            {
                "name": b.name,
                "messages": b.messages.to_json(),
                "marks": [_mark_to_json(m) for m in b.marks],
            }
            for b in c.branches
        ],
        "checkpoint": checkpoint,
        "checkpoint_seq": c.checkpoint_seq,
    }


def _mark_to_json(m: HistoryMark) -> dict[str, JsonValue]:
    return {
        "display_entry": m.display_entry,
        "revision": m.revision,
        "message_count": m.message_count,
    }


def _effect_to_json(e: ToolEffect) -> dict[str, JsonValue]:
    return {
        "call": e.call.to_json(),
        "state": e.state.value,
        "result": None if e.result is None else e.result.to_json(),
    }


# --- reading ---------------------------------------------------------------------------


def decode_continuation(data: object) -> Continuation:
    """Read a continuation's shape; raises ``Malformed`` (run it through ``j.decode``)."""
    w = "continuation"
    d = j.obj(data, w)
    messages = History.decode(j.field(d, "messages", w))
    request = None
    raw = d.get("request")
    if raw is not None:
        r = j.obj(raw, "request")
        request = ActiveRequest(
            j.string(r, "id", "request"),
            TurnId(j.integer(r, "turn_id", "request")),
            j.integer(r, "revision", "request"),
            messages.extend(History.decode(j.field(r, "added", "request"))),
        )
    checkpoint = None
    raw = d.get("checkpoint")
    if raw is not None:
        if request is None:
            raise Malformed("checkpoint without a request")
        cp = j.obj(raw, "checkpoint")
        checkpoint = ToolCheckpoint(
            j.string(cp, "id", "checkpoint"),
            j.string(cp, "request_id", "checkpoint"),
            request.messages.extend(History.decode(j.field(cp, "added", "checkpoint"))),
            j.items(cp, "effects", "checkpoint", _decode_effect),
        )
    return Continuation(
        messages,
        j.integer(d, "revision", w),
        j.integer(d, "durable_revision", w),
        j.enum(d, "provenance", w, Provenance),
        request,
        j.items(d, "marks", w, _decode_mark),
        j.items(d, "branches", w, _decode_branch),
        checkpoint,
        j.integer(d, "checkpoint_seq", w),
    )


def _decode_mark(data: object) -> HistoryMark:
    w = "history mark"
    d = j.obj(data, w)
    return HistoryMark(
        j.integer(d, "display_entry", w),
        j.integer(d, "revision", w),
        j.integer(d, "message_count", w),
    )


def _decode_branch(data: object) -> Branch:
    d = j.obj(data, "branch")
    return Branch(
        j.string(d, "name", "branch"),
        History.decode(j.field(d, "messages", "branch")),
        j.items(d, "marks", "branch", _decode_mark),
    )


def _decode_effect(data: object) -> ToolEffect:
    d = j.obj(data, "tool effect")
    raw = d.get("result")
    return ToolEffect(
        ToolCall.decode(j.field(d, "call", "tool effect")),
        j.enum(d, "state", "tool effect", EffectState),
        None if raw is None else ToolOutcome.decode(raw),
    )
