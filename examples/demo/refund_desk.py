"""Stand-in tools and hooks for the refund desk demo, so ``phaseflow run`` works offline.

``workflows/refund-desk.yaml`` names its tools (``crm.lookup_customer``, ``orders.select``,
``payments.issue_refund``, ...) and its ``call`` effects (``fetch_refund_policy``,
``notify_customer``, ...); a real host implements them against its CRM, order system and
payment provider. These stand-ins answer from a small in-memory data set instead, so the
demo conversation in ``refund-desk.script.yaml`` runs without a model or a network::

    phaseflow run workflows/refund-desk.yaml \\
        --provider scripted:examples/demo/refund-desk.script.yaml \\
        --tools examples.demo.refund_desk:TOOLS --hooks examples.demo.refund_desk:HOOKS \\
        --approve all -m "Hi, I'm ada@example.com" -m "Rex" \\
        -m "Order O-9; the kettle arrived broken" -m "Yes, please"

With ``--provider openai --model ...`` the same tools serve a real model.
"""

from __future__ import annotations

from typing import Any

from phaseflow.machine import EffectContext
from phaseflow.tools import ToolContext, tool

#: the CRM: customers by email, with the answer to their security question
CUSTOMERS: dict[str, dict[str, Any]] = {
    "ada@example.com": {"id": "C-1042", "name": "Ada", "tier": "gold", "answer": "rex"},
}

#: the order system: each customer's recent orders
ORDERS: dict[str, list[dict[str, Any]]] = {
    "C-1042": [
        {"order_id": "O-9", "item": "blue kettle", "total": 120.0, "status": "delivered",
         "days_since_delivery": 6},
        {"order_id": "O-7", "item": "tea set", "total": 45.5, "status": "refunded",
         "days_since_delivery": 40},
    ],
}


#: refunds issued, by idempotency key
REFUNDS: dict[str, str] = {}


def _customer(customer_id: str) -> dict[str, Any] | None:
    return next((c for c in CUSTOMERS.values() if c["id"] == customer_id), None)


def _order(customer_id: str, order_id: str) -> dict[str, Any] | None:
    return next((o for o in ORDERS.get(customer_id, []) if o["order_id"] == order_id), None)


@tool(name="crm.lookup_customer")
def lookup_customer(email: str = "", phone: str = "") -> dict[str, Any]:
    """Find a customer by the email address or phone number on the account."""
    found = CUSTOMERS.get(email.strip().lower())
    if found is None:
        return {"found": False, "message": f"no account for {email or phone}"}
    return {"found": True, "customer_id": found["id"],
            "customer": {"name": found["name"], "tier": found["tier"], "verified": False}}


@tool(name="crm.verify_identity")
def verify_identity(answer: str, ctx: ToolContext) -> dict[str, Any]:
    """Check the customer's answer to the account's security question."""
    # The customer is the one the CRM lookup found (the state), never one the model names:
    # a tool that takes its subject from the state cannot be talked into another account.
    found = _customer(str(ctx.state.get("customer_id") or ""))
    if found is None:
        return {"verified": False, "message": "look the customer up first"}
    correct = answer.strip().lower() == found["answer"]
    failed = int(ctx.state.get("verification_attempts") or 0) + (0 if correct else 1)
    return {"verified": correct, "verification_attempts": failed,
            "customer": {"name": found["name"], "tier": found["tier"], "verified": correct}}


@tool(name="orders.search")
def search_orders(ctx: ToolContext) -> dict[str, Any]:
    """List the customer's recent orders with their status and totals."""
    return {"orders": ORDERS.get(str(ctx.state.get("customer_id")), [])}


@tool(name="orders.select")
def select_order(order_id: str, ctx: ToolContext) -> dict[str, Any]:
    """Record the order the customer wants refunded, with its status and amount."""
    order = _order(str(ctx.state.get("customer_id")), order_id)
    if order is None:
        return {"selected": False, "message": f"the customer has no order {order_id}"}
    return {"selected": True, "order_id": order_id, "amount": order["total"],
            "order": {k: v for k, v in order.items() if k != "order_id"}}


@tool(name="approvals.check_status")
def check_approval_status() -> dict[str, Any]:
    """Look up the duty manager's decision on the pending approval request."""
    return {"approval_status": "approved"}


@tool(name="payments.issue_refund")
def issue_refund(order_id: str, amount: float, ctx: ToolContext) -> dict[str, Any]:
    """Refund the order to the original payment method."""
    # A payment provider deduplicates by this key: a call run again after a crash (the
    # workflow marks the tool idempotent) refunds once.
    REFUNDS.setdefault(ctx.idempotency_key, f"R-{77 + len(REFUNDS)}")
    return {"refund_id": REFUNDS[ctx.idempotency_key], "order_id": order_id, "amount": amount}


@tool(name="helpdesk.add_note")
def add_note(note: str) -> dict[str, Any]:
    """Add a note for the human agent who takes over the conversation."""
    return {"noted": True}


TOOLS = [lookup_customer, verify_identity, search_orders, select_order,
         check_approval_status, issue_refund, add_note]


# --- the workflow's `call` effects ---------------------------------------------------------

def fetch_refund_policy(ctx: EffectContext, **args: Any) -> dict[str, Any]:
    """The current refund policy (a preparation of `refund` and `manager_approval`)."""
    return {"policy": {"name": "standard", "window_days": 30,
                       "refund_method": "the original payment method"}}


def _noted(ctx: EffectContext, **args: Any) -> None:
    """A call effect with nothing to return (a real host would notify, audit, queue)."""


HOOKS = {
    "fetch_refund_policy": fetch_refund_policy,
    "request_manager_approval": _noted,
    "record_refund_audit": _noted,
    "notify_customer": _noted,
    "transfer_to_human": _noted,
}
