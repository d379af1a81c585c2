"""``session.approve`` / ``session.reject``: the human's decision returns the Reply of the
turn it resumes, as ``reply()`` returns one, through the public API."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from phaseflow import Agent, ScriptedProvider, load_workflow_text
from phaseflow.errors import ConfigError
from phaseflow.session import ResolutionRefused, TurnFailed

DESK = load_workflow_text("""\
phaseflow: 1
name: refunds
initial: work
state:
  refunded: {type: array}
tools:
  orders.refund: {approval: always, writes: [refunded]}
  orders.note: {}
phases:
  work:
    goal: Refund orders.
    tools: [orders.refund, orders.note]
""")


def _agent(script: list[Any], ran: list[str]) -> Agent:
    def refund(order_id: str) -> dict[str, Any]:
        ran.append(order_id)
        return {"refunded": [*ran]}

    return Agent(DESK, ScriptedProvider(script),
                 tools={"orders.refund": refund, "orders.note": lambda text: "noted"})


def _refund(order_id: str) -> dict[str, Any]:
    return {"calls": [{"orders.refund": {"order_id": order_id}}]}


def test_approve_returns_the_reply_of_the_resumed_turn() -> None:
    ran: list[str] = []

    async def go() -> None:
        session = await _agent([_refund("O-9"), "O-9 is refunded."], ran).session("s")
        waiting = await session.reply("Refund O-9")
        assert (waiting, waiting.status) == ("", "awaiting_approval")
        assert waiting.approval is not None and ran == []
        reply = await session.approve(waiting.approval.call_id)
        assert (reply, reply.status, reply.approval) == ("O-9 is refunded.", "completed", None)
        assert ran == ["O-9"] and session.state["refunded"] == ["O-9"]
        assert session.status != "awaiting_approval"

    asyncio.run(go())


def test_reject_returns_the_reply_and_the_model_saw_the_reason() -> None:
    ran: list[str] = []
    agent = _agent([_refund("O-7"), "I did not refund O-7."], ran)
    session = agent.session_sync("s")
    waiting = session.reply_sync("Refund O-7")
    assert waiting.approval is not None
    reply = session.reject_sync(waiting.approval.call_id, "a manager must look first")
    assert (reply, reply.status) == ("I did not refund O-7.", "completed")
    assert ran == []
    results = [m for m in session.history if m.role == "tool"]
    assert len(results) == 1 and "a manager must look first" in str(results[0].content)


def test_a_turn_that_stops_at_a_second_approval_returns_that_one() -> None:
    ran: list[str] = []

    async def go() -> None:
        script = [_refund("O-1"), _refund("O-2"), "Both are refunded."]
        session = await _agent(script, ran).session("s")
        first = await session.reply("Refund O-1 and O-2")
        assert first.approval is not None
        second = await session.approve(first.approval.call_id)
        assert second.status == "awaiting_approval" and second.approval is not None
        assert second.approval.call_id != first.approval.call_id
        assert second.approval.arguments == {"order_id": "O-2"}
        done = await session.approve(second.approval.call_id,
                                     arguments_hash=second.approval.arguments_hash)
        assert (done, done.status) == ("Both are refunded.", "completed")
        assert ran == ["O-1", "O-2"]

    asyncio.run(go())


def test_approve_for_the_turn_trusts_the_same_arguments_again() -> None:
    ran: list[str] = []

    async def go() -> None:
        script = [_refund("O-1"), _refund("O-1"), "Refunded twice."]
        session = await _agent(script, ran).session("s")
        first = await session.reply("Refund O-1, twice")
        assert first.approval is not None
        reply = await session.approve(first.approval.call_id, scope="turn")
        assert (reply, reply.status) == ("Refunded twice.", "completed")
        assert ran == ["O-1", "O-1"]

    asyncio.run(go())


def test_a_decision_for_another_call_or_scope_is_refused_and_nothing_runs() -> None:
    ran: list[str] = []
    session = _agent([_refund("O-9"), "done"], ran).session_sync("s")
    waiting = session.reply_sync("Refund O-9")
    assert waiting.approval is not None
    with pytest.raises(ResolutionRefused):
        session.approve_sync("not-the-call")
    with pytest.raises(ResolutionRefused):
        session.approve_sync(waiting.approval.call_id, arguments_hash="0" * 64)
    with pytest.raises(ConfigError, match="scope must be call, turn or session"):
        session.approve_sync(waiting.approval.call_id, scope="forever")  # type: ignore[arg-type]
    assert ran == [] and session.status == "awaiting_approval"
    assert session.approve_sync(waiting.approval.call_id) == "done"


def test_a_resumed_turn_that_fails_raises_turn_failed_as_reply_does() -> None:
    ran: list[str] = []
    session = _agent([_refund("O-9")], ran).session_sync("s")  # the script ends there
    waiting = session.reply_sync("Refund O-9")
    assert waiting.approval is not None
    with pytest.raises(TurnFailed) as failure:
        session.approve_sync(waiting.approval.call_id)
    assert failure.value.status == "failed" and ran == ["O-9"]
