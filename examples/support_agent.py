"""Embedding phaseflow in a Python program: a guided support agent, turn by turn.

The bundled ``workflows/refund-desk.yaml`` drives a conversation. A real host would send
the instructions and the navigation block to a model and run the tools the model calls;
here a scripted "model" stands in, so the program runs offline and deterministically:

    python examples/support_agent.py

What it shows: loading a workflow with a registry of host callables, one machine per
conversation, the tool filter (a call the phase does not allow is refused before it
runs), tools that need approval, state changes through ``phaseflow.State``, one turn
boundary per model turn with ``advance``, and what each boundary did.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import phaseflow
from phaseflow.machine import EffectContext

WORKFLOW = Path(__file__).resolve().parents[1] / "workflows" / "refund-desk.yaml"


# --- host callables for the workflow's `call` effects and preparations ---------------------

sent: list[str] = []


def fetch_refund_policy(ctx: EffectContext, **args: Any) -> dict[str, Any]:
    return {"policy": {"name": "standard", "window_days": 30, "refund_method": "card"}}


async def notify_customer(ctx: EffectContext, **args: Any) -> None:
    await asyncio.sleep(0)  # async callables work too
    sent.append(f"notify customer {ctx.state.get('customer_id')} via {args.get('channel')}")


def record(name: str) -> Any:
    def callable_(ctx: EffectContext, **args: Any) -> None:
        sent.append(f"{name} in phase {ctx.phase}")

    return callable_


REGISTRY = {
    "fetch_refund_policy": fetch_refund_policy,
    "notify_customer": notify_customer,
    "request_manager_approval": record("request_manager_approval"),
    "record_refund_audit": record("record_refund_audit"),
    "transfer_to_human": record("transfer_to_human"),
}


# --- the host's tools: what each returns is written to the state ---------------------------

TOOLS: dict[str, Any] = {
    "crm.lookup_customer": lambda a: {"customer_id": "C-1042",
                                      "customer": {"name": "Ada", "verified": False}},
    "crm.verify_identity": lambda a: {"customer": {"name": "Ada", "verified": True}},
    "orders.search": lambda a: {},
    "orders.select": lambda a: {
        "order_id": a["order_id"], "amount": 120.0, "refund_reason": a["reason"],
        "order": {"status": "delivered", "days_since_delivery": 6},
    },
    "payments.issue_refund": lambda a: {"refund_id": "R-77"},
}

#: What the scripted model does on each turn: the tool calls it makes.
SCRIPT: list[list[tuple[str, dict[str, Any]]]] = [
    [("crm.lookup_customer", {"email": "ada@example.com"})],
    [("payments.issue_refund", {}), ("crm.verify_identity", {"answer": "blue"})],
    [("orders.search", {}), ("orders.select", {"order_id": "O-9", "reason": "arrived broken"})],
    [("payments.issue_refund", {"order_id": "O-9"})],
]


def approve(tool: str, args: dict[str, Any]) -> bool:
    """The host's approval step for tools marked `approval: always` (a person would be
    asked; the demo approves)."""
    print(f"    approval asked for {tool}({args}) -> approved")
    return True


async def converse() -> str:
    workflow = phaseflow.load_workflow(WORKFLOW, registry=REGISTRY)
    machine = workflow.machine()
    state = phaseflow.State(workflow.defaults())
    catalogue = workflow.tools or {}
    for turn, calls in enumerate(SCRIPT, start=1):
        print(f"--- turn {turn} ---")
        print(machine.describe_navigation(state))
        for tool, args in calls:
            if not machine.tool_allowed(tool):
                print(f"    {tool}: refused (not available in phase {machine.current})")
                continue
            spec = catalogue.get(tool)
            if spec is not None and spec.approval == "always" and not approve(tool, args):
                continue
            for key, value in TOOLS[tool](args).items():
                state.set(key, value)
            print(f"    {tool}: ran")
        result = await machine.advance(state, turn=turn)
        if result.transitioned and result.transition is not None:
            print(f"  => {result.transition.from_phase} -> {result.phase}")
            if result.transition.instructions:
                print("  instructions:", result.transition.instructions.strip().splitlines()[0])
        elif result.blocked:
            print(f"  => blocked on {result.target}: missing {', '.join(result.missing)}")
        for event in result.events:
            print("  event:", event.format())
    print("--- end ---")
    print(machine.describe_navigation(state))
    print("host callables ran:", "; ".join(sent))
    return machine.current


if __name__ == "__main__":
    final = asyncio.run(converse())
    print("final phase:", final)
