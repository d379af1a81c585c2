"""The spec's refund desk, loaded from YAML, driven through the spec's test scenario."""

from __future__ import annotations

import asyncio
from typing import Any

import phaseflow as loader
from phaseflow.machine import EffectContext, State
from tests.support.machines import SPEC_BLOCK

REFUND_DESK = """\
phaseflow: 1
name: refund-desk
description: Verify a customer, find the order, refund it or escalate.
initial: greet

state:
  customer_id: {type: string, description: Verified customer id}
  order_id:    {type: string}
  amount:      {type: number}
  refund_id:   {type: string}
  policy:      {type: object}

tools:
  lookup_customer: {description: Find a customer by email, writes: [customer_id]}
  find_order:      {writes: [order_id, amount]}
  issue_refund:    {writes: [refund_id], approval: always}

phases:
  greet:
    goal: Learn who the customer is and what they need.
    instructions: Ask for the email address on the account. Be brief.
    tools: [lookup_customer]
    transitions:
      - to: locate_order
        when: state.customer_id
        description: Customer verified

  locate_order:
    goal: Identify the order to refund.
    requires: [customer_id]
    needs: [order_id, amount]
    tools: [find_order]
    transitions:
      - to: refund
        when: state.amount <= 500
        description: Small refund, no approval from a manager
      - to: escalate
        when: state.amount > 500
      - to: escalate
        trigger: model
        description: The customer asks for a human

  refund:
    goal: Issue the refund and confirm it.
    requires: [order_id, amount, policy]
    prepare:
      - name: load_policy
        produces: [policy]
        call: fetch_refund_policy
    instructions: |
      Refund {{ state.amount }} for order {{ state.order_id }} under policy
      {{ state.policy.name }}.
    tools: [issue_refund]
    on_exit:
      - call: notify_customer
        with: {channel: email}
    transitions:
      - to: done
        when: state.refund_id

  escalate:
    goal: Hand the conversation to a human agent.
    terminal: true
  done:
    goal: Close the conversation politely.
    terminal: true
"""


def test_the_spec_scenario_end_to_end() -> None:
    called: list[tuple[str, dict[str, Any]]] = []

    async def fetch_refund_policy(ctx: EffectContext) -> dict[str, Any]:
        called.append(("fetch_refund_policy", {}))
        return {"policy": {"name": "standard"}}

    def notify_customer(ctx: EffectContext, channel: str) -> None:
        called.append(("notify_customer", {"channel": channel, "phase": ctx.phase}))

    wf = loader.load_workflow_text(REFUND_DESK, registry={
        "fetch_refund_policy": fetch_refund_policy, "notify_customer": notify_customer})
    m = wf.machine(clock=lambda: 0.0)
    s = State(wf.defaults())

    async def scenario() -> None:
        assert m.current == "greet" and m.active_tools() == ("lookup_customer",)
        s.set("customer_id", "C-1")
        r = await m.advance(s, turn=1)
        assert r.transitioned and m.current == "locate_order"
        assert not m.tool_allowed("issue_refund")
        s.set("order_id", "O-9")
        s.set("amount", 120)
        r = await m.advance(s, turn=2)
        assert r.transitioned and m.current == "refund" and r.preparations == ("load_policy",)
        assert s["policy"] == {"name": "standard"}
        assert r.transition is not None
        assert r.transition.instructions == "Refund 120 for order O-9 under policy\nstandard."
        assert "Current phase: refund" in m.describe_navigation(s)
        assert not m.request("escalate", s)
        assert await m.take_request("escalate", s, turn=3) is None
        s.set("refund_id", "R-1")
        r = await m.advance(s, turn=4)
        assert r.transitioned and m.current == "done" and m.current_phase is not None
        assert m.current_phase.terminal
        assert [name for name, _ in called] == ["fetch_refund_policy", "notify_customer"]
        assert called[1][1] == {"channel": "email", "phase": "refund"}
        assert [h.to_phase for h in m.history] == ["locate_order", "refund", "done"]
        assert "This is the final phase." in m.describe_navigation(s)

    asyncio.run(scenario())


def test_the_spec_navigation_example_from_yaml() -> None:
    wf = loader.load_workflow_text(REFUND_DESK)
    m = wf.machine()
    s = State({"customer_id": "C-1"})
    m.advance_sync(State(), turn=1)
    m.advance_sync(s, turn=2)
    assert m.describe_navigation(s) == SPEC_BLOCK


def test_large_escalation_path() -> None:
    wf = loader.load_workflow_text(REFUND_DESK)
    m = wf.machine()
    s = State({"customer_id": "C", "amount": 900})
    m.advance_sync(s, turn=1)
    assert m.advance_sync(s, turn=2).phase == "escalate"
    assert m.advance_sync(s, turn=3).stayed
