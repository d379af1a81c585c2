"""The turn core's messages and tool specs as Anthropic Messages API request values.

Plain data in, plain data out (the adapter, :mod:`phaseflow.providers.anthropic`, sends it
and reads the stream). Roles alternate as the API wants: tool results, and a user message
after them, go in one ``user`` message; an assistant message is its thinking blocks (put
back exactly, see :mod:`phaseflow.providers.carry`), its text and its ``tool_use`` blocks.

Prompt caching: a breakpoint (``cache_control``) ends the stable prefix (the tool
definitions and the system text, which the API caches in that order) and another ends the
history, so the next request, which extends this one, reads all of it from the cache.

The request's ``context`` (what changes with the phase and the state) goes last, after
the history's breakpoint, never inside the cached prefix: a ``text`` block at the end of
the last ``user`` turn (after its ``tool_result`` blocks, where the API wants any text of
that turn), or, when the history ends with the model's turn or is empty, a ``user`` turn
of its own.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from phaseflow.providers.carry import carried_parts, restored
from phaseflow.providers.chat_wire import plain
from phaseflow.providers.media import has_media, media_of, note
from phaseflow.providers.protocol import ProviderRequest
from phaseflow.providers.wire_names import WireNames
from phaseflow.turn.messages import (
    AssistantMessage,
    Content,
    MediaPart,
    SystemMessage,
    TextPart,
    ToolResultMessage,
    UserMessage,
)

__all__ = ["WIRE", "request_messages", "request_system", "request_tools"]

#: the name a reply's carried parts are kept under (:class:`~phaseflow.turn.messages.Carried`)
WIRE = "anthropic"

_CACHE = {"type": "ephemeral"}


def _media_block(part: MediaPart, attachments: Mapping[str, bytes]) -> dict[str, Any]:
    """A media part as a block: an image (base64 source for bytes, url source for a URL),
    a PDF a ``document`` block with a base64 source; other media named in text."""
    media = media_of(part, attachments)
    if media is not None and media.data is not None:
        kind = "image" if media.is_image else "document"
        return {"type": kind, "source": {"type": "base64", "media_type": media.media_type,
                                         "data": media.base64}}
    if media is not None and media.url is not None and media.is_image:
        return {"type": "image", "source": {"type": "url", "url": media.url}}
    return {"type": "text", "text": note(part)}


def _blocks(content: Content, attachments: Mapping[str, bytes] | None = None,
            ) -> list[dict[str, Any]]:
    """Content as text, image and document blocks (:func:`_media_block`)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    out: list[dict[str, Any]] = []
    for part in content:
        if isinstance(part, TextPart):
            if part.text:
                out.append({"type": "text", "text": part.text})
        else:
            out.append(_media_block(part, attachments or {}))
    return out


def _text(content: Content) -> str:
    if isinstance(content, str):
        return content
    return "".join(p.text if isinstance(p, TextPart) else
                   f"[attachment {p.media_type}: {p.token}]" for p in content)


def _assistant(message: AssistantMessage, names: WireNames) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    text = _text(message.content)
    if text:
        blocks.append({"type": "text", "text": text})
    for call in message.tool_calls:
        blocks.append({"type": "tool_use", "id": call.id, "name": names.to_wire(call.name),
                       "input": call.argument_value()})
    blocks = restored(blocks, carried_parts(message, WIRE))
    # the API refuses an empty assistant message; a reply with nothing in it said nothing
    return blocks or [{"type": "text", "text": "(no reply)"}]


def request_messages(request: ProviderRequest, names: WireNames, *,
                     cache: bool = True) -> list[dict[str, Any]]:
    """The history as Messages API messages, the last block marked for the cache, then
    the request's ``context`` (after the breakpoint: see the module's docstring)."""
    out: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})

    for message in request.history:
        if isinstance(message, SystemMessage) or (isinstance(message, UserMessage)
                                                  and message.note):
            # (the session's note of a timer's turn too: system text in the user's turn)
            add("user", [{"type": "text", "text": f"[system] {_text(message.content)}"}])
        elif isinstance(message, UserMessage):
            add("user", _blocks(message.content, request.attachments)
                or [{"type": "text", "text": "(empty)"}])
        elif isinstance(message, AssistantMessage):
            add("assistant", _assistant(message, names))
        elif isinstance(message, ToolResultMessage):
            result: dict[str, Any] = {"type": "tool_result", "tool_use_id": message.call_id,
                                      "content": _text(message.content) or "(empty)"}
            if has_media(message.content):  # a result's images are blocks of it
                result["content"] = _blocks(message.content, request.attachments)
            if message.is_error:
                result["is_error"] = True
            add("user", [result])
    if cache and out:
        last = out[-1]["content"][-1]
        if last.get("type") in ("text", "tool_result", "image", "tool_use"):
            out[-1]["content"][-1] = {**last, "cache_control": _CACHE}
    if request.context:
        block = {"type": "text", "text": request.context}
        if out and out[-1]["role"] == "user":
            out[-1] = {**out[-1], "content": [*out[-1]["content"], block]}
        else:
            out.append({"role": "user", "content": [block]})
    return out


def request_system(request: ProviderRequest, *, cache: bool = True) -> list[dict[str, Any]]:
    """The system text as one block, ending the cached prefix."""
    if not request.system:
        return []
    block: dict[str, Any] = {"type": "text", "text": request.system}
    if cache:
        block["cache_control"] = _CACHE
    return [block]


def request_tools(request: ProviderRequest, names: WireNames, *,
                  cache: bool = True) -> list[dict[str, Any]]:
    """The offered tools; without a system text the last tool ends the cached prefix."""
    tools: list[dict[str, Any]] = [
        {"name": names.to_wire(t.name), "description": t.description,
         "input_schema": plain(t.parameters) or {"type": "object", "properties": {}}}
        for t in request.tools
    ]
    if cache and tools and not request.system:
        tools[-1]["cache_control"] = _CACHE
    return tools


def dumps(value: Any) -> str:
    """A JSON value as compact text (a tool call's input given whole)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
