"""Trust a host can see and take back: ``session.trust()``, ``grant_trust``,
``revoke_trust``, ``Agent(trusted_tools=...)``; persisted with the session, each change
an event, through the public API."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from phaseflow import Agent, ScriptedProvider, SQLiteStore, load_workflow_text
from phaseflow.errors import ConfigError
from phaseflow.session import Trusted

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


def _refund(order_id: str) -> dict[str, Any]:
    return {"calls": [{"orders.refund": {"order_id": order_id}}]}


def _agent(script: list[Any], ran: list[str], **options: Any) -> Agent:
    def refund(order_id: str) -> dict[str, Any]:
        ran.append(order_id)
        return {"refunded": [*ran]}

    return Agent(DESK, ScriptedProvider(script),
                 tools={"orders.refund": refund, "orders.note": lambda text: "noted"},
                 **options)


def test_a_session_approval_is_listed_covers_the_same_arguments_and_is_revoked() -> None:
    ran: list[str] = []

    async def go() -> None:
        script = [_refund("O-1"), "done", _refund("O-1"), "again", _refund("O-2"), "other",
                  _refund("O-1"), "asked"]
        session = await _agent(script, ran).session("s")
        assert session.trust() == ()
        waiting = await session.reply("Refund O-1")
        assert waiting.approval is not None
        await session.approve(waiting.approval.call_id, scope="session")
        (entry,) = session.trust()
        assert (entry.tool, entry.covers, entry.scope) == ("orders.refund", "same_arguments",
                                                           "session")
        assert len(entry.detail) == 64  # the SHA-256 of the canonical arguments
        # the same arguments run without asking; other arguments ask
        assert (await session.reply("Refund O-1 again")).status == "completed"
        other = await session.reply("Refund O-2")
        assert other.status == "awaiting_approval"
        await session.reject(other.approval.call_id)  # type: ignore[union-attr]
        await session.revoke_trust("orders.refund")
        assert session.trust() == ()
        asked = await session.reply("Refund O-1 once more")
        assert asked.status == "awaiting_approval"
        changes = [e for e in await session.events() if e.type == "trust_changed"]
        assert [(e.tool, e.change, e.keys) for e in changes] == [  # type: ignore[union-attr]
            ("orders.refund", "revoked", 1)]
        assert ran == ["O-1", "O-1"]

    asyncio.run(go())


def test_a_host_grant_trusts_any_arguments_and_survives_resume(tmp_path: Path) -> None:
    ran: list[str] = []
    db = tmp_path / "s.db"

    async def go() -> None:
        script = [_refund("O-1"), "one", _refund("O-2"), "two", _refund("O-3"), "three"]
        agent = _agent(script, ran, store=SQLiteStore(db))
        session = await agent.session("s")
        await session.grant_trust("orders.refund")
        assert session.trust() == (Trusted("orders.refund", "any_arguments", "session"),)
        assert (await session.reply("Refund O-1")).status == "completed"
        again = _agent(script, ran, store=SQLiteStore(db))
        resumed = await again.session("s")
        assert [t.to_json() for t in resumed.trust()] == [
            {"tool": "orders.refund", "covers": "any_arguments", "scope": "session",
             "detail": ""}]
        assert (await resumed.reply("Refund O-2")).status == "completed"
        await resumed.revoke_trust("orders.refund")
        assert (await resumed.reply("Refund O-3")).status == "awaiting_approval"
        kinds = [(e.change, e.tool) for e in await resumed.events()  # type: ignore[union-attr]
                 if e.type == "trust_changed"]
        assert kinds == [("granted", "orders.refund"), ("revoked", "orders.refund")]
        assert ran == ["O-1", "O-2"]

    asyncio.run(go())


def test_agent_trusted_tools_seed_every_new_session_and_one_can_take_it_back() -> None:
    ran: list[str] = []
    agent = _agent([_refund("O-1"), "one", _refund("O-2"), "two"], ran,
                   trusted_tools=["orders.refund"])
    first = agent.session_sync("a")
    assert [t.tool for t in first.trust()] == ["orders.refund"]
    assert first.reply_sync("Refund O-1").status == "completed"
    second = agent.session_sync("b")
    second.revoke_trust_sync("orders.refund")
    assert second.trust() == ()
    assert second.reply_sync("Refund O-2").status == "awaiting_approval"
    assert [t.tool for t in agent.session_sync("a").trust()] == ["orders.refund"]
    assert ran == ["O-1"]


def test_turn_approvals_are_listed_while_the_turn_runs_and_gone_after() -> None:
    seen: list[list[tuple[str, str]]] = []
    sessions: list[Any] = []

    def refund(order_id: str) -> str:
        seen.append([(t.tool, t.scope) for t in sessions[0].trust()])
        return "refunded"

    async def go() -> None:
        script = [_refund("O-1"), _refund("O-1"), "both", _refund("O-1"), "asks"]
        agent = Agent(DESK, ScriptedProvider(script), tools={
            "orders.refund": refund, "orders.note": lambda text: "noted"})
        session = await agent.session("s")
        sessions.append(session)
        waiting = await session.reply("Refund O-1 twice")
        await session.approve(waiting.approval.call_id, scope="turn")  # type: ignore[union-attr]
        assert session.trust() == ()
        assert (await session.reply("and again")).status == "awaiting_approval"

    asyncio.run(go())
    assert seen == [[("orders.refund", "turn")], [("orders.refund", "turn")]]


def test_refusals_are_clear() -> None:
    agent = _agent([], [])
    with pytest.raises(ConfigError, match=r"no tool 'orders\.nope' to trust"):
        agent.session_sync("s").grant_trust_sync("orders.nope")
    with pytest.raises(ConfigError, match="trusted_tools: no tool 'x'"):
        _agent([], [], trusted_tools=["x"])
    with pytest.raises(ConfigError, match="not the string"):
        _agent([], [], trusted_tools="orders.refund")
    session = agent.session_sync("s")
    session.revoke_trust_sync("orders.refund")  # nothing trusted it: nothing happens
    assert session.events_sync() == ()


def test_sessions_show_and_trust_list_it_and_revoke_takes_it_back(tmp_path: Path) -> None:
    from tests.support.phaseflow_cli import cli_env, run_phaseflow

    path = tmp_path / "s.db"
    ran: list[str] = []
    script = [_refund("O-1"), "one", _refund("O-2"), "two"]
    session = _agent(script, ran, store=SQLiteStore(path)).session_sync("cli")
    waiting = session.reply_sync("Refund O-1")
    session.approve_sync(waiting.approval.call_id, scope="session")  # type: ignore[union-attr]
    session.grant_trust_sync("orders.note")
    env = cli_env()

    def cli(*args: str) -> Any:
        return run_phaseflow("sessions", *args, "--store", str(path), cwd=tmp_path, env=env,
                             timeout=120)

    shown = cli("show", "cli")
    assert shown.returncode == 0, shown.stderr
    assert "trusted\n  orders.note: any arguments, for the session\n" in shown.stdout
    assert "  orders.refund: the same arguments (sha256 " in shown.stdout
    assert "trust      granted orders.note" in shown.stdout
    listed = cli("trust", "cli", "--json")
    assert [(t["tool"], t["covers"]) for t in json.loads(listed.stdout)] == [
        ("orders.note", "any_arguments"), ("orders.refund", "same_arguments")]
    revoked = cli("trust", "cli", "--revoke", "orders.refund")
    assert revoked.returncode == 0, revoked.stderr
    assert "revoked every trust of 'orders.refund'" in revoked.stderr
    assert revoked.stdout == "  orders.note: any arguments, for the session\n"
    again = cli("trust", "cli", "--revoke", "orders.refund")
    assert again.returncode == 0 and "nothing to revoke" in again.stderr
    assert json.loads(cli("show", "cli", "--json").stdout)["trust"] == [
        {"tool": "orders.note", "covers": "any_arguments", "scope": "session", "detail": ""}]
    assert cli("trust", "nobody").returncode == 1
    # the revocation is the session's: an agent opening it asks again
    resumed = _agent(script, ran, store=SQLiteStore(path)).session_sync("cli")
    assert resumed.reply_sync("Refund O-2").status == "awaiting_approval"
    kinds = [e.to_json()["change"] for e in resumed.events_sync() if e.type == "trust_changed"]
    assert kinds == ["granted", "revoked"]


DESK_YAML = """\
phaseflow: 1
name: refunds
initial: work
state:
  refunded: {type: array}
tools:
  orders.refund: {approval: always}
phases:
  work:
    goal: Refund orders.
    tools: [orders.refund]
"""

DESK_TOOLS = '''\
def refund(order_id: str) -> str:
    return "refunded " + order_id


TOOLS = {"orders.refund": refund}
'''


def test_trust_is_listed_and_revoked_over_http_against_a_real_serve(tmp_path: Path) -> None:
    import httpx

    from tests.support.serve_server import new_session, serving, stored_events

    (tmp_path / "desk.yaml").write_text(DESK_YAML, encoding="utf-8")
    (tmp_path / "desk_tools.py").write_text(DESK_TOOLS, encoding="utf-8")
    (tmp_path / "script.yaml").write_text(
        "- calls: [{orders.refund: {order_id: O-1}}]\n- one\n"
        "- calls: [{orders.refund: {order_id: O-1}}]\n- again\n"
        "- calls: [{orders.refund: {order_id: O-1}}]\n- asked\n", encoding="utf-8")
    args = ["desk.yaml", "--tools", "desk_tools:TOOLS", "--provider", "scripted:script.yaml",
            "--store", str(tmp_path / "s.db")]
    json_only = {"Accept": "application/json"}
    with serving(args, tmp_path / "server.log", cwd=tmp_path) as server, \
            httpx.Client(base_url=server.base, timeout=30) as client:
        waiting = new_session(client, ["refund O-1"], workflow="refunds")
        sid = waiting["id"]
        assert client.get(f"/v1/sessions/{sid}/trust").json() == {"session_id": sid,
                                                                    "trust": []}
        call_id = waiting["pending_approval"]["call_id"]
        decided = client.post(f"/v1/sessions/{sid}/approvals/{call_id}",
                              json={"decision": "approve_session"}, headers=json_only)
        assert decided.status_code == 200, decided.text
        (entry,) = client.get(f"/v1/sessions/{sid}/trust").json()["trust"]
        assert (entry["tool"], entry["covers"], entry["scope"]) == (
            "orders.refund", "same_arguments", "session")
        again = client.post(f"/v1/sessions/{sid}/messages", json={"text": "again"},
                            headers=json_only)
        assert again.json()["status"] != "awaiting_approval", again.text
        revoked = client.delete(f"/v1/sessions/{sid}/trust/orders.refund")
        assert revoked.status_code == 200, revoked.text
        assert revoked.json()["trust"] == []
        twice = client.delete(f"/v1/sessions/{sid}/trust/orders.refund")
        assert twice.status_code == 404 and twice.json()["type"].endswith("not_trusted")
        assert client.get("/v1/sessions/nobody/trust").status_code == 404
        asked = client.post(f"/v1/sessions/{sid}/messages", json={"text": "once more"},
                            headers=json_only)
        assert asked.json()["status"] == "awaiting_approval", asked.text
        changes = [e for e in stored_events(client, sid) if e["type"] == "trust_changed"]
        assert [(e["tool"], e["change"]) for e in changes] == [("orders.refund", "revoked")]
