"""What is particular to ``PostgresStore``: opening (and failing to), the pool, closing."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from phaseflow.stores import StoreError
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
        assert await pg.sql("SELECT version FROM phaseflow_schema") == [(2,)]
    pg.run(body)


def test_one_store_serves_many_tasks_through_a_small_pool(pg: Backend) -> None:
    async def body() -> None:
        store = await pg.open(pool_size=2)  # type: ignore[call-arg]
        records = await asyncio.gather(*(seed(store, f"s{k}") for k in range(12)))
        loaded = await asyncio.gather(*(store.load(f"s{k}") for k in range(12)))
        assert list(loaded) == list(records)
        assert len(await store.sessions()) == 12
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
