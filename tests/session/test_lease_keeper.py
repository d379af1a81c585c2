"""A turn keeps its lease while it waits between commits: a tool that runs longer than
the lease finds the lease still this worker's, unexpired, when it ends; a sync host's
turns (each ``reply_sync`` an event loop of its own) keep it the same way; once the turn
is over the lease is let go (the keeper renews nothing after the turn's last commit)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from phaseflow import load_workflow_text
from phaseflow.providers.scripted import ScriptedProvider
from phaseflow.session import Agent
from phaseflow.stores.base import Lease
from phaseflow.stores.sqlite import SQLiteStore
from phaseflow.tools import tool

WORKFLOW = """
phaseflow: 1
name: patient
initial: talk
tools:
  slow:
    description: Take longer than the lease lasts
phases:
  talk:
    goal: Answer.
    tools: [slow]
"""


def test_a_tool_longer_than_the_lease_ends_with_the_lease_still_held(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    seen: list[tuple[Lease | None, float]] = []

    @tool
    async def slow() -> str:
        """Wait three leases."""
        await asyncio.sleep(0.6)
        seen.append((await store.lease("s"), time.time()))
        return "done"

    script = ScriptedProvider(
        [{"calls": [{"slow": {}}]}, "First.", {"calls": [{"slow": {}}]}, "Second."]
    )
    agent = Agent(
        load_workflow_text(WORKFLOW), script, tools=[slow], store=store, lease=0.2, worker="w1"
    )
    session = agent.session_sync("s")
    assert session.reply_sync("one") == "First."
    assert session.reply_sync("two") == "Second."  # another event loop
    assert len(seen) == 2
    for lease, now in seen:  # renewed while the tool ran: unexpired, this worker's
        assert lease is not None and lease.owner == "w1" and lease.expires > now
    time.sleep(0.3)  # the turn is over: nothing renews the lease, nobody holds it
    held = asyncio.run(store.lease("s"))
    assert held is None or held.expires < time.time()
