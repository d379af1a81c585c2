"""What is particular to ``PostgresStore``: opening (and failing to), the pool, closing."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from phaseflow.stores import StoreConflict, StoreError
from tests.support.libpq_trace import round_trips
from tests.support.store_backends import Backend
from tests.support.store_sessions import seed


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_unreachable_server_is_a_store_error_without_the_password(pg: Backend) -> None:
    from phaseflow.stores.postgres import PostgresStore

    async def body() -> None:
        port = _closed_port()
        store = PostgresStore(f"postgresql://ada:s3cret@127.0.0.1:{port}/sessions",
                              connect_timeout=2)
        with pytest.raises(StoreError, match=(
                rf"postgresql://ada:\*\*\*@127.0.0.1:{port}/sessions: cannot open the "
                "session store: "
                ".*refused")) as caught:
            await store.load("x")
        assert "s3cret" not in str(caught.value)
        assert caught.value.__suppress_context__
        with pytest.raises(StoreError, match="cannot open"):
            await PostgresStore("host=127.0.0.1 port=x").open()
    pg.run(body)


def test_bad_options_are_refused() -> None:
    pytest.importorskip("psycopg")
    from phaseflow.stores.postgres import PostgresStore

    with pytest.raises(StoreError, match="pool_size"):
        PostgresStore("", pool_size=0)


def test_stores_opening_together_create_the_schema_once(pg: Backend) -> None:
    async def body() -> None:
        from phaseflow.stores.postgres import PostgresStore

        stores = [PostgresStore(pg.dsn) for _ in range(6)]
        pg._opened.extend(stores)
        await asyncio.gather(*(s.open() for s in stores))
        assert await pg.sql("SELECT version FROM phaseflow_schema") == [(4,)]
    pg.run(body)


def test_one_store_serves_many_tasks_through_a_small_pool(pg: Backend) -> None:
    async def body() -> None:
        store = await pg.open(pool_size=2)  # type: ignore[call-arg]
        records = await asyncio.gather(*(seed(store, f"s{k}") for k in range(12)))
        loaded = await asyncio.gather(*(store.load(f"s{k}") for k in range(12)))
        assert list(loaded) == list(records)
        assert len(await store.sessions()) == 12
    pg.run(body)


def test_tasks_meeting_a_store_not_yet_open_share_one_pool(pg: Backend) -> None:
    """Many tasks whose first operation finds the store not open yet (a server's first
    burst of requests) open one pool between them. The store connects as a role allowed
    3 connections: one pool of 2 fits; a pool opened by each task (as before) did not,
    as a burst of 1,000 conversations ran PostgreSQL out of connections."""
    import uuid

    from psycopg.conninfo import make_conninfo

    from phaseflow.stores.postgres import PostgresStore

    async def body() -> None:
        await seed(await pg.open(), "s")
        role = f"burst_{uuid.uuid4().hex[:8]}"
        schema = pg.schema  # type: ignore[attr-defined]
        await pg.sql(f"CREATE ROLE {role} LOGIN CONNECTION LIMIT 3")
        await pg.sql(f"GRANT USAGE ON SCHEMA {schema} TO {role}")
        await pg.sql(f"GRANT ALL ON ALL TABLES IN SCHEMA {schema} TO {role}")
        await pg.sql(f"GRANT ALL ON ALL SEQUENCES IN SCHEMA {schema} TO {role}")
        store = PostgresStore(make_conninfo(pg.dsn, user=role), pool_size=2)
        pg._opened.append(store)
        loaded = await asyncio.gather(*(store.load("s") for _ in range(20)))
        assert all(r is not None and r.session_id == "s" for r in loaded)
    pg.run(body)


def test_a_closed_store_reopens_and_async_with_closes(pg: Backend) -> None:
    async def body() -> None:
        from phaseflow.stores.postgres import PostgresStore

        async with PostgresStore(pg.dsn) as store:
            first = await seed(store, "s")
        await store.close()  # closing twice is harmless
        assert await store.load("s") == first  # used again: it reopens
        await store.close()
    pg.run(body)


def test_the_synchronous_twins_work_on_postgres(pg: Backend) -> None:
    """Each ``*_sync`` call runs its own event loop; the store follows (a pool belongs to
    one loop): a new pool in the new loop, the old one's connections closed."""
    from psycopg.conninfo import make_conninfo

    import phaseflow
    from phaseflow.providers import ScriptedProvider
    from phaseflow.session import Agent
    from phaseflow.stores.postgres import PostgresStore
    from tests.support.store_sessions import CHAT

    store = PostgresStore(make_conninfo(pg.dsn, application_name="phaseflow-sync"))
    agent = Agent(phaseflow.load_workflow_text(CHAT), ScriptedProvider(["One.", "Two."]),
                  store=store)
    session = agent.session_sync("sync")
    assert session.reply_sync("hello") == "One."
    assert session.reply_sync("again") == "Two."
    again = agent.session_sync("sync")
    assert again.history == session.history
    assert _backends(pg, at_most=1) <= 1  # the last loop's pool; earlier ones closed
    pg.run(store.close)
    assert _backends(pg, at_most=0) == 0


def _backends(pg: Backend, at_most: int) -> int:
    """The server's connections named phaseflow-sync, once at most ``at_most`` (a backend
    ends a moment after its client closes): waited for up to 5 s."""
    for _ in range(100):
        [(n,)] = pg.run(lambda: pg.sql("SELECT count(*) FROM pg_stat_activity"
                                       " WHERE application_name = 'phaseflow-sync'"))
        if n <= at_most:
            break
        time.sleep(0.05)
    return int(n)


def test_connections_the_server_dropped_are_replaced(pg: Backend) -> None:
    """A server restart (or an idle timeout) drops the pool's connections: the next
    operations get fresh ones instead of failing."""
    from psycopg.conninfo import make_conninfo

    from phaseflow.stores.postgres import PostgresStore

    async def body() -> None:
        store = PostgresStore(make_conninfo(pg.dsn, application_name="phaseflow-dropped"),
                              pool_size=3)
        pg._opened.append(store)
        first = await seed(store, "s")
        await asyncio.gather(*(store.load("s") for _ in range(6)))  # several connections
        # (waiting until each backend has ended: a restart's connections are gone
        # before the server takes new ones)
        await pg.sql("SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity"
                     " WHERE application_name = 'phaseflow-dropped'")
        for _ in range(4):
            assert await store.load("s") == first
    pg.run(body)


def test_the_connection_check_costs_no_round_trip_on_a_live_connection(pg: Backend) -> None:
    """The pool checks a connection before each use by looking at its socket: a live
    idle connection has nothing to read, so a load is its one statement's round trip,
    with the check on (the default) as with it off."""
    import tempfile

    from psycopg import pq

    from phaseflow.stores.postgres import PostgresStore

    async def body() -> dict[bool, int]:
        trips: dict[bool, int] = {}
        for check in (False, True):
            store = await pg.open(pool_size=1, check_connections=check)
            assert isinstance(store, PostgresStore)
            sid = f"check-{check}"
            await seed(store, sid)
            pool = store._pool
            assert pool is not None
            with tempfile.TemporaryFile("w+") as out:
                async with pool.connection() as conn:
                    conn.pgconn.trace(out.fileno())
                    conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)
                assert await store.load(sid) is not None
                async with pool.connection() as conn:
                    conn.pgconn.untrace()
                out.seek(0)
                trips[check] = round_trips(out.read())
        return trips

    assert pg.run(body) == {False: 1, True: 1}


def test_the_connection_check_reads_a_socket_numbered_above_1023() -> None:
    """A busy server's pool connections can have descriptors above 1,023, which
    ``select`` refuses: the check still tells a quiet socket from one with news."""
    import os
    import resource

    from phaseflow.stores.postgres import _has_news

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= 1500:
        pytest.skip(f"this process may open at most {hard} files")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1501), hard))
    ours, theirs = socket.socketpair()
    high = os.dup2(ours.fileno(), 1500)
    try:
        assert not _has_news(high)
        theirs.sendall(b"bye")
        assert _has_news(high)
    finally:
        os.close(high)
        ours.close()
        theirs.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.parametrize("before", [3, 4, 5, 6])
def test_a_wrong_guess_is_taken_back_and_made_again_with_a_read(
        pg: Backend, before: int, caplog: pytest.LogCaptureFixture) -> None:
    """A store guesses the row it left (its last commit's version and counts, the lease
    that commit let go) and sends its writes behind a guard, in one round trip. When
    another store moved the session on, the guard aborts the transaction, nothing is
    written, and the operation runs again with a read: the lease is taken with the next
    epoch, a stale commit is refused as before, and the connection stays usable (psycopg
    prepares a statement at its fifth use: ``before`` moves that use into the aborted
    pipeline, whose skipped preparation must not be taken for done), with nothing in
    the log (psycopg logs an error raised inside a pipeline that then fails to end)."""
    from tests.support.store_sessions import chat_commits, renumber

    async def body() -> None:
        log = (await chat_commits(before + 3)).log
        a = await pg.open(pool_size=1)  # type: ignore[call-arg]
        b = await pg.open(pool_size=1)  # type: ignore[call-arg]
        now = time.time()

        async def commit_a(k: int, **options: object) -> tuple[int, ...]:
            record, events = log[k]
            return await a.commit(renumber(record, k + 1, session_id="s"), events,
                                  expected_version=k, **options)  # type: ignore[arg-type]

        for k in range(before):  # a's turns, each lease let go by the turn's last commit
            lease = await a.acquire("s", "a", 30, now)
            assert lease is not None
            await commit_a(k, lease=lease, release=True)
        other = await b.acquire("s", "b", 30, now)  # b takes the turn and lets it go
        assert other is not None and other.epoch == lease.epoch + 1
        await b.release(other)

        again = await a.acquire("s", "a", 30, now)  # a's guess: the epoch it let go
        assert again is not None
        assert (again.epoch, again.version) == (other.epoch + 1, before)

        record, events = log[before]  # b writes the session on (no lease asked)
        assert await b.load("s") is not None
        await b.commit(renumber(record, before + 1, session_id="s"), events,
                       expected_version=before)
        with pytest.raises(StoreConflict, match="stored version is"):
            await commit_a(before, lease=again)  # a's guess: its own last commit
        assert (await a.load("s")) == (await b.load("s"))
        await commit_a(before + 1, lease=again)  # read again: a writes on
        await commit_a(before + 2, lease=again, release=True)  # and guesses right again
        stored = await a.events("s")
        assert [e.seq for e in stored] == list(range(1, len(stored) + 1))
        assert len(stored) == sum(len(events) for _, events in log[:before + 3])
        assert await a.lease("s") is None
    with caplog.at_level("WARNING"):
        pg.run(body)
    assert [r.getMessage() for r in caplog.records if r.name.startswith("psycopg")] == []
