"""``Agent.fire_timers(limit=, concurrency=)`` on a real SQLite store: the due sessions
read a page at a time with their records, their timer turns run at once (never more
than ``concurrency``), the soonest ``limit`` of them; sessions another worker holds
passed over without holding up the ones after them; a damaged session named in the
answer's ``problems`` while the others fire; and ``Agent.session_from`` opening a
page's record, caught up by the lease when another worker committed since."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from phaseflow import load_workflow_text
from phaseflow.errors import ConfigError
from phaseflow.providers.protocol import ProviderRequest
from phaseflow.providers.scripted import ScriptedProvider
from phaseflow.session import Agent
from phaseflow.stores.sqlite import SQLiteStore

WORKFLOW = """
phaseflow: 1
name: waiter
initial: wait
state:
  followed: {type: integer, default: 0}
phases:
  wait:
    goal: Wait for the customer's answer.
    transitions:
      - to: follow_up
        after: 10m
  follow_up:
    goal: Follow up with the customer.
    on_enter:
      - set: {followed: 1}
    terminal: true
"""


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


class Gauged(ScriptedProvider):
    """The scripted model, counting how many of its requests run at once."""

    def __init__(self, replies: list[str]) -> None:
        super().__init__(replies)
        self.at_once = 0
        self.most = 0

    async def stream(self, request: ProviderRequest) -> AsyncIterator[Any]:
        self.at_once += 1
        self.most = max(self.most, self.at_once)
        try:
            await asyncio.sleep(0.005)
            async for part in super().stream(request):
                yield part
        finally:
            self.at_once -= 1


def _agent(path: Path, clock: Clock, provider: ScriptedProvider, worker: str) -> Agent:
    return Agent(load_workflow_text(WORKFLOW), provider, store=SQLiteStore(str(path)),
                 clock=clock, phase_clock=clock, worker=worker)


async def _sessions(path: Path, clock: Clock, count: int) -> Agent:
    """``count`` sessions, one turn each, a millisecond apart (``s000``'s timer is due
    first), every timer due."""
    replies = ["Hello.", "Welcome back.", "Glad to hear."]
    agent = _agent(path, clock, ScriptedProvider(replies), "setup")
    for k in range(count):
        await (await agent.session(f"s{k:03d}")).reply("hi")
        clock.now += 0.001
    clock.now += 601
    return agent


async def _followed(agent: Agent, count: int) -> list[str]:
    return [f"s{k:03d}" for k in range(count)
            if (await agent.session(f"s{k:03d}")).phase == "follow_up"]


def test_a_page_of_timer_turns_runs_at_once_never_more_than_the_concurrency(
        tmp_path: Path) -> None:
    async def body() -> None:
        clock = Clock()
        setup = await _sessions(tmp_path / "s.db", clock, 40)
        provider = Gauged(["Any news?"] * 40)
        agent = _agent(tmp_path / "s.db", clock, provider, "timers")
        fired = await agent.fire_timers(concurrency=8)
        assert (fired, fired.problems) == (40, ())
        assert 1 < provider.most <= 8
        assert len(await _followed(setup, 40)) == 40
        assert await agent.fire_timers() == 0  # each once
    asyncio.run(body())


def test_the_soonest_limit_timers_fire(tmp_path: Path) -> None:
    async def body() -> None:
        clock = Clock()
        setup = await _sessions(tmp_path / "s.db", clock, 10)
        agent = _agent(tmp_path / "s.db", clock, ScriptedProvider(["Any news?"] * 10), "t")
        assert await agent.fire_timers(limit=4, concurrency=3) == 4
        assert await _followed(setup, 10) == ["s000", "s001", "s002", "s003"]
    asyncio.run(body())


def test_sessions_another_worker_holds_do_not_hold_up_the_ones_after_them(
        tmp_path: Path) -> None:
    async def body() -> None:
        clock = Clock()
        setup = await _sessions(tmp_path / "s.db", clock, 9)
        for k in range(6):  # the six soonest: a live worker holds each
            assert await setup.store.acquire(f"s{k:03d}", "busy-worker", 3600, clock())
        agent = _agent(tmp_path / "s.db", clock, ScriptedProvider(["Any news?"] * 9), "t")
        # pages of two (concurrency 2): three pages of held sessions come first
        assert await agent.fire_timers(concurrency=2) == 3
        assert await _followed(setup, 9) == ["s006", "s007", "s008"]
    asyncio.run(body())


def test_a_damaged_session_is_named_and_the_others_fire(tmp_path: Path) -> None:
    async def body() -> None:
        clock = Clock()
        setup = await _sessions(tmp_path / "s.db", clock, 5)
        import sqlite3

        db = sqlite3.connect(tmp_path / "s.db", isolation_level=None)
        db.execute("UPDATE sessions SET snapshot = '[1, 2' WHERE id = 's002'")
        db.close()
        agent = _agent(tmp_path / "s.db", clock, ScriptedProvider(["Any news?"] * 5), "t")
        fired = await agent.fire_timers(concurrency=2)
        assert fired == 4
        assert [sid for sid, _ in fired.problems] == ["s002"]
        assert "'s002'" in fired.problems[0][1]
        for k in (0, 1, 3, 4):
            assert (await setup.session(f"s{k:03d}")).phase == "follow_up"
    asyncio.run(body())


def test_a_page_record_another_worker_moved_on_is_caught_up_before_its_timer(
        tmp_path: Path) -> None:
    async def body() -> None:
        clock = Clock()
        setup = await _sessions(tmp_path / "s.db", clock, 1)
        agent = _agent(tmp_path / "s.db", clock, ScriptedProvider(["Any news?"]), "t")
        [due] = await agent.store.due_sessions(clock(), 10)
        assert due.record is not None
        # meanwhile the user wrote: that turn spends the timer
        await (await setup.session("s000")).reply("I'm back")
        stale = agent.session_from(due.record)
        assert stale.turn == 1  # as the page read it: no second read
        assert await stale.fire_timer() == ()  # the lease said it moved on: spent
        assert (stale.turn, stale.phase) == (2, "follow_up")
        assert await agent.fire_timers() == 0
    asyncio.run(body())


@pytest.mark.parametrize(("limit", "concurrency"), [(-1, 64), (10, 0), (True, 4), (5, 1.5)])
def test_limits_that_are_not_counts_are_refused(limit: Any, concurrency: Any) -> None:
    agent = Agent(load_workflow_text(WORKFLOW), ScriptedProvider([]))
    with pytest.raises(ConfigError, match="must be an integer"):
        agent.fire_timers_sync(limit=limit, concurrency=concurrency)
