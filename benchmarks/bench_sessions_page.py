"""The first page of ``GET /v1/sessions`` over many stored sessions (run by hand:
``python benchmarks/bench_sessions_page.py --sessions 1000000``).

The store is filled in the database itself: one real session is made (a turn of the
benchmark workflow, committed by the store), then its row is copied ``--sessions``
times under new ids and ``updated_at`` times (an ``INSERT ... SELECT`` over a series:
seconds, not a million commits). Then a real ``phaseflow serve`` process (a one-phase
chat workflow, ``--store`` the filled one) is asked for pages by httpx on the
same machine, each timed from the request to the parsed answer:

* the first page (``?limit=20``), and a page deep in the list (its cursor taken from
  the ``updated_at`` of the session half way down: keyset pagination reads no row
  before it);
* the first page of one status (``?status=idle``: every stored session is idle here);
* the store's own ``sessions_page`` (no HTTP) for the first page.

Both stores: SQLite (a file in a temporary folder) and PostgreSQL (a private cluster
started here, from ``PHASEFLOW_PG_BIN`` or the ``pg_ctl`` on ``PATH``, as the tests
start theirs). ``--stores sqlite`` or ``--stores postgres`` runs one.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT)]

REPEATS = 50


WORKFLOW = """\
phaseflow: 1
name: chat
initial: talk
phases:
  talk:
    goal: Talk.
"""


def _project(folder: Path) -> list[str]:
    """The served workflow in ``folder``; the serve arguments that run it."""
    (folder / "chat.yaml").write_text(WORKFLOW, encoding="utf-8")
    (folder / "chat.script.yaml").write_text('- "Hello."\n', encoding="utf-8")
    return [str(folder / "chat.yaml"), "--provider",
            f"scripted:{folder / 'chat.script.yaml'}"]


async def _seed(store: Any) -> None:
    """One real session of one turn, committed by the store (id ``seed``)."""
    import phaseflow
    from phaseflow.providers import ScriptedProvider
    from phaseflow.session import Agent

    workflow = phaseflow.load_workflow_text(WORKFLOW)
    agent = Agent(workflow, ScriptedProvider(["Hello."]), store=store)
    session = await agent.session("seed")
    await session.reply("Hi")


SQLITE_FILL = """
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
INSERT INTO sessions (id, workflow, workflow_hash, version, status, phase, turn,
    lease_owner, lease_expires, lease_epoch, snapshot, message_count, mark_count,
    event_count, created_at, updated_at)
SELECT printf('b%08d', i), workflow, workflow_hash, version, status, phase, turn,
    NULL, NULL, 0, snapshot, 0, 0, 0, created_at, updated_at - i * 0.001
FROM sessions, n WHERE sessions.id = 'seed'
"""

PG_FILL = """
INSERT INTO sessions (id, workflow, workflow_hash, version, status, phase, turn,
    lease_owner, lease_expires, lease_epoch, snapshot, message_count, mark_count,
    event_count, created_at, updated_at)
SELECT 'b' || lpad(i::text, 8, '0'), workflow, workflow_hash, version, status, phase, turn,
    NULL, NULL, 0, snapshot, 0, 0, 0, created_at, updated_at - i * 0.001
FROM sessions, generate_series(1, %s) AS i WHERE sessions.id = 'seed'
"""


def fill_sqlite(path: Path, count: int) -> float:
    import sqlite3

    from phaseflow.stores.sqlite import SQLiteStore

    store = SQLiteStore(path, synchronous="OFF")
    asyncio.run(_seed(store))
    store.close()
    started = time.perf_counter()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA synchronous=OFF")
    conn.execute("BEGIN")
    conn.execute(SQLITE_FILL, (count,))
    conn.execute("COMMIT")
    conn.execute("ANALYZE")
    conn.close()
    return time.perf_counter() - started


def fill_postgres(dsn: str, count: int) -> float:
    import psycopg

    from phaseflow.stores.postgres import PostgresStore

    async def seed() -> None:
        async with PostgresStore(dsn) as store:
            await _seed(store)
    asyncio.run(seed())
    started = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(PG_FILL, (count,))
        conn.execute("VACUUM ANALYZE sessions")
    return time.perf_counter() - started


@contextmanager
def postgres() -> Iterator[str]:
    from tests.support import pgserver  # the tests' private cluster, syncing as a server does

    cluster = pgserver.start(durable=True)
    try:
        yield cluster.dsn
    finally:
        cluster.stop()


def _cursor(updated_at: float, sid: str) -> str:
    raw = json.dumps([updated_at, sid]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _timed(client: Any, params: dict[str, Any]) -> tuple[list[float], dict[str, Any]]:
    times, page = [], {}
    for _ in range(REPEATS):
        started = time.perf_counter()
        answer = client.get("/v1/sessions", params=params)
        page = answer.json()
        times.append(time.perf_counter() - started)
        assert answer.status_code == 200, answer.text
    return times, page


def over_http(store: str, count: int, folder: Path) -> dict[str, list[float]]:
    import httpx

    from tests.support.serve_server import start

    server = start([*_project(folder), "--store", store], folder / "serve.log", cwd=folder)
    try:
        with httpx.Client(base_url=server.base, timeout=120) as client:
            client.get("/v1/sessions", params={"limit": 20})  # warm up
            first, page = _timed(client, {"limit": 20})
            assert len(page["sessions"]) == 20 and page["next_cursor"]
            middle = count // 2
            # the half-way session's own place: b<middle>, updated middle ms before seed
            top = page["sessions"][0]["updated_at"]
            deep, deep_page = _timed(client, {"limit": 20, "cursor": _cursor(
                top - middle * 0.001, f"b{middle:08d}")})
            assert len(deep_page["sessions"]) == 20
            status, _ = _timed(client, {"limit": 20, "status": "idle"})
    finally:
        server.stop()
    return {"first page": first, "a page half way down": deep, "first page, ?status=idle":
            status}


def in_store(make: Any) -> list[float]:
    from phaseflow.stores.base import SessionsPage

    async def run() -> list[float]:
        store = make()
        times = []
        try:
            for _ in range(REPEATS):
                started = time.perf_counter()
                rows = await store.sessions_page(SessionsPage(21))
                times.append(time.perf_counter() - started)
                assert len(rows) == 21
        finally:
            closing = store.close()
            if asyncio.iscoroutine(closing):
                await closing
        return times
    return asyncio.run(run())


def _report(name: str, count: int, fill: float, rows: dict[str, list[float]]) -> None:
    print(f"\n{name}: {count:,} sessions (filled in {fill:.1f} s); {REPEATS} requests each; "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"{'':34}{'p50 ms':>9}{'p95 ms':>9}{'max ms':>9}")
    for what, values in rows.items():
        ordered = sorted(values)
        p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
        print(f"{what:34}{statistics.median(values) * 1000:9.2f}{p95 * 1000:9.2f}"
              f"{max(values) * 1000:9.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1_000_000)
    parser.add_argument("--stores", default="sqlite,postgres")
    args = parser.parse_args()
    stores = args.stores.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        if "sqlite" in stores:
            from phaseflow.stores.sqlite import SQLiteStore

            path = folder / "sessions.db"
            fill = fill_sqlite(path, args.sessions)
            rows = over_http(str(path), args.sessions, folder)
            rows["the store's sessions_page (no HTTP)"] = in_store(lambda: SQLiteStore(path))
            _report("SQLite", args.sessions, fill, rows)
        if "postgres" in stores:
            from phaseflow.stores.postgres import PostgresStore

            with postgres() as dsn:
                fill = fill_postgres(dsn, args.sessions)
                rows = over_http(dsn, args.sessions, folder)
                rows["the store's sessions_page (no HTTP)"] = in_store(
                    lambda: PostgresStore(dsn))
                _report("PostgreSQL", args.sessions, fill, rows)


if __name__ == "__main__":
    main()
