"""``phaseflow run --busy``: what a message does when another worker holds the session's
turn (a server, another ``run``), as a user runs it: a real process on a store whose
lease another worker holds."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from phaseflow.stores import SQLiteStore
from tests.support.run_cli import DESK_ARGS, events, project, run

SCRIPT = "- Hello.\n- Hello again.\n- Hello once more.\n"


def held_session(tmp_path: Path) -> Path:
    """A stored session whose lease a live worker of another machine holds for 10 min."""
    cwd = project(tmp_path, SCRIPT)
    first = run(cwd, *DESK_ARGS, "--session", "s", "--store", "s.db", "-m", "hi")
    assert first.returncode == 0, first.stderr
    lease = asyncio.run(SQLiteStore(cwd / "s.db").acquire("s", "server-1", 600.0,
                                                           time.time()))
    assert lease is not None
    return cwd


def test_busy_reject_refuses_the_message_and_stores_nothing(tmp_path: Path) -> None:
    cwd = held_session(tmp_path)
    proc = run(cwd, *DESK_ARGS, "--session", "s", "--store", "s.db", "--busy", "reject",
               "-m", "are you there?")
    assert proc.returncode == 1
    assert "another worker is running its turn" in proc.stderr
    assert "queued" not in proc.stderr
    assert asyncio.run(SQLiteStore(cwd / "s.db").queued("s")) == ()


def test_busy_queue_stores_the_message_for_the_holder(tmp_path: Path) -> None:
    cwd = held_session(tmp_path)
    proc = run(cwd, *DESK_ARGS, "--session", "s", "--store", "s.db", "-m", "later")
    assert proc.returncode == 0, proc.stderr
    assert "is queued for it" in proc.stdout  # (the transcript's notices)
    queued = asyncio.run(SQLiteStore(cwd / "s.db").queued("s"))
    assert [q.data["content"] for q in queued] == ["later"]


def test_busy_interrupt_takes_the_turn_over_and_answers(tmp_path: Path) -> None:
    cwd = held_session(tmp_path)
    proc = run(cwd, *DESK_ARGS, "--session", "s", "--store", "s.db", "--busy", "interrupt",
               "--json", "-m", "now, please")
    assert proc.returncode == 0, proc.stderr
    seen = [e for e in events(proc.stdout) if e["type"] != "text_delta"]
    assert [e["type"] for e in seen] == ["turn_started", "turn_finished"]
    assert seen[-1]["reply"] == "Hello again."
    lease = asyncio.run(SQLiteStore(cwd / "s.db").lease("s"))
    assert lease is None or lease.owner != "server-1"
