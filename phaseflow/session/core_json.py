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
    Ended,
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


def _ended_json(ended: Ended) -> dict[str, Any]:
    """How a call ended, as stored: its outcome is the ledger's (stored there, once)."""
    return {"label": ended.label, "writes": _pairs(ended.writes), "move": ended.move}


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
    made, _ = _ledger(core.continuation) if group is not None else ({}, {})
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
        **({"cached_input_tokens": core.cached_input_tokens}
           if core.cached_input_tokens else {}),
        "pending": [e.to_json() for e in core.pending],
        **({"plan": [c.to_json() for c in core.plan]} if core.plan else {}),
        **({"steer": content_to_json(core.steer)} if core.steer is not None else {}),
        **({"compaction": {"upto": core.compaction.upto, "summary": core.compaction.summary,
                           "replies": core.compaction.replies}}
           if core.compaction is not None else {}),
        **({"tokens_per_char": core.tokens_per_char} if core.tokens_per_char != 0.25 else {}),
        **({"cut": {"text": core.cut, "reasoning": core.cut_reasoning,
                    "parts": core.cut_parts}} if core.cut_parts else {}),
        **({"continued": core.continued} if core.continued else {}),
        **({"cut_off": True} if core.cut_off else {}),
        **({"recovered": core.recovered} if core.recovered else {}),
        **({"awaits_first_boundary": True} if core.awaits_first_boundary else {}),
        **({"captures": [list(c) for c in core.captures]} if core.captures else {}),
        "group": None if group is None else {
            "checkpoint_id": group.checkpoint_id,
            "calls": [{**_call_json(p.call, made), "kind": p.kind, "note": p.note,
                       "writes": _pairs(p.writes)} for p in group.calls],
            "results": [[p.call.id, _ended_json(p.ended)] for p in group.calls
                        if p.ended is not None],
            "approved": [p.call.id for p in group.calls if p.approved],
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


def _ended(data: Mapping[str, Any], kept: Mapping[str, ToolOutcome], call_id: str) -> Ended:
    """A stored result. Its outcome must be in the ledger; an older record also wrote it
    out beside the result, and it must be the same one."""
    if call_id not in kept:
        raise ValueError(f"the outcome of call {call_id!r} is not in the call ledger")
    if "outcome" in data and _value(ToolOutcome.from_json(data["outcome"]),
                                    "tool outcome") != kept[call_id]:
        raise ValueError(f"the outcome of call {call_id!r} differs from the call ledger's")
    return Ended(cast(ResultLabel, data["label"]), _writes(data["writes"]), data.get("move"))


def _group(data: Mapping[str, Any], continuation: Continuation) -> Group:
    """A stored group: each call's entry with its approval and how it ended (stored as
    lists of ids and results beside the calls, the format every version wrote)."""
    made, kept = _ledger(continuation)
    ended = {str(cid): _ended(d, kept, str(cid)) for cid, d in data["results"]}
    approved = {str(c) for c in data["approved"]}
    calls = tuple(Planned(call, cast(CallKind, p["kind"]), str(p["note"]), _writes(p["writes"]),
                          call.id in approved, ended.pop(call.id, None))
                  for p in data["calls"] for call in (_stored_call(p, made),))
    if ended:
        raise ValueError(f"results for calls not in the group: {', '.join(sorted(ended))}")
    return Group(str(data["checkpoint_id"]), calls, bool(data["admitted"]),
                 bool(data.get("cut", False)))


_STATUSES = ("idle", "running", "awaiting_approval", "finished", "failed", "cancelling")


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


def _count(value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{what} {value!r}")
    return value


def _cut(data: Mapping[str, Any]) -> dict[str, Any]:
    """A reply being continued (cut at the output limit) and the context recovery of
    the current request, as the core's fields (their defaults when absent)."""
    out: dict[str, Any] = {}
    cut = data.get("cut")
    if cut is not None:
        text, reasoning = cut["text"], cut["reasoning"]
        if not isinstance(text, str) or not isinstance(reasoning, str):
            raise ValueError(f"cut {cut!r}")
        out.update(cut=text, cut_reasoning=reasoning, cut_parts=_count(cut["parts"], "cut"))
    out["continued"] = _count(data.get("continued", 0), "continued")
    out["cut_off"] = data.get("cut_off", False) is True
    out["recovered"] = _count(data.get("recovered", 0), "recovered")
    out["awaits_first_boundary"] = data.get("awaits_first_boundary", False) is True
    captures = data.get("captures", ())
    out["captures"] = tuple((str(r), _count(n, "capture size")) for r, n in captures)
    return out


def _steer(session_id: str, data: Mapping[str, Any]) -> Any:
    """The steering message delivered to the current request, if any."""
    if "steer" not in data:
        return None
    try:
        return content_from_json(data["steer"])
    except Malformed as exc:
        raise CoreDataError(f"session {session_id!r}: the stored steering message is "
                            f"invalid: {exc}") from None


def _no_running_marks(execution: TurnExecution) -> TurnExecution:
    """Older records also marked a group's running calls in the turn core's activity
    (``ToolExecution``); which calls run is the ledger's to say now (admitted, no
    outcome), so the marks are cleared and a turn ends as any other."""
    for running in execution.active_tools:
        cleared = execution.tool_completed(running.call_id)
        if not isinstance(cleared, Rejected):
            execution = cleared
    return execution


def core_from_json(session_id: str, data: Mapping[str, Any], execution: TurnExecution,
                   continuation: Continuation) -> Core:
    """The core a record describes; :class:`CoreDataError` naming what is wrong."""
    execution = _no_running_marks(execution)
    try:
        raw_group = data["group"]
        group = None if raw_group is None else _group(raw_group, continuation)
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
            cached_input_tokens=int(data.get("cached_input_tokens", 0)),
            pending=tuple(ev.event_from_json(e) for e in data["pending"]),
            plan=tuple(_value(ToolCall.from_json(c), "planned call")
                       for c in data.get("plan", ())),
            steer=_steer(session_id, data),
            compaction=_compaction(data.get("compaction")),
            tokens_per_char=_ratio(data.get("tokens_per_char", 0.25)),
            **_cut(data),
            group=group,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise CoreDataError(f"session {session_id!r}: stored core data is malformed "
                            f"({type(exc).__name__}: {exc})") from None
