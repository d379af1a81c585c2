"""A guided support agent on the bundled refund desk, end to end, offline.

    python examples/support_agent.py

The agent is what a host writes: tools as plain functions, the workflow's ``call``
effects as hooks, an ``Agent`` and one ``Session`` per conversation. A scripted model
(``ScriptedProvider``) stands in for a real one, so the program runs offline and
deterministically; swap in ``OpenAIProvider(model=...)`` to talk to a real model.

What it shows: the model is offered only the current phase's tools (a call of another
is refused with a result, never run); tool results write only the keys the catalogue
lists in ``writes``; the model records the refund reason itself with ``record`` (the one
key this phase ``collect``s); a refund needs a human's approval (``approval: always``);
phase changes inside a turn; the final phase's last reply.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from phaseflow import Agent, ScriptedProvider, Session, tool

WORKFLOW = Path(__file__).resolve().parents[1] / "workflows" / "refund-desk.yaml"


@tool(name="crm.lookup_customer")
def lookup_customer(email: str = "", phone: str = "") -> dict[str, Any]:
    """Find a customer by the email or phone number on their account."""
    return {"customer_id": "C-1042", "customer": {"name": "Ada", "verified": True}}


@tool(name="orders.select")
def select_order(order_id: str) -> dict[str, Any]:
    """Select the order the customer wants refunded."""
    # `note` is not in the catalogue's writes: the model sees it, the state never does
    return {"order_id": order_id, "amount": 120.0, "note": "gift wrap",
            "order": {"status": "delivered", "days_since_delivery": 6}}


@tool(name="payments.issue_refund")
def issue_refund(order_id: str, amount: float) -> dict[str, Any]:
    """Refund the order to the original payment method."""
    return {"refund_id": "R-77"}


def fetch_refund_policy(ctx: Any, **args: Any) -> dict[str, Any]:
    return {"policy": {"name": "standard", "window_days": 30, "refund_method": "card"}}


def noop(ctx: Any, **args: Any) -> None:
    return None


HOOKS = {"fetch_refund_policy": fetch_refund_policy, "request_manager_approval": noop,
         "record_refund_audit": noop, "notify_customer": noop, "transfer_to_human": noop}

#: the model's replies, in order: text, or tool calls
SCRIPT: list[Any] = [
    {"calls": [{"crm.lookup_customer": {"email": "ada@example.com"}},
               {"payments.issue_refund": {"order_id": "O-9", "amount": 120}}]},
    "Thanks, Ada, you're verified. Which order is it about, and what went wrong?",
    {"calls": [{"orders.select": {"order_id": "O-9"}},
               {"record": {"refund_reason": "arrived broken"}}]},
    {"text": "Refunding 120 to your card.",
     "calls": [{"payments.issue_refund": {"order_id": "O-9", "amount": 120}}]},
    "Refund R-77 is on its way: expect it within 5 days. Anything else?",
]


def show(event: Any) -> None:
    if event.type == "tool_result":
        print(f"    {event.name}: {event.status} -> {event.content[:70]}")
    elif event.type == "phase_changed":
        print(f"  => {event.from_phase} -> {event.to_phase} ({event.trigger})")
    elif event.type == "approval_requested":
        print(f"    approval asked for {event.name}({event.arguments})")
    elif event.type == "turn_finished":
        print(f"  [{event.status}] {event.reply}")


async def chat(session: Session, text: str) -> None:
    print(f"user: {text}")
    async for event in session.send(text):
        show(event)
    while session.pending_approval is not None:  # a person would be asked here
        pending = session.pending_approval
        print(f"    approving {pending.name}")
        async for event in session.resolve(pending.call_id, "approve"):
            show(event)


async def main() -> str:
    provider = ScriptedProvider(SCRIPT)
    agent = Agent(WORKFLOW, provider, hooks=HOOKS,
                  tools=[lookup_customer, select_order, issue_refund],
                  system="You are the support agent of Acme.")
    session = await agent.session("conv-42")
    await chat(session, "Hi, I'd like a refund. I'm ada@example.com")
    await chat(session, "Order O-9. It arrived broken.")
    provider.assert_complete()
    print("state:", {k: session.state[k] for k in ("order_id", "refund_reason", "refund_id")})
    print("status:", session.status)
    return session.phase


if __name__ == "__main__":
    print("final phase:", asyncio.run(main()))
