"""A whole refund-desk conversation through the real ``openai`` SDK, against an
OpenAI-compatible server on loopback: streamed replies, tool calls in fragments, a phase
change inside a turn that the next request already shows, an approval, and the final
phase's last request without tools."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from phaseflow.session import Agent, TextDeltaEvent, TurnFailed
from phaseflow.tools import tool
from tests.support.fake_openai_server import (
    Fail,
    FakeOpenAIServer,
    text_reply,
    tool_calls_reply,
)

pytest.importorskip("openai")

from phaseflow.providers import OpenAIProvider

WORKFLOW = Path(__file__).resolve().parents[2] / "workflows" / "refund-desk.yaml"
RAN: list[str] = []


@tool(name="crm.lookup_customer")
def lookup_customer(email: str = "", phone: str = "") -> dict[str, Any]:
    """Find a customer by email or phone."""
    RAN.append("crm.lookup_customer")
    return {"customer_id": "C-1", "customer": {"name": "Ada", "verified": True}}


@tool(name="orders.select")
def select_order(order_id: str) -> dict[str, Any]:
    """Select the order to refund."""
    RAN.append("orders.select")
    return {"order_id": order_id, "amount": 120,
            "order": {"status": "delivered", "days_since_delivery": 4}}


@tool(name="payments.issue_refund")
def issue_refund(order_id: str, amount: float) -> dict[str, Any]:
    """Refund an order."""
    RAN.append("payments.issue_refund")
    return {"refund_id": "R-1"}


HOOKS = {
    "fetch_refund_policy": lambda *_, **__: {"policy": {"name": "standard", "window_days": 30,
                                                   "refund_method": "card"}},
    "request_manager_approval": lambda *_, **__: None,
    "record_refund_audit": lambda *_, **__: None,
    "notify_customer": lambda *_, **__: None,
    "transfer_to_human": lambda *_, **__: None,
}


def _messages(server: FakeOpenAIServer, n: int) -> list[dict[str, Any]]:
    body = server.requests[n].body
    messages: list[dict[str, Any]] = body["messages"]
    return messages


def test_a_refund_conversation_through_the_openai_sdk() -> None:
    RAN.clear()
    with FakeOpenAIServer() as server:
        server.push(
            tool_calls_reply(("call_a", "crm__lookup_customer",
                              json.dumps({"email": "ada@example.com"}))),
            text_reply("Thanks, Ada. Which order is it about?"),
            tool_calls_reply(("call_b", "orders__select", json.dumps({"order_id": "O-9"})),
                             ("call_c", "record",
                              json.dumps({"refund_reason": "arrived broken"}))),
            tool_calls_reply(("call_d", "payments__issue_refund",
                              json.dumps({"order_id": "O-9", "amount": 120}))),
            text_reply("Refund R-1 is on its way; anything else?"),
        )
        provider = OpenAIProvider("test-model", base_url=server.base_url, api_key="k")
        agent = Agent(WORKFLOW, provider, hooks=HOOKS,
                      tools=[lookup_customer, select_order, issue_refund],
                      system="You are the support agent of Acme.")

        async def run() -> None:
            session = await agent.session("conv-42")
            deltas = [e async for e in session.send("Hi, I'm ada@example.com")
                      if isinstance(e, TextDeltaEvent)]
            assert len(deltas) >= 2, "the reply is streamed in pieces"
            assert session.phase == "locate_order"
            # the phase change inside the turn is seen by the turn's next request
            second = _messages(server, 1)
            # the stable system text first, the phase's block last, after the history
            assert second[0] == {"role": "system",
                                 "content": "You are the support agent of Acme."}
            assert second[-1]["role"] == "system"
            assert "Current phase: locate_order" in second[-1]["content"]
            second = second[:-1]
            tools = [t["function"]["name"] for t in server.requests[1].body["tools"]]
            assert "crm__lookup_customer" not in tools
            assert "orders__select" in tools
            assert second[-1] == {"role": "tool", "tool_call_id": "call_a", "content":
                                  second[-1]["content"]}

            events = [e async for e in session.send("Order O-9, it arrived broken")]
            assert session.status == "awaiting_approval"
            assert session.phase == "refund"
            assert session.state["refund_reason"] == "arrived broken"
            assert session.state["policy"]["name"] == "standard"  # its preparation ran
            assert "payments.issue_refund" not in RAN
            pending = session.pending_approval
            assert pending is not None and pending.name == "payments.issue_refund"
            assert [e.type for e in events][-1] == "approval_requested"

            finished = [e async for e in session.resolve(pending.call_id, "approve")]
            assert finished[-1].type == "turn_finished"
            assert finished[-1].reply == "Refund R-1 is on its way; anything else?"
            assert RAN == ["crm.lookup_customer", "orders.select", "payments.issue_refund"]
            assert session.phase == "done"
            assert session.status == "finished"
            final = server.requests[-1].body
            assert "tools" not in final or not final["tools"]
            assert "This is the final phase." in final["messages"][-1]["content"]

        asyncio.run(run())
        assert server.pending == 0
        # every tool call in every request sent has exactly one result
        for recorded in server.requests:
            calls, results = [], []
            for m in recorded.body["messages"]:
                calls += [c["id"] for c in m.get("tool_calls") or []]
                if m["role"] == "tool":
                    results.append(m["tool_call_id"])
            assert sorted(calls) == sorted(results)


def test_a_429_is_retried_after_its_retry_after_and_a_stalled_stream_is_cancelled() -> None:
    from tests.support.fake_openai_server import Fail, Stall, chunk

    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    with FakeOpenAIServer() as server:
        server.push(
            Fail(429, "slow down", {"Retry-After": "3"}),
            text_reply("Hello!"),
            Stall([chunk({"role": "assistant", "content": "Let me think"})]),
            text_reply("Back again."),
        )
        provider = OpenAIProvider("test-model", base_url=server.base_url, api_key="k")
        agent = Agent(WORKFLOW, provider, hooks=HOOKS, sleep=sleep,
                      tools=[lookup_customer, select_order, issue_refund])

        async def run() -> None:
            session = await agent.session("conv-7")
            events = [e async for e in session.send("hi")]
            assert slept == [3.0]
            assert [e.type for e in events if e.type == "retrying"] == ["retrying"]
            assert events[-1].reply == "Hello!"

            async def cancel_when_stalled() -> None:
                while not server.stalled.is_set():
                    await asyncio.sleep(0.01)
                session.cancel()

            canceller = asyncio.ensure_future(cancel_when_stalled())
            events = [e async for e in session.send("are you there?")]
            await canceller
            assert events[-1].type == "turn_finished" and events[-1].status == "cancelled"
            assert session.status == "idle"
            server.release()
            assert await session.reply("hello?") == "Back again."
            users = [m["content"] for m in server.requests[-1].body["messages"]
                     if m["role"] == "user"]
            assert users == ["hi", "are you there?", "hello?"]

        asyncio.run(run())


def test_a_reply_cut_at_the_output_limit_through_a_real_server_runs_none_of_its_calls() -> None:
    """The server stops a reply holding tool calls with ``finish_reason: length`` (the
    second call's arguments cut mid-JSON): no call runs, each gets a result saying so,
    and the model is asked to go on in the same turn, its request carrying every call
    with its result."""
    RAN.clear()
    cut = tool_calls_reply(("call_a", "crm__lookup_customer", '{"email": "ada@example.com"}'),
                           ("call_b", "crm__lookup_customer", '{"email": "ad'))
    finish = next(i for i, c in enumerate(cut) if c.get("choices")
                  and c["choices"][0]["finish_reason"] == "tool_calls")
    cut[finish]["choices"][0]["finish_reason"] = "length"
    with FakeOpenAIServer() as server:
        server.push(cut, text_reply("Sorry, could you say that again?"))
        provider = OpenAIProvider("test-model", base_url=server.base_url, api_key="k")
        agent = Agent(WORKFLOW, provider, hooks=HOOKS,
                      tools=[lookup_customer, select_order, issue_refund])

        async def run() -> None:
            session = await agent.session("conv-cut")
            events = [e async for e in session.send("hi, I'm ada@example.com")]
            assert RAN == []
            assert [e.code for e in events if e.type == "error"] == []
            assert [(e.continuation, e.calls) for e in events
                    if e.type == "reply_continued"] == [(1, 2)]
            assert [e.status for e in events if e.type == "tool_result"] == ["refused"] * 2
            assert events[-1].type == "turn_finished" and events[-1].status == "completed"
            assert events[-1].reply == "Sorry, could you say that again?"
            assert len(server.requests) == 2  # asked to go on, in that turn
            sent = _messages(server, 1)
            answered = [m["tool_call_id"] for m in sent if m["role"] == "tool"]
            assert answered == ["call_a", "call_b"]

        asyncio.run(run())


def test_a_text_reply_cut_at_the_output_limit_is_continued_and_stitched() -> None:
    """``finish_reason: length`` on a text reply: the session sends what was said and
    asks the model to go on; the parts are one reply (``reply()`` returns it whole,
    ``completed``), one assistant message marked continued. Cut again after the last
    continuation, the turn ends ``cut``: never the status of a whole reply."""
    with FakeOpenAIServer() as server:
        server.push(text_reply("The refund policy is", finish="length"),
                    text_reply(" thirty days", finish="length"),
                    text_reply(" from delivery."),
                    text_reply("Part one", finish="length"),
                    text_reply(" and part", finish="length"),
                    text_reply(" two", finish="length"))
        provider = OpenAIProvider("test-model", base_url=server.base_url, api_key="k")
        agent = Agent(WORKFLOW, provider, hooks=HOOKS, max_continuations=2,
                      tools=[lookup_customer, select_order, issue_refund])

        async def run() -> None:
            session = await agent.session("conv-long")
            answer = await session.reply("what is the policy?")
            assert answer == "The refund policy is thirty days from delivery."
            assert answer.status == "completed"
            assert len(server.requests) == 3
            # the history as sent, without the phase's trailing block (a system message)
            again = [m for m in _messages(server, 2) if m["role"] != "system"]
            assert again[-2] == {"role": "assistant",
                                 "content": "The refund policy is thirty days"}
            assert again[-1]["role"] == "user" and "Continue" in again[-1]["content"]
            stored = [m for m in session.transcript if m.role.value == "assistant"]
            assert [(m.content, m.continued) for m in stored] == [
                ("The refund policy is thirty days from delivery.", 2)]
            cut = await session.reply("and the rest?")
            assert cut == "Part one and part two" and cut.status == "cut"
            assert len(server.requests) == 6
            assert session.status == "idle"
            # the next turn's request carries the stitched replies, one message each
            assistants = [m for m in session.transcript if m.role.value == "assistant"]
            assert [m.continued for m in assistants] == [2, 2]

        asyncio.run(run())


def test_a_context_length_error_through_a_real_server_is_compacted_and_sent_again() -> None:
    """The server refuses a request with the API's ``context_length_exceeded`` error:
    the session summarises the older turns with the same server (no compaction is
    configured, and the event says so) and sends the request again, once; refused a
    second time, the turn fails naming the size and the budget."""
    full = Fail(400, "This model's maximum context length is 512 tokens. However, you "
                     "requested 536 tokens.", type="invalid_request_error",
                code="context_length_exceeded")
    with FakeOpenAIServer() as server:
        server.push(text_reply("Hello Ada, how can I help?"),
                    text_reply("Which order is it?"),
                    full, text_reply("Summary: Ada wants a refund."),
                    text_reply("Order O-9, noted."),
                    full, text_reply("Summary again."), full)
        provider = OpenAIProvider("test-model", base_url=server.base_url, api_key="k")
        agent = Agent(WORKFLOW, provider, hooks=HOOKS,
                      tools=[lookup_customer, select_order, issue_refund])

        async def run() -> None:
            session = await agent.session("conv-full")
            await session.reply("hi, I'm Ada " + "and I want a refund " * 10)
            await session.reply("for my order " + "which arrived broken " * 10)
            answer = await session.reply("it is O-9")
            assert answer == "Order O-9, noted." and answer.status == "completed"
            events = [e for e in await session.events() if e.turn == 3]
            notice = next(e for e in events if e.type == "error")
            assert notice.code == "context_full"
            assert "maximum context length is 512 tokens" in notice.message
            assert "agent's own provider" in notice.message
            assert [e.type for e in events].count("history_compacted") == 1
            refused, summary, resent = (r.body for r in server.requests[2:5])
            assert summary["messages"][0]["role"] == "system"  # the compaction request
            assert len(json.dumps(resent["messages"])) < len(json.dumps(refused["messages"]))
            assert resent["messages"][-1] == refused["messages"][-1]
            with pytest.raises(TurnFailed) as failed:
                await session.reply("thanks")
            assert "still larger than the model's context" in failed.value.error
            assert "for a budget of" in failed.value.error
            assert server.pending == 0  # asked once more, never a third time

        asyncio.run(run())
