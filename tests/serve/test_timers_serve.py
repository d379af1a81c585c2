"""Timers in a served deployment: two real ``phaseflow serve`` processes on one
PostgreSQL store, each firing the due timers it finds; every session's timer fires
exactly once (one timer turn, ``on_enter``'s effect once), and the HTTP API says when
a session's next timer is due, then that none is left."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.phaseflow_cli import cli_env
from tests.support.serve_server import start, stored_events

WORKFLOW = """\
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
        after: 2s
  follow_up:
    goal: Follow up with the customer.
    on_enter:
      - call: noted
      - set: {followed: 1}
    terminal: true
"""

HOOKS = '''
import os


def noted(ctx, **_):
    with open(os.environ["TIMER_EFFECTS"], "a", encoding="utf-8") as f:
        f.write(f"{ctx.phase} {ctx.turn}\\n")


HOOKS = {"noted": noted}
'''


@pytest.fixture
def pg(postgres_dsn: str) -> Iterator[str]:
    from tests.support.store_backends import PostgresBackend

    yield PostgresBackend(postgres_dsn).dsn


def test_two_servers_on_one_postgres_fire_each_timer_once(tmp_path: Path, pg: str) -> None:
    (tmp_path / "waiter.yaml").write_text(WORKFLOW, encoding="utf-8")
    (tmp_path / "waiter_hooks.py").write_text(HOOKS, encoding="utf-8")
    (tmp_path / "script.yaml").write_text('- "Hello."\n- "Any news?"\n', encoding="utf-8")
    effects = tmp_path / "effects.txt"
    args = [str(tmp_path / "waiter.yaml"), "--provider", f"scripted:{tmp_path / 'script.yaml'}",
            "--hooks", "waiter_hooks:HOOKS", "--store", pg, "--timers", "0.2", "--grace", "1"]
    env = cli_env(TIMER_EFFECTS=str(effects))
    a = start(args, tmp_path / "a.log", cwd=tmp_path, env=env)
    b = start(args, tmp_path / "b.log", cwd=tmp_path, env=env)
    sessions = [f"t-{uuid.uuid4().hex[:8]}" for _ in range(12)]
    try:
        with httpx.Client(base_url=a.base, timeout=60) as ca, \
                httpx.Client(base_url=b.base, timeout=60) as cb:
            for n, sid in enumerate(sessions):
                client = (ca, cb)[n % 2]
                assert client.post("/v1/sessions", json={"id": sid}).status_code == 201
                sent = client.post(f"/v1/sessions/{sid}/messages", json={"text": "hi"},
                                   headers={"Accept": "application/json"})
                assert sent.status_code == 200, sent.text
                shown = client.get(f"/v1/sessions/{sid}").json()
                assert shown["phase"] == "wait"
                assert shown["next_timer_at"] > shown["updated_at"]
            deadline = time.monotonic() + 60
            left = set(sessions)
            while left and time.monotonic() < deadline:
                left = {sid for sid in left
                        if cb.get(f"/v1/sessions/{sid}").json()["phase"] != "follow_up"}
                time.sleep(0.2)
            assert not left, a.log() + b.log()
            time.sleep(1.0)  # both workers look again: nothing fires twice
            for sid in sessions:
                shown = ca.get(f"/v1/sessions/{sid}").json()
                assert (shown["turn"], shown["status"], shown["next_timer_at"]) == (
                    2, "finished", None)
                starts = [e for e in stored_events(ca, sid) if e["type"] == "turn_started"]
                assert len(starts) == 2 and "[timer]" in starts[1]["message"]
        lines = effects.read_text(encoding="utf-8").splitlines()
        assert len(lines) == len(sessions), lines  # on_enter's effect once per timer
    finally:
        a.stop()
        b.stop()
    assert "timers" in a.log() + b.log()


SEEDED = WORKFLOW.replace("  followed: {type: integer, default: 0}\n",
                          "  followed: {type: integer, default: 0}\n"
                          "  name: {type: string, default: ''}\n").replace("after: 2s",
                                                                          "after: 5s")

NAMED_HOOKS = """
import os


def noted(ctx, **_):
    with open(os.environ["TIMER_EFFECTS"], "a", encoding="utf-8") as f:
        f.write(f"{ctx.state['name']} {ctx.phase} {ctx.turn}\\n")


HOOKS = {"noted": noted}
"""


async def _seed(store: Any, path: Path, count: int) -> list[str]:
    """``count`` sessions of the waiter, one turn each: each one's timer is due five
    seconds after it was made."""
    from phaseflow.providers.scripted import ScriptedProvider
    from phaseflow.session import Agent

    agent = Agent(str(path), ScriptedProvider(["Hello."]), store=store,
                  hooks={"noted": lambda ctx, **_: None})
    sessions = [f"t{k:03d}-{uuid.uuid4().hex[:6]}" for k in range(count)]
    gate = asyncio.Semaphore(16)

    async def one(sid: str) -> None:
        async with gate:
            await (await agent.session(sid, state={"name": sid})).reply("hi")

    await asyncio.gather(*(one(sid) for sid in sessions))
    return sessions


async def _turns(store: Any, sessions: list[str]) -> dict[str, tuple[str, int, int]]:
    """Each session's phase, turn and number of ``turn_started`` events, as stored."""
    found: dict[str, tuple[str, int, int]] = {}
    for sid in sessions:
        record = await store.load(sid)
        starts = [e for e in await store.events(sid) if e.data["type"] == "turn_started"]
        found[sid] = (record.phase, record.turn, len(starts))
    return found


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_two_servers_on_one_store_fire_150_due_timers_each_once(
        tmp_path: Path, kind: str, request: pytest.FixtureRequest) -> None:
    """Two servers run on one store; 150 sessions are made there, each one's timer due
    five seconds later: the servers' timer loops read the same pages at the same time,
    and each timer fires exactly once (one timer turn, ``on_enter``'s effect once, by
    one of them)."""
    path = tmp_path / "waiter.yaml"
    path.write_text(SEEDED, encoding="utf-8")
    (tmp_path / "waiter_hooks.py").write_text(NAMED_HOOKS, encoding="utf-8")
    (tmp_path / "script.yaml").write_text('- "Hello."\n- "Any news?"\n', encoding="utf-8")
    if kind == "sqlite":
        from phaseflow.stores.sqlite import SQLiteStore

        where = str(tmp_path / "sessions.db")

        def opened() -> Any:
            return SQLiteStore(where)
    else:
        from phaseflow.stores.postgres import PostgresStore

        where = request.getfixturevalue("pg")

        def opened() -> Any:
            return PostgresStore(where)

    async def seed() -> list[str]:
        store = opened()
        try:
            return await _seed(store, path, 150)
        finally:
            await _close(store)

    effects = tmp_path / "effects.txt"
    args = [str(path), "--provider", f"scripted:{tmp_path / 'script.yaml'}", "--hooks",
            "waiter_hooks:HOOKS", "--store", where, "--timers", "0.2", "--grace", "1"]
    env = cli_env(TIMER_EFFECTS=str(effects))
    servers = [start(args, tmp_path / f"{name}.log", cwd=tmp_path, env=env)
               for name in ("a", "b")]
    sessions: list[str] = []

    async def stored() -> dict[str, tuple[str, int, int]]:
        store = opened()
        try:
            return await _turns(store, sessions)
        finally:
            await _close(store)

    try:
        sessions += asyncio.run(seed())
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if len(effects.read_text().splitlines() if effects.exists() else ()) >= 150:
                break
            time.sleep(0.2)
        time.sleep(1.0)  # both workers look again: nothing fires twice
        turns = asyncio.run(stored())
    finally:
        for server in servers:
            server.stop()
    logs = "".join(server.log() for server in servers)
    assert {sid: t for sid, t in turns.items() if t != ("follow_up", 2, 2)} == {}, logs
    lines = effects.read_text(encoding="utf-8").splitlines()
    assert sorted(lines) == sorted(f"{sid} follow_up 2" for sid in sessions)
    # both servers took part (each logged the timer turns it started)
    assert all("firing due timers" in server.log() for server in servers), logs


async def _close(store: Any) -> None:
    result = store.close()
    if asyncio.iscoroutine(result):
        await result
