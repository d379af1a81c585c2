"""The new providers against a real server: llama.cpp's ``llama-server`` (the Anthropic
Messages API and the OpenAI Responses API, streamed), through the official SDKs. Runs
where ``PHASEFLOW_LLAMA_SERVER`` names its start script (CI sets it when the script is
there); elsewhere these tests skip, and the loopback servers of the other provider tests
are what checks the wire. The model is tiny: these check the plumbing (streaming, usage,
the prompt cache, the context-full error, a whole session turn), not its judgement."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import phaseflow
from phaseflow.providers import AnthropicProvider, OpenAIResponsesProvider
from phaseflow.providers.protocol import Provider, ProviderFailure, ProviderReply, TextDelta
from phaseflow.providers.sdk_clients import CONTEXT_FULL
from phaseflow.session import Agent
from phaseflow.turn.messages import UserMessage
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
    assert reply.status == "completed" and reply.strip()


def test_later_turns_read_the_conversation_from_the_cache(server: LlamaServer) -> None:
    from tests.support.hostile_desk import collect as collect_events

    workflow = phaseflow.load_workflow_text(
        "phaseflow: 1\nname: chat\ninitial: talk\nphases:\n  talk:\n    goal: Chat.\n")
    agent = Agent(workflow, _providers(server)["anthropic"],
                  system="You are a terse assistant. " * 10)
    session = agent.session_sync("c")
    ends = [next(e for e in collect_events(session.send(f"Colour {n}?"), 120)
                 if e.type == "turn_finished") for n in range(3)]
    assert all(e.status == "completed" for e in ends)
    for end in ends[1:]:  # the system text and the turns before: from the cache
        assert end.cached_input_tokens >= 0.8 * end.input_tokens, end
