"""A worker process killed with SIGKILL anywhere in a conversation, again and again, and
resumed in a new process each time: no tool effect runs twice, no user message is lost
or doubled, every call has exactly one result, the history is one chain and the
resumed state is what the events say.

The driver behaves like a client: after each worker it reads the store and recovers an
interrupted turn, resolves a pending approval, or sends its next message - re-sending a
message whose ``turn_started`` it cannot find (the worker died before committing it).

``PHASEFLOW_KILL_ROUNDS=N`` runs N conversations of random kills per store instead of
the default (16 on SQLite, 8 on Postgres; about 5 kills each); ``PHASEFLOW_KILL_SEED``
draws other ones; the counts are printed (``pytest -s``).
"""

from __future__ import annotations

import os
import random
import uuid
from dataclasses import replace
from pathlib import Path

from tests.support.durability.checks import check_all, read_log
from tests.support.durability.driver import (
    POINTS,
    EveryPoint,
    KillStats,
    RandomKills,
    drive_conversation,
    read,
    run_worker,
)
from tests.support.durability.worker import WorkerSpec

TURNS = 5


def _base(store_url: str, sid: str, tmp_path: Path, approval_every: int = 2) -> WorkerSpec:
    return WorkerSpec(store_url, sid, str(tmp_path / f"{sid}.log"), "send", turns=TURNS,
                      approval_every=approval_every, result=str(tmp_path / f"{sid}.result"),
                      kills_log=str(tmp_path / f"{sid}.kills"))


def _messages(n: int = TURNS) -> list[str]:
    return [f"message {i + 1}" for i in range(n)]


def test_every_kill_point_is_survived(store_url: str, tmp_path: Path) -> None:
    """Every kill point kills a worker at least once (conversations are run until each
    did), and every conversation ends whole."""
    kills = EveryPoint()
    stats = KillStats()
    for round_ in range(12):
        if not kills.left:
            break
        sid = f"every-{round_}-{uuid.uuid4().hex[:8]}"
        base = _base(store_url, sid, tmp_path)
        stats.add(drive_conversation(base, _messages(), random.Random(round_), kills))
        check_all(base.store, sid, base.log, _messages())
    assert not kills.left, f"kill points that never fired: {kills.left}"
    assert set(stats.by_point) == {p for p, _ in POINTS}
    print(f"\nevery point: {stats.kills} kills in {stats.runs} workers, "
          f"{stats.conversations} conversations")


def test_random_kills(store_url: str, tmp_path: Path) -> None:
    """Conversations whose workers are killed at random points and random times."""
    # a Postgres worker connects twice (the schema check, the pool): fewer by default
    default = "8" if store_url.startswith("pg:") else "16"
    rounds = int(os.environ.get("PHASEFLOW_KILL_ROUNDS", default))
    seed = int(os.environ.get("PHASEFLOW_KILL_SEED", "0"))
    stats = KillStats()
    effects: dict[str, int] = {}
    for round_ in range(rounds):
        sid = f"random-{round_}-{uuid.uuid4().hex[:8]}"
        base = _base(store_url, sid, tmp_path)
        stats.add(drive_conversation(base, _messages(), random.Random(f"{seed}-{round_}-c"),
                                     RandomKills(random.Random(f"{seed}-{round_}-k"))))
        for k, v in check_all(base.store, sid, base.log, _messages()).items():
            effects[k] = effects.get(k, 0) + v
    assert stats.kills >= rounds * 3  # a conversation survives several kills
    print(f"\nrandom kills: {stats.kills} kills in {stats.runs} workers over "
          f"{stats.conversations} conversations ({stats.resends} messages re-sent); "
          f"{effects}; by point {dict(sorted(stats.by_point.items()))}")


def test_checkpoint_and_admission_are_one_commit(store_url: str, sid: str,
                                                 tmp_path: Path) -> None:
    """Killed right before the commit that checkpoints the tool group: nothing of the
    group is stored (the request is asked again). Killed right after it: the group is
    stored with its calls admitted, none started - there is no commit in between."""
    base = _base(store_url, sid, tmp_path)
    out = run_worker(replace(base, text="message 1", kill="before:tool_call:1"))
    assert out.killed
    seen = read(base.store, sid)
    assert seen.status == "running" and seen.group is None
    assert seen.started == ["message 1"]

    out = run_worker(replace(base, action="recover", kill="after:tool_call:1"))
    assert out.killed
    seen = read(base.store, sid)
    assert seen.group is not None and seen.group["admitted"] is True
    assert [c["kind"] for c in seen.group["calls"]] == ["run", "run"]
    assert read_log(base.log) == []  # admitted, never started

    out = run_worker(replace(base, action="recover"))
    assert not out.killed and out.result is not None and out.result["status"] == "idle"
    from tests.support.durability.checks import check_chain, final

    statuses = check_chain(final(base.store, sid))
    # work is not idempotent: admitted, maybe run: "outcome unknown, not run again";
    # safe is: run again now, with the same key
    assert sorted(statuses.values()) == ["ok", "unknown"]
    log = read_log(base.log)
    # (no phase change: work's result wrote nothing, so no on_enter hook ran)
    assert [(x.kind, x.tool) for x in log] == [("start", "safe"), ("end", "safe")]


def test_killed_while_awaiting_approval_resolved_in_a_new_process(
        store_url: str, sid: str, tmp_path: Path) -> None:
    """The worker dies while its turn waits for a human; the human's decision is taken
    by another process, which runs the approved call once."""
    base = _base(store_url, sid, tmp_path, approval_every=1)
    out = run_worker(replace(base, text="message 1", kill="awaiting:1"))
    assert out.killed
    seen = read(base.store, sid)
    assert seen.status == "awaiting_approval" and seen.pending is not None
    assert read_log(base.log) == []
    out = run_worker(replace(base, action="resolve", decision="approve"))
    assert not out.killed and out.result is not None and out.result["ok"], out
    assert out.result["status"] == "idle"
    starts = [(x.tool, x.key) for x in read_log(base.log) if x.kind == "start"]
    assert [t for t, _ in starts] == ["pay", "work", "safe", "hook:b"]
    # yet another process finds nothing pending any more: nothing runs again
    out = run_worker(replace(base, action="resolve", decision="approve"))
    assert out.result is not None and out.result["ok"]
    assert [(x.tool, x.key) for x in read_log(base.log) if x.kind == "start"] == starts


def test_killed_mid_tool_then_recovered_by_the_next_send(store_url: str, sid: str,
                                                         tmp_path: Path) -> None:
    """A worker killed in the middle of a tool; the next message (a new process) first
    finishes that turn - the interrupted call gets "outcome unknown", not a second
    run - and then its own."""
    base = _base(store_url, sid, tmp_path, approval_every=0)
    out = run_worker(replace(base, text="message 1", kill="tool-middle:1"))
    assert out.killed
    out = run_worker(replace(base, text="message 2"))
    assert not out.killed and out.result is not None and out.result["ok"], out
    from tests.support.durability.checks import check_chain, check_messages, check_state, final

    f = final(base.store, sid)
    statuses = check_chain(f)
    check_messages(f, ["message 1", "message 2"])
    check_state(f)
    results = [e for e in f.events if e["type"] == "tool_result"]
    assert "interrupted" in results[0]["content"] and results[0]["name"] == "work"
    starts = [x.key for x in read_log(base.log) if x.kind == "start" and x.tool == "work"]
    assert len(starts) == len(set(starts)) == 2
    assert len(statuses) == 4
