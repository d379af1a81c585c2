"""The turn core's messages and tool specs as Chat Completions request values.

Kept apart from the SDK call so the translation is plain data in, plain data out: the
adapter (``openai.py``) only sends it and reads the stream.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from phaseflow.providers.media import has_media, media_of, note
from phaseflow.providers.protocol import ProviderRequest
from phaseflow.providers.wire_names import WireNames
from phaseflow.turn.messages import (
    AssistantMessage,
    Content,
    MediaPart,
    Message,
    SystemMessage,
    TextPart,
    ToolResultMessage,
    UserMessage,
)

__all__ = ["ContextAs", "names_of", "plain", "request_messages", "request_tools"]


def names_of(request: ProviderRequest) -> WireNames:
    """The wire names of one request: its tools and every call in its history."""
    names: set[str] = {t.name for t in request.tools}
    for message in request.history:
        if isinstance(message, AssistantMessage):
            names.update(c.name for c in message.tool_calls)
    return WireNames(names)


def plain(value: object) -> Any:
    """A JSON value built from mappings and sequences (a read-only schema, a tuple) as
    the dicts and lists the SDK serialises."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def _media_text(part: MediaPart) -> str:
    return note(part)


def _text(content: Content) -> str:
    """Content as one string (roles that take only text: assistant, tool, system)."""
    if isinstance(content, str):
        return content
    return "".join(p.text if isinstance(p, TextPart) else _media_text(p) for p in content)


def _media_part(part: MediaPart, attachments: Mapping[str, bytes]) -> dict[str, Any]:
    """A media part as a content part: an image is an ``image_url`` part (a ``data:`` URL
    of its bytes, or its URL), a PDF a ``file`` part with its bytes; any other media is
    named in text."""
    media = media_of(part, attachments)
    if media is not None and media.is_image:
        return {"type": "image_url", "image_url": {"url": media.url or media.data_url}}
    if media is not None and media.data is not None:
        return {"type": "file", "file": {"filename": "attachment.pdf",
                                         "file_data": media.data_url}}
    return {"type": "text", "text": _media_text(part)}


def _user_content(content: Content, attachments: Mapping[str, bytes] | None = None,
                  ) -> str | list[dict[str, Any]]:
    """User content: text stays text; parts become content parts (:func:`_media_part`)."""
    if isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for part in content:
        if isinstance(part, TextPart):
            parts.append({"type": "text", "text": part.text})
        else:
            parts.append(_media_part(part, attachments or {}))
    return parts


#: where ``ProviderRequest.context`` goes: a trailing system message, or appended to the
#: last user or tool message (for chat templates that refuse a system message not first)
ContextAs = Literal["system", "inline"]


def request_messages(request: ProviderRequest, names: WireNames,
                     context_as: ContextAs = "system") -> list[dict[str, Any]]:
    """The request's system text, history and context as Chat Completions messages: the
    system text first, the history in order, the context last (see
    :class:`~phaseflow.providers.protocol.ProviderRequest`)."""
    out = _history_messages(request, names)
    if request.context:
        if context_as == "system":
            out.append({"role": "system", "content": request.context})
        else:
            _inline(out, request.context)
    return out


def _inline(out: list[dict[str, Any]], context: str) -> None:
    """``context`` appended to the last message when it is a user or tool message (a
    text part after a user message's parts, a paragraph after a text), else a user
    message of its own."""
    last = out[-1] if out else None
    if last is None or last["role"] not in ("user", "tool"):
        out.append({"role": "user", "content": context})
        return
    content = last["content"]
    if isinstance(content, list):
        out[-1] = {**last, "content": [*content, {"type": "text", "text": context}]}
    else:
        out[-1] = {**last, "content": f"{content}\n\n{context}" if content else context}


def _history_messages(request: ProviderRequest, names: WireNames) -> list[dict[str, Any]]:
    """The request's system text and history as Chat Completions messages."""
    out: list[dict[str, Any]] = []
    if request.system:
        out.append({"role": "system", "content": request.system})
    shown: list[dict[str, Any]] = []
    for index, message in enumerate(request.history):
        if isinstance(message, SystemMessage):
            out.append({"role": "system", "content": _text(message.content)})
        elif isinstance(message, UserMessage) and message.note:
            # the session's note (a timer's turn): a system message, not the user's words
            out.append({"role": "system", "content": _text(message.content)})
        elif isinstance(message, UserMessage):
            out.append({"role": "user",
                        "content": _user_content(message.content, request.attachments)})
        elif isinstance(message, AssistantMessage):
            text = _text(message.content)
            entry: dict[str, Any] = {"role": "assistant"}
            if message.tool_calls:
                entry["content"] = text or None
                entry["tool_calls"] = [
                    {"id": c.id, "type": "function",
                     "function": {"name": names.to_wire(c.name), "arguments": c.arguments}}
                    for c in message.tool_calls
                ]
            else:
                entry["content"] = text
            out.append(entry)
        elif isinstance(message, ToolResultMessage):
            out.append({"role": "tool", "tool_call_id": message.call_id,
                        "content": _text(message.content)})
            if has_media(message.content):
                # a tool message takes only text: its images follow the tool messages of
                # the reply as a user message that names the call
                shown.append({"type": "text", "text": f"[the result of {message.call_id}]"})
                shown.extend(_media_part(p, request.attachments) for p in message.content
                             if isinstance(p, MediaPart))
        if shown and not _next_is_tool(request.history, index):
            out.append({"role": "user", "content": shown})
            shown = []
    return out


def _next_is_tool(history: Sequence[Message], index: int) -> bool:
    return index + 1 < len(history) and isinstance(history[index + 1], ToolResultMessage)


def request_tools(request: ProviderRequest, names: WireNames) -> list[dict[str, Any]]:
    """The offered tools as function tools, under their wire names."""
    return [
        {"type": "function",
         "function": {"name": names.to_wire(t.name), "description": t.description,
                      "parameters": plain(t.parameters) or {"type": "object", "properties": {}}}}
        for t in request.tools
    ]

