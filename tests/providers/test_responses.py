"""OpenAIResponsesProvider through the real ``openai`` SDK against a loopback server
speaking the Responses API's streaming events: reasoning items kept with their encrypted
content and carried back, function calls, stop reasons and errors."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Iterator

import pytest

from phaseflow.providers.protocol import ProviderFailure, ProviderReply, Usage
from phaseflow.providers.responses import OpenAIResponsesProvider
from phaseflow.turn.messages import (
    AssistantMessage,
    Carried,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from tests.support.cache_layout import cache_order, converse
from tests.support.provider_streams import assemble, collect, request
from tests.support.wire_scripts import responses_reply
from tests.support.wire_servers import Drop, Fail, WireServer

pytest.importorskip("openai")

KEY = "sk-proj-loopback-S3cr3t"


@pytest.fixture
def server() -> Iterator[WireServer]:
    with WireServer("responses") as running:
        yield running


def _reply(server: WireServer, *script: object) -> ProviderReply | ProviderFailure:
    server.push(*script)  # type: ignore[arg-type]
    provider = OpenAIResponsesProvider("gpt-test", base_url=server.base_url, api_key=KEY)
    return assemble(collect(provider, request(UserMessage("Hi"), tools=["crm.lookup"])))


def test_reasoning_text_and_calls_stream_into_one_reply(server: WireServer) -> None:
    reply = _reply(server, responses_reply(
        "Checking.", [("call_a", "crm__lookup", '{"email": "ada@example.com"}'),
                      ("call_b", "crm__lookup", '{"email": "bob@example.com"}')],
        reasoning=[("rs_1", "Two lookups needed.", "gAAAAABencrypted==")],
        usage=(40, 12, 32)))
    assert isinstance(reply, ProviderReply)
    assert reply.text == "Checking." and reply.reasoning == "Two lookups needed."
    assert reply.calls == (("call_a", "crm.lookup", '{"email": "ada@example.com"}'),
                           ("call_b", "crm.lookup", '{"email": "bob@example.com"}'))
    assert reply.stop == "tool_use"
    assert reply.usage == Usage(40, 12, cached_input_tokens=32)
    assert reply.carried is not None and reply.carried.provider == "responses"
    [[position, item]] = json.loads(reply.carried.data)
    assert position == 0 and item["encrypted_content"] == "gAAAAABencrypted=="
    assert item["id"] == "rs_1" and item["type"] == "reasoning"


def test_the_request_is_stateless_and_asks_for_the_encrypted_reasoning(
        server: WireServer) -> None:
    _reply(server, responses_reply("Hi."))
    body = server.requests[0].body
    assert body["store"] is False and body["stream"] is True
    assert body["include"] == ["reasoning.encrypted_content"]
    assert body["instructions"] == "Be brief."
    assert body["tools"][0]["name"] == "crm__lookup" and body["tools"][0]["type"] == "function"
    assert server.requests[0].headers["authorization"] == f"Bearer {KEY}"


def test_reasoning_items_go_back_exactly_before_their_calls(server: WireServer) -> None:
    item = {"type": "reasoning", "id": "rs_7", "summary": [
        {"type": "summary_text", "text": "Look her up."}], "encrypted_content": "gAAA/+=="}
    history = (UserMessage("Find Ada"),
               AssistantMessage("", (ToolCall("call_7", "crm.lookup", '{"q":"ada"}'),),
                                carried=Carried("responses", json.dumps([[0, item]]))),
               ToolResultMessage("call_7", "found"),
               AssistantMessage("Done.", carried=Carried("anthropic", json.dumps(
                   [[0, {"type": "thinking", "thinking": "x", "signature": "y"}]]))))
    server.push(responses_reply("ok"))
    provider = OpenAIResponsesProvider("gpt-test", base_url=server.base_url, api_key=KEY)
    collect(provider, request(*history, UserMessage("thanks"), tools=["crm.lookup"]))
    assert server.requests[0].body["input"] == [
        {"role": "user", "content": "Find Ada"},
        item,
        {"type": "function_call", "call_id": "call_7", "name": "crm__lookup",
         "arguments": '{"q":"ada"}'},
        {"type": "function_call_output", "call_id": "call_7", "output": "found"},
        {"role": "assistant", "content": "Done."},  # another wire's parts dropped
        {"role": "user", "content": "thanks"},
    ]


def test_an_incomplete_reply_is_cut_and_a_filtered_one_fails(server: WireServer) -> None:
    cut = _reply(server, responses_reply("partial", incomplete="max_output_tokens"))
    assert isinstance(cut, ProviderReply) and cut.stop == "max_tokens"
    filtered = _reply(server, responses_reply("x", incomplete="content_filter"))
    assert isinstance(filtered, ProviderFailure) and not filtered.retryable


def test_a_failed_response_and_an_error_event_are_failures(server: WireServer) -> None:
    failed = [*responses_reply("x")[:1], ("response.failed", {
        "type": "response.failed", "sequence_number": 1, "response": {
            "id": "resp_loop", "object": "response", "created_at": 0, "status": "failed",
            "model": "m", "output": [], "error": {"code": "server_error",
                                                   "message": "the model crashed"}}})]
    failure = _reply(server, failed)
    assert isinstance(failure, ProviderFailure) and failure.retryable
    assert "the model crashed" in failure.message
    error = [*responses_reply("x")[:1], ("error", {
        "type": "error", "sequence_number": 1, "code": "invalid_prompt",
        "message": "bad prompt", "param": None})]
    failure = _reply(server, error)
    assert isinstance(failure, ProviderFailure) and not failure.retryable
    assert "bad prompt" in failure.message


def test_429_is_retryable_after_retry_after_and_a_drop_is_retryable(
        server: WireServer) -> None:
    failure = _reply(server, Fail(429, "Rate limit reached", {"Retry-After": "2"}))
    assert failure == ProviderFailure("the server answered 429: Rate limit reached",
                                      retryable=True, retry_after=2.0, status=429)
    dropped = _reply(server, Drop(responses_reply("Hello there")[:4]))
    assert isinstance(dropped, ProviderFailure) and dropped.retryable


BLOCK = "Current phase: help. Look the user up first."


def _provider(server: WireServer) -> OpenAIResponsesProvider:
    return OpenAIResponsesProvider("gpt-test", base_url=server.base_url, api_key=KEY)


def test_the_phase_block_is_a_trailing_developer_message(server: WireServer) -> None:
    blocks = asyncio.run(converse(
        _provider(server), server,
        responses_reply("", [("call_1", "lookup", '{"email": "ada@example.com"}')]),
        responses_reply("Found."), responses_reply("Bye.")))
    bodies = [r.body for r in server.requests]
    assert len(bodies) == 3 and all("Look the user up" in b for b in blocks)
    for body, block in zip(bodies, blocks, strict=True):
        assert body["input"][-1] == {"role": "developer", "content": block}
        assert body["instructions"] == "Be brief."  # the stable text only
    assert bodies[1]["input"][-2]["type"] == "function_call_output"
    for previous, current in itertools.pairwise(bodies):
        before = cache_order("responses", previous)[:-1]
        after = cache_order("responses", current)
        assert after[:len(before)] == before  # reusable up to the previous block
        # the history never keeps a block: only the last item is one
        assert "Look the user up" not in json.dumps(current["input"][:-1])


def test_an_empty_block_adds_nothing_and_a_block_adds_one_item(server: WireServer) -> None:
    history = (UserMessage("Hi"), AssistantMessage("Hello."))
    server.push(responses_reply("ok"), responses_reply("ok"))
    collect(_provider(server), request(*history))
    collect(_provider(server), request(*history, context=BLOCK))
    plain, with_block = (r.body for r in server.requests)
    assert [i["role"] for i in plain["input"]] == ["user", "assistant"]
    assert with_block["input"].pop() == {"role": "developer", "content": BLOCK}
    assert with_block == plain
