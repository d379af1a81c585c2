"""Attachments as each provider's real SDK sends them: a stored image and a PDF in a user
message, and an image in a tool's result, read back from what the loopback servers
received (OpenAI Chat Completions, Anthropic Messages, OpenAI Responses, Gemini)."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest

from phaseflow.providers.anthropic import AnthropicProvider
from phaseflow.providers.gemini import GeminiProvider
from phaseflow.providers.openai import OpenAIProvider
from phaseflow.providers.protocol import ProviderReply, ProviderRequest
from phaseflow.providers.responses import OpenAIResponsesProvider
from phaseflow.turn.messages import (
    AssistantMessage,
    MediaPart,
    TextPart,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from tests.support.fake_openai_server import FakeOpenAIServer, text_reply
from tests.support.provider_streams import assemble, collect, request
from tests.support.wire_scripts import anthropic_reply, gemini_reply, responses_reply
from tests.support.wire_servers import WireServer

PHOTO = b"\x89PNG\r\n\x1a\n" + bytes(range(40))
CHART = b"\x89PNG\r\n\x1a\n" + b"chart" * 9
PDF = b"%PDF-1.4\n1 0 obj\n<<>>\nendobj\n%%EOF\n"
B64 = {name: base64.b64encode(data).decode() for name, data in
       {"photo": PHOTO, "chart": CHART, "pdf": PDF}.items()}
KEY = "sk-loopback-key"


def _request() -> ProviderRequest:
    history = (
        UserMessage((TextPart("What is in these?"), MediaPart("image/png", "s1-photo"),
                     MediaPart("application/pdf", "s1-pdf"))),
        AssistantMessage("", (ToolCall.of("call_1", "chart", {}),)),
        ToolResultMessage("call_1", (TextPart("the chart"), MediaPart("image/png", "s1-chart"))),
    )
    return request(*history, tools=["chart"], attachments={
        "s1-photo": PHOTO, "s1-chart": CHART, "s1-pdf": PDF})


def _sent(provider: Any, server: Any) -> Any:
    reply = assemble(collect(provider, _request()))
    assert isinstance(reply, ProviderReply), reply
    return server.requests[-1].body


@pytest.fixture
def wire(request: pytest.FixtureRequest) -> Iterator[WireServer]:
    with WireServer(request.param) as running:
        yield running


def test_chat_completions_sends_image_url_and_file_parts_and_a_results_image() -> None:
    with FakeOpenAIServer() as server:
        server.push(text_reply("A cat."))
        body = _sent(OpenAIProvider("m", base_url=server.base_url), server)
    messages = body["messages"]
    user = next(m for m in messages if m["role"] == "user")
    assert user["content"] == [
        {"type": "text", "text": "What is in these?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{B64['photo']}"}},
        {"type": "file", "file": {"filename": "attachment.pdf",
                                  "file_data": f"data:application/pdf;base64,{B64['pdf']}"}},
    ]
    tool = next(m for m in messages if m["role"] == "tool")
    assert tool["content"] == "the chart[attachment image/png: s1-chart]"
    after = messages[messages.index(tool) + 1]  # a tool message takes text only
    assert after["role"] == "user"
    assert after["content"][1] == {
        "type": "image_url", "image_url": {"url": f"data:image/png;base64,{B64['chart']}"}}


@pytest.mark.parametrize("wire", ["anthropic"], indirect=True)
def test_anthropic_sends_base64_image_and_document_blocks(wire: WireServer) -> None:
    wire.push(anthropic_reply("A cat."))
    body = _sent(AnthropicProvider("claude-test", base_url=wire.base_url, api_key=KEY), wire)
    first = body["messages"][0]["content"]
    assert first[1] == {"type": "image", "source": {
        "type": "base64", "media_type": "image/png", "data": B64["photo"]}}
    assert first[2] == {"type": "document", "source": {
        "type": "base64", "media_type": "application/pdf", "data": B64["pdf"]}}
    result = body["messages"][-1]["content"][0]
    assert result["type"] == "tool_result"
    assert result["content"][0] == {"type": "text", "text": "the chart"}
    assert result["content"][1]["source"]["data"] == B64["chart"]


@pytest.mark.parametrize("wire", ["responses"], indirect=True)
def test_responses_sends_input_image_and_input_file(wire: WireServer) -> None:
    wire.push(responses_reply("A cat."))
    provider = OpenAIResponsesProvider("gpt-test", base_url=wire.base_url, api_key=KEY)
    body = _sent(provider, wire)
    user = next(i for i in body["input"] if i.get("role") == "user")
    assert user["content"][1] == {"type": "input_image", "detail": "auto",
                                  "image_url": f"data:image/png;base64,{B64['photo']}"}
    assert user["content"][2] == {"type": "input_file", "filename": "attachment.pdf",
                                  "file_data": f"data:application/pdf;base64,{B64['pdf']}"}
    output = next(i for i in body["input"] if i.get("type") == "function_call_output")
    assert output["output"][0] == {"type": "input_text", "text": "the chart"}
    assert output["output"][1]["image_url"] == f"data:image/png;base64,{B64['chart']}"


@pytest.mark.parametrize("wire", ["gemini"], indirect=True)
def test_gemini_sends_inline_data(wire: WireServer) -> None:
    wire.push(gemini_reply("A cat."))
    body = _sent(GeminiProvider("gemini-test", base_url=wire.base_url, api_key=KEY), wire)
    parts = body["contents"][0]["parts"]
    assert _inline(parts[1]) == ("image/png", PHOTO)
    assert _inline(parts[2]) == ("application/pdf", PDF)
    last = body["contents"][-1]["parts"]
    assert "functionResponse" in last[0]
    assert _inline(last[1]) == ("image/png", CHART)


def _inline(part: dict[str, Any]) -> tuple[str, bytes]:
    """An ``inlineData`` part as the SDK sends it (``mime_type``; URL-safe base64)."""
    blob = part["inlineData"]
    return blob["mime_type"], base64.urlsafe_b64decode(blob["data"])
