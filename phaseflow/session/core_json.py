"""The session core's own values as plain JSON (the turn core's values have their own
codecs): what ``SessionRecord.core`` holds, so a session reopened from any store is the
one that was stored."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, cast

from phaseflow.errors import PhaseflowError
from phaseflow.session import events as ev
from phaseflow.session.values import (
    CallKind,
    Compaction,
    Core,
    Done,
    Group,
    Planned,
    ResultLabel,
    Status,
)
from phaseflow.turn.continuation import Continuation
from phaseflow.turn.execution import TurnExecution
from phaseflow.turn.jsonio import Malformed
from phaseflow.turn.messages import ToolCall, ToolOutcome, content_from_json, content_to_json
from phaseflow.turn.rejections import Rejected


class CoreDataError(PhaseflowError):
    """Stored session data that cannot be the session core's (corrupted or foreign)."""


def _pairs(items: tuple[tuple[str, Any], ...]) -> list[list[Any]]:
    return [[k, v] for k, v in items]


def _done_json(done: Done, kept: ToolOutcome | None) -> dict[str, Any]:
    """A call's result as stored; its outcome only when the ledger does not keep the same
    one (``kept``: the outcome the checkpoint's effect holds for the call)."""
    outcome = {} if kept is done.outcome or kept == done.outcome else {
        "outcome": done.outcome.to_json()}
    return {**outcome, "label": done.label, "writes": _pairs(done.writes), "move": done.move}


def _ledger(continuation: Continuation
            ) -> tuple[dict[str, ToolCall], dict[str, ToolOutcome]]:
    """What the ledger's open checkpoint holds, by call id: the calls the model made, and
    the outcomes of those that have one."""
    checkpoint = continuation.checkpoint
    if checkpoint is None:
        return {}, {}
    made = {e.call.id: e.call for e in checkpoint.effects}
    kept = {e.call.id: e.result for e in checkpoint.effects if e.result is not None}
    return made, kept


def _call_json(call: ToolCall, made: Mapping[str, ToolCall]) -> dict[str, Any]:
    """A group's call as stored: only its id when the ledger's checkpoint holds the same
    call (one stored copy of a call, read back from the ledger), else the call itself."""
    known = made.get(call.id)
    if known is call or known == call:
        return {"id": call.id}
    return {"call": call.to_json()}


def core_to_json(core: Core) -> dict[str, Any]:
    group = core.group
    made, kept = _ledger(core.continuation) if group is not None else ({}, {})
    return {
        "status": core.status,
        "turn": core.turn,
        "step": core.step,
        "attempt": core.attempt,
        "request_id": core.request_id,
        "final_request": core.final_request,
        "reply": core.reply,
        "input_tokens": core.input_tokens,
        "output_tokens": core.output_tokens,
        "pending": [e.to_json() for e in core.pending],
        **({"plan": [c.to_json() for c in core.plan]} if core.plan else {}),
        **({"steer": content_to_json(core.steer)} if core.steer is not None else {}),
        **({"compaction": {"upto": core.compaction.upto, "summary": core.compaction.summary,
                           "replies": core.compaction.replies}}
           if core.compaction is not None else {}),
        **({"tokens_per_char": core.tokens_per_char} if core.tokens_per_char != 0.25 else {}),
        "group": None if group is None else {
            "checkpoint_id": group.checkpoint_id,
            "calls": [{**_call_json(p.call, made), "kind": p.kind, "note": p.note,
                       "writes": _pairs(p.writes)} for p in group.calls],
            "results": [[cid, _done_json(d, kept.get(cid))] for cid, d in group.results],
            "approved": list(group.approved),
            "admitted": group.admitted,
            **({"cut": True} if group.cut else {}),
        },
    }


def _value(decoded: Any, what: str) -> Any:
    if isinstance(decoded, Rejected):
        raise CoreDataError(f"{what}: {decoded}")
    return decoded


def _writes(data: Any) -> tuple[tuple[str, Any], ...]:
    return tuple((str(k), v) for k, v in data)


def _done(data: Mapping[str, Any], kept: Mapping[str, ToolOutcome], call_id: str) -> Done:
    """A stored result: its outcome written out, or the one the ledger keeps."""
    if "outcome" in data:
        outcome = _value(ToolOutcome.from_json(data["outcome"]), "tool outcome")
    elif call_id in kept:
        outcome = kept[call_id]
    else:
        raise ValueError(f"the outcome of call {call_id!r} is not in the call ledger")
    return Done(outcome, cast(ResultLabel, data["label"]), _writes(data["writes"]),
                data.get("move"))


_STATUSES = ("idle", "running", "awaiting_approval", "finished", "failed")


def _stored_call(data: Mapping[str, Any], made: Mapping[str, ToolCall]) -> ToolCall:
    """A group's stored call: by id from the ledger's checkpoint, or written out (what
    older records and a call the checkpoint does not hold store)."""
    if "call" in data:
        return cast(ToolCall, _value(ToolCall.from_json(data["call"]), "tool call"))
    call = made.get(str(data["id"]))
    if call is None:
        raise ValueError(f"call {data['id']!r} is not in the call ledger")
    return call


def _check_one_call(session_id: str, group: Group, continuation: Continuation,
                    execution: TurnExecution) -> None:
    """A call is stored in the group (what runs), the ledger's checkpoint (what the
    model made) and, while it waits for a human, the pending approval (what the human
    is shown). They must be one call: a stored session whose copies differ was altered,
    and approving what was shown would run something else. Refused as damage."""
    made, _ = _ledger(continuation)
    planned = {p.call.id: p.call for p in group.calls}
    for call_id, call in planned.items():
        if made.get(call_id, call) != call:
            raise CoreDataError(
                f"session {session_id!r}: stored call {call_id!r} differs between the tool "
                f"group and the call ledger (the stored session was altered)")
    pending = execution.pending_approval
    if pending is not None and planned.get(pending.call.id) != pending.call:
        raise CoreDataError(
            f"session {session_id!r}: the pending approval of call {pending.call.id!r} does "
            f"not match the call that would run (the stored session was altered)")


def _compaction(data: Any) -> Compaction | None:
    """The stored fold (``None``: the history was never compacted)."""
    if data is None:
        return None
    upto, summary, replies = data["upto"], data["summary"], data["replies"]
    if type(upto) is not int or type(replies) is not int or not isinstance(summary, str) or (
            upto < 0 or replies < 0):
        raise ValueError(f"compaction {data!r}")
    return Compaction(upto, summary, replies)


def _ratio(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not (
            0 < value < 1e6) or value != value:
        raise ValueError(f"tokens_per_char {value!r}")
    return float(value)


def _steer(session_id: str, data: Mapping[str, Any]) -> Any:
    """The steering message delivered to the current request, if any."""
    if "steer" not in data:
        return None
    try:
        return content_from_json(data["steer"])
    except Malformed as exc:
        raise CoreDataError(f"session {session_id!r}: the stored steering message is "
                            f"invalid: {exc}") from None


def core_from_json(session_id: str, data: Mapping[str, Any], execution: TurnExecution,
                   continuation: Continuation) -> Core:
    """The core a record describes; :class:`CoreDataError` naming what is wrong."""
    try:
        raw_group = data["group"]
        group = None
        made, kept = _ledger(continuation) if raw_group is not None else ({}, {})
        if raw_group is not None:
            group = Group(
                str(raw_group["checkpoint_id"]),
                tuple(Planned(_stored_call(p, made), cast(CallKind, p["kind"]),
                              str(p["note"]), _writes(p["writes"]))
                      for p in raw_group["calls"]),
                tuple((str(cid), _done(d, kept, str(cid))) for cid, d in raw_group["results"]),
                tuple(str(c) for c in raw_group["approved"]),
                bool(raw_group["admitted"]),
                bool(raw_group.get("cut", False)),
            )
        status = data["status"]
        if status not in _STATUSES:
            raise CoreDataError(f"session {session_id!r}: stored status {status!r} is not "
                                f"one of {', '.join(_STATUSES)}")
        core = Core(session_id, execution, continuation)
        if group is not None:
            _check_one_call(session_id, group, continuation, execution)
        return replace(
            core,
            status=cast(Status, status),
            turn=int(data["turn"]),
            step=int(data["step"]),
            attempt=int(data["attempt"]),
            request_id=data["request_id"],
            final_request=bool(data["final_request"]),
            reply=str(data["reply"]),
            input_tokens=int(data["input_tokens"]),
            output_tokens=int(data["output_tokens"]),
            pending=tuple(ev.event_from_json(e) for e in data["pending"]),
            plan=tuple(_value(ToolCall.from_json(c), "planned call")
                       for c in data.get("plan", ())),
            steer=_steer(session_id, data),
            compaction=_compaction(data.get("compaction")),
            tokens_per_char=_ratio(data.get("tokens_per_char", 0.25)),
            group=group,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise CoreDataError(f"session {session_id!r}: stored core data is malformed "
                            f"({type(exc).__name__}: {exc})") from None
