"""The stores under test behind one small interface (:class:`Backend`: new store objects
on one test's data, raw SQL into it, coroutines on one event loop per test), and the private
PostgreSQL database of a test session (:func:`start_postgres`, the body of the
``postgres_dsn`` fixture). The fixtures that hand them to tests are in
``tests/stores/conftest.py`` and ``tests/conftest.py``."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from phaseflow.stores import MemoryStore, SQLiteStore, Store
from tests.support import pgserver

T = TypeVar("T")


def start_postgres() -> Iterator[str]:
    """The DSN of a private PostgreSQL database, for this test session: the body of the
    ``postgres_dsn`` fixture (defined once, in ``tests/conftest.py``, so the store and
    durability tests share one cluster)."""
    required = os.environ.get(pgserver.REQUIRE_ENV) == "1"
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError as exc:
        message = f"psycopg is not installed (pip install -e '.[dev]'): {exc}"
        if required:
            pytest.fail(message)
        pytest.skip(message)
    try:
        cluster = pgserver.start()
    except pgserver.Unavailable as exc:
        if required or os.environ.get(pgserver.BIN_ENV):
            pytest.fail(f"PostgreSQL is required here but cannot start: {exc}")
        pytest.skip(f"PostgreSQL tests skipped: {exc}")
    except pgserver.StartFailed as exc:
        pytest.fail(f"the private PostgreSQL cluster did not start: {exc}")
    try:
        yield cluster.dsn
    finally:
        admin = _ADMIN.pop(cluster.dsn, None)
        if admin is not None:
            admin.close()
        cluster.stop()


class Backend:
    """One store's data for one test: new store objects on it, raw SQL into it."""

    name = "memory"

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._opened: list[Any] = []

    async def open(self) -> Store:
        """A new store object on this test's data (the memory store: the same one)."""
        raise NotImplementedError

    async def shared(self) -> Store:
        """One store object for the whole test (hypothesis examples reuse it)."""
        found = getattr(self, "_shared", None)
        if found is None:
            found = self._shared = await self.open()
        return found  # type: ignore[no-any-return]

    async def sql(self, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Run one statement on the store's database, outside any store object."""
        raise NotImplementedError

    def run(self, body: Callable[[], Awaitable[T]]) -> T:
        return self.loop.run_until_complete(body())

    async def _close(self, store: Any) -> None:
        close = getattr(store, "close", None)
        if close is not None:
            done = close()
            if asyncio.iscoroutine(done):
                await done

    def finish(self) -> None:
        async def close_all() -> None:
            for store in self._opened:
                await self._close(store)
        try:
            self.loop.run_until_complete(close_all())
        finally:
            self.loop.close()


class MemoryBackend(Backend):
    name = "memory"

    def __init__(self) -> None:
        super().__init__()
        self.store = MemoryStore()

    async def open(self) -> Store:
        return self.store


class SQLiteBackend(Backend):
    name = "sqlite"

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path

    async def open(self) -> Store:
        store = SQLiteStore(self.path)
        self._opened.append(store)
        return store

    async def sql(self, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        conn = sqlite3.connect(self.path, isolation_level=None)
        try:
            return list(conn.execute(statement.replace("%s", "?"), params))
        finally:
            conn.close()


_ADMIN: dict[str, Any] = {}


def _admin(dsn: str) -> Any:
    """One connection for the whole run to create schemas and run raw SQL (connecting
    costs more than most tests)."""
    import psycopg

    conn = _ADMIN.get(dsn)
    if conn is None or conn.closed:
        conn = _ADMIN[dsn] = psycopg.connect(dsn, autocommit=True)
    return conn


class PostgresBackend(Backend):
    name = "postgres"

    def __init__(self, dsn: str) -> None:
        super().__init__()
        from psycopg.conninfo import make_conninfo

        schema = f"t_{uuid.uuid4().hex[:12]}"
        self._admin = _admin(dsn)
        self._admin.execute(f"CREATE SCHEMA {schema}")
        self.schema = schema
        self.dsn = make_conninfo(dsn, options=f"-c search_path={schema}")

    async def open(self, **options: Any) -> Store:
        from phaseflow.stores.postgres import PostgresStore

        store = PostgresStore(self.dsn, **options)
        self._opened.append(store)
        await store.open()
        return store

    async def sql(self, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        conn = self._admin
        conn.execute(f"SET search_path TO {self.schema}")
        cur = conn.execute(statement, params)
        return list(cur.fetchall()) if cur.description else []


def open_backend(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """The backend ``kind`` names (``memory``, ``sqlite``, ``postgres``: its DSN from the
    ``postgres_dsn`` fixture), finished after the test; a fixture yields from it."""
    backend: Backend
    if kind == "memory":
        backend = MemoryBackend()
    elif kind == "sqlite":
        backend = SQLiteBackend(tmp_path / "sessions.db")
    else:
        backend = PostgresBackend(request.getfixturevalue("postgres_dsn"))
    try:
        yield backend
    finally:
        backend.finish()
