"""The streamed replies of the loopback servers (``tests/support/wire_servers.py``), one
builder per wire, each event shaped as the API documents it:

- :func:`anthropic_reply`: ``message_start``, ``content_block_start`` /
  ``content_block_delta`` (``thinking_delta``, ``signature_delta``, ``text_delta``,
  ``input_json_delta``) / ``content_block_stop``, ``message_delta``, ``message_stop``;
- :func:`responses_reply`: ``response.created``, ``response.output_item.added``,
  ``response.reasoning_summary_text.delta``, ``response.output_text.delta``,
  ``response.function_call_arguments.delta``, ``response.output_item.done``,
  ``response.completed``;
- :func:`gemini_reply`: ``streamGenerateContent`` chunks (``candidates[0].content.parts``:
  thoughts, text, ``functionCall`` parts with their ``thoughtSignature``; the last chunk's
  ``finishReason`` and ``usageMetadata``).

Calls are ``(call id, wire name, arguments JSON text)``; arguments are cut every
``split`` characters, mid-JSON.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any

from tests.support.wire_servers import Event

Call = tuple[str, str, str]


def _pieces(text: str, split: int) -> list[str]:
    return [text[i: i + split] for i in range(0, len(text), split)] or [""]


def anthropic_reply(text: str = "", calls: Sequence[Call] = (), *,
                    thinking: Sequence[tuple[str, str]] = (), stop: str | None = None,
                    usage: tuple[int, int, int, int] = (20, 9, 0, 0),
                    split: int = 5) -> list[Event]:
    """A Messages API stream: thinking blocks ``(text, signature)``, then the text, then
    the ``tool_use`` blocks; ``usage`` is (input, output, cache read, cache write)."""
    stop = stop or ("tool_use" if calls else "end_turn")
    events: list[Event] = [("message_start", {"type": "message_start", "message": {
        "id": "msg_loop", "type": "message", "role": "assistant", "content": [],
        "model": "claude-loopback", "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": usage[0], "output_tokens": 1,
                  "cache_read_input_tokens": usage[2],
                  "cache_creation_input_tokens": usage[3]}}}),
        ("ping", {"type": "ping"})]
    index = 0

    def block(start: dict[str, Any], deltas: list[dict[str, Any]]) -> None:
        nonlocal index
        events.append(("content_block_start", {"type": "content_block_start",
                                               "index": index, "content_block": start}))
        events.extend(("content_block_delta", {"type": "content_block_delta", "index": index,
                                               "delta": d}) for d in deltas)
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
        index += 1

    for thought, signature in thinking:
        block({"type": "thinking", "thinking": "", "signature": ""},
              [{"type": "thinking_delta", "thinking": p} for p in _pieces(thought, split)]
              + [{"type": "signature_delta", "signature": signature}])
    if text:
        block({"type": "text", "text": ""},
              [{"type": "text_delta", "text": p} for p in _pieces(text, split)])
    for call_id, name, arguments in calls:
        block({"type": "tool_use", "id": call_id, "name": name, "input": {}},
              [{"type": "input_json_delta", "partial_json": p}
               for p in _pieces(arguments, split)])
    events.append(("message_delta", {"type": "message_delta",
                                     "delta": {"stop_reason": stop, "stop_sequence": None},
                                     "usage": {"output_tokens": usage[1]}}))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def _response(status: str, output: list[Any], usage: tuple[int, int, int] | None
              ) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "resp_loop", "object": "response", "created_at": 0, "status": status,
        "model": "gpt-loopback", "output": output, "parallel_tool_calls": True,
        "tool_choice": "auto", "tools": [], "error": None, "incomplete_details": None,
        "instructions": None, "metadata": {}, "temperature": 1.0, "top_p": 1.0}
    if usage is not None:
        body["usage"] = {"input_tokens": usage[0],
                         "input_tokens_details": {"cached_tokens": usage[2]},
                         "output_tokens": usage[1],
                         "output_tokens_details": {"reasoning_tokens": 0},
                         "total_tokens": usage[0] + usage[1]}
    return body


def responses_reply(text: str = "", calls: Sequence[Call] = (), *,
                    reasoning: Sequence[tuple[str, str, str]] = (),
                    usage: tuple[int, int, int] | None = (20, 9, 0),
                    incomplete: str | None = None, split: int = 5) -> list[Event]:
    """A Responses API stream: reasoning items ``(id, summary, encrypted content)``,
    then the message, then the function calls."""
    seq = 0
    events: list[Event] = []

    def add(kind: str, **data: Any) -> None:
        nonlocal seq
        events.append((kind, {"type": kind, "sequence_number": seq, **data}))
        seq += 1

    add("response.created", response=_response("in_progress", [], None))
    output: list[Any] = []
    for item_id, summary, encrypted in reasoning:
        n = len(output)
        add("response.output_item.added", output_index=n,
            item={"type": "reasoning", "id": item_id, "summary": []})
        for p in _pieces(summary, split):
            add("response.reasoning_summary_text.delta", item_id=item_id, output_index=n,
                summary_index=0, delta=p)
        item = {"type": "reasoning", "id": item_id,
                "summary": [{"type": "summary_text", "text": summary}],
                "encrypted_content": encrypted}
        add("response.output_item.done", output_index=n, item=item)
        output.append(item)
    if text:
        n = len(output)
        add("response.output_item.added", output_index=n, item={
            "type": "message", "id": "msg_loop", "status": "in_progress", "role": "assistant",
            "content": []})
        for p in _pieces(text, split):
            add("response.output_text.delta", item_id="msg_loop", output_index=n,
                content_index=0, delta=p, logprobs=[])
        item = {"type": "message", "id": "msg_loop", "status": "completed",
                "role": "assistant", "content": [{"type": "output_text", "text": text,
                                                  "annotations": []}]}
        add("response.output_item.done", output_index=n, item=item)
        output.append(item)
    for k, (call_id, name, arguments) in enumerate(calls):
        n = len(output)
        item_id = f"fc_{k}"
        add("response.output_item.added", output_index=n, item={
            "type": "function_call", "id": item_id, "call_id": call_id, "name": name,
            "arguments": "", "status": "in_progress"})
        for p in _pieces(arguments, split):
            add("response.function_call_arguments.delta", item_id=item_id, output_index=n,
                delta=p)
        add("response.function_call_arguments.done", item_id=item_id, output_index=n,
            arguments=arguments)
        item = {"type": "function_call", "id": item_id, "call_id": call_id, "name": name,
                "arguments": arguments, "status": "completed"}
        add("response.output_item.done", output_index=n, item=item)
        output.append(item)
    if incomplete is not None:
        body = _response("incomplete", output, usage)
        body["incomplete_details"] = {"reason": incomplete}
        add("response.incomplete", response=body)
    else:
        add("response.completed", response=_response("completed", output, usage))
    return events


def signature(text: str) -> str:
    """A thought signature as the Gemini API sends it (base64 of opaque bytes)."""
    return base64.b64encode(text.encode() + b"\x00\xff").decode()


def gemini_chunk(parts: Sequence[dict[str, Any]], finish: str | None = None,
                 usage: tuple[int, int, int] | None = None) -> dict[str, Any]:
    chunk: dict[str, Any] = {"candidates": [{"content": {"role": "model", "parts": list(parts)},
                                             "index": 0}],
                             "modelVersion": "gemini-loopback", "responseId": "r_loop"}
    if finish is not None:
        chunk["candidates"][0]["finishReason"] = finish
    if usage is not None:
        chunk["usageMetadata"] = {"promptTokenCount": usage[0],
                                  "candidatesTokenCount": usage[1],
                                  "cachedContentTokenCount": usage[2],
                                  "totalTokenCount": usage[0] + usage[1]}
    return chunk


def gemini_reply(text: str = "", calls: Sequence[tuple[str, str]] = (), *,
                 thought: str = "", signed: str | None = None, finish: str = "STOP",
                 usage: tuple[int, int, int] = (20, 9, 0), split: int = 5) -> list[Event]:
    """A ``streamGenerateContent`` stream: a thought, the text in pieces, then the
    function calls ``(wire name, arguments JSON text)`` whole; ``signed``: the thought
    signature, on the first call (or, without calls, on the last text part)."""
    chunks: list[dict[str, Any]] = []
    if thought:
        chunks.append(gemini_chunk([{"text": thought, "thought": True}]))
    pieces = _pieces(text, split) if text else []
    for n, piece in enumerate(pieces):
        part: dict[str, Any] = {"text": piece}
        if signed is not None and not calls and n == len(pieces) - 1:
            part["thoughtSignature"] = signature(signed)
        chunks.append(gemini_chunk([part]))
    call_parts: list[dict[str, Any]] = []
    for k, (name, arguments) in enumerate(calls):
        part = {"functionCall": {"name": name, "args": json.loads(arguments)}}
        if signed is not None and k == 0:
            part["thoughtSignature"] = signature(signed)
        call_parts.append(part)
    chunks.append(gemini_chunk(call_parts, finish, usage))
    return [(None, c) for c in chunks]
