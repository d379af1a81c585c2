"""A stored session as its readers show it - ``phaseflow sessions show --json`` and the
HTTP service's resources: its messages in the chat roles' JSON form, the call waiting
for a human, the history the model sees and the whole transcript. One form, for both."""

from __future__ import annotations

from typing import Any

from phaseflow.errors import PhaseflowError
from phaseflow.session.compaction import visible
from phaseflow.session.core_json import core_from_json
from phaseflow.session.tool_calls import arguments_hash
from phaseflow.session.values import Core
from phaseflow.stores.base import SessionRecord
from phaseflow.turn.messages import (
    AssistantMessage,
    Message,
    ToolResultMessage,
    UserMessage,
    content_to_json,
)


def message_json(message: Message) -> dict[str, Any]:
    """One model message in the roles of an OpenAI-style chat: ``tool_calls`` with
    ``id``, ``name`` and the arguments as a JSON value; a result's ``tool_call_id`` and
    ``status``."""
    out: dict[str, Any] = {"role": message.role.value}
    if isinstance(message, ToolResultMessage):
        out["tool_call_id"] = message.call_id
        out["status"] = "error" if message.is_error else "ok"
    out["content"] = content_to_json(message.content)
    if isinstance(message, AssistantMessage):
        out["tool_calls"] = [{"id": c.id, "name": c.name, "arguments": c.argument_value()}
                             for c in message.tool_calls]
        if message.reasoning:
            out["reasoning"] = message.reasoning
        if message.continued:
            out["continued"] = message.continued  # a reply cut and continued: stitched
    elif isinstance(message, UserMessage) and message.note:
        out["note"] = message.note  # the session's note ("timer"), not the user's words
    return out


def pending_json(record: SessionRecord) -> dict[str, Any] | None:
    """The call waiting for a human, as :class:`~phaseflow.session.PendingApproval`."""
    pending = record.execution.pending_approval
    if pending is None or record.status != "awaiting_approval":
        return None
    call = pending.call
    return {"call_id": call.id, "name": call.name, "arguments": call.argument_value(),
            "arguments_hash": arguments_hash(call), "reason": pending.reason}


def stored_core(record: SessionRecord) -> Core:
    """The session core a record holds (as far as it can be read: damage is named by
    the commands that open the session, not here)."""
    try:
        return core_from_json(record.session_id, record.core, record.execution, record.continuation)
    except PhaseflowError:
        return Core(record.session_id, record.execution, record.continuation)


def history(record: SessionRecord) -> tuple[Message, ...]:
    """The exact model messages the model sees now: what ``Session.history`` gives once
    the session is opened (within a turn, the messages of its open request and tool
    group too; with history compaction, the summary in place of what it folds)."""
    core = stored_core(record)
    return visible(core.history(), core.compaction).to_tuple()


def transcript(record: SessionRecord) -> tuple[Message, ...]:
    """Every message of a stored session, compacted or not (``Session.transcript``)."""
    return stored_core(record).history().to_tuple()
