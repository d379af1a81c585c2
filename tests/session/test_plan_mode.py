"""Plan mode, as a host and a CLI user see it: only the catalogue's ``read_only`` tools
run; every other call gets a result saying it was not run and is listed as the plan;
switching to exec mode lets the next turn carry it out, with approvals as usual."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import phaseflow
from phaseflow.errors import ConfigError
from phaseflow.providers import ScriptedProvider
from phaseflow.session import Agent, ModeRefused
from phaseflow.stores import SQLiteStore
from phaseflow.tools import tool
from tests.support.run_cli import DESK_ARGS, events, project, run

WORKFLOW = """\
phaseflow: 1
name: shop
initial: work
state:
  paid: {type: number}
tools:
  lookup: {read_only: true}
  pay: {approval: always, writes: [paid]}
  ship: {}
phases:
  work:
    goal: Help.
    tools: [lookup, pay, ship]
    transitions:
      - to: done
        when: state.paid and state.paid > 100
  done:
    goal: Bye.
    terminal: true
"""

RAN: list[str] = []


@tool
def lookup(q: str) -> str:
    """Look something up."""
    RAN.append(f"lookup {q}")
    return f"found {q}"


@tool
def pay(amount: float) -> dict[str, Any]:
    """Pay."""
    RAN.append(f"pay {amount}")
    return {"paid": amount}


@tool
def ship(item: str) -> str:
    """Ship an item."""
    RAN.append(f"ship {item}")
    return "shipped"


TOOLS = [lookup, pay, ship]

PLAN_THEN_DO = [
    {"calls": [{"lookup": {"q": "order"}}, {"pay": {"amount": 5}}, {"ship": {"item": "kettle"}}]},
    "I would pay 5 and ship the kettle.",
    {"calls": [{"pay": {"amount": 5}}, {"ship": {"item": "kettle"}}]},
    "Done.",
]


def agent(provider: ScriptedProvider, **options: Any) -> Agent:
    return Agent(phaseflow.load_workflow_text(WORKFLOW), provider, tools=TOOLS, **options)


def test_plan_mode_runs_only_read_only_tools_and_lists_the_rest_as_the_plan() -> None:
    RAN.clear()
    provider = ScriptedProvider(PLAN_THEN_DO)
    session = agent(provider, mode="plan").session_sync("p")
    assert session.mode == "plan"
    events_ = session.send_sync("refund and ship")
    results = {e.name: e.status for e in events_ if e.type == "tool_result"}
    assert results == {"lookup": "ok", "pay": "planned", "ship": "planned"}
    assert RAN == ["lookup order"]
    assert [(c.name, c.argument_value()) for c in session.plan] == [
        ("pay", {"amount": 5}), ("ship", {"item": "kettle"})]
    assert session.pending_approval is None  # nothing asked: nothing would run
    assert "Plan mode" in provider.told(0)
    planned = next(m for m in session.history if getattr(m, "call_id", "") ==
                   session.plan[0].id)
    assert "not run" in str(planned.content).lower()


def test_switching_to_exec_lets_the_next_turn_carry_the_plan_out_with_approvals() -> None:
    RAN.clear()
    provider = ScriptedProvider(PLAN_THEN_DO)
    session = agent(provider, mode="plan").session_sync("p")
    session.send_sync("refund and ship")
    changed = session.set_mode_sync("exec")
    assert [(e.type, e.mode) for e in changed] == [("mode_changed", "exec")]
    assert session.set_mode_sync("exec") == ()  # already: nothing happens
    reply = session.reply_sync("go ahead")
    assert reply.status == "awaiting_approval" and reply.approval is not None
    assert reply.approval.name == "pay"
    session.resolve_sync(reply.approval.call_id, "approve")
    assert RAN == ["lookup order", "pay 5.0", "ship kettle"]
    assert "Plan mode" not in provider.told()


def test_the_mode_changes_between_turns_only() -> None:
    session = agent(ScriptedProvider(PLAN_THEN_DO[2:])).session_sync("p")
    session.send_sync("pay and ship")
    assert session.status == "awaiting_approval"
    with pytest.raises(ModeRefused, match="between turns"):
        session.set_mode_sync("plan")
    with pytest.raises(ConfigError, match="'exec' or 'plan'"):
        session.set_mode_sync("dry-run")
    with pytest.raises(ConfigError, match="'exec' or 'plan'"):
        agent(ScriptedProvider([]), mode="dry")


def test_the_mode_and_the_plan_are_stored_with_the_session(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    first = agent(ScriptedProvider(PLAN_THEN_DO), store=SQLiteStore(path), mode="plan")
    first.session_sync("p").send_sync("refund and ship")
    again = agent(ScriptedProvider(PLAN_THEN_DO), store=SQLiteStore(path)).session_sync("p")
    assert again.mode == "plan"
    assert [c.name for c in again.plan] == ["pay", "ship"]
    stored = asyncio.run(SQLiteStore(path).events("p"))
    assert {s.data["name"]: s.data["status"] for s in stored
            if s.data["type"] == "tool_result"} == {
                "lookup": "ok", "pay": "planned", "ship": "planned"}


def test_a_read_only_key_that_is_not_a_boolean_is_a_validation_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(WORKFLOW.replace("read_only: true", "read_only: yes please"),
                   encoding="utf-8")
    with pytest.raises(phaseflow.errors.PhaseflowError, match="read_only"):
        phaseflow.load_workflow(str(bad))


def test_run_mode_plan_lists_the_plan_and_mode_exec_switches_a_stored_session(
        tmp_path: Path) -> None:
    cwd = project(tmp_path, "- calls: [{pay: {amount: 5}}]\n- I would pay 5.\n"
                            "- calls: [{pay: {amount: 5}}]\n- Paid.\n")
    first = run(cwd, *DESK_ARGS, "--json", "--session", "s", "--store", "s.db",
                "--mode", "plan", "--message", "pay 5")
    assert first.returncode == 0, first.stderr
    seen = [e for e in events(first.stdout) if e["type"] == "tool_result"]
    assert [(e["name"], e["status"]) for e in seen] == [("pay", "planned")]
    second = run(cwd, *DESK_ARGS, "--json", "--session", "s", "--store", "s.db",
                 "--mode", "exec", "--approve", "all", "--message", "go ahead")
    assert second.returncode == 0, second.stderr
    kinds = [(e["type"], e.get("mode") or e.get("status")) for e in events(second.stdout)
             if e["type"] in ("mode_changed", "tool_result")]
    assert kinds == [("mode_changed", "exec"), ("tool_result", "ok")]
