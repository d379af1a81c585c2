"""A timer turn's input - the session's note, kept as ``UserMessage(note="timer")`` -
as each provider's real SDK sends it, read back from what the loopback servers received:
a system message (Chat Completions), a developer message (Responses), ``[system]`` text
in the user's turn (Anthropic, Gemini); never a user message in the user's words."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from phaseflow.providers.anthropic import AnthropicProvider
from phaseflow.providers.gemini import GeminiProvider
from phaseflow.providers.openai import OpenAIProvider
from phaseflow.providers.protocol import ProviderReply
from phaseflow.providers.responses import OpenAIResponsesProvider
from phaseflow.turn.messages import AssistantMessage, UserMessage
from tests.support.fake_openai_server import FakeOpenAIServer, text_reply
from tests.support.provider_streams import assemble, collect, request
from tests.support.wire_scripts import anthropic_reply, gemini_reply, responses_reply
from tests.support.wire_servers import WireServer

NOTE = "[timer] No message from the user: the timer of phase 'wait' (after 10m) fired."
KEY = "sk-loopback-key"


def _sent(provider: Any, server: Any) -> Any:
    history = (UserMessage("hi"), AssistantMessage("Hello."), UserMessage(NOTE, "timer"))
    reply = assemble(collect(provider, request(*history)))
    assert isinstance(reply, ProviderReply), reply
    return server.requests[-1].body


@pytest.fixture
def wire(request: pytest.FixtureRequest) -> Iterator[WireServer]:
    with WireServer(request.param) as running:
        yield running


def test_chat_completions_sends_the_note_as_a_system_message() -> None:
    with FakeOpenAIServer() as server:
        server.push(text_reply("Any news?"))
        body = _sent(OpenAIProvider("m", base_url=server.base_url), server)
    shown = [(m["role"], m["content"]) for m in body["messages"] if m["role"] != "system"
             or m["content"] == NOTE]
    assert shown[:3] == [("user", "hi"), ("assistant", "Hello."), ("system", NOTE)]


@pytest.mark.parametrize("wire", ["responses"], indirect=True)
def test_responses_sends_the_note_as_a_developer_message(wire: WireServer) -> None:
    wire.push(responses_reply("Any news?"))
    body = _sent(OpenAIResponsesProvider("gpt-test", base_url=wire.base_url, api_key=KEY),
                 wire)
    roles = [(i.get("role"), i.get("content")) for i in body["input"]]
    assert ("developer", NOTE) in roles
    assert all(not (role == "user" and NOTE in str(c)) for role, c in roles)


@pytest.mark.parametrize("wire", ["anthropic"], indirect=True)
def test_anthropic_sends_the_note_as_system_text(wire: WireServer) -> None:
    wire.push(anthropic_reply("Any news?"))
    body = _sent(AnthropicProvider("claude-test", base_url=wire.base_url, api_key=KEY), wire)
    last = body["messages"][2]
    assert last["role"] == "user" and last["content"][0]["text"] == f"[system] {NOTE}"


@pytest.mark.parametrize("wire", ["gemini"], indirect=True)
def test_gemini_sends_the_note_as_system_text(wire: WireServer) -> None:
    wire.push(gemini_reply("Any news?"))
    body = _sent(GeminiProvider("gemini-test", base_url=wire.base_url, api_key=KEY), wire)
    last = body["contents"][2]
    assert last["role"] == "user" and last["parts"][0]["text"] == f"[system] {NOTE}"
