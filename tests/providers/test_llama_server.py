"""The new providers against a real server: llama.cpp's ``llama-server`` (the Anthropic
Messages API and the OpenAI Responses API, streamed), through the official SDKs. Runs
where ``PHASEFLOW_LLAMA_SERVER`` names its start script (CI sets it when the script is
there); elsewhere these tests skip, and the loopback servers of the other provider tests
are what checks the wire. The model is tiny: these check the plumbing (streaming, usage,
the prompt cache, the context-full error, a whole session turn), not its judgement."""

from __future__ import annotations

import itertools
import json
import urllib.request
from collections.abc import AsyncIterator, Iterator

import pytest

import phaseflow
from phaseflow.providers import AnthropicProvider, OpenAIResponsesProvider
from phaseflow.providers.protocol import (
    Provider,
    ProviderEvent,
    ProviderFailure,
    ProviderReply,
    ProviderRequest,
    TextDelta,
)
from phaseflow.providers.sdk_clients import CONTEXT_FULL
from phaseflow.session import Agent
from phaseflow.turn.messages import AssistantMessage, ToolCall, ToolResultMessage, UserMessage
from tests.support.llama_server import LlamaServer, llama_server
from tests.support.provider_streams import assemble, collect, request

pytest.importorskip("anthropic")


@pytest.fixture(scope="module")
def server() -> Iterator[LlamaServer]:
    with llama_server() as running:
        yield running


def _providers(server: LlamaServer) -> dict[str, Provider]:
    return {"anthropic": AnthropicProvider("smollm", base_url=server.root, max_tokens=16),
            "responses": OpenAIResponsesProvider("smollm", base_url=server.v1,
                                                 max_tokens=16)}


@pytest.mark.parametrize("wire", ["anthropic", "responses"])
def test_a_reply_streams_with_its_usage(server: LlamaServer, wire: str) -> None:
    provider = _providers(server)[wire]
    events = collect(provider, request(UserMessage("Say hello."), tools=["lookup"]))
    assert any(isinstance(e, TextDelta) and e.text for e in events)
    reply = assemble(events)
    assert isinstance(reply, ProviderReply), reply
    assert reply.stop in ("end_turn", "max_tokens") and reply.text
    assert reply.usage.input_tokens > 0 and reply.usage.output_tokens > 0


def test_the_second_request_reads_the_prompt_from_the_cache(server: LlamaServer) -> None:
    provider = _providers(server)["responses"]
    same = request(UserMessage("Name three colours."), system="You are terse. " * 20)
    first, second = (assemble(collect(provider, same)) for _ in range(2))
    assert isinstance(first, ProviderReply) and isinstance(second, ProviderReply)
    assert second.usage.cached_input_tokens >= 0.8 * first.usage.input_tokens - 8


@pytest.mark.parametrize("wire", ["anthropic", "responses"])
def test_a_prompt_beyond_the_context_is_the_context_full_failure(
        server: LlamaServer, wire: str) -> None:
    provider = _providers(server)[wire]
    failure = assemble(collect(provider, request(UserMessage("word " * 3000))))
    assert isinstance(failure, ProviderFailure) and not failure.retryable
    assert failure.message.startswith(CONTEXT_FULL) and failure.status == 400


def test_a_session_turn_through_the_anthropic_provider(server: LlamaServer) -> None:
    workflow = phaseflow.load_workflow_text(
        "phaseflow: 1\nname: hello\ninitial: greet\nphases:\n  greet:\n    goal: Greet.\n")
    agent = Agent(workflow, _providers(server)["anthropic"])
    reply = agent.session_sync("s").reply_sync("Hello!")
    # the small model may run past the output limit even after the continuations
    # ('cut'): either way a whole streamed reply came back through the provider
    assert reply.status in ("completed", "cut") and reply.strip()


def _tokens(server: LlamaServer, text: str) -> int:
    """How many tokens the server's model makes of ``text`` (its ``/tokenize``)."""
    body = json.dumps({"content": text}).encode()
    ask = urllib.request.Request(f"{server.root}/tokenize", body,
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(ask, timeout=30) as answer:
        return len(json.load(answer)["tokens"])


def test_later_turns_read_the_conversation_from_the_cache(server: LlamaServer) -> None:
    from tests.support.hostile_desk import collect as collect_events

    workflow = phaseflow.load_workflow_text(
        "phaseflow: 1\nname: chat\ninitial: talk\nphases:\n  talk:\n    goal: Chat.\n")
    provider = _providers(server)["anthropic"]
    blocks: list[str] = []

    class Recording:
        def stream(self, request: ProviderRequest) -> AsyncIterator[ProviderEvent]:
            blocks.append(request.context)
            return provider.stream(request)

    # one request a turn: a reply the small model runs past its output limit ends the
    # turn 'cut' (it is not continued), which says nothing about the cache
    agent = Agent(workflow, Recording(), system="You are a terse assistant. " * 10,
                  max_continuations=0)
    session = agent.session_sync("c")
    ends = [next(e for e in collect_events(session.send(f"Colour {n}?"), 120)
                 if e.type == "turn_finished") for n in range(3)]
    assert all(e.status in ("completed", "cut") for e in ends), ends
    assert all("Current phase: talk" in b for b in blocks)
    for n, (previous, end) in enumerate(itertools.pairwise(ends)):
        # the previous request up to its trailing block (the phase's instructions and
        # navigation, which end the last user turn) comes from the cache: the system
        # text and every turn before; only the new messages and the block are new
        # (and the chat template's tokens around the block: the separator before it,
        # the end of that user turn and the prompt for the model's reply, 7 with this
        # model's template)
        assert end.cached_input_tokens >= (
            previous.input_tokens - _tokens(server, blocks[n]) - 10), end
        assert end.cached_input_tokens > previous.cached_input_tokens


@pytest.mark.parametrize("wire", ["anthropic", "responses"])
def test_the_phase_block_after_tool_results_is_accepted(server: LlamaServer, wire: str) -> None:
    # Anthropic: a text block after the turn's tool_result blocks; Responses: a
    # developer message after the function_call_output
    history = (UserMessage("Look up Ada."),
               AssistantMessage("", (ToolCall("toolu_1", "lookup", '{"name": "Ada"}'),)),
               ToolResultMessage("toolu_1", '{"found": true}'))
    reply = assemble(collect(_providers(server)[wire], request(
        *history, tools=["lookup"], context="Current phase: answer. Say what was found.")))
    assert isinstance(reply, ProviderReply), reply
    assert reply.usage.input_tokens > 0
