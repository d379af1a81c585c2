"""The session under attack from its tools: a sync tool that overruns its timeout (its
late writes are dropped), a tool whose own code times out, and a host task cancelled
while tools run (they stop with it, nothing left behind)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import phaseflow
from phaseflow.providers import ScriptedProvider
from phaseflow.session import Agent
from phaseflow.session.events import Event
from phaseflow.tools import tool
from tests.support.hostile_desk import (
    NAPPED,
    RAN,
    TOOLS,
    collect,
    collect_async,
    napper,
    pay,
    workflow,
)


def test_a_sync_tool_s_timeout_is_enforced_and_its_writes_are_dropped() -> None:
    RAN.clear()
    NAPPED.clear()
    provider = ScriptedProvider([{"calls": [{"napper": {"seconds": 1.5}}]}, "ok",
                                 "still here"])
    session = Agent(workflow(), provider, tools=TOOLS).session_sync("s")

    async def scenario() -> tuple[list[Event], list[Event]]:
        events = [e async for e in session.send("nap")]
        # the turn did not wait for the function: it is still asleep in its thread
        assert not NAPPED.is_set()
        # the loop is alive while the thread finishes: its late result is dropped
        await asyncio.get_running_loop().run_in_executor(None, NAPPED.wait, 10)
        await asyncio.sleep(0.05)
        assert "note" not in session.state
        return events, [e async for e in session.send("and now?")]

    events, after = asyncio.run(asyncio.wait_for(scenario(), 20))
    result = next(e for e in events if e.type == "tool_result")
    # a sync tool's thread runs on: its outcome is not known, and the model is told so
    assert result.status == "unknown" and "timed out after 0.2 s" in result.content
    assert "do not assume it failed" in result.content
    assert NAPPED.is_set() and RAN == ["napper"]
    assert "note" not in session.state
    assert [e.reply for e in events if e.type == "turn_finished"] == ["ok"]
    assert [e.reply for e in after if e.type == "turn_finished"] == ["still here"]


@tool
def flaky(q: str) -> str:
    """A tool whose own socket times out."""
    raise TimeoutError("socket timed out")


@tool(timeout=5)
def later(q: str) -> Any:
    """A sync tool with a timeout that returns an awaitable."""
    async def value() -> str:
        return f"later {q}"
    return value()


def test_a_tool_s_own_timeout_error_is_its_failure_not_the_deadline() -> None:
    wf = phaseflow.load_workflow_text(
        "phaseflow: 1\nname: t\ninitial: a\nphases:\n  a:\n    goal: g\n"
        "    tools: [flaky, later]\n")
    provider = ScriptedProvider([{"calls": [{"flaky": {"q": "x"}}, {"later": {"q": "y"}}]},
                                 "done"])
    session = Agent(wf, provider, tools=[flaky, later]).session_sync("s")
    events = collect(session.send("go"))
    results = {e.name: (e.status, e.content) for e in events if e.type == "tool_result"}
    assert results["flaky"] == ("error", "flaky failed: TimeoutError: socket timed out")
    assert results["later"] == ("ok", "later y")  # awaited, in a thread or not
    assert session.status == "idle"


def test_a_sync_tool_within_its_timeout_writes_as_usual() -> None:
    provider = ScriptedProvider([{"calls": [{"napper": {"seconds": 0}}]}, "ok"])
    session = Agent(workflow(), provider, tools=TOOLS).session_sync("s")
    events = collect(session.send("nap"))
    assert [e.status for e in events if e.type == "tool_result"] == ["ok"]
    assert session.state.get("note") == "slept"


def test_a_host_task_cancelled_while_tools_run_stops_them_and_leaves_nothing_behind(
        caplog: pytest.LogCaptureFixture) -> None:
    """The host's own task is cancelled (a server shutting down, a client's request
    dropped by its framework) while a tool group runs: the tools are cancelled with it,
    not left running, and nothing is reported as an exception nobody retrieved."""
    stopped = threading.Event()

    @tool
    async def lookup(q: str) -> str:
        """Look something up, slowly."""
        try:
            await asyncio.sleep(3600)
        finally:
            stopped.set()
        return "never"

    async def scenario() -> None:
        provider = ScriptedProvider([{"calls": [{"lookup": {"q": "a"}},
                                                {"lookup": {"q": "b"}}]}, "done"])
        session = await Agent(workflow(), provider, tools=[pay, napper, lookup]).session("s")
        turn = asyncio.ensure_future(collect_async(session.send("go")))
        for _ in range(200):
            await asyncio.sleep(0.01)
            if session.status == "running" and session._runner.core.group is not None:
                break
        await asyncio.sleep(0.05)
        turn.cancel()
        await asyncio.gather(turn, return_exceptions=True)
        assert stopped.is_set()

    asyncio.run(scenario())
    import gc

    gc.collect()
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]
