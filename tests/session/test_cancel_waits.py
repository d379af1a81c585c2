"""A cancel that waits for its tools, with real threads: a cancelled turn stays
``cancelling`` until every sync tool's thread of it has ended (its result kept) or
reached its deadline (``unknown``); a message sent meanwhile waits for it, or is
refused (``busy="reject"``); no effect of the cancelled turn lands after the next turn
has started."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import phaseflow
from phaseflow.providers import ScriptedProvider
from phaseflow.session import Agent, SessionBusy
from phaseflow.session import events as ev
from phaseflow.stores import SQLiteStore
from phaseflow.tools import tool

WORKFLOW = """\
phaseflow: 1
name: desk
initial: work
tools:
  slow.block: {writes: [done]}
state:
  done: {type: boolean}
phases:
  work:
    goal: Work.
    tools: [slow.block]
"""

#: what happened, in order, from every thread: the tool's effect and the model's requests
LOG: list[str] = []
STARTED = threading.Event()
RELEASE = threading.Event()


def reset() -> None:
    LOG.clear()
    STARTED.clear()
    RELEASE.clear()


@tool(name="slow.block", timeout=30)
def block() -> dict[str, Any]:
    """Block until released (a sync tool: it runs in a thread of its own)."""
    STARTED.set()
    RELEASE.wait(30)
    LOG.append("effect")
    return {"done": True}


@tool(name="slow.block", timeout=1.0)
def stuck() -> str:
    """Block past its deadline."""
    STARTED.set()
    RELEASE.wait(30)
    LOG.append("late effect")
    return "too late"


class Logged(ScriptedProvider):
    async def stream(self, request: Any) -> Any:
        LOG.append(f"request {len(self.requests) + 1}")
        async for item in super().stream(request):
            yield item


def agent(fn: Any = block, **options: Any) -> Agent:
    script = [{"calls": [{"slow.block": {}}]}, "after the cancel"]
    return Agent(phaseflow.load_workflow_text(WORKFLOW), Logged(script), tools=[fn],
                 **options)


async def until(check: Any, patience: float = 20.0) -> None:
    """Wait until ``check()`` holds (a test that fails, never one that hangs)."""
    deadline = time.monotonic() + patience
    while not check():
        assert time.monotonic() < deadline, "never happened"
        await asyncio.sleep(0.005)


async def cancel_when_the_tool_runs(session: Any) -> None:
    await until(STARTED.is_set)
    session.cancel()


def test_a_cancelled_turn_is_cancelling_until_its_tool_s_thread_ends() -> None:
    reset()

    async def run() -> None:
        session = await agent().session("s")
        turn = asyncio.ensure_future(session.reply("go"))
        await cancel_when_the_tool_runs(session)
        await until(lambda: session.status == "cancelling")
        with pytest.raises(SessionBusy):
            async for _ in session.send("now?", busy="reject"):
                pass
        assert (await session.events())[-1].type == "turn_cancelling"
        LOG.append("released")
        RELEASE.set()
        with pytest.raises(Exception, match="cancelled"):
            await turn
        assert session.status == "idle"
        events = await session.events()
        result = next(e for e in events if isinstance(e, ev.ToolResultEvent))
        # the tool ended: its result and its write are kept, as for a call that
        # finished before the cancel
        assert result.status == "ok" and dict(session.state)["done"] is True
        assert [e.tools for e in events if isinstance(e, ev.TurnCancelling)] == [
            ("slow.block",)]
        assert events[-1].type == "turn_finished" and events[-1].status == "cancelled"

    asyncio.run(run())
    assert LOG == ["request 1", "released", "effect"]


def test_a_message_sent_while_cancelling_waits_for_the_tool() -> None:
    """Queued while the cancelled turn waits for its tool, the message starts a turn
    only after that tool ended: its effect never lands after the next turn's first
    request."""
    reset()

    async def run() -> None:
        session = await agent().session("s")
        turn = asyncio.ensure_future(session.reply("go"))
        await cancel_when_the_tool_runs(session)
        await until(lambda: session.status == "cancelling")
        queued = await session.reply("and now?")
        assert queued.status == "queued"
        await asyncio.sleep(0.1)
        assert session.status == "cancelling" and LOG == ["request 1"]
        RELEASE.set()
        await asyncio.gather(turn, return_exceptions=True)
        assert await session.reply("go on") == "after the cancel"
        users = [m.content for m in session.transcript if m.role.value == "user"]
        assert users == ["go", "and now?\n\ngo on"]

    asyncio.run(run())
    assert LOG == ["request 1", "effect", "request 2"]


def test_a_tool_past_its_deadline_is_given_up_on_as_unknown() -> None:
    reset()

    async def run() -> None:
        session = await agent(stuck).session("s")
        turn = asyncio.ensure_future(session.reply("go"))
        await cancel_when_the_tool_runs(session)
        started = time.monotonic()
        await asyncio.gather(turn, return_exceptions=True)
        assert time.monotonic() - started < 5
        assert session.status == "idle"
        result = next(e for e in await session.events() if isinstance(e, ev.ToolResultEvent))
        assert result.status == "unknown" and "given up on" in result.content

    asyncio.run(run())
    RELEASE.set()


PROJECT_TOOLS = '''\
import os
import time

from phaseflow.tools import tool


@tool(name="slow.block", timeout=30)
def block() -> dict:
    """Block a while (a sync tool: a thread of its own)."""
    open(os.environ["DESK_STARTED"], "w").close()
    time.sleep(float(os.environ.get("DESK_BLOCK", "3")))
    return {"done": True}


TOOLS = [block]
'''


def project(folder: Path) -> dict[str, str]:
    from tests.support.phaseflow_cli import cli_env

    (folder / "desk.yaml").write_text(WORKFLOW, encoding="utf-8")
    (folder / "desk_tools.py").write_text(PROJECT_TOOLS, encoding="utf-8")
    (folder / "script.yaml").write_text("- calls: [{slow.block: {}}]\n- Done.\n",
                                        encoding="utf-8")
    return {**cli_env(), "DESK_STARTED": str(folder / "started"), "DESK_BLOCK": "3.5"}


def wait_for(path: Path, patience: float = 60) -> None:
    deadline = time.monotonic() + patience
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def test_run_says_what_it_still_waits_for_after_ctrl_c(tmp_path: Path) -> None:
    import signal
    import subprocess

    from tests.support.phaseflow_cli import PHASEFLOW

    env = project(tmp_path)
    child = subprocess.Popen(
        [*PHASEFLOW, "run", "desk.yaml", "--tools", "desk_tools:TOOLS", "--provider",
         "scripted:script.yaml", "--store", "memory", "-m", "go"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(tmp_path / "started")
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=60)
    assert "cancelling the turn" in out
    assert "still stopping: slow.block" in out, out + err
    assert out.index("still stopping: slow.block") < out.index("[turn cancelled]")
    assert child.returncode == 130


def test_the_http_api_shows_cancelling_until_the_tool_ended(tmp_path: Path) -> None:
    import httpx

    from tests.support.serve_server import serving

    env = project(tmp_path)
    args = ["desk.yaml", "--tools", "desk_tools:TOOLS", "--provider", "scripted:script.yaml",
            "--store", str(tmp_path / "s.db")]
    with serving(args, tmp_path / "server.log", cwd=tmp_path, env=env) as server, \
            httpx.Client(base_url=server.base, timeout=60) as client:
        sid = client.post("/v1/sessions", json={"workflow": "desk"}).json()["id"]
        answers: list[httpx.Response] = []
        sender = threading.Thread(target=lambda: answers.append(client.post(
            f"/v1/sessions/{sid}/messages", json={"text": "go"},
            headers={"Accept": "application/json"})))
        sender.start()
        wait_for(tmp_path / "started")
        cancelled = client.post(f"/v1/sessions/{sid}/cancel")
        assert cancelled.status_code == 202, cancelled.text
        seen: list[str] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            status = client.get(f"/v1/sessions/{sid}").json()["status"]
            if not seen or seen[-1] != status:
                seen.append(status)
            if status == "idle":
                break
            time.sleep(0.05)
        sender.join(60)
        assert "cancelling" in seen and seen[-1] == "idle", seen
        events = client.get(f"/v1/sessions/{sid}/events", params={"follow": "false"}).json()
        kinds = [e["type"] for e in events]
        assert "turn_cancelling" in kinds
        result = next(e for e in events if e["type"] == "tool_result")
        assert result["status"] == "ok"  # it ended: its result is kept


def test_a_worker_that_stops_while_cancelling_leaves_the_turn_to_be_ended(
        tmp_path: Path) -> None:
    """The worker dies while its cancelled turn waits for a thread: the stored session
    is ``cancelling``; opened again, the turn ends ``cancelled``, the call ``unknown``
    (it may have run), and the session takes messages again."""
    reset()
    path = tmp_path / "s.db"

    async def die_while_cancelling() -> None:
        session = await agent(store=SQLiteStore(path)).session("s")
        turn = asyncio.ensure_future(session.reply("go"))
        await cancel_when_the_tool_runs(session)
        await until(lambda: session.status == "cancelling")
        turn.cancel()  # the worker dies here
        await asyncio.gather(turn, return_exceptions=True)

    asyncio.run(die_while_cancelling())
    RELEASE.set()
    again = agent(store=SQLiteStore(path)).session_sync("s")
    assert again.status == "cancelling"
    again.recover_sync(force=True)
    assert again.status == "idle"
    events = again.events_sync()
    result = next(e for e in events if isinstance(e, ev.ToolResultEvent))
    assert result.status == "unknown"
    assert events[-1].type == "turn_finished" and events[-1].status == "cancelled"
