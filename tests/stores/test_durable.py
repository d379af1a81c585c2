"""What only a store that encodes rows can promise (SQLite, Postgres): one schema, a
commit whose cost does not grow with the conversation, and hostile contents (corrupted
rows, a schema from a later phaseflow) refused with an error naming the session, never a
traceback and never a different session."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from phaseflow.errors import PhaseflowError
from phaseflow.stores import SessionRecord, Store, StoreError, codec
from phaseflow.stores.codec import StoreDataError
from tests.support.store_backends import Backend
from tests.support.store_sessions import chat_commits, renumber, seed

ROOT = Path(__file__).resolve().parents[2]
#: the turn of the record ``seed`` commits (a one-turn chat)
_RECORD_TURN = 1

#: the one schema: each table's columns, in order
SCHEMA = {
    "phaseflow_schema": ["version"],
    "sessions": ["id", "workflow", "workflow_hash", "version", "status", "phase", "turn",
                 "lease_owner", "lease_expires", "lease_epoch", "snapshot", "message_count",
                 "mark_count", "event_count", "created_at", "updated_at"],
    "messages": ["session_id", "idx", "data"],
    "marks": ["session_id", "idx", "data"],
    "events": ["session_id", "seq", "data"],
    "captures": ["sha256", "data"],
    "inbox": ["id", "session_id", "data"],
    "turns": ["session_id", "turn", "version", "workflow", "workflow_hash", "status", "phase",
              "snapshot", "message_count", "mark_count", "updated_at"],
    "request_keys": ["session_id", "key", "fingerprint", "created_at"],
    "cancels": ["session_id", "requested_at"],
    "owners": ["session_id", "owner"],
    "timers": ["session_id", "due_at"],
}


async def _columns(durable: Backend) -> dict[str, list[str]]:
    out = {}
    for table in SCHEMA:
        if durable.name == "sqlite":
            rows = await durable.sql(f"SELECT name FROM pragma_table_info('{table}')")
        else:
            rows = await durable.sql(
                "SELECT column_name FROM information_schema.columns WHERE table_name = %s"
                " AND table_schema = current_schema() ORDER BY ordinal_position", (table,))
        out[table] = [r[0] for r in rows]
    return out


def test_both_stores_have_the_same_schema(durable: Backend) -> None:
    assert {table: list(columns) for table, columns in codec.TABLES.items()} == SCHEMA

    async def body() -> None:
        await (await durable.open()).sessions()
        assert await _columns(durable) == SCHEMA
        assert await durable.sql("SELECT version FROM phaseflow_schema") == [(4,)]
        await (await durable.open()).sessions()  # opening again changes nothing
        assert await durable.sql("SELECT version FROM phaseflow_schema") == [(4,)]
    durable.run(body)


# --- the cost of a commit -----------------------------------------------------------


async def _footprint(durable: Backend, sid: str) -> tuple[int, int, int, int]:
    """(snapshot length, messages rows, marks rows, events rows) of session ``sid``."""
    [(snapshot,)] = await durable.sql("SELECT length(snapshot) FROM sessions WHERE id = %s",
                                      (sid,))
    counts = []
    for table in ("messages", "marks", "events"):
        [(n,)] = await durable.sql(f"SELECT count(*) FROM {table} WHERE session_id = %s",
                                   (sid,))
        counts.append(n)
    return (snapshot, *counts)  # type: ignore[return-value]


def test_a_commit_writes_as_much_after_200_turns_as_after_5(durable: Backend) -> None:
    """The rows a commit writes: the same number of messages rows on turn 5 and turn 200,
    and a snapshot of about the same size (the history is not in it)."""
    async def body() -> None:
        log = (await chat_commits(200)).log
        store = await durable.open()
        seen = {}
        for turn in (5, 200):
            sid = f"at-{turn}"
            at = [k for k, (r, _) in enumerate(log) if r.turn == turn]
            before = dataclasses.replace(log[at[0] - 1][0], session_id=sid, version=1)
            await store.commit(before, [], expected_version=0)  # the history so far
            steps = []
            last = await _footprint(durable, sid)
            for version, k in enumerate(at, start=2):
                record, events = log[k]
                await store.commit(dataclasses.replace(record, session_id=sid,
                                                       version=version),
                                   events, expected_version=version - 1)
                now = await _footprint(durable, sid)
                steps.append((now[0], now[1] - last[1], now[2] - last[2], now[3] - last[3]))
                last = now
            assert last[1] == 2 * turn  # the whole history is there, one row a message
            seen[turn] = steps
            loaded = await (await durable.open()).load(sid)
            assert loaded == dataclasses.replace(log[at[-1]][0], session_id=sid,
                                                 version=len(at) + 1)
        assert [s[1:] for s in seen[5]] == [s[1:] for s in seen[200]]  # rows per commit
        for small, large in zip(seen[5], seen[200], strict=True):
            assert abs(large[0] - small[0]) < 40, (small, large)  # snapshot characters
    durable.run(body)


# --- hostile contents -----------------------------------------------------------------


async def _two_sessions(durable: Backend) -> tuple[Store, SessionRecord, SessionRecord]:
    store = await durable.open()
    log = (await chat_commits(2, "bad")).log
    bad = renumber(log[-1][0], 1)
    await store.commit(bad, [{"type": "x"}], expected_version=0)
    good = await seed(store, "good")
    return store, bad, good


async def _snapshot(durable: Backend, sid: str) -> str:
    [(text,)] = await durable.sql("SELECT snapshot FROM sessions WHERE id = %s", (sid,))
    return str(text)


def _edited(snapshot: str, edit: str) -> str:
    data = json.loads(snapshot)
    if edit == "continuation is text":
        data["continuation"] = "xyz"
    elif edit == "no execution":
        del data["execution"]
    elif edit == "state is a list":
        data["state"] = [1, 2]
    elif edit == "an old progress part":
        data["progress"] = {"what": "ever"}
    elif edit == "messages is a number":
        data["continuation"]["messages"] = 5
    elif edit == "machine in a wrong phase":
        data["machine"] = {"current": 7}
    return json.dumps(data)


@pytest.mark.parametrize("snapshot", [
    '{"schema": 99}', "TRUNCATE", "[]", '"x"', "null", '{"schema": 1}', "{}", "",
    "continuation is text",
    "no execution", "state is a list", "messages is a number",
])
def test_a_corrupted_snapshot_is_an_error_naming_the_session(durable: Backend,
                                                            snapshot: str) -> None:
    async def body() -> None:
        _, _, good = await _two_sessions(durable)
        text = await _snapshot(durable, "bad")
        if snapshot == "TRUNCATE":
            snapshot_text = text[: len(text) // 2]
        elif snapshot[:1] in ('{', '[', '"', 'n', ''):
            snapshot_text = snapshot
        else:
            snapshot_text = _edited(text, snapshot)
        await durable.sql("UPDATE sessions SET snapshot = %s WHERE id = 'bad'",
                          (snapshot_text,))
        fresh = await durable.open()
        with pytest.raises(StoreDataError, match="session 'bad'") as caught:
            await fresh.load("bad")
        assert caught.value.__context__ is None or caught.value.__suppress_context__
        if snapshot == '{"schema": 99}':
            assert "upgrade phaseflow" in str(caught.value)
        assert await fresh.load("good") == good  # the other session is untouched
    durable.run(body)


def test_the_progress_part_older_snapshots_carry_is_ignored(durable: Backend) -> None:
    """Snapshots written before the session stopped mirroring the turn core's stages
    carry a ``progress`` part: whatever it holds, the session opens as it was."""
    async def body() -> None:
        await _two_sessions(durable)
        before = await (await durable.open()).load("bad")
        text = await _snapshot(durable, "bad")
        assert "progress" not in json.loads(text)  # no longer written
        await durable.sql("UPDATE sessions SET snapshot = %s WHERE id = 'bad'",
                          (_edited(text, "an old progress part"),))
        after = await (await durable.open()).load("bad")
        assert before is not None and after == before
    durable.run(body)


@pytest.mark.parametrize("row", ["not json", '{"role": "wizard"}', "[]", '"text"', "{"])
def test_a_corrupted_message_row_is_an_error_naming_the_session(durable: Backend,
                                                               row: str) -> None:
    async def body() -> None:
        _, _, good = await _two_sessions(durable)
        await durable.sql("UPDATE messages SET data = %s WHERE session_id = 'bad' AND idx = 1",
                          (row,))
        fresh = await durable.open()
        with pytest.raises(StoreDataError, match="session 'bad'"):
            await fresh.load("bad")
        assert await fresh.load("good") == good
    durable.run(body)


def test_a_missing_message_row_is_an_error_not_a_shorter_history(
        durable: Backend, request: pytest.FixtureRequest) -> None:
    """The last turn's messages and mark gone leave a valid-looking, shorter history:
    only the row counts the sessions row keeps tell it is not the session stored."""

    async def body() -> None:
        await _two_sessions(durable)
        await durable.sql("DELETE FROM messages WHERE session_id = 'bad' AND idx IN (2, 3)")
        await durable.sql("DELETE FROM marks WHERE session_id = 'bad' AND idx = 1")
        with pytest.raises(StoreDataError, match="session 'bad'"):
            await (await durable.open()).load("bad")
    durable.run(body)


def test_corrupted_events_and_queued_messages_are_errors_naming_the_session(
        durable: Backend) -> None:
    async def body() -> None:
        store, _, _ = await _two_sessions(durable)
        await durable.sql("UPDATE events SET data = '{\"ty' WHERE session_id = 'bad'")
        with pytest.raises(StoreDataError, match="session 'bad': event 1"):
            await store.events("bad")
        assert [e.seq for e in await store.events("good")] == [1]
        await store.enqueue("bad", {"text": "hi"})
        await durable.sql("UPDATE inbox SET data = 'no' WHERE session_id = 'bad'")
        with pytest.raises(StoreDataError, match="session 'bad': queued message"):
            await store.queued("bad")
    durable.run(body)


def test_a_store_from_a_later_phaseflow_is_refused_on_open(durable: Backend) -> None:
    async def body() -> None:
        await seed(await durable.open(), "old")
        await durable.sql("UPDATE phaseflow_schema SET version = 99")
        with pytest.raises(StoreError, match=r"schema is version 99.*upgrade phaseflow"):
            await (await durable.open()).load("old")
        [(version,)] = await durable.sql("SELECT version FROM phaseflow_schema")
        assert version == 99  # refused, not downgraded
    durable.run(body)


def test_store_errors_are_phaseflow_errors(durable: Backend) -> None:
    """A table gone under a running store: an error a host can catch, not psycopg's or
    sqlite3's."""
    async def body() -> None:
        store = await durable.open()
        await seed(store, "s")
        await durable.sql("DROP TABLE events")
        with pytest.raises(StoreError, match="events") as caught:
            await store.events("s")
        assert isinstance(caught.value, PhaseflowError)
        assert caught.value.__context__ is None or caught.value.__suppress_context__
    durable.run(body)


def test_writers_in_several_processes_lose_no_update(durable: Backend) -> None:
    """Three processes each add six turns to one session, retrying on conflict: all
    eighteen land, once each, in one unbroken event log."""
    async def body() -> None:
        await seed(await durable.open(), "shared", events=0)
    durable.run(body)
    target = str(getattr(durable, "path", None) or getattr(durable, "dsn", ""))
    procs = [subprocess.Popen(
        [sys.executable, "-m", "tests.support.store_cas_writer", durable.name, target, "shared",
         "6", f"p{k}"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for k in range(3)]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outputs

    async def check() -> None:
        store = await durable.open()
        record = await store.load("shared")
        assert record is not None and (record.version, record.turn) == (19, _RECORD_TURN + 18)
        events = await store.events("shared")
        assert [e.seq for e in events] == list(range(1, 19))
        assert sorted(e.data["by"] for e in events) == sorted(["p0", "p1", "p2"] * 6)
    durable.run(check)


def test_a_load_during_commits_reads_one_committed_record(
        durable: Backend, request: pytest.FixtureRequest) -> None:
    """Readers on other connections load while a writer commits a real conversation:
    every load is exactly one of the committed records (never a row from one commit with
    the history of another), and none fails."""
    async def body() -> None:
        log = (await chat_commits(25)).log
        writer, readers = await durable.open(), [await durable.open() for _ in range(2)]
        committed = {r.version: r for r, _ in log}
        done = asyncio.Event()
        seen: list[SessionRecord] = []

        async def write() -> None:
            for version, (record, events) in enumerate(log, start=1):
                await writer.commit(record, events, expected_version=version - 1)
                await asyncio.sleep(0)
            done.set()

        async def read(store: Store) -> None:
            while not done.is_set():
                record = await store.load("chat")
                if record is not None:
                    seen.append(record)
                await asyncio.sleep(0)

        await asyncio.gather(write(), *(read(r) for r in readers))
        assert seen, "the readers never overlapped the writer"
        assert all(r == committed[r.version] for r in seen)
    durable.run(body)


def test_connections_opening_a_new_sqlite_file_at_once_all_succeed(tmp_path: Path) -> None:
    # Switching a new file to WAL takes SQLite's lock without its busy timeout: four
    # stores opening one new file at once used to fail now and then ("database is
    # locked"), about 1 in 40 files.
    from phaseflow.stores import SQLiteStore

    async def body() -> None:
        for i in range(120):
            stores = [SQLiteStore(tmp_path / f"new-{i}.db") for _ in range(4)]
            try:
                assert await asyncio.gather(*(s.load("x") for s in stores)) == [None] * 4
            finally:
                for s in stores:
                    s.close()
    asyncio.run(body())
