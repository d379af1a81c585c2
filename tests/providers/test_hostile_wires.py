"""The session's hostile-provider promise, held by each new stream parser: whatever
malformed wire data the server sends (data that is not JSON, deltas for blocks that never
started, fields of the wrong type, calls without names, a block started twice), the turn
ends with one provider error, the server is asked once (the provider's fault is never
retried, though the agent would retry a retryable failure three times), no tool runs, and
the next message is a normal turn. Driven through the real SDKs against the loopback
servers (``tests/support/wire_servers.py``); the events' own checks are
tests/session/test_session_hostile.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from phaseflow.providers import AnthropicProvider, GeminiProvider, OpenAIResponsesProvider
from phaseflow.session import Agent
from tests.support.hostile_desk import RAN, TOOLS, collect, workflow
from tests.support.wire_scripts import (
    anthropic_reply,
    gemini_chunk,
    gemini_reply,
    responses_reply,
)
from tests.support.wire_servers import Event, WireServer

pytest.importorskip("anthropic")
pytest.importorskip("google.genai")

_START = anthropic_reply("")[:2]  # message_start, ping
_STOP = anthropic_reply("")[-2:]  # message_delta (end_turn), message_stop


def _a(kind: str, **data: Any) -> Event:
    return (kind, {"type": kind, **data})


def _text_block(index: int = 0) -> Event:
    return _a("content_block_start", index=index, content_block={"type": "text", "text": ""})


ANTHROPIC: dict[str, list[Event]] = {
    "data that is not JSON": [*_START, ("content_block_start", '{"type": "content_block_')],
    "a delta for a block never started": [
        *_START, _a("content_block_delta", index=3, delta={"type": "text_delta", "text": "x"}),
        *_STOP],
    "a text delta of a number": [
        *_START, _text_block(), _a("content_block_delta", index=0,
                                   delta={"type": "text_delta", "text": 123}), *_STOP],
    "arguments for a text block": [
        *_START, _text_block(), _a("content_block_delta", index=0, delta={
            "type": "input_json_delta", "partial_json": '{"q": "x"}'}), *_STOP],
    "a tool_use without a name": [
        *_START, _a("content_block_start", index=0, content_block={
            "type": "tool_use", "id": "toolu_1", "input": {}}), *_STOP],
    "a block started twice": [*_START, _text_block(), _text_block(), *_STOP],
    "a signature for a text block": [
        *_START, _text_block(), _a("content_block_delta", index=0, delta={
            "type": "signature_delta", "signature": "abc"}), *_STOP],
    "an index that is null": [
        *_START, _a("content_block_start", index=None,
                    content_block={"type": "text", "text": ""}), *_STOP],
    "no stop_reason": [*_START, _a("message_delta", delta={}, usage={"output_tokens": 1}),
                       _a("message_stop")],
}


def _r(kind: str, **data: Any) -> Event:
    return (kind, {"type": kind, "sequence_number": 1, **data})


_CREATED = responses_reply("")[:1]
_DONE = responses_reply("")[-1:]

RESPONSES: dict[str, list[Event]] = {
    "data that is not JSON": [*_CREATED, ("response.output_text.delta", '{"delta": "unterm')],
    "a text delta of a number": [*_CREATED, _r("response.output_text.delta", item_id="m",
                                               output_index=0, content_index=0, delta=5),
                                 *_DONE],
    "arguments for an item never added": [
        *_CREATED, _r("response.function_call_arguments.delta", item_id="fc", output_index=0,
                      delta='{"q"'), *_DONE],
    "a function call without a name": [
        *_CREATED, _r("response.output_item.added", output_index=0, item={
            "type": "function_call", "id": "fc", "call_id": "c1", "arguments": ""}), *_DONE],
    "an item added twice": [
        *_CREATED, *(_r("response.output_item.added", output_index=0, item={
            "type": "message", "id": "m", "role": "assistant", "content": []})
            for _ in range(2)), *_DONE],
    "an output index that is text": [
        *_CREATED, _r("response.output_item.added", output_index="zero", item={
            "type": "message", "id": "m", "role": "assistant", "content": []}), *_DONE],
}


def _g(*parts: dict[str, Any], finish: str = "STOP") -> list[Event]:
    return [(None, gemini_chunk(list(parts), finish, (5, 1, 0)))]


GEMINI: dict[str, list[Event]] = {
    "data that is not JSON": [(None, '{"candidates": [{"content": {"parts": [{"te')],
    "text of a number": _g({"text": 42}),
    "a function call without a name": _g({"functionCall": {"args": {"q": "x"}}}),
    "arguments that are a list": _g({"functionCall": {"name": "lookup", "args": [1, 2]}}),
    "a blocked reply": _g({"text": "x"}, finish="PROHIBITED_CONTENT"),
    "candidates that are not a list": [(None, {"candidates": {"content": "x"}})],
}

WIRES: dict[str, tuple[dict[str, list[Event]], list[Event], Callable[[str], Any]]] = {
    "anthropic": (ANTHROPIC, anthropic_reply("fine"),
                  lambda url: AnthropicProvider("m", base_url=url, api_key="k-loop")),
    "responses": (RESPONSES, responses_reply("fine"),
                  lambda url: OpenAIResponsesProvider("m", base_url=url, api_key="k-loop")),
    "gemini": (GEMINI, gemini_reply("fine"),
               lambda url: GeminiProvider("m", base_url=url, api_key="k-loop")),
}

CASES = [(wire, case) for wire, (cases, _, _) in WIRES.items() for case in sorted(cases)]


@pytest.mark.parametrize(("wire", "case"), CASES)
def test_malformed_wire_data_ends_the_turn_once_and_the_session_goes_on(
        wire: str, case: str) -> None:
    RAN.clear()
    cases, fine, make = WIRES[wire]
    with WireServer(wire) as server:  # type: ignore[arg-type]
        server.push(cases[case], fine)
        agent = Agent(workflow(), make(server.base_url), tools=TOOLS, max_retries=3)
        session = agent.session_sync("s")
        events = collect(session.send("hello"))
        assert [e.status for e in events if e.type == "turn_finished"] == ["failed"]
        errors = [e for e in events if e.type == "error"]
        assert [e.code for e in errors] == ["provider_error"], errors
        assert "malformed" in errors[0].message or "stopped the reply" in errors[0].message
        assert len(server.requests) == 1  # the provider's fault: never retried
        assert RAN == []
        again = collect(session.send("still there?"))
        assert [e.reply for e in again if e.type == "turn_finished"] == ["fine"]
        assert session.status == "idle"
