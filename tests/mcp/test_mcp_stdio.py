"""Catalogue tools implemented by a real MCP server started as a subprocess (stdio),
through the public API: ``Agent(mcp=...)``, a scripted model, sessions."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from phaseflow import Agent, load_workflow
from phaseflow.errors import ConfigError
from phaseflow.providers.scripted import ScriptedProvider
from phaseflow.session.events import Event, ToolResultEvent, TurnFinished
from tests.support.mcp_servers import (
    WORKFLOW,
    alive,
    asynchronous,
    kill,
    server_pids,
    stdio_servers,
    wait_for,
    wait_gone,
    write_json,
)


def _workflow(tmp_path: Path, text: str = WORKFLOW) -> Path:
    path = tmp_path / "desk.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def _results(events: list[Event] | tuple[Event, ...]) -> list[tuple[str, str, str]]:
    return [(e.name, e.status, e.content) for e in events if isinstance(e, ToolResultEvent)]


async def _send(session: Any, text: str) -> list[Event]:
    return [e async for e in session.send(text)]


@asynchronous
async def test_tools_of_a_stdio_server_in_a_session(tmp_path: Path, pids: Path) -> None:
    provider = ScriptedProvider([
        {"calls": [{"demo.lookup": {"email": "ada@example.com"}},
                   {"demo.fail": {"why": "not today"}},
                   {"demo.lookup": {"email": 42}}]},
        "Found Ada.",
    ])
    async with Agent(_workflow(tmp_path), provider,
                     mcp=write_json(tmp_path / "servers.json", stdio_servers(pids))) as agent:
        session = await agent.session("s1")
        events = await _send(session, "I am ada@example.com")
        [pid] = server_pids(pids)
        assert alive(pid)
        # the server's description and parameters are what the model is offered
        offered = {t.name: t for t in provider.requests[0].tools}
        assert set(offered) == {"demo.lookup", "demo.fail", "demo.slow", "demo.pid",
                                "demo.header", "demo.grow", "demo.retitle", "demo.shrink"}
        assert offered["demo.lookup"].description == "Find a customer by email."
        assert offered["demo.lookup"].parameters["required"] == ["email"]
        results = {(name, status): content for name, status, content in _results(events)}
        ok = results[("demo.lookup", "ok")]
        assert json.loads(ok) == {"customer_id": "C-ada", "name": "Ada"}
        # isError: an error result the model sees, with the server's message
        assert "McpToolError: Error executing tool fail: refused: not today" in results[
            ("demo.fail", "error")]
        # arguments are checked against the server's schema before any call
        assert results[("demo.lookup", "refused")] == (
            "Invalid arguments for demo.lookup: 'email' must be a string, got integer")
        # the catalogue's writes: the structured content's key is written to the state
        assert session.state["customer_id"] == "C-ada"
        assert [e.reply for e in events if isinstance(e, TurnFinished)] == ["Found Ada."]
    assert not alive(pid)  # closing the agent stopped the server


@asynchronous
async def test_a_killed_server_is_started_again_for_the_next_call(tmp_path: Path,
                                                                  pids: Path) -> None:
    provider = ScriptedProvider([
        {"calls": [{"demo.slow": {"seconds": 30}}]}, "It broke.",
        {"calls": [{"demo.pid": {}}]}, "Working again.",
    ])
    async with Agent(_workflow(tmp_path), provider, mcp=stdio_servers(pids)) as agent:
        session = await agent.session("s1")
        [first] = server_pids(pids)

        async def killer() -> None:
            await asyncio.to_thread(wait_for, pids / "slow-started")
            kill(first)

        killing = asyncio.create_task(killer())
        events = await _send(session, "go slowly")
        await killing
        [(name, status, content)] = _results(events)
        assert (name, status) == ("demo.slow", "error")
        assert "stopped during the call, so its outcome is unknown" in content
        events = await _send(session, "again")
        [(name, status, content)] = _results(events)
        assert status == "ok"
        second = int(content)
        assert second != first and server_pids(pids) == {first, second}
        assert agent.mcp.links["demo"].connections == 2
    assert not alive(second)


async def _until(condition: Callable[[], bool], seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        await asyncio.sleep(0.02)


@asynchronous
async def test_the_offered_tools_follow_the_server(tmp_path: Path, pids: Path) -> None:
    """The server says its list changed: the list is read again (same connection), and
    the next request offers what the server offers now."""
    provider = ScriptedProvider([
        {"calls": [{"demo.retitle": {}}]}, "Retitled.",
        {"calls": [{"demo.shrink": {}}]}, "Shrunk.",
        {"calls": [{"demo.lookup": {"email": "ada@example.com"}}]}, "Refused.",
    ])
    async with Agent(_workflow(tmp_path), provider, mcp=stdio_servers(pids)) as agent:
        link = agent.mcp.links["demo"]
        session = await agent.session("s1")
        assert agent.tools["demo.lookup"].description == "Find a customer by email."
        await _send(session, "retitle")
        await _until(lambda: link.changes >= 1)  # the agent's tools and views followed
        assert agent.tools["demo.lookup"].description == "Look a customer up (v2)."
        await _send(session, "shrink")
        offered = {t.name: t.description for t in provider.requests[2].tools}
        assert offered["demo.lookup"] == "Look a customer up (v2)."
        await _until(lambda: link.changes >= 2)
        assert "demo.lookup" not in agent.tools
        assert "lookup" not in agent.mcp.tools("demo")
        events = await _send(session, "look her up")
        assert "demo.lookup" not in {t.name for t in provider.requests[4].tools}
        [(name, status, content)] = _results(events)
        assert (name, status) == ("demo.lookup", "refused")  # never sent to the server
        assert "demo.lookup" in content
        assert link.connections == 1 and link.listings >= 3  # read again, not reconnected


@asynchronous
async def test_a_new_tool_is_offered_without_a_catalogue(tmp_path: Path, pids: Path) -> None:
    text = WORKFLOW.split("tools:\n")[0] + "phases:" + WORKFLOW.split("phases:")[1]
    provider = ScriptedProvider([{"calls": [{"demo.grow": {}}]}, "Grown.",
                                 {"calls": [{"demo.fresh": {}}]}, "Fresh."])
    async with Agent(_workflow(tmp_path, text), provider, mcp=stdio_servers(pids)) as agent:
        session = await agent.session("s1")
        assert "demo.fresh" not in agent.tools
        await _send(session, "grow")
        await _until(lambda: agent.mcp.links["demo"].changes >= 1)
        assert "demo.fresh" in agent.tools
        [(name, status, content)] = _results(await _send(session, "fresh"))
        assert (name, status, content) == ("demo.fresh", "ok", "fresh!")


@asynchronous
async def test_cancelling_a_turn_during_a_call(tmp_path: Path, pids: Path,
                                              capfd: pytest.CaptureFixture[str],
                                              caplog: pytest.LogCaptureFixture) -> None:
    # (the cancelled turn never asks for the text after its calls)
    provider = ScriptedProvider([{"calls": [{"demo.slow": {"seconds": 30}}]},
                                 {"calls": [{"demo.pid": {}}]}, "Still here."])
    agent = Agent(_workflow(tmp_path), provider, mcp=stdio_servers(pids))
    try:
        session = await agent.session("s1")

        async def cancel_when_started() -> None:
            await asyncio.to_thread(wait_for, pids / "slow-started")
            session.cancel()

        cancelling = asyncio.create_task(cancel_when_started())
        started = time.monotonic()
        events = await _send(session, "go slowly")
        await cancelling
        assert time.monotonic() - started < 25  # not the 30 s the call would take
        assert [e.status for e in events if isinstance(e, TurnFinished)] == ["cancelled"]
        assert [r[1] for r in _results(events)] == ["cancelled"]
        await asyncio.to_thread(wait_for, pids / "slow-cancelled")  # on the server too
        # the connection survived the cancellation: the next call uses it
        events = await _send(session, "again")
        assert [r[1] for r in _results(events)] == ["ok"]
        assert agent.mcp.links["demo"].connections == 1
    finally:
        await agent.aclose()
    await agent.aclose()  # twice: nothing happens
    # no teardown errors: nothing printed, nothing logged as a warning or worse
    assert "Traceback" not in capfd.readouterr().err
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_server_that_does_not_start_is_refused_by_name(tmp_path: Path, pids: Path) -> None:
    provider = ScriptedProvider(["Hi."])
    workflow = _workflow(tmp_path)
    with pytest.raises(ConfigError) as raised:
        Agent(workflow, provider, mcp=stdio_servers(pids, "crash", name="broken"))
    message = str(raised.value)
    assert "MCP server 'broken'" in message and "did not start" in message
    assert "the test server refuses to start (crash mode)" in message  # its stderr
    started = time.monotonic()
    with pytest.raises(ConfigError, match=r"MCP server 'demo' .* did not answer within 2 s"):
        Agent(workflow, provider, mcp=stdio_servers(pids, "hang", timeout=2))
    assert time.monotonic() - started < 20
    with pytest.raises(ConfigError, match=r"MCP server 'demo' \(/no/such/server\) did not "
                                          r"start: no such command"):
        Agent(workflow, provider, mcp={"mcpServers": {"demo": {"command": "/no/such/server"}}})


def test_catalogue_mistakes_are_refused_at_start(tmp_path: Path, pids: Path) -> None:
    provider = ScriptedProvider(["Hi."])
    missing = _workflow(tmp_path, WORKFLOW.replace("demo.fail: {}", "demo.fial: {}").replace(
        "demo.*", "demo.lookup"))
    with pytest.raises(ConfigError, match=r"catalogue tool 'demo\.fial': MCP server 'demo' has "
                                          r"no tool 'fial'"):
        Agent(missing, provider, mcp=stdio_servers(pids))

    def lookup(email: str) -> str:
        return email

    with pytest.raises(ConfigError, match=r"'demo\.lookup' is given as a host tool"):
        Agent(_workflow(tmp_path), provider, tools={"demo.lookup": lookup},
              mcp=stdio_servers(pids))


def test_sync_use_and_no_catalogue(tmp_path: Path, pids: Path) -> None:
    """Without a catalogue every server tool is offered as NAME.TOOL, beside the host's
    Python tools; the synchronous twins work too (each on a loop of its own, the servers
    on theirs)."""
    text = WORKFLOW.split("tools:\n")[0] + "phases:" + WORKFLOW.split("phases:")[1].replace(
        '["demo.*"]', '["demo.*", "notes.*"]')
    workflow = load_workflow(str(_workflow(tmp_path, text)))
    provider = ScriptedProvider([{"calls": [{"demo.meta": {}}, {"notes.add": {"text": "hi"}}]},
                                 "Done.", "Bye."])

    def add(text: str) -> str:
        return f"noted: {text}"

    with Agent(workflow, provider, tools={"notes.add": add}, mcp=stdio_servers(pids)) as agent:
        assert {"demo.lookup", "demo.pid", "demo.fail", "demo.meta", "notes.add"} <= set(
            agent.tools)
        session = agent.session_sync("s1")
        assert session.reply_sync("meta please") == "Done."
        results = {m.call_id: m.content for m in session.history if hasattr(m, "call_id")}
        assert "noted: hi" in results.values()
        # every call carries the session's idempotency key in its request's _meta
        [call] = [c for m in session.history for c in getattr(m, "tool_calls", ())
                  if c.name == "demo.meta"]
        [result] = [m for m in session.history if getattr(m, "call_id", None) == call.id]
        assert isinstance(result.content, str)
        sent = json.loads(result.content)
        assert sent["phaseflow/idempotency-key"] == f"s1:{call.id}"
        assert session.reply_sync("thanks") == "Bye."
        [pid] = server_pids(pids)
        assert alive(pid)
    assert not alive(pid)


def test_a_host_killed_outright_leaves_no_server(tmp_path: Path, pids: Path) -> None:
    """SIGKILL runs no cleanup at all: the server sees its input end, and exits."""
    import subprocess
    import sys

    servers = write_json(tmp_path / "servers.json", stdio_servers(pids))
    code = ("import sys, time\n"
            "from phaseflow import Agent, ScriptedProvider\n"
            f"agent = Agent({str(_workflow(tmp_path))!r}, ScriptedProvider(['hi']), "
            f"mcp={str(servers)!r})\n"
            "print('ready', flush=True)\n"
            "time.sleep(120)\n")
    host = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert host.stdout is not None and host.stdout.readline() == "ready\n"
        [server] = server_pids(pids)
        assert alive(server)
        kill(host.pid)
        host.wait(60)
    finally:
        if host.poll() is None:
            host.kill()
            host.wait()
    assert not wait_gone({server}), "the server outlived its killed host"


@asynchronous
async def test_approval_and_timeout_come_from_the_catalogue(tmp_path: Path,
                                                           pids: Path) -> None:
    text = WORKFLOW.replace("  demo.pid: {}\n", "  demo.pid: {approval: always}\n").replace(
        "  demo.slow: {timeout: 60}\n", "  demo.slow: {timeout: 1}\n")
    provider = ScriptedProvider([
        {"calls": [{"demo.slow": {"seconds": 30}}]}, "Too slow.",
        {"calls": [{"demo.pid": {}}]}, "Approved.",
    ])
    async with Agent(_workflow(tmp_path, text), provider, mcp=stdio_servers(pids)) as agent:
        session = await agent.session("s1")
        started = time.monotonic()
        [(name, status, content)] = _results(await _send(session, "slow"))
        assert (name, status, content) == ("demo.slow", "error", "demo.slow timed out after 1 s")
        assert time.monotonic() - started < 20
        await asyncio.to_thread(wait_for, pids / "slow-cancelled")  # cancelled on the server
        reply = await session.reply("my pid?")
        assert reply.status == "awaiting_approval" and reply.approval is not None
        assert reply.approval.name == "demo.pid"
        events = [e async for e in session.resolve(reply.approval.call_id, "approve")]
        [(name, status, content)] = _results(events)
        assert (name, status) == ("demo.pid", "ok")
        assert int(content) in server_pids(pids)
        assert agent.mcp.links["demo"].connections == 1  # the timeout cancelled one call only


FRONT = """\
phaseflow: 1
name: front
initial: chat
uses: {desk: desk.yaml}
state:
  go: {type: boolean}
tools:
  front.hello: {}
phases:
  chat:
    goal: Chat until the customer wants the desk.
    collect: [go]
    transitions:
      - to: inside
        when: state.go
  inside:
    goal: The desk.
    call: desk
"""


@asynchronous
async def test_a_called_workflow_s_server_tools_are_attached(tmp_path: Path,
                                                              pids: Path) -> None:
    """The server tools a callee's catalogue names are the session's, though the caller
    has a catalogue of its own without them."""
    _workflow(tmp_path)
    (tmp_path / "front.yaml").write_text(FRONT, encoding="utf-8")
    provider = ScriptedProvider([{"calls": [{"record": {"go": True}}]}, "In.",
                                 {"calls": [{"demo.lookup": {"email": "ada@example.com"}}]},
                                 "Found Ada."])
    async with Agent(tmp_path / "front.yaml", provider, mcp=stdio_servers(pids)) as agent:
        assert agent.missing_tools() == ("front.hello",)
        session = await agent.session("s1")
        await _send(session, "Hi")
        assert session.path == ("front", "inside", "mcp-desk", "work")
        [(name, status, content)] = _results(await _send(session, "I am ada@example.com"))
        assert (name, status) == ("demo.lookup", "ok")
        assert json.loads(content)["customer_id"] == "C-ada"
