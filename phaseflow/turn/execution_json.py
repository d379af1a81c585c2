"""The plain-JSON form of :class:`~phaseflow.turn.execution.TurnExecution` (part 1).

Kept apart from the value so each module has one job: ``execution`` says what a session's
control state may do, this module says how it is written down and read back. Reading goes
through the shape readers of :mod:`~phaseflow.turn.jsonio` (``Malformed`` on the first
wrong shape); ``TurnExecution.from_json`` turns that into a rejection and then checks the
invariants (``validate``).
"""

from __future__ import annotations

from phaseflow.turn import jsonio as j
from phaseflow.turn.execution import (
    ActiveTool,
    Activity,
    ApprovalRequest,
    Completion,
    EditRange,
    Mode,
    PendingAutoApproval,
    RunActive,
    RunFailed,
    RunIdle,
    RunPhase,
    Starting,
    Thinking,
    ToolExecution,
    TrustEntry,
    TrustKey,
    TrustKeyKind,
    TrustScope,
    TurnExecution,
)
from phaseflow.turn.jsonio import JsonValue, Malformed
from phaseflow.turn.messages import ToolCall, content_from_json, content_to_json

__all__ = ["decode_execution", "execution_to_json", "trust_key_to_json"]


# --- writing ---------------------------------------------------------------------------


def execution_to_json(ex: TurnExecution) -> dict[str, JsonValue]:
    return {
        "mode": ex.mode.value,
        "phase": _phase_to_json(ex.phase),
        "steering": [content_to_json(c) for c in ex.steering],
        "follow_up": [content_to_json(c) for c in ex.follow_up],
        "trust": [{"key": trust_key_to_json(e.key), "scope": e.scope.value} for e in ex.trust],
        "auto_approvals": [
            {"call_id": p.call_id, "scope": p.scope.value} for p in ex.auto_approvals
        ],
        "edit_ranges": [{"path": r.path, "start": r.start, "end": r.end} for r in ex.edit_ranges],
        "shell_tools": list(ex.shell_tools),
    }


def trust_key_to_json(key: TrustKey) -> dict[str, JsonValue]:
    return {"tool": key.tool, "kind": key.kind.value, "detail": key.detail}


def _phase_to_json(phase: RunPhase) -> dict[str, JsonValue]:
    if isinstance(phase, RunIdle):
        return {"kind": "idle"}
    if isinstance(phase, RunFailed):
        return {"kind": "failure", "message": phase.message}
    activity: dict[str, JsonValue] = {"kind": phase.activity.kind}
    if isinstance(phase.activity, ToolExecution):
        activity["active_tools"] = [
            {"call_id": t.call_id, "name": t.name} for t in phase.activity.active_tools
        ]
    approval: JsonValue = None
    if phase.pending_approval is not None:
        approval = {
            "call": phase.pending_approval.call.to_json(),
            "reason": phase.pending_approval.reason,
        }
    return {
        "kind": "active",
        "activity": activity,
        "pending_approval": approval,
        "error": phase.error,
    }


# --- reading ---------------------------------------------------------------------------


def decode_execution(data: object) -> TurnExecution:
    """Read an execution value's shape; raises ``Malformed`` (run it through ``j.decode``)."""
    w = "turn execution"
    d = j.obj(data, w)
    return TurnExecution(
        mode=j.enum(d, "mode", w, Mode),
        phase=_decode_phase(j.field(d, "phase", w)),
        steering=j.items(d, "steering", w, content_from_json),
        follow_up=j.items(d, "follow_up", w, content_from_json),
        trust=j.items(d, "trust", w, _decode_trust),
        auto_approvals=j.items(d, "auto_approvals", w, _decode_auto),
        edit_ranges=j.items(d, "edit_ranges", w, _decode_edit_range),
        shell_tools=j.items(d, "shell_tools", w, _decode_name),
    )


def _decode_activity(data: object) -> Activity:
    d = j.obj(data, "activity")
    kind = j.string(d, "kind", "activity")
    simple: dict[str, Activity] = {
        "starting": Starting(),
        "thinking": Thinking(),
        "completion": Completion(),
    }
    if kind in simple:
        return simple[kind]
    if kind == "tool_execution":
        return ToolExecution(j.items(d, "active_tools", "activity", _decode_active_tool))
    raise Malformed(f"activity: unknown kind {kind!r}")


def _decode_active_tool(data: object) -> ActiveTool:
    d = j.obj(data, "active tool")
    return ActiveTool(j.string(d, "call_id", "active tool"), j.string(d, "name", "active tool"))


def _decode_phase(data: object) -> RunPhase:
    d = j.obj(data, "phase")
    kind = j.string(d, "kind", "phase")
    if kind == "idle":
        return RunIdle()
    if kind == "failure":
        return RunFailed(j.string(d, "message", "phase"))
    if kind != "active":
        raise Malformed(f"phase: unknown kind {kind!r}")
    activity = _decode_activity(j.field(d, "activity", "phase"))
    raw = d.get("pending_approval")
    approval = None
    if raw is not None:
        a = j.obj(raw, "approval")
        approval = ApprovalRequest(
            ToolCall.decode(j.field(a, "call", "approval")), j.string(a, "reason", "approval")
        )
    return RunActive(activity, approval, j.opt_string(d, "error", "phase"))


def _decode_trust_key(data: object) -> TrustKey:
    d = j.obj(data, "trust key")
    return TrustKey(  # the constructor refuses a name key with a detail and the reverse
        j.string(d, "tool", "trust key"),
        j.enum(d, "kind", "trust key", TrustKeyKind),
        j.string(d, "detail", "trust key"),
    )


def _decode_trust(data: object) -> TrustEntry:
    d = j.obj(data, "trust entry")
    return TrustEntry(
        _decode_trust_key(j.field(d, "key", "trust entry")),
        j.enum(d, "scope", "trust entry", TrustScope),
    )


def _decode_auto(data: object) -> PendingAutoApproval:
    d = j.obj(data, "auto approval")
    return PendingAutoApproval(
        j.string(d, "call_id", "auto approval"), j.enum(d, "scope", "auto approval", TrustScope)
    )


def _decode_edit_range(data: object) -> EditRange:
    w = "edit range"
    d = j.obj(data, w)
    return EditRange(j.string(d, "path", w), j.integer(d, "start", w), j.integer(d, "end", w))


def _decode_name(data: object) -> str:
    if not isinstance(data, str):
        raise Malformed("shell tool: expected a string")
    return data
