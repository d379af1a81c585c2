"""AnthropicProvider through the real ``anthropic`` SDK against a loopback server speaking
the Messages API's streaming events: what a reply becomes, what a request carries
(thinking blocks and signatures put back, cache breakpoints), and how stop reasons and
errors map."""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
from collections.abc import Iterator

import pytest

from phaseflow.providers.anthropic import AnthropicProvider
from phaseflow.providers.protocol import ProviderFailure, ProviderReply, Usage
from phaseflow.providers.sdk_clients import CONTEXT_FULL
from phaseflow.turn.messages import (
    AssistantMessage,
    Carried,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from tests.support.cache_layout import cache_order, converse
from tests.support.provider_streams import assemble, collect, request
from tests.support.wire_scripts import anthropic_reply
from tests.support.wire_servers import Drop, Fail, WireServer

pytest.importorskip("anthropic")

KEY = "sk-ant-loopback-S3cr3t"


@pytest.fixture
def server() -> Iterator[WireServer]:
    with WireServer("anthropic") as running:
        yield running


def _provider(server: WireServer, **options: object) -> AnthropicProvider:
    return AnthropicProvider("claude-test", base_url=server.base_url, api_key=KEY,
                             **options)  # type: ignore[arg-type]


def _reply(server: WireServer, *script: object, tools: tuple[str, ...] = ("crm.lookup",)
           ) -> ProviderReply | ProviderFailure:
    server.push(*script)  # type: ignore[arg-type]
    return assemble(collect(_provider(server), request(UserMessage("Hi"), tools=tools)))


def test_thinking_text_and_a_call_stream_into_one_reply_with_the_cache_read(
        server: WireServer) -> None:
    reply = _reply(server, anthropic_reply(
        "Let me look.", [("toolu_1", "crm__lookup", '{"email": "ada@example.com"}')],
        thinking=[("The user wants a lookup.", "EqQBCkYIARgCKkCsig==")],
        usage=(12, 30, 900, 40)))
    assert isinstance(reply, ProviderReply)
    assert reply.text == "Let me look."
    assert reply.reasoning == "The user wants a lookup."
    assert reply.calls == (("toolu_1", "crm.lookup", '{"email": "ada@example.com"}'),)
    assert reply.stop == "tool_use"
    assert reply.usage == Usage(952, 30, cached_input_tokens=900)
    assert reply.carried is not None and reply.carried.provider == "anthropic"
    assert json.loads(reply.carried.data) == [[0, {
        "type": "thinking", "thinking": "The user wants a lookup.",
        "signature": "EqQBCkYIARgCKkCsig=="}]]


def test_the_request_has_cache_breakpoints_after_the_prefix_and_the_history(
        server: WireServer) -> None:
    _reply(server, anthropic_reply("Hi."))
    body = server.requests[0].body
    headers = server.requests[0].headers  # (the SDK's version decides which header)
    assert KEY in headers.get("x-api-key", "") + headers.get("authorization", "")
    assert body["stream"] is True and body["max_tokens"] == 4096
    assert body["system"] == [{"type": "text", "text": "Be brief.",
                               "cache_control": {"type": "ephemeral"}}]
    assert body["tools"][0]["name"] == "crm__lookup"
    assert body["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}


def test_a_thinking_block_goes_back_exactly_and_another_wires_parts_do_not(
        server: WireServer) -> None:
    block = {"type": "thinking", "thinking": "Plan: look up.", "signature": "c2lnbmF0dXJl/+=="}
    redacted = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"}
    mine = Carried("anthropic", json.dumps([[0, block], [1, redacted]]))
    theirs = Carried("responses", json.dumps([[0, {"type": "reasoning", "id": "rs_1"}]]))
    history = (UserMessage("Find Ada"),
               AssistantMessage("Looking.", (ToolCall("toolu_9", "crm.lookup", "{}"),),
                                carried=mine),
               ToolResultMessage("toolu_9", "found"),
               AssistantMessage("Ada is a customer.", carried=theirs),
               UserMessage("thanks"))
    server.push(anthropic_reply("ok"))
    collect(_provider(server), request(*history, tools=["crm.lookup"]))
    messages = server.requests[0].body["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant", "user"]
    assert messages[1]["content"] == [
        block, redacted, {"type": "text", "text": "Looking."},
        {"type": "tool_use", "id": "toolu_9", "name": "crm__lookup", "input": {}}]
    assert messages[2]["content"][0] == {"type": "tool_result", "tool_use_id": "toolu_9",
                                         "content": "found"}
    # another wire's parts are dropped; the visible text stays
    assert messages[3]["content"] == [{"type": "text", "text": "Ada is a customer."}]


@pytest.mark.parametrize(("stop", "kind"), [("end_turn", "end_turn"),
                                            ("stop_sequence", "end_turn"),
                                            ("max_tokens", "max_tokens"),
                                            ("pause_turn", "max_tokens")])
def test_stop_reasons_map(server: WireServer, stop: str, kind: str) -> None:
    reply = _reply(server, anthropic_reply("partial", stop=stop))
    assert isinstance(reply, ProviderReply) and reply.stop == kind


def test_a_refusal_is_a_failure_that_is_not_retried(server: WireServer) -> None:
    failure = _reply(server, anthropic_reply("I can't", stop="refusal"))
    assert isinstance(failure, ProviderFailure) and not failure.retryable
    assert "refused" in failure.message


@pytest.mark.parametrize(("status", "kind"), [(429, "rate_limit_error"),
                                              (529, "overloaded_error")])
def test_429_and_529_are_retried_after_the_servers_retry_after(
        server: WireServer, status: int, kind: str) -> None:
    failure = _reply(server, Fail(status, "slow down", {"retry-after": "7"}, type=kind),
                     anthropic_reply("never asked"))
    assert failure == ProviderFailure(f"the server answered {status}: slow down",
                                      retryable=True, retry_after=7.0, status=status)
    assert len(server.requests) == 1  # the SDK's own retries are off


def test_a_prompt_too_long_is_the_context_full_failure(server: WireServer) -> None:
    failure = _reply(server, Fail(400, "prompt is too long: 210000 tokens > 200000 maximum",
                                  type="invalid_request_error"))
    assert isinstance(failure, ProviderFailure) and not failure.retryable
    assert failure.message.startswith(CONTEXT_FULL) and failure.status == 400


def test_other_errors_are_final_with_the_servers_message(server: WireServer) -> None:
    failure = _reply(server, Fail(400, "messages.1: tool_use ids must be unique",
                                  type="invalid_request_error"))
    assert failure == ProviderFailure(
        "the server answered 400: messages.1: tool_use ids must be unique", status=400)


def test_a_dropped_stream_is_retryable_and_an_error_event_is_not(server: WireServer) -> None:
    dropped = _reply(server, Drop(anthropic_reply("Hello there")[:4]))
    assert isinstance(dropped, ProviderFailure) and dropped.retryable
    error = [*anthropic_reply("Hi")[:3], ("error", {"type": "error", "error": {
        "type": "api_error", "message": "model crashed"}})]
    failure = _reply(server, error)
    assert isinstance(failure, ProviderFailure) and "model crashed" in failure.message


def test_no_server_listening_names_the_server_and_never_the_key() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    provider = AnthropicProvider("m", base_url=f"http://127.0.0.1:{port}", api_key=KEY)
    failure = assemble(collect(provider, request(UserMessage("Hi"))))
    assert isinstance(failure, ProviderFailure) and failure.retryable
    assert failure.message.startswith(
        f"the connection to the model server at http://127.0.0.1:{port} failed")
    assert KEY not in failure.message and KEY not in repr(provider)


def test_the_tokens_read_from_the_cache_reach_the_turns_end(server: WireServer) -> None:
    import phaseflow
    from phaseflow.session import Agent
    from tests.support.hostile_desk import collect as collect_events

    workflow = phaseflow.load_workflow_text(
        "phaseflow: 1\nname: hello\ninitial: greet\nphases:\n  greet:\n    goal: Greet.\n")
    server.push(anthropic_reply("Hi!", usage=(10, 3, 0, 500)),
                anthropic_reply("Bye!", usage=(12, 3, 500, 0)))
    session = Agent(workflow, _provider(server)).session_sync("s")
    ends = [next(e for e in collect_events(session.send(m)) if e.type == "turn_finished")
            for m in ("hello", "bye")]
    assert [(e.input_tokens, e.cached_input_tokens) for e in ends] == [(510, 0), (512, 500)]
    # the second request's history ends with a breakpoint (before the phase's block,
    # which is last): the first turn is cached
    second = server.requests[1].body["messages"]
    assert second[-1]["content"][-2]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in second[-1]["content"][-1]
    assert "cache_control" not in second[0]["content"][-1]


BLOCK = "Current phase: help. Look the user up first."


def test_the_phase_block_ends_the_request_after_the_history_s_breakpoint(
        server: WireServer) -> None:
    blocks = asyncio.run(converse(
        _provider(server), server,
        anthropic_reply("", [("toolu_1", "lookup", '{"email": "ada@example.com"}')]),
        anthropic_reply("Found."), anthropic_reply("Bye.")))
    bodies = [r.body for r in server.requests]
    assert len(bodies) == 3 and all("Look the user up" in b for b in blocks)
    for body, block in zip(bodies, blocks, strict=True):
        last = body["messages"][-1]["content"]
        # the block is the last thing sent, a text block of the last user turn...
        assert body["messages"][-1]["role"] == "user"
        assert last[-1] == {"type": "text", "text": block}
        # ...after the breakpoint on the history's end, so never in the cached prefix
        assert last[-2]["cache_control"] == {"type": "ephemeral"}
        assert body["system"] == [{"type": "text", "text": "Be brief.",
                                   "cache_control": {"type": "ephemeral"}}]
    # the second turn ends with the tool result: the text block comes after it
    assert [b["type"] for b in bodies[1]["messages"][-1]["content"]] == [
        "tool_result", "text"]
    for previous, current in itertools.pairwise(bodies):
        before = cache_order("anthropic", previous)[:-1]
        after = cache_order("anthropic", current)
        assert after[:len(before)] == before  # reusable up to the previous block
        # the history never keeps a block: only the last turn holds one
        assert "Look the user up" not in json.dumps(current["messages"][:-1])


@pytest.mark.parametrize("history", [(), (UserMessage("Hi"), AssistantMessage("Hello."))],
                         ids=["empty", "ends-with-the-model"])
def test_without_a_user_turn_to_end_the_block_is_a_user_turn_of_its_own(
        server: WireServer, history: tuple[UserMessage, ...]) -> None:
    server.push(anthropic_reply("ok"))
    collect(_provider(server), request(*history, context=BLOCK))
    messages = server.requests[0].body["messages"]
    assert messages[-1] == {"role": "user", "content": [{"type": "text", "text": BLOCK}]}
    assert len(messages) == len(history) + 1
    if history:
        assert messages[-2]["content"][-1]["cache_control"] == {"type": "ephemeral"}


def test_an_empty_block_adds_nothing(server: WireServer) -> None:
    history = (UserMessage("Find Ada"),
               AssistantMessage("", (ToolCall("toolu_9", "crm.lookup", "{}"),)),
               ToolResultMessage("toolu_9", "found"))
    server.push(anthropic_reply("ok"), anthropic_reply("ok"))
    collect(_provider(server), request(*history, tools=["crm.lookup"]))
    collect(_provider(server), request(*history, tools=["crm.lookup"], context=BLOCK))
    plain, with_block = (r.body for r in server.requests)
    assert plain["messages"][-1]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_9", "content": "found",
         "cache_control": {"type": "ephemeral"}}]
    with_block["messages"][-1]["content"].pop()
    assert with_block == plain
