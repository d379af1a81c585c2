"""The spans and span events of a traced agent, read from the SDK's in-memory exporter:
a conversation with tools and a hook, an approval, a retry, refusals, a resumed turn."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from phaseflow import Agent, MemoryStore, ScriptedProvider, SQLiteStore
from tests.support.otlp_memory import Traced
from tests.support.shop import WORKFLOW

NOTES: list[str] = []


def lookup(name: str) -> dict[str, Any]:
    return {"customer_id": "C-1", "tier": "gold"}


def pay(amount: float) -> dict[str, Any]:
    return {"receipt": "R-1"}


def note(text: str) -> str:
    return "noted"


def notify(ctx: Any, channel: str) -> None:
    NOTES.append(channel)


TOOLS = {"crm.lookup": lookup, "pay": pay, "helpdesk.note": note}
SCRIPT: list[Any] = [
    {"calls": [{"crm.lookup": {"name": "Ada"}}]},
    "Hello Ada. Shall I take the payment?",
    {"calls": [{"pay": {"amount": 5}}]},
    "Paid, thank you.",
]


def agent(tmp_path: Path, traced: Traced, script: list[Any], store: Any = None,
          **options: Any) -> Agent:
    (tmp_path / "shop.yaml").write_text(WORKFLOW, encoding="utf-8")
    return Agent(tmp_path / "shop.yaml", ScriptedProvider(script), tools=TOOLS,
                 hooks={"notify": notify}, store=store, **options, **traced.providers)


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def under(traced: Traced, parent: ReadableSpan) -> list[ReadableSpan]:
    return [s for s in traced.spans() if parent_of(s) == parent.context.span_id]


def events(span: ReadableSpan) -> list[tuple[str, dict[str, Any]]]:
    return [(e.name, dict(e.attributes or {})) for e in span.events]


def test_a_conversation_with_tools_an_approval_and_a_hook(tmp_path: Path,
                                                          traced: Traced) -> None:
    session = agent(tmp_path, traced, SCRIPT).session_sync("s-1")
    first = session.reply_sync("I'm Ada")
    waiting = session.reply_sync("Yes, pay 5")
    assert waiting.status == "awaiting_approval" and waiting.approval is not None
    session.resolve_sync(waiting.approval.call_id, "approve")
    assert str(first) == "Hello Ada. Shall I take the payment?"

    turns = traced.named("invoke_agent ")
    assert [s.name for s in turns] == ["invoke_agent shop"] * 3
    one, two, resumed = turns
    for span in turns:
        assert span.kind is SpanKind.INTERNAL
        assert span.attributes is not None
        assert span.attributes["gen_ai.operation.name"] == "invoke_agent"
        assert span.attributes["gen_ai.agent.name"] == "shop"
        assert span.attributes["gen_ai.conversation.id"] == "s-1"
        assert span.parent is None  # one trace per drive of a turn
    assert [s.attributes["phaseflow.turn"] for s in turns] == [1, 2, 2]  # type: ignore[index]
    assert [s.attributes["phaseflow.turn.status"]  # type: ignore[index]
            for s in turns] == ["completed", "awaiting_approval", "completed"]
    # the turn resumed after the approval links to the drive it continues
    assert [(link.context.span_id, dict(link.attributes or {})) for link in resumed.links] == [
        (two.context.span_id, {"phaseflow.link": "continues"})]
    assert not one.links and not two.links

    # turn 1: a chat that calls crm.lookup, the tool, a boundary with the hook, a chat
    chats = [s for s in under(traced, one) if s.name == "chat"]
    assert len(chats) == 2
    for chat in chats:
        assert chat.kind is SpanKind.CLIENT
        assert chat.status.status_code is StatusCode.UNSET
        assert chat.attributes is not None
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.provider.name"] == "phaseflow.scripted"
        assert chat.attributes["gen_ai.request.model"] == ""
        assert chat.attributes["gen_ai.usage.input_tokens"] > 0  # type: ignore[operator]
        assert chat.attributes["gen_ai.usage.output_tokens"] > 0  # type: ignore[operator]
        assert "gen_ai.input.messages" not in chat.attributes  # not asked for
    assert [c.attributes["gen_ai.response.finish_reasons"]  # type: ignore[index]
            for c in chats] == [("tool_calls",), ("stop",)]
    tools = [s for s in under(traced, one) if s.name.startswith("execute_tool ")]
    assert [(t.name, t.attributes["gen_ai.tool.call.id"],  # type: ignore[index]
             t.attributes["gen_ai.tool.name"], t.attributes["phaseflow.tool.status"])  # type: ignore[index]
            for t in tools] == [("execute_tool crm.lookup", "call_1_1", "crm.lookup", "ok")]
    assert tools[0].status.status_code is StatusCode.UNSET
    assert "gen_ai.tool.call.arguments" not in (tools[0].attributes or {})
    hooks = [h for h in under(traced, one) if h.name == "phaseflow.hook"]
    assert [h.attributes["phaseflow.hook.name"] for h in hooks] == ["notify"]  # type: ignore[index]
    assert NOTES[-1] == "email"
    assert any(s.name == "phaseflow.commit" for s in under(traced, one))
    assert ("phaseflow.phase_changed", {"phaseflow.phase": "ask", "phaseflow.phase.to": "pay",
                                        "phaseflow.transition.trigger": "guard"}) in events(one)
    # the token counts of the turn are the sum of its requests'
    total_in = sum(c.attributes["gen_ai.usage.input_tokens"]  # type: ignore[misc,index]
                   for c in chats)
    assert one.attributes["gen_ai.usage.input_tokens"] == total_in  # type: ignore[index]

    # turn 2: the approval pauses the drive; the resumed drive runs the tool
    assert [name for name, _ in events(two)] == ["phaseflow.approval_requested"]
    assert events(two)[0][1]["gen_ai.tool.name"] == "pay"
    assert not [s for s in under(traced, two) if s.name.startswith("execute_tool")]
    assert ("phaseflow.approval_resolved", {"gen_ai.tool.name": "pay",
                                            "phaseflow.call.id": "call_3_1",
                                            "phaseflow.approval.decision": "approve"}
            ) in events(resumed)
    paid = [s for s in under(traced, resumed) if s.name == "execute_tool pay"]
    assert len(paid) == 1 and paid[0].attributes["phaseflow.tool.status"] == "ok"  # type: ignore[index]
    assert resumed.attributes["phaseflow.phase"] == "done"  # type: ignore[index]

    # metrics
    transitions = traced.points("phaseflow.transitions")
    assert sum(p.value for p in transitions) == 2
    assert {p.attributes["phaseflow.phase.to"] for p in transitions} == {"pay", "done"}
    tokens = traced.points("gen_ai.client.token.usage")
    assert {p.attributes["gen_ai.token.type"] for p in tokens} == {"input", "output"}
    assert sum(p.count for p in traced.points("gen_ai.client.operation.duration")) == 4
    assert sum(p.count for p in traced.points("phaseflow.tool.duration")) == 2
    statuses: dict[str, int] = {}
    for p in traced.points("phaseflow.turn.duration"):
        status = p.attributes["phaseflow.turn.status"]
        statuses[status] = statuses.get(status, 0) + p.count
    assert statuses == {"completed": 2, "awaiting_approval": 1}


def test_a_retried_request_is_two_chat_spans_and_a_retry_event(tmp_path: Path,
                                                                traced: Traced) -> None:
    async def no_wait(seconds: float) -> None:
        return None

    script = [{"error": "overloaded", "retryable": True, "status": 503}, "Hello."]
    session = agent(tmp_path, traced, script, sleep=no_wait, model="m-1").session_sync("s-2")
    assert session.reply_sync("hi") == "Hello."
    (turn,) = traced.named("invoke_agent ")
    failed, answered = [s for s in under(traced, turn) if s.name.startswith("chat")]
    assert [s.name for s in (failed, answered)] == ["chat m-1", "chat m-1"]
    assert failed.attributes["gen_ai.request.model"] == "m-1"  # type: ignore[index]
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.attributes["error.type"] == "503"  # type: ignore[index]
    assert failed.attributes["gen_ai.response.finish_reasons"] == ("error",)  # type: ignore[index]
    assert answered.status.status_code is StatusCode.UNSET, answered.attributes
    assert [(name, a["phaseflow.retry.attempt"]) for name, a in events(turn)] == [
        ("phaseflow.retry", 1)]
    durations = {p.attributes.get("error.type"): p.count
                 for p in traced.points("gen_ai.client.operation.duration")}
    assert durations == {"503": 1, None: 1}


def test_refused_and_rejected_calls_are_refusal_events_not_tool_spans(
        tmp_path: Path, traced: Traced) -> None:
    script: list[Any] = [
        {"calls": [{"pay": {"amount": 5}}]},  # not offered in phase ask: refused
        {"calls": [{"crm.lookup": {"name": "Ada"}}]},
        "Found you.",
        {"calls": [{"pay": {"amount": 5}}]},  # rejected by the human
        "Not paid.",
    ]
    session = agent(tmp_path, traced, script).session_sync("s-3")
    session.reply_sync("I'm Ada")
    waiting = session.reply_sync("pay")
    assert waiting.approval is not None
    session.resolve_sync(waiting.approval.call_id, "reject", reason="too much")
    one, _, resumed = traced.named("invoke_agent ")
    refusals = [a for name, a in events(one) if name == "phaseflow.refusal"]
    assert refusals == [{"gen_ai.tool.name": "pay", "phaseflow.call.id": "call_1_1",
                         "phaseflow.tool.status": "refused"}]
    assert [a["phaseflow.tool.status"] for name, a in events(resumed)
            if name == "phaseflow.refusal"] == ["rejected"]
    assert [s.name for s in traced.named("execute_tool")] == ["execute_tool crm.lookup"]


def test_message_contents_only_when_asked(tmp_path: Path, traced: Traced,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    session = agent(tmp_path, traced, SCRIPT[:2]).session_sync("s-4")
    session.reply_sync("I'm Ada, card 4111")
    (turn,) = traced.named("invoke_agent ")
    assert "4111" in str(turn.attributes["gen_ai.input.messages"])  # type: ignore[index]
    assert "Hello Ada" in str(turn.attributes["gen_ai.output.messages"])  # type: ignore[index]
    chat = traced.named("chat")[0]
    assert "I'm Ada" in str(chat.attributes["gen_ai.input.messages"])  # type: ignore[index]
    assert "crm.lookup" in str(chat.attributes["gen_ai.output.messages"])  # type: ignore[index]
    (tool,) = traced.named("execute_tool")
    assert tool.attributes["gen_ai.tool.call.arguments"] == '{"name": "Ada"}'  # type: ignore[index]
    assert "C-1" in str(tool.attributes["gen_ai.tool.call.result"])  # type: ignore[index]


def test_a_turn_resumed_by_another_agent_links_to_the_stored_span(
        tmp_path: Path, traced: Traced) -> None:
    """A new agent (a new process, as far as the observer knows) reads the span context
    of the drive it continues from the store."""
    path = tmp_path / "sessions.db"
    first = agent(tmp_path, traced, SCRIPT, store=SQLiteStore(path))
    session = first.session_sync("s-5")
    session.reply_sync("I'm Ada")
    waiting = session.reply_sync("pay")
    assert waiting.approval is not None
    paused = traced.named("invoke_agent ")[-1]
    stored = [e for e in asyncio.run(SQLiteStore(path).events("s-5")) if "trace" in e.data]
    assert stored and stored[-1].data["trace"].startswith(
        f"00-{paused.context.trace_id:032x}-{paused.context.span_id:016x}-")
    second = agent(tmp_path, traced, SCRIPT, store=SQLiteStore(path))
    again = second.session_sync("s-5")
    again.resolve_sync(waiting.approval.call_id, "approve")
    resumed = traced.named("invoke_agent ")[-1]
    assert resumed.context.trace_id != paused.context.trace_id
    assert [(link.context.trace_id, link.context.span_id) for link in resumed.links] == [
        (paused.context.trace_id, paused.context.span_id)]


PREPARED = """\
phaseflow: 1
name: prepared
initial: talk
state:
  policy: {type: string}
phases:
  talk:
    goal: Talk.
    transitions:
      - to: desk
        trigger: model
        description: The customer wants the desk
  desk:
    goal: Help at the desk.
    requires: [policy]
    prepare:
      - name: load_policy
        produces: [policy]
        call: fetch_policy
    on_enter:
      - call: broken
"""


def test_a_move_s_preparations_and_a_failing_hook(tmp_path: Path, traced: Traced) -> None:
    def fetch_policy(ctx: Any) -> dict[str, Any]:
        return {"policy": "30 days"}

    def broken(ctx: Any) -> None:
        raise RuntimeError("the hook broke")

    (tmp_path / "prepared.yaml").write_text(PREPARED, encoding="utf-8")
    script: list[Any] = [{"calls": [{"go_to_phase": {"phase": "desk"}}]}, "At the desk."]
    session = Agent(tmp_path / "prepared.yaml", ScriptedProvider(script),
                    hooks={"fetch_policy": fetch_policy, "broken": broken},
                    **traced.providers).session_sync("p-1")
    assert session.reply_sync("the desk, please") == "At the desk."
    assert session.phase == "desk" and session.state["policy"] == "30 days"
    (turn,) = traced.named("invoke_agent")
    (move,) = traced.named("execute_tool")
    assert move.name == "execute_tool go_to_phase"
    (prepare,) = traced.named("phaseflow.prepare")
    assert parent_of(prepare) == move.parent.span_id  # type: ignore[union-attr]
    assert prepare.attributes == {"phaseflow.phase": "talk",
                                  "phaseflow.prepare.target": "desk"}
    hooks = {h.attributes["phaseflow.hook.name"]: h  # type: ignore[index]
             for h in traced.named("phaseflow.hook")}
    assert parent_of(hooks["fetch_policy"]) == prepare.context.span_id
    assert hooks["fetch_policy"].status.status_code is StatusCode.UNSET
    assert parent_of(hooks["broken"]) == turn.context.span_id
    assert hooks["broken"].status.status_code is StatusCode.ERROR
    assert hooks["broken"].attributes["error.type"] == "RuntimeError"  # type: ignore[index]
    assert ("phaseflow.phase_changed", {"phaseflow.phase": "talk", "phaseflow.phase.to": "desk",
                                        "phaseflow.transition.trigger": "model"}) in events(turn)
    assert [a["phaseflow.error.code"] for name, a in events(turn)
            if name == "phaseflow.error"] == ["effect_error"]


def test_a_provider_that_raises_ends_its_chat_span_with_the_error(
        tmp_path: Path, traced: Traced) -> None:
    class Broken:
        def stream(self, request: Any) -> Any:
            raise ConnectionError("no route")

    (tmp_path / "shop.yaml").write_text(WORKFLOW, encoding="utf-8")
    session = Agent(tmp_path / "shop.yaml", Broken(), tools=TOOLS, hooks={"notify": notify},
                    **traced.providers).session_sync("b-1")
    with pytest.raises(Exception, match="no route"):
        session.reply_sync("hello")
    (chat,) = traced.named("chat")
    assert chat.status.status_code is StatusCode.ERROR
    assert chat.attributes["error.type"] == "ConnectionError"  # type: ignore[index]
    assert chat.attributes["gen_ai.provider.name"] == "Broken"  # type: ignore[index]
    (turn,) = traced.named("invoke_agent")
    assert turn.attributes["phaseflow.turn.status"] == "failed"  # type: ignore[index]
    assert turn.status.status_code is StatusCode.ERROR


def test_a_drive_cut_short_by_its_store_ends_interrupted_and_is_continued(
        tmp_path: Path, traced: Traced) -> None:
    from phaseflow.stores.base import StoreError

    class Failing(MemoryStore):
        """A store whose third commit fails once (the database went away)."""

        commits = 0

        async def commit(self, record: Any, events: Any, **options: Any) -> Any:
            self.commits += 1
            if self.commits == 3:
                raise StoreError("the database went away")
            return await super().commit(record, events, **options)

    store = Failing()
    shop = agent(tmp_path, traced, SCRIPT, store=store)
    session = shop.session_sync("i-1")
    with pytest.raises(StoreError, match="went away"):
        session.reply_sync("I'm Ada")
    assert not traced.named("invoke_agent")  # the drive's span is still open
    (commit,) = [s for s in traced.named("phaseflow.commit")
                 if s.status.status_code is StatusCode.ERROR]
    assert commit.attributes["error.type"] == "StoreError"  # type: ignore[index]
    shop.session_sync("i-1").recover_sync(force=True)
    cut, finished = traced.named("invoke_agent")
    assert cut.attributes["phaseflow.turn.status"] == "interrupted"  # type: ignore[index]
    assert cut.status.status_code is StatusCode.ERROR
    assert finished.attributes["phaseflow.turn.continues"] is True  # type: ignore[index]
    assert [link.context.span_id for link in finished.links] == [cut.context.span_id]


LOGIN = """\
phaseflow: 1
name: login
initial: talk
tools:
  login:
    description: Log in
phases:
  talk:
    goal: Log the user in.
"""


def test_captured_contents_hide_the_values_of_secret_keys(
        tmp_path: Path, traced: Traced, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")

    def login(user: str, password: str) -> dict[str, Any]:
        return {"user": user, "session": {"access_token": "tok-9", "max_tokens": 7}}

    (tmp_path / "login.yaml").write_text(LOGIN, encoding="utf-8")
    script: list[Any] = [{"calls": [{"login": {"user": "ada", "password": "hunter2"}}]},
                         "You are in."]
    session = Agent(tmp_path / "login.yaml", ScriptedProvider(script), tools=[login],
                    **traced.providers).session_sync("l-1")
    assert session.reply_sync("log me in") == "You are in."
    (tool,) = traced.named("execute_tool")
    assert tool.attributes["gen_ai.tool.call.arguments"] == (  # type: ignore[index]
        '{"password": "***", "user": "ada"}')
    assert tool.attributes["gen_ai.tool.call.result"] == (  # type: ignore[index]
        '{"user": "ada", "session": {"access_token": "***", "max_tokens": 7}}')
    recorded = " ".join(str(dict(s.attributes or {})) for s in traced.spans())
    assert "ada" in recorded and "max_tokens" in recorded
    assert "hunter2" not in recorded and "tok-9" not in recorded
