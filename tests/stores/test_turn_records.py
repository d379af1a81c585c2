"""The record of each turn's end (``Store.commit(..., keep_turn=True)``,
``Store.turn_record``), the same tests for every store, and what only the durable ones
do: keep it in the ``turns`` table (damage found like a session's), migrate a store of
schema version 1, and (PostgreSQL) write it in the commit's pipeline without a round trip
of its own."""

from __future__ import annotations

import tempfile
from typing import Any

import pytest

from phaseflow.stores import SessionRecord, Store
from phaseflow.stores.codec import StoreDataError
from tests.support import forks
from tests.support.libpq_trace import round_trips
from tests.support.store_backends import Backend
from tests.support.store_sessions import Recorder, chat_commits, renumber


def _ends(turn: int, events: tuple[Any, ...]) -> bool:
    return any(e.get("type") == "turn_finished" and e.get("turn") == turn for e in events)


async def _replay(store: Store, recorder: Recorder, sid: str = "chat"
                  ) -> dict[int, SessionRecord]:
    """The recorded commits of a real chat, committed into ``store`` one by one, each
    turn's end kept as the runner keeps it; the records of the turns' ends."""
    ends: dict[int, SessionRecord] = {}
    for k, (record, events) in enumerate(recorder.log):
        keep = record.status != "running" and _ends(record.turn, events)
        record = renumber(record, k + 1, session_id=sid)
        await store.commit(record, events, expected_version=k, keep_turn=keep)
        if keep:
            ends[record.turn] = record
    return ends


def test_the_runner_keeps_exactly_each_turn_s_end() -> None:
    """A real session's commits: the one carrying each turn's ``turn_finished`` is kept
    (as the record of that turn), and no other."""
    async def body() -> None:
        recorder = await chat_commits(3)
        kept = []
        for record, events in recorder.log:
            found = await recorder.turn_record("chat", record.turn)
            if found is not None and found.version == record.version:
                kept.append((record.turn, record.status, [e["type"] for e in events]))
        assert kept == [(turn, "idle", ["turn_finished"]) for turn in (1, 2, 3)]
    import asyncio
    asyncio.run(body())


def test_a_turn_s_end_is_kept_and_read_back(store: Backend) -> None:
    async def body() -> None:
        target = await store.open()
        ends = await _replay(target, await chat_commits(3))
        assert sorted(ends) == [1, 2, 3]
        reader = await store.open()  # another store object: what is stored, not known
        for turn, record in ends.items():
            found = await reader.turn_record("chat", turn)
            assert found is not None
            assert forks.comparable(found) == forks.comparable(record)
            assert (found.session_id, found.version) == ("chat", record.version)
            assert len(found.continuation.messages) == 2 * turn  # the prefix, not all
        assert await reader.turn_record("chat", 4) is None
        assert await reader.turn_record("chat", 0) is None
        assert await reader.turn_record("other", 1) is None
    store.run(body)


def test_a_rewritten_history_drops_the_earlier_turns_records(store: Backend) -> None:
    """A commit whose history does not extend the stored one (a compaction, a rewind):
    the records of earlier turns named history rows that are gone, so they go too."""
    async def body() -> None:
        target = await store.open()
        recorder = await chat_commits(3)
        ends = await _replay(target, recorder)
        shorter = renumber(ends[1], len(recorder.log) + 1, session_id="chat")
        await target.commit(shorter, [], expected_version=len(recorder.log))
        for turn in (1, 2, 3):
            assert await target.turn_record("chat", turn) is None
    store.run(body)


def test_deleting_a_session_deletes_its_turns_records(store: Backend) -> None:
    async def body() -> None:
        target = await store.open()
        await _replay(target, await chat_commits(2))
        assert await target.delete("chat")
        assert await target.turn_record("chat", 1) is None
        await _replay(target, await chat_commits(1))  # the id is free again
        found = await target.turn_record("chat", 1)
        assert found is not None and found.version == len((await chat_commits(1)).log)
    store.run(body)


def test_a_damaged_turn_record_is_an_error_naming_the_session_and_turn(
        durable: Backend) -> None:
    async def body() -> None:
        target = await durable.open()
        await _replay(target, await chat_commits(2))
        await durable.sql("UPDATE turns SET status = 'failed' WHERE turn = 1")
        with pytest.raises(StoreDataError, match=r"end of turn 1: session 'chat': its "
                           "status column says 'failed'"):
            await target.turn_record("chat", 1)
        await durable.sql("DELETE FROM messages WHERE idx = 1")
        with pytest.raises(StoreDataError, match=r"end of turn 2: session 'chat': the "
                           r"store holds 3 messages rows where it wrote 4"):
            await target.turn_record("chat", 2)
    durable.run(body)


def test_a_store_of_schema_version_1_is_migrated_and_keeps_working(durable: Backend) -> None:
    """A store made before the ``turns`` table (made here by removing it from a new one,
    with the snapshots saying version 1): opened by this phaseflow, it gets the table and
    this phaseflow's version (4), its sessions open and talk on, and a turn that ended
    before the migration cannot be forked, saying why; one that ended after can."""
    async def body() -> None:
        session = await forks.agent(await durable.open()).session("old")
        for i in range(2):
            await session.reply(f"Message {i}")
        for table in ("turns", "request_keys", "cancels", "owners", "timers"):
            await durable.sql(f"DROP TABLE {table}")
        await durable.sql("UPDATE phaseflow_schema SET version = 1")
        await durable.sql("UPDATE sessions SET snapshot = replace(snapshot, '\"schema\":4',"
                          " '\"schema\":1')")
        [(text,)] = await durable.sql("SELECT snapshot FROM sessions")
        assert text.startswith('{"schema":1,')

        store = await durable.open()
        reopened = await forks.agent(store).session("old")
        assert await durable.sql("SELECT version FROM phaseflow_schema") == [(4,)]
        assert await durable.sql("SELECT count(*) FROM turns") == [(0,)]
        assert (reopened.turn, reopened.state["n"], reopened.phase) == (2, 2, "high")
        assert str(await reopened.reply("Message 2")) == "Reply 2"
        from phaseflow.session import ForkRefused
        with pytest.raises(ForkRefused, match=r"no record of the end of turn 2 of session "
                           r"'old'.*upgraded from version 1"):
            await reopened.fork("new", at_turn=2)
        fork = await reopened.fork("new", at_turn=3)
        assert fork.history == reopened.history
    durable.run(body)


def test_keeping_a_turn_adds_no_round_trip_on_postgres(pg: Backend) -> None:
    """libpq's own trace of the store's connection: a commit that keeps its turn sends
    the turn's row in the same pipeline as its guard, its other writes and its
    ``COMMIT``: one round trip, as a commit that does not (docs/durability.md)."""
    from psycopg import pq

    from phaseflow.stores.postgres import PostgresStore

    async def body() -> None:
        store = await pg.open(pool_size=1, check_connections=False)
        assert isinstance(store, PostgresStore)
        recorder = await chat_commits(2)
        log = recorder.log
        await _replay(store, _first(recorder, 2))
        pool = store._pool
        assert pool is not None
        counts: dict[bool, tuple[int, bool]] = {}
        for keep, k in ((False, 2), (True, 3)):
            record, events = log[k]
            with tempfile.TemporaryFile("w+") as out:
                async with pool.connection() as conn:
                    conn.pgconn.trace(out.fileno())
                    conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)
                await store.commit(renumber(record, k + 1, session_id="chat"), events,
                                   expected_version=k, keep_turn=keep)
                async with pool.connection() as conn:
                    conn.pgconn.untrace()
                out.seek(0)
                text = out.read()
            counts[keep] = (round_trips(text), "INSERT INTO turns" in text)
        assert counts == {False: (1, False), True: (1, True)}, counts
    pg.run(body)


def _first(recorder: Recorder, n: int) -> Recorder:
    """A recorder holding the first ``n`` commits of ``recorder``."""
    out = Recorder()
    out.log = recorder.log[:n]
    return out

