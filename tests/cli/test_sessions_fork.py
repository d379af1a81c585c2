"""``phaseflow sessions fork ID --at N --as NEW``, run as a user runs it (a subprocess) on
an SQLite file and on PostgreSQL: the new session is the original at the end of turn N
(``show --json`` prints what the original printed right after that turn), it opens and
talks on through the API, the original is untouched; refusals exit 1 (what was asked
cannot be done) or 2 (misuse), one line each, nothing written."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

from phaseflow.stores import SQLiteStore, Store
from tests.support import forks
from tests.support.phaseflow_cli import run_phaseflow


def sessions(*args: str) -> subprocess.CompletedProcess[str]:
    return run_phaseflow("sessions", *args, timeout=120)


def _show(where: str, sid: str) -> dict[str, Any]:
    proc = sessions("show", sid, "--json", "--store", where)
    assert proc.returncode == 0, proc.stderr
    shown: dict[str, Any] = json.loads(proc.stdout)
    return shown


async def _talk(store: Store, turns: int) -> None:
    session = await forks.agent(store).session("orig")
    for i in range(turns):
        await session.reply(f"Message {i}")


def _forks_on(where: str, store_factory: Any, *, refusals: bool = True) -> None:
    """The whole story on one store: ``where`` for the CLI, ``store_factory()`` a store
    object on it for the API (``refusals``: the refusals too)."""
    async def talk(turns: int) -> None:
        store = store_factory()
        try:
            await _talk(store, turns)
        finally:
            await _close(store)
    asyncio.run(talk(2))
    after_two = _show(where, "orig")
    asyncio.run(_more(store_factory))
    original = _show(where, "orig")
    original_events = sessions("events", "orig", "--json", "--store", where).stdout

    proc = sessions("fork", "orig", "--at", "2", "--as", "branch", "--store", where)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ("forked session orig at the end of turn 2 as branch (idle, phase "
                           "high, 8 messages)\n")
    shown = _show(where, "branch")
    for key in ("workflow", "status", "phase", "turn", "state", "pending_approval", "history"):
        assert shown[key] == after_two[key], key
    assert (shown["id"], shown["version"]) == ("branch", 1)
    events = sessions("events", "branch", "--json", "--store", where)
    [forked] = [json.loads(line) for line in events.stdout.splitlines()]
    assert {k: forked[k] for k in ("type", "seq", "turn", "from_session", "at_turn")} == {
        "type": "session_forked", "seq": 1, "turn": 2, "from_session": "orig", "at_turn": 2}
    timeline = sessions("show", "branch", "--store", where).stdout
    assert "forked     from session orig at the end of turn 2" in timeline
    # the original is untouched
    assert _show(where, "orig") == original
    assert sessions("events", "orig", "--json", "--store", where).stdout == original_events

    async def talk_on() -> str:
        store = store_factory()
        try:
            runs = len(forks.RUNS)
            session = await forks.agent(store).session("branch")
            reply = str(await session.reply("Message 2"))
            assert forks.RUNS[runs:] == [2]  # only the new call ran
            return reply
        finally:
            await _close(store)
    assert asyncio.run(talk_on()) == "Reply 2"

    if refusals:
        _refusals(where)


def _refusals(where: str) -> None:
    """Refused: exit 1, one line, nothing written; misuse: exit 2."""
    listed = sessions("list", "--json", "--store", where).stdout
    for args, message in (
            (("orig", "--at", "2", "--as", "branch"), "session 'branch' exists already: a "
             "fork is a new session (name another id)"),
            (("orig", "--at", "9", "--as", "x"), "session 'orig' has not reached turn 9 "
             "(it is at turn 3)"),
            (("nobody", "--at", "1", "--as", "x"), "no session 'nobody' in the store")):
        proc = sessions("fork", *args, "--store", where)
        assert (proc.returncode, proc.stdout) == (1, ""), proc
        assert proc.stderr == f"phaseflow sessions fork: error: {message}\n"
    for args, message in (
            (("orig", "--at", "0", "--as", "x"), "--at is a turn number (1, 2, ...), not '0'"),
            (("orig", "--at", "two", "--as", "x"), "--at is a turn number (1, 2, ...), not "
             "'two'"),
            (("orig", "--at", "1", "--as", ""), "--as: a session id is a non-empty string, "
             "not ''")):
        proc = sessions("fork", *args, "--store", where)
        assert (proc.returncode, proc.stdout) == (2, ""), proc
        assert proc.stderr == f"phaseflow sessions fork: error: {message}\n"
    assert sessions("list", "--json", "--store", where).stdout == listed


async def _more(store_factory: Any) -> None:
    """A third turn of the original, after the state right after turn 2 was printed."""
    store = store_factory()
    try:
        session = await forks.agent(store).session("orig")
        await session.reply("Message 2")
    finally:
        await _close(store)


async def _close(store: Any) -> None:
    close = getattr(store, "close", None)
    if close is not None:
        done = close()
        if asyncio.iscoroutine(done):
            await done


def test_fork_on_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    _forks_on(str(path), lambda: SQLiteStore(path))


def test_fork_on_postgres(postgres_dsn: str) -> None:
    import uuid

    import psycopg

    from phaseflow.stores.postgres import PostgresStore

    database = f"fork_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {database}")
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    dsn = make_conninfo(postgres_dsn, dbname=database)
    params = conninfo_to_dict(dsn)
    url = (f"postgresql://{params.get('user', '')}@{params.get('host', '')}:"
           f"{params.get('port', '')}/{database}")
    _forks_on(url, lambda: PostgresStore(dsn), refusals=False)


def test_fork_needs_its_arguments() -> None:
    proc = sessions("fork", "orig")
    assert proc.returncode == 2
    assert "the following arguments are required: --at, --as" in proc.stderr


def test_fork_of_a_store_that_keeps_nothing_is_misuse() -> None:
    proc = sessions("fork", "orig", "--at", "1", "--as", "x", "--store", "memory")
    assert proc.returncode == 2 and "keeps no sessions" in proc.stderr


def test_branches_lists_the_edits_of_the_last_message(tmp_path: Path) -> None:
    path = tmp_path / "s.db"

    async def build() -> None:
        store = SQLiteStore(path)
        try:
            await _talk(store, 2)
            session = await forks.agent(store).session("orig")
            await session.edit_last("Message 1, edited")
            await session.edit_last("Message 1, again")
            await session.fork("orig~7x", at_turn=1)  # named like none: not a branch
        finally:
            store.close()
    asyncio.run(build())
    proc = sessions("branches", "orig", "--store", str(path))
    assert proc.returncode == 0, proc.stderr
    assert [line.split("  ")[:4] for line in proc.stdout.splitlines()] == [
        ["orig~1", "turn 2", "idle", "phase high"], ["orig~2", "turn 2", "idle", "phase high"]]
    none = sessions("branches", "orig~1", "--store", str(path))
    assert (none.returncode, none.stdout, none.stderr) == (
        0, "", "session orig~1 has no branches\n")
    missing = sessions("branches", "nobody", "--store", str(path))
    assert (missing.returncode, missing.stderr) == (
        1, "phaseflow sessions branches: error: no session 'nobody' in the store\n")
