"""Structured replies: a phase's ``reply`` schema goes to each provider in its native
form (recorded from what the real SDK sent to a loopback server), tools still offered;
the reply is checked, sent back once with the problem when it does not match, and its
values are recorded into state keys, which drive the phase's transition."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

import phaseflow
from phaseflow.providers import AnthropicProvider, GeminiProvider, OpenAIResponsesProvider
from phaseflow.providers.openai import OpenAIProvider
from phaseflow.session import Agent
from phaseflow.session.prompt_text import plain_text
from phaseflow.tools import tool
from phaseflow.turn.messages import AssistantMessage, UserMessage
from tests.support.fake_openai_server import FakeOpenAIServer
from tests.support.fake_openai_server import reply as chat_reply
from tests.support.wire_scripts import anthropic_reply, gemini_reply, responses_reply
from tests.support.wire_servers import WireServer

pytest.importorskip("anthropic")
pytest.importorskip("google.genai")

WORKFLOW = """\
phaseflow: 1
name: desk
initial: triage
state:
  category: {type: string}
  urgency: {type: integer}
phases:
  triage:
    goal: Sort the request.
    tools: [lookup]
    reply:
      schema:
        type: object
        properties:
          category: {type: string, enum: [billing, bug]}
          urgency: {type: integer, minimum: 1, maximum: 3}
        required: [category, urgency]
      record: {category: category, urgency: urgency}
    transitions:
      - to: billing
        when: state.category == "billing"
  billing:
    goal: Settle the bill.
    terminal: true
"""

SCHEMA = {"type": "object",
          "properties": {"category": {"type": "string", "enum": ["billing", "bug"]},
                         "urgency": {"type": "integer", "minimum": 1, "maximum": 3}},
          "required": ["category", "urgency"]}
GOOD = '{"category": "billing", "urgency": 2}'
#: the reply in the phase the structured reply moved to (a terminal phase: the session
#: asks the model once more there, without the schema)
SETTLED = "I have opened a billing case."


@tool
def lookup(q: str) -> str:
    """Look a customer up."""
    return f"{q}: customer C-1"


def _agent(provider: Any) -> Agent:
    return Agent(phaseflow.load_workflow_text(WORKFLOW), provider, tools=[lookup])


def _native(kind: str, body: dict[str, Any]) -> Any:
    """The reply schema as each API's request carries it."""
    if kind == "anthropic":
        assert body["output_config"]["format"]["type"] == "json_schema"
        return body["output_config"]["format"]["schema"]
    if kind == "responses":
        assert body["text"]["format"]["type"] == "json_schema"
        assert body["text"]["format"]["name"] == "reply"
        return body["text"]["format"]["schema"]
    if kind == "gemini":
        assert body["generationConfig"]["responseMimeType"] == "application/json"
        return body["generationConfig"]["responseJsonSchema"]
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["name"] == "reply"
    return body["response_format"]["json_schema"]["schema"]


def _tool_names(kind: str, body: dict[str, Any]) -> list[str]:
    if kind == "gemini":
        return [f["name"] for t in body["tools"] for f in t["functionDeclarations"]]
    if kind == "openai":
        return [t["function"]["name"] for t in body["tools"]]
    return [t["name"] for t in body["tools"]]


def _run(kind: str, text: str) -> tuple[Agent, Any, list[Any]]:
    """One turn whose reply is ``text``, on ``kind``'s loopback server and SDK."""
    if kind == "openai":
        with FakeOpenAIServer() as chat:
            chat.push(chat_reply(text), chat_reply(SETTLED))
            agent = _agent(OpenAIProvider("gpt-loop", base_url=chat.base_url, api_key="k"))
            session = agent.session_sync("s")
            events = list(session.send_sync("My bill is wrong"))
            bodies = [r.body for r in chat.requests]
        assert [e.type for e in events if e.type == "error"] == [], events
        return agent, session, bodies
    script = {"anthropic": anthropic_reply, "responses": responses_reply,
              "gemini": gemini_reply}[kind]
    with WireServer(kind) as server:  # type: ignore[arg-type]
        server.push(script(text), script(SETTLED))
        make = {"anthropic": AnthropicProvider, "responses": OpenAIResponsesProvider,
                "gemini": GeminiProvider}[kind]
        agent = _agent(make("loop-model", base_url=server.base_url, api_key="k"))
        session = agent.session_sync("s")
        events = list(session.send_sync("My bill is wrong"))
        bodies = [r.body for r in server.requests]
    assert [e.type for e in events if e.type == "error"] == [], events
    return agent, session, bodies


@pytest.mark.parametrize("kind", ["openai", "responses", "anthropic", "gemini"])
def test_a_structured_reply_is_sent_natively_recorded_and_drives_a_transition(
        kind: str) -> None:
    _, session, bodies = _run(kind, GOOD)
    assert len(bodies) == 2
    assert _native(kind, bodies[0]) == SCHEMA
    with pytest.raises((KeyError, AssertionError)):
        _native(kind, bodies[1])  # the billing phase declares no reply
    assert "lookup" in _tool_names(kind, bodies[0])  # tools stay available
    assert session.state["category"] == "billing" and session.state["urgency"] == 2
    assert session.phase == "billing"


def test_a_reply_that_does_not_match_is_sent_back_once_with_the_problem() -> None:
    with WireServer("anthropic") as claude:
        claude.push(anthropic_reply('{"category": "billing"}'), anthropic_reply(GOOD),
                    anthropic_reply(SETTLED))
        session = _agent(AnthropicProvider("claude-loop", base_url=claude.base_url,
                                           api_key="k")).session_sync("s")
        events = list(session.send_sync("My bill is wrong"))
        bodies = [r.body for r in claude.requests]
    assert len(bodies) == 3
    messages = bodies[1]["messages"]
    assert messages[-2] == {"role": "assistant",
                            "content": [{"type": "text", "text": '{"category": "billing"}'}]}
    correction = json.dumps(messages[-1])
    assert "missing required" in correction and "urgency" in correction
    assert _native("anthropic", bodies[1]) == SCHEMA
    [finished] = [e for e in events if e.type == "turn_finished"]
    assert finished.status == "completed"
    changed = [e for e in events if e.type == "state_changed"]
    assert changed and session.state["urgency"] == 2
    assert session.phase == "billing"
    # the history keeps the reply that matched, not the one sent back
    assert [plain_text(m.content) for m in session.history
            if isinstance(m, AssistantMessage)] == [
        GOOD, SETTLED]


def test_a_second_miss_ends_the_turn_with_reply_invalid_and_records_nothing() -> None:
    with FakeOpenAIServer() as chat:
        chat.push(chat_reply("Billing, I think."), chat_reply('{"category": "refund"}'))
        session = _agent(OpenAIProvider("gpt-loop", base_url=chat.base_url,
                                        api_key="k")).session_sync("s")
        events = list(session.send_sync("My bill is wrong"))
        assert len(chat.requests) == 2
        assert "not JSON" in json.dumps(chat.requests[1].body["messages"][-2])  # (then the context)
    errors = [e for e in events if e.type == "error"]
    assert [e.code for e in errors] == ["reply_invalid"]
    assert errors[0].message.endswith("also when sent back once: missing required "
                                      "property 'urgency'")
    assert "category" not in session.state
    assert session.phase == "triage"


class _InOrder:
    """A provider answering requests in the order they come (a scripted provider answers
    by the replies in the history, which a reply sent back does not add to)."""

    def __init__(self, replies: list[Any]) -> None:
        from phaseflow.providers.scripted import ScriptedProvider

        self.script = [ScriptedProvider([r]) for r in replies]
        self.requests: list[Any] = []

    async def stream(self, request: Any) -> Any:
        self.requests.append(request)
        fresh = replace(request, history=())
        async for event in self.script[len(self.requests) - 1].stream(fresh):
            yield event


def test_a_reply_sent_back_may_call_tools_before_it_answers_in_shape() -> None:
    model = _InOrder(["Billing.", {"calls": [{"lookup": {"q": "ada"}}]}, GOOD, SETTLED])
    session = _agent(model).session_sync("s")
    events = list(session.send_sync("My bill is wrong"))
    assert [e.name for e in events if e.type == "tool_result"] == ["lookup"]
    assert [e.type for e in events if e.type == "error"] == []
    assert session.phase == "billing" and session.state["urgency"] == 2
    assert len(model.requests) == 4
    sent_back = model.requests[1].history[-1]
    assert isinstance(sent_back, UserMessage) and "not JSON" in plain_text(sent_back.content)
    # after the tool call, the problem is no longer sent: the request holds the history
    after = model.requests[2].history
    assert not [m for m in after if isinstance(m, UserMessage) and "schema" in
                plain_text(m.content)]
