"""Catalogue tools implemented by a real MCP server on loopback over Streamable HTTP (a
separate process), through ``Agent(mcp=...)``: calls, an expired session initialised
again, a server restarted behind the same URL."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from pathlib import Path

import pytest

from phaseflow import Agent
from phaseflow.errors import ConfigError
from phaseflow.providers.scripted import ScriptedProvider
from phaseflow.session.events import ToolResultEvent
from tests.support.mcp_servers import WORKFLOW, asynchronous, free_port, http_server


def _workflow(tmp_path: Path) -> Path:
    path = tmp_path / "desk.yaml"
    path.write_text(WORKFLOW, encoding="utf-8")
    return path


async def _results(session: object, text: str) -> list[tuple[str, str, str]]:
    return [(e.name, e.status, e.content) async for e in session.send(text)  # type: ignore[attr-defined]
            if isinstance(e, ToolResultEvent)]


@asynchronous
async def test_tools_over_streamable_http(tmp_path: Path) -> None:
    provider = ScriptedProvider([
        {"calls": [{"demo.lookup": {"email": "bo@example.com"}}, {"demo.fail": {"why": "x"}},
                   {"demo.header": {"name": "x-test"}}]},
        "Found Bo.",
    ])
    with http_server("http") as (url, _process):
        servers = {"mcpServers": {"demo": {"url": url, "headers": {"X-Test": "yes"}}}}
        async with Agent(_workflow(tmp_path), provider, mcp=servers) as agent:
            session = await agent.session("s1")
            results = {(n, s): c for n, s, c in await _results(session, "I am bo@example.com")}
            assert json.loads(results[("demo.lookup", "ok")])["customer_id"] == "C-bo"
            assert "refused: x" in results[("demo.fail", "error")]
            assert results[("demo.header", "ok")] == "yes"  # the configured header was sent
            assert session.state["customer_id"] == "C-bo"
            assert agent.mcp.links["demo"].connections == 1


@asynchronous
async def test_an_expired_session_is_initialised_again(tmp_path: Path) -> None:
    """A 2025 server (the initialize handshake, Mcp-Session-Id) forgets the session (404):
    the call it refused unseen is sent again on a new session, and succeeds."""
    provider = ScriptedProvider([{"calls": [{"demo.pid": {}}]}, "One.",
                                 {"calls": [{"demo.pid": {}}]}, "Two."])
    with http_server("legacy-http") as (url, process):
        async with Agent(_workflow(tmp_path), provider,
                         mcp={"mcpServers": {"demo": {"url": url}}}) as agent:
            link = agent.mcp.links["demo"]
            session = await agent.session("s1")
            [(_, status, first)] = await _results(session, "one")
            assert status == "ok" and int(first) == process.pid
            await asyncio.to_thread(urllib.request.urlopen, url.replace("/mcp", "/expire"),
                                    b"", 30)  # the server forgets the session
            [(_, status, second)] = await _results(session, "two")
            assert (status, second) == ("ok", first)
            assert link.connections == 2  # a new session, same server


@asynchronous
async def test_a_restarted_http_server_is_reached_again(tmp_path: Path) -> None:
    provider = ScriptedProvider([{"calls": [{"demo.pid": {}}]}, "One.",
                                 {"calls": [{"demo.pid": {}}]}, "Two."])
    port = free_port()
    with http_server("http", port=port) as (url, process):
        agent = Agent(_workflow(tmp_path), provider,
                      mcp={"mcpServers": {"demo": {"url": url, "timeout": 20}}})
        session = await agent.session("s1")
        [(_, status, first)] = await _results(session, "one")
        assert (status, int(first)) == ("ok", process.pid)
    try:
        with http_server("http", port=port) as (url, process):
            started = time.monotonic()
            [(_, status, second)] = await _results(session, "two")
            assert (status, int(second)) == ("ok", process.pid)
            assert int(second) != int(first)
            assert time.monotonic() - started < 30
            assert agent.mcp.links["demo"].connections == 2
    finally:
        await agent.aclose()


def test_a_server_that_cannot_be_reached_is_refused_without_its_secrets(tmp_path: Path
                                                                       ) -> None:
    url = f"http://user:s3cret@127.0.0.1:{free_port()}/mcp?token=t0ken"
    with pytest.raises(ConfigError) as raised:
        Agent(_workflow(tmp_path), ScriptedProvider(["Hi."]),
              mcp={"mcpServers": {"demo": {"url": url, "headers": {"Authorization": "h1dden"},
                                           "timeout": 10}}})
    message = str(raised.value)
    assert message.startswith("MCP server 'demo' (http://127.0.0.1:")
    assert "could not be reached" in message
    assert not any(secret in message for secret in ("s3cret", "t0ken", "h1dden"))
