"""A store damaged by hand, as an operator with ``sqlite3`` or ``psql`` would: what a user
sees is an error naming the session and what is wrong - from the API, from ``phaseflow
sessions`` (one line, exit 1, no traceback) - never the damage read back as a session.

- a number JSON has not (NaN, an infinity) in a stored state, message or event;
- an event row deleted or added (the log is numbered without a gap);
- a column the snapshot repeats (status, turn, phase, workflow) edited: the snapshot is
  the truth, so ``sessions list`` / ``show`` and the API never disagree;
- a column of a type phaseflow never writes;
- a database that is not phaseflow's: refused before anything is written to it;
- a session id no database can store: refused alike by every store, before any I/O.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

import phaseflow
from phaseflow.errors import PhaseflowError
from phaseflow.providers import ScriptedProvider
from phaseflow.session import Agent
from phaseflow.stores import SQLiteStore, StoreError
from phaseflow.stores.base import MAX_SESSION_ID_BYTES, InvalidSessionId, check_session_id
from phaseflow.stores.codec import StoreDataError
from tests.support.store_backends import Backend
from tests.support.store_sessions import CHAT, cli, seed

SID = "s"


def _where(backend: Backend) -> str:
    """What ``--store`` names for this backend: the file, or the DSN (with its schema)."""
    return str(getattr(backend, "path", None) or backend.dsn)  # type: ignore[attr-defined]


def sessions(backend: Backend, *args: str) -> subprocess.CompletedProcess[str]:
    return cli("sessions", *args, "--store", _where(backend))


def one_error(out: subprocess.CompletedProcess[str], code: int, command: str,
              *phrases: str) -> str:
    """The single line a failed command printed, checked: exit ``code``, no traceback,
    ``phaseflow sessions COMMAND: error: ...`` holding each phrase."""
    assert out.returncode == code, (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith(f"phaseflow sessions {command}: error: "), lines[0]
    for phrase in phrases:
        assert phrase in lines[0], lines[0]
    return lines[0]


async def _snapshot(backend: Backend) -> str:
    [(text,)] = await backend.sql("SELECT snapshot FROM sessions WHERE id = %s", (SID,))
    return str(text)


async def _put_snapshot(backend: Backend, text: str) -> None:
    await backend.sql("UPDATE sessions SET snapshot = %s WHERE id = %s", (text, SID))


async def _opened_by_the_api(backend: Backend) -> PhaseflowError:
    """The error opening the session gives, through an agent as a host opens it."""
    agent = Agent(phaseflow.load_workflow_text(CHAT), ScriptedProvider([]),
                  store=await backend.open())
    with pytest.raises(PhaseflowError) as caught:
        await agent.session(SID)
    return caught.value


# --- numbers JSON has not ---------------------------------------------------------------

@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_a_number_json_has_not_in_a_stored_state_is_an_error(durable: Backend,
                                                            number: str) -> None:
    async def body() -> None:
        await seed(await durable.open(), SID)
        data = json.loads(await _snapshot(durable))
        data["state"]["score"] = 7777.25
        await _put_snapshot(durable, json.dumps(data).replace("7777.25", number))
        with pytest.raises(StoreDataError) as caught:
            await (await durable.open()).load(SID)
        message = str(caught.value)
        assert message.startswith(f"session {SID!r}: the stored snapshot is not phaseflow's "
                                  "JSON: it holds ")
        assert number.lstrip("-") in message
        assert str(await _opened_by_the_api(durable)) == message
    durable.run(body)
    if number != "NaN":
        return  # what the command line prints is the same message
    line = one_error(sessions(durable, "show", SID), 1, "show", f"session {SID!r}",
                     "not phaseflow's JSON")
    assert number.lstrip("-") in line
    listed = sessions(durable, "list")
    one_error(listed, 1, "list", f"session {SID!r}", "not phaseflow's JSON")
    assert listed.stdout.splitlines()[1].split() == [SID, "-", "damaged", "-", "-", "-"]


def test_a_state_holding_nan_is_never_written(durable: Backend) -> None:
    """Nothing can put NaN into a session's state (the State refuses it); a record that
    holds one anyway is refused by the store, naming the session, and nothing is
    written."""
    async def body() -> None:
        store = await durable.open()
        first = await seed(store, SID)
        bad = dataclasses.replace(first, version=2, state={"score": float("nan")})
        with pytest.raises(StoreError, match=f"session {SID!r}: the state is not JSON"):
            await store.commit(bad, [], expected_version=1)
        with pytest.raises(StoreError, match=f"session {SID!r}: an event is not JSON"):
            await store.commit(dataclasses.replace(first, version=2),
                               [{"type": "x", "value": float("inf")}], expected_version=1)
        assert await store.version(SID) == 1
    durable.run(body)


@pytest.mark.parametrize("table", ["messages", "events"])
def test_nan_in_a_message_or_event_row_is_an_error(durable: Backend, table: str) -> None:
    async def body() -> None:
        await seed(await durable.open(), SID, events=2)
        key = "idx" if table == "messages" else "seq"
        row = 0 if table == "messages" else 2
        await durable.sql(f"UPDATE {table} SET data = %s WHERE session_id = %s AND {key} = %s",
                          ('{"role": "user", "content": "x", "n": NaN}', SID, row))
        fresh = await durable.open()
        if table == "messages":
            with pytest.raises(StoreDataError, match=r"session 's': stored message 0 is not "
                               "phaseflow's JSON: it holds NaN"):
                await fresh.load(SID)
        else:
            with pytest.raises(StoreDataError, match=r"session 's': event 2 is not "
                               "phaseflow's JSON: it holds NaN"):
                await fresh.events(SID)
    durable.run(body)
    command = "show" if table == "messages" else "events"
    one_error(sessions(durable, command, SID), 1, command, "session 's'", "NaN")


# --- the event log ----------------------------------------------------------------------

_EVENT_DAMAGE = {
    "a row deleted from the middle": (
        "DELETE FROM events WHERE session_id = %s AND seq = 2",
        "event 2 is missing from the stored log: the event log was edited or is damaged"),
    "the last rows deleted": (
        "DELETE FROM events WHERE session_id = %s AND seq >= 3",
        "events 3 to 4 are missing from the stored log: the event log was edited or is "
        "damaged"),
    "a row added": (
        "INSERT INTO events (session_id, seq, data) VALUES (%s, 5, '{\"type\": \"note\"}')",
        "the store holds an event 5 the session never wrote (it wrote 4): the event log "
        "was edited or is damaged"),
    "a row renumbered": (
        "UPDATE events SET seq = 9 WHERE session_id = %s AND seq = 4",
        "the store holds an event 9 the session never wrote (it wrote 4): the event log "
        "was edited or is damaged"),
}


@pytest.mark.parametrize("damage", sorted(_EVENT_DAMAGE))
def test_an_event_row_deleted_or_added_is_an_error(durable: Backend, damage: str) -> None:
    statement, problem = _EVENT_DAMAGE[damage]

    async def body() -> None:
        store = await durable.open()
        await seed(store, SID, events=4)
        await seed(store, "other", events=4)
        assert [e.seq for e in await store.events(SID)] == [1, 2, 3, 4]
        await durable.sql(statement, (SID,))
        with pytest.raises(StoreDataError) as caught:
            await store.events(SID)
        assert str(caught.value) == f"session {SID!r}: {problem}"
        assert [e.seq for e in await store.events("other")] == [1, 2, 3, 4]
    durable.run(body)
    one_error(sessions(durable, "events", SID), 1, "events", f"session {SID!r}: {problem}")
    one_error(sessions(durable, "show", SID), 1, "show", f"session {SID!r}: {problem}")


def test_the_events_after_a_gap_are_the_stored_ones(durable: Backend) -> None:
    """A client resuming a stream after the damaged part reads the intact rest."""
    async def body() -> None:
        store = await durable.open()
        await seed(store, SID, events=4)
        await durable.sql("DELETE FROM events WHERE session_id = %s AND seq = 2", (SID,))
        assert [e.seq for e in await store.events(SID, after=2)] == [3, 4]
        assert await store.events(SID, after=4) == ()
        with pytest.raises(StoreDataError, match="event 2 is missing"):
            await store.events(SID, after=1)
    durable.run(body)


# --- one truth: the columns a snapshot repeats ------------------------------------------

_COLUMNS = {
    "status": ("'finished'", "its status column says 'finished' where its stored core "
               "says 'idle'"),
    "turn": ("7", "its turn column says 7 where its stored core says 1"),
    "phase": ("'elsewhere'", "its phase column says 'elsewhere' where its stored machine "
              "says 'talk'"),
    "workflow": ("'other'", "its workflow column says 'other' where its stored machine "
                 "says 'chat'"),
}


@pytest.mark.parametrize("column", sorted(_COLUMNS))
def test_a_column_edited_by_hand_is_an_error_not_another_truth(durable: Backend,
                                                              column: str) -> None:
    value, problem = _COLUMNS[column]
    expected = f"session {SID!r}: {problem}: the row was edited or is damaged"

    async def body() -> None:
        store = await durable.open()
        await seed(store, SID)
        await seed(store, "other")
        await durable.sql(f"UPDATE sessions SET {column} = {value} WHERE id = %s", (SID,))
        with pytest.raises(StoreDataError) as caught:
            await store.load(SID)
        assert str(caught.value) == expected
        assert str(await _opened_by_the_api(durable)) == expected
        listed = {s.session_id: s for s in await store.sessions()}
        assert listed[SID].problem == expected
        assert (listed[SID].status, listed[SID].turn) == ("", 0)  # nothing it says is shown
        assert listed["other"].problem is None and listed["other"].status == "idle"
    durable.run(body)
    if column not in ("status", "turn"):
        return  # what the command line prints is the same message
    one_error(sessions(durable, "show", SID), 1, "show", expected)
    listed = sessions(durable, "list")
    one_error(listed, 1, "list", expected)
    rows = {line.split()[0]: line.split()[1:] for line in listed.stdout.splitlines()[1:]}
    assert rows == {SID: ["-", "damaged", "-", "-", "-"],
                    "other": ["chat", "idle", "talk", "1", rows["other"][-1]]}
    as_json = {s["id"]: s for s in json.loads(sessions(durable, "list", "--json").stdout)}
    assert as_json[SID]["problem"] == expected and as_json[SID]["status"] is None
    assert as_json["other"]["problem"] is None and as_json["other"]["turn"] == 1


def test_a_record_that_says_two_things_cannot_be_made(store: Backend) -> None:
    """The rule holds for every store, the memory store too: a record's status, turn
    and phase are its core's and machine's."""
    async def body() -> None:
        first = await seed(await store.open(), SID)
        for change in ({"turn": 7}, {"status": "finished"}, {"phase": "elsewhere"}):
            with pytest.raises(StoreError, match=(
                    f"session {SID!r}: the record's {next(iter(change))} is ")):
                dataclasses.replace(first, **change)
    store.run(body)


_SQLITE_TYPES = {
    "turn": ("'two'", "load", "the turn column holds 'two'"),
    "updated_at": ("'yesterday'", "load", "the updated_at column holds 'yesterday'"),
    "version": ("'one'", "load", "the version column holds 'one'"),
    "lease_expires": ("'soon'", "lease", "the lease_expires column holds 'soon'"),
    "event_count": ("'four'", "events", "the event_count column holds 'four'"),
    "message_count": ("-1", "load", "the message_count column holds -1"),
}


@pytest.mark.parametrize("column", sorted(_SQLITE_TYPES))
def test_a_column_of_a_type_phaseflow_never_writes_is_an_error(tmp_path: Path,
                                                               column: str) -> None:
    """SQLite keeps whatever an UPDATE puts in a column; reading it back is an error
    naming the session and the column, never a TypeError from deep inside."""
    value, method, problem = _SQLITE_TYPES[column]
    path = tmp_path / "s.db"

    async def body() -> None:
        store = SQLiteStore(path)
        await seed(store, SID, events=4)
        await store.acquire(SID, "w", 30.0, 1.0)
        with sqlite3.connect(path) as conn:
            conn.execute(f"UPDATE sessions SET {column} = {value} WHERE id = ?", (SID,))
        with pytest.raises(StoreDataError, match=f"session 's': {problem}"):
            await getattr(store, method)(SID)
        store.close()
    asyncio.run(body())


def test_nan_in_a_postgres_time_column_is_an_error(pg: Backend) -> None:
    """A float column of PostgreSQL holds NaN and infinities: never written by
    phaseflow, an error when read."""
    async def body() -> None:
        store = await pg.open()
        await seed(store, SID)
        await store.acquire(SID, "w", 30.0, 1.0)
        await pg.sql("UPDATE sessions SET updated_at = %s, lease_expires = %s WHERE id = %s",
                          (float("nan"), float("inf"), SID))
        with pytest.raises(StoreDataError, match="session 's': the updated_at column holds nan"):
            await store.load(SID)
        with pytest.raises(StoreDataError, match="session 's': the lease_expires column holds "
                           "inf"):
            await store.lease(SID)
    pg.run(body)


# --- a database that is not phaseflow's -------------------------------------------------

def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("tables", [
    "CREATE TABLE sessions (id INTEGER PRIMARY KEY, name TEXT);"
    " INSERT INTO sessions (name) VALUES ('ada')",
    "CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('x')",
    "CREATE VIEW answers AS SELECT 42 AS answer",
])
def test_a_foreign_sqlite_database_is_refused_unchanged(tmp_path: Path, tables: str) -> None:
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as conn:
        conn.executescript(tables)
    conn.close()
    before = _digest(path)
    own = tables.split()[2]

    async def body() -> None:
        store = SQLiteStore(path)
        with pytest.raises(StoreError) as caught:
            await store.load(SID)
        assert str(caught.value) == (
            f"{path}: not a phaseflow session store: it holds tables of its own ('{own}') and "
            "no phaseflow_schema table; phaseflow left it unchanged (name a new file or an "
            "empty database)")
        store.close()
    asyncio.run(body())
    for command in (("list",), ("show", SID), ("events", SID)):
        out = cli("sessions", *command, "--store", str(path))
        one_error(out, 2, command[0], f"{path}: not a phaseflow session store")
    assert _digest(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.db"]  # no -wal, no -shm
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("delete",)
        assert [n for (n,) in conn.execute("SELECT name FROM sqlite_master")] == [own]
    conn.close()


def test_an_empty_file_becomes_a_store(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    path.write_bytes(b"")

    async def body() -> None:
        store = SQLiteStore(path)
        await seed(store, SID)
        assert await store.version(SID) == 1
        store.close()
    asyncio.run(body())


def test_a_foreign_postgres_sessions_table_is_refused_and_nothing_is_created(
        pg: Backend) -> None:
    """A PostgreSQL schema is shared: another program's tables are fine beside
    phaseflow's, but one that has a name of phaseflow's makes the schema not
    phaseflow's to use; nothing is created in it."""
    async def body() -> None:
        await pg.sql("CREATE TABLE sessions (id INTEGER PRIMARY KEY, name TEXT)")
        await pg.sql("CREATE TABLE notes (body TEXT)")
        with pytest.raises(StoreError) as caught:
            await pg.open()
        assert str(caught.value) == (
            f"{_where(pg)}: not a phaseflow session store: it holds tables of its own "
            "('sessions') and no phaseflow_schema table; phaseflow left it unchanged (name a "
            "new file or an empty database)")
        tables = await pg.sql("SELECT tablename FROM pg_tables WHERE schemaname ="
                              " current_schema() ORDER BY tablename")
        assert tables == [("notes",), ("sessions",)]
        await pg.sql("DROP TABLE sessions")
        await seed(await pg.open(), SID)  # beside another program's 'notes': fine
    pg.run(body)
    out = sessions(pg, "list")
    assert out.returncode == 0 and out.stdout.split()[6:8] == [SID, "chat"], out


def test_a_phaseflow_store_missing_a_column_is_refused(durable: Backend) -> None:
    async def body() -> None:
        await seed(await durable.open(), SID)
        await durable.sql("ALTER TABLE events DROP COLUMN data")
        with pytest.raises(StoreError, match=(
                "the session store is damaged or not phaseflow's: its table 'events' has "
                r"other columns than phaseflow's \(without 'data'\)")):
            await (await durable.open()).load(SID)
    durable.run(body)
    one_error(sessions(durable, "list"), 2, "list", "its table 'events' has other columns")


# --- session ids ------------------------------------------------------------------------

_BAD_IDS = {
    "a lone surrogate": "a\udc80b",
    "NUL": "a\x00b",
    "too long": "x" * (MAX_SESSION_ID_BYTES + 1),
    "too long in UTF-8": "é" * (MAX_SESSION_ID_BYTES // 2 + 1),
    "empty": "",
}


async def _every_method(store: Any, sid: str) -> list[str]:
    """What each store method that names a session says about ``sid``."""
    calls = [store.load(sid), store.version(sid), store.events(sid), store.delete(sid),
             store.lease(sid), store.queued(sid), store.enqueue(sid, {"text": "hi"}),
             store.acquire(sid, "w", 30.0, 1.0)]
    said = []
    for call in calls:
        with pytest.raises(InvalidSessionId) as caught:
            await call
        said.append(str(caught.value))
    return said


@pytest.mark.parametrize("kind", sorted(_BAD_IDS))
def test_a_session_id_no_database_can_store_is_refused_alike_by_every_store(
        store: Backend, kind: str) -> None:
    sid = _BAD_IDS[kind]
    with pytest.raises(InvalidSessionId) as caught:
        check_session_id(sid)
    expected = str(caught.value)

    async def body() -> None:
        s = await store.open()
        assert await _every_method(s, sid) == [expected] * 8
        good = await seed(s, "good")
        with pytest.raises(InvalidSessionId) as made:
            dataclasses.replace(good, session_id=sid)
        assert str(made.value) == expected
        assert [x.session_id for x in await s.sessions()] == ["good"]
    store.run(body)
    if kind == "a lone surrogate":
        assert expected == ("session id 'a\\udc80b' is not text a database can store: it "
                            "holds a lone surrogate ('\\udc80' at index 1)")


def test_a_refused_id_touches_no_file(tmp_path: Path) -> None:
    async def body() -> None:
        store = SQLiteStore(tmp_path / "never.db")
        await _every_method(store, "a\udc80b")
        store.close()
    asyncio.run(body())
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("sid", ["x" * MAX_SESSION_ID_BYTES, "é" * (MAX_SESSION_ID_BYTES // 2),
                                 "a\nb\tc ☃"])
def test_the_longest_and_oddest_ids_are_kept_by_every_store(store: Backend, sid: str) -> None:
    async def body() -> None:
        s = await store.open()
        first = await seed(s, sid, events=1)
        loaded = await (await store.open()).load(sid)
        assert loaded == first
        assert [e.seq for e in await s.events(sid)] == [1]
    store.run(body)


def test_a_command_line_id_that_is_not_utf8_is_one_line_exit_2(tmp_path: Path) -> None:
    """A shell passes bytes; Python reads a byte that is not UTF-8 as a lone surrogate."""
    path = tmp_path / "s.db"

    async def body() -> None:
        store = SQLiteStore(path)
        await seed(store, SID)
        store.close()
    asyncio.run(body())
    for command in ("show", "events", "delete"):
        out = cli("sessions", command, b"a\xffb", "--store", str(path))
        assert out.returncode == 2, out.stderr
        assert out.stderr == (f"phaseflow sessions {command}: error: session id 'a\\udcffb' is not "
                       "text a database can store: it holds a lone surrogate ('\\udcff' at "
                       "index 1)\n")


# --- phaseflow run ----------------------------------------------------------------------

def test_run_on_a_damaged_session_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "s.db"

    async def body() -> None:
        store = SQLiteStore(path)
        await seed(store, SID)
        store.close()
    asyncio.run(body())
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE sessions SET status = 'finished' WHERE id = ?", (SID,))
    conn.close()
    (tmp_path / "chat.yaml").write_text(CHAT)
    (tmp_path / "script.yaml").write_text("- Hello.\n")
    out = cli("run", "chat.yaml", "--session", SID, "--store", str(path), "--provider",
              "scripted:script.yaml", "-m", "hi", cwd=tmp_path)
    assert out.returncode == 1, (out.stdout, out.stderr)
    assert out.stderr == (
        f"phaseflow run: error: session {SID!r}: its status column says 'finished' where its "
        "stored core says 'idle': the row was edited or is damaged\n")


def test_recover_names_a_damaged_session_and_recovers_the_others(tmp_path: Path) -> None:
    """A damaged session's status cannot be known: ``recover`` without IDs says so and
    exits 1, but still takes every other running session (here: none)."""
    path = tmp_path / "s.db"

    async def body() -> None:
        store = SQLiteStore(path)
        await seed(store, SID)
        await seed(store, "fine")
        store.close()
    asyncio.run(body())
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE sessions SET status = 'running' WHERE id = ?", (SID,))
    conn.close()
    (tmp_path / "chat.yaml").write_text(CHAT)
    (tmp_path / "script.yaml").write_text("- Hello.\n")
    out = cli("sessions", "recover", "--store", str(path), "--workflow", "chat.yaml",
              "--provider", "scripted:script.yaml", cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    assert out.stdout.splitlines() == [
        f"{SID}: cannot be read: session {SID!r}: its status column says 'running' where its "
        "stored core says 'idle': the row was edited or is damaged",
        "nothing to recover: no session of chat is running"]
