"""A guided session's cost per turn with a durable store, against LangGraph and the OpenAI
Agents SDK with theirs, and against the floor: the same durable transactions alone (run
by hand: ``python benchmarks/bench_session_durable.py [--flags]``).

The workload is ``bench_session.py``'s (every turn one user message; the scripted model
answers the turn's first request with two tool calls, ``lookup_customer`` and
``find_order``, and the second with a text; fresh call ids every turn), each framework
keeping the conversation in its durable store:

* **SQLite**, WAL journal and ``synchronous=FULL`` on every framework's connections:
  phaseflow's ``SQLiteStore`` (its defaults), LangGraph's ``SqliteSaver`` (a
  ``sqlite3`` connection with both pragmas set before ``setup()``), the Agents SDK's
  ``SQLiteSession`` (a subclass setting ``synchronous`` on each connection the
  session opens, after the SDK's own WAL setup);
* the same three with **``synchronous=NORMAL``** (``*-normal``: ``SQLiteStore(path,
  synchronous="NORMAL")``, the same pragma on the peers' connections): WAL syncs at
  checkpoints only, so a power loss may lose the last commits (never half of one);
* **PostgreSQL**: phaseflow's ``PostgresStore`` and LangGraph's ``PostgresSaver`` (one
  psycopg connection, ``autocommit=True, prepare_threshold=0, row_factory=dict_row``, as
  its documentation says) on a private cluster started here (``tests/support/pgserver.py``,
  ``durable=True``: the server's defaults, ``fsync``/``synchronous_commit`` on), on
  loopback, one database per framework. (The SDK's Postgres session needs SQLAlchemy
  and asyncpg: not measured.)
* ``pf-memory``: phaseflow on its ``MemoryStore`` (no disk): the engine's own cost.

**The floor** (``floor-sqlite``, ``floor-sqlite-normal``, ``floor-pg``): per turn only
the durable transactions phaseflow's turn makes, with the same rows. First a probe runs
phaseflow's conversation (as long as the longest one measured) on a scratch
``SQLiteStore`` (``synchronous=OFF``) through a wrapper (``ProbeStore``) that, before
each ``commit``, encodes the record exactly as the store is about to
(``codec.encode(record, store._known[sid])``, ``codec.dumps`` of each event) and keeps
the strings: the snapshot, the appended messages, marks and events, the row's other text
columns, whether the commit gives the lease back; it also counts the store calls per
turn. A floor turn ``i`` replays phaseflow's turn ``i``: the lease's transaction (an
upsert of the session's row, not waiting for the disk, as phaseflow's: SQLite
``PRAGMA synchronous=NORMAL`` around it, Postgres ``SET LOCAL synchronous_commit TO
OFF``), then one transaction per commit (update the session row with that commit's
snapshot, insert that commit's message, mark and event rows, into tables shaped as
phaseflow's; the last also clears the lease). SQLite: one connection on a thread of its
own, as ``SQLiteStore``, WAL and the variant's ``synchronous``, ``BEGIN IMMEDIATE``.
Postgres: a psycopg ``AsyncConnectionPool`` (autocommit connections, max 4, no
connection check), each transaction in one pipeline. No reads: phaseflow's reads (its
compare-and-set ``SELECT``, the version and queue checks, the pool's connection checks)
are what the floor leaves out. The report gives phaseflow / floor per round (the two ran
seconds apart in the same round), median and range, at 20 turns and after 500, and
phaseflow / (floor + the in-memory turn): what is left once the disk and the engine's own
steps are counted. Target of the issue: <= 1.3.

LangGraph runs with ``invoke`` and its default durability (``"async"``: a step's
checkpoint is written while the next step runs; the run waits for them before it
returns).

Measured, in one process, rounds interleaved (every variant once per round, the order
rotated), medians of the rounds: CPU time of this process (``time.process_time``, all of
its threads: the SQLite threads count; the Postgres server's processes do not: the
server's CPU per turn, from ``/proc`` of the postmaster and its children, is its own
column) and wall time per turn, (1) over a fresh 20-turn conversation, (2) over 20 turns
of a conversation that already has 500.

Durable commits per turn, each variant in a fresh process per count (``--child``),
two runs (3 warm-up turns, then 0 or N more turns; the difference over N, so opening,
schema creation and the first turn are not counted):

* SQLite: ``strace -f -y -T -e trace=fsync,fdatasync`` on the child: the syncs per turn,
  by file (the WAL, the database, a rollback journal) and the time spent in them;
* Postgres: ``pg_stat_database.xact_commit`` of the variant's database (every committed
  transaction, read-only ones included) and ``pg_stat_wal.wal_sync`` (the WAL flushes,
  the server's durable commits; cluster-wide, so a background flush counts too), read
  once the child's backends are gone (a backend reports its statistics when it exits).

``--paired``: the growth again, in back-to-back pairs (each round 20 turns of a fresh
conversation, then 20 of the long one; the ratio per pair, median of the rounds), so a
slow spell of the shared disk hits both halves of a pair: on a shared machine the fsync
latency moves by 2-3x over minutes, which the separate phases above cannot tell from
growth.

``--profile``: phaseflow's durable turn (SQLite and Postgres) broken down: every store
call timed (wall, calls per turn), and cProfile with a wall clock over the event loop's
thread.

Flags: ``--rounds 5``, ``--turns 20`` (per round), ``--long 500`` (the history before
the second phase), ``--count-turns 20``, ``--only KEY,KEY`` (the ``VARIANTS`` keys),
``--no-postgres``, ``--skip-timing``, ``--skip-counts``, ``--paired``, ``--profile``,
``--top 12`` (profile rows). Throughput under load (1, 2, 4 worker processes on
Postgres) is ``bench_throughput.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import cProfile
import gc
import json
import os
import pstats
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_session import (  # noqa: E402
    ANSWER,
    SYSTEM,
    WORKFLOW,
    Conversation,
    PhaseflowConversation,
    ScriptProvider,
    agents_agent,
    find_order,
    langgraph_graph,
    lookup_customer,
    question,
    timed,
)

#: key -> (label, backend, SQLite ``synchronous``; "" for Postgres)
VARIANTS: dict[str, tuple[str, str, str]] = {
    "pf-memory": ("phaseflow + MemoryStore (no disk: the engine alone)", "memory", ""),
    "pf-sqlite": ("phaseflow + SQLiteStore", "sqlite", "FULL"),
    "floor-sqlite": ("floor: the same transactions, SQLite", "sqlite", "FULL"),
    "lg-sqlite": ("LangGraph + SqliteSaver (invoke)", "sqlite", "FULL"),
    "sdk-sqlite": ("Agents SDK + SQLiteSession", "sqlite", "FULL"),
    "pf-sqlite-normal": ("phaseflow + SQLiteStore, NORMAL", "sqlite", "NORMAL"),
    "floor-sqlite-normal": ("floor, SQLite NORMAL", "sqlite", "NORMAL"),
    "lg-sqlite-normal": ("LangGraph + SqliteSaver, NORMAL", "sqlite", "NORMAL"),
    "sdk-sqlite-normal": ("Agents SDK + SQLiteSession, NORMAL", "sqlite", "NORMAL"),
    "pf-pg": ("phaseflow + PostgresStore", "postgres", ""),
    "floor-pg": ("floor: the same transactions, Postgres", "postgres", ""),
    "lg-pg": ("LangGraph + PostgresSaver (invoke)", "postgres", ""),
}

#: phaseflow's variant -> its floor (the ratio the issue asks for: <= 1.3)
FLOORS: dict[str, str] = {"pf-sqlite": "floor-sqlite", "pf-sqlite-normal": "floor-sqlite-normal",
                          "pf-pg": "floor-pg"}

#: the ratio target of the issue: a turn within 1.3x of its commits alone
FLOOR_TARGET = 1.3


# --- the frameworks, durable ----------------------------------------------------------


class Backend:
    """One framework on one durable store: ``conversation(id)`` opens (or resumes) a
    conversation; ``close()`` releases the connections."""

    async def conversation(self, cid: str) -> Conversation:
        raise NotImplementedError

    async def close(self) -> None:
        return None


class PhaseflowBackend(Backend):
    def __init__(self, store: Any) -> None:
        from phaseflow.api import load_workflow_text
        from phaseflow.session import Agent

        self.store = store
        self.agent = Agent(load_workflow_text(WORKFLOW), ScriptProvider(),
                           tools=[lookup_customer, find_order], store=store, system=SYSTEM)

    async def conversation(self, cid: str) -> Conversation:
        return PhaseflowConversation(await self.agent.session(cid))

    async def close(self) -> None:
        close = getattr(self.store, "close", None)  # a MemoryStore has nothing to close
        result = close() if close is not None else None
        if asyncio.iscoroutine(result):
            await result


class LangGraphConversation(Conversation):
    def __init__(self, app: Any, cid: str) -> None:
        self.app = app
        self.config = {"configurable": {"thread_id": cid}}

    async def turn(self, text: str) -> None:
        from langchain_core.messages import HumanMessage

        out = self.app.invoke({"messages": [HumanMessage(text)]}, self.config)
        if out["messages"][-1].content != ANSWER:
            raise SystemExit(f"LangGraph: unexpected reply {out['messages'][-1]!r}")


class LangGraphBackend(Backend):
    def __init__(self, saver: Any, conn: Any) -> None:
        saver.setup()
        self.conn = conn
        self.app = langgraph_graph(saver, False)

    async def conversation(self, cid: str) -> Conversation:
        return LangGraphConversation(self.app, cid)

    async def close(self) -> None:
        self.conn.close()


class AgentsConversation(Conversation):
    def __init__(self, agent: Any, run_config: Any, session: Any) -> None:
        self.agent, self.run_config, self.session = agent, run_config, session

    async def turn(self, text: str) -> None:
        from agents import Runner

        result = await Runner.run(self.agent, text, session=self.session,
                                  run_config=self.run_config)
        if result.final_output != ANSWER:
            raise SystemExit(f"Agents SDK: unexpected reply {result.final_output!r}")


class AgentsBackend(Backend):
    def __init__(self, path: str, synchronous: str) -> None:
        from agents import SQLiteSession

        class SyncedSQLiteSession(SQLiteSession):
            """The SDK's session with ``synchronous`` set on each of its connections
            (the SDK sets WAL itself)."""

            @staticmethod
            def _configure_connection(conn: sqlite3.Connection) -> None:
                SQLiteSession._configure_connection(conn)
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute(f"PRAGMA synchronous={synchronous}")

        self.cls = SyncedSQLiteSession
        self.path = path
        self.agent, self.run_config = agents_agent()
        self.sessions: list[Any] = []

    async def conversation(self, cid: str) -> Conversation:
        session = self.cls(cid, self.path)
        self.sessions.append(session)
        return AgentsConversation(self.agent, self.run_config, session)

    async def close(self) -> None:
        for s in self.sessions:
            s.close()


def sqlite_connection(path: str, synchronous: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    return conn


async def open_backend(key: str, where: str) -> Backend:
    """``where``: the SQLite file, or the database's DSN."""
    sync = VARIANTS[key][2]
    if key == "pf-memory":
        from phaseflow.stores import MemoryStore

        return PhaseflowBackend(MemoryStore())
    if key.startswith("floor-"):
        return await FloorBackend.open(VARIANTS[key][1], where, sync, SHAPES)
    if key.startswith("pf-sqlite"):
        from phaseflow.stores.sqlite import SQLiteStore

        return PhaseflowBackend(SQLiteStore(where, synchronous=sync))
    if key == "pf-pg":
        from phaseflow.stores.postgres import PostgresStore

        store = PostgresStore(where)
        await store.open()
        return PhaseflowBackend(store)
    if key.startswith("lg-sqlite"):
        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = sqlite_connection(where, sync)
        return LangGraphBackend(SqliteSaver(conn), conn)
    if key == "lg-pg":
        import psycopg
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg.rows import dict_row

        pconn = psycopg.connect(where, autocommit=True, prepare_threshold=0,
                                row_factory=dict_row)
        return LangGraphBackend(PostgresSaver(pconn), pconn)
    if key.startswith("sdk-sqlite"):
        return AgentsBackend(where, sync)
    raise SystemExit(f"unknown variant {key}")


# --- the floor: phaseflow's durable transactions alone --------------------------------------


@dataclass
class CommitShape:
    """What one of phaseflow's commits wrote: the rows, as its codec encoded them."""

    snapshot: str
    meta: str  # the sessions row's other text columns, concatenated
    messages: list[str]
    marks: list[str]
    events: list[str]
    release: bool

    def size(self) -> int:
        return (len(self.snapshot) + len(self.meta) + sum(map(len, self.messages))
                + sum(map(len, self.marks)) + sum(map(len, self.events)))


@dataclass
class TurnShape:
    """One turn of phaseflow's: its commits and its store calls."""

    commits: list[CommitShape] = field(default_factory=list)
    calls: collections.Counter[str] = field(default_factory=collections.Counter)


#: phaseflow's turns as written, turn i of a conversation at index i (set by ``probe``, or
#: read by a ``--child`` from ``--shapes``); the floor replays them
SHAPES: list[TurnShape] = []


class ProbeStore:
    """A store that records what each commit writes: before passing it on, it encodes the
    record the way the store is about to (``codec.encode`` with what the store knows it
    holds, ``codec.dumps`` for the events), so the sizes are exactly the rows written."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.turn = TurnShape()

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._store, name)
        if not asyncio.iscoroutinefunction(target):
            return target

        async def call(*args: Any, **kwargs: Any) -> Any:
            self.turn.calls[name] += 1
            return await target(*args, **kwargs)
        return call

    async def commit(self, record: Any, events: Any, **kwargs: Any) -> Any:
        from phaseflow.stores import codec

        written, _ = codec.encode(record, self._store._known.get(record.session_id))
        self.turn.calls["commit"] += 1
        self.turn.commits.append(CommitShape(
            written.snapshot, record.workflow + record.workflow_hash + record.status
            + record.phase, list(written.messages), list(written.marks),
            [codec.dumps(dict(e)) for e in events], bool(kwargs.get("release"))))
        return await self._store.commit(record, events, **kwargs)


async def probe(path: Path, n: int) -> list[TurnShape]:
    """``n`` turns of one phaseflow conversation on a scratch ``SQLiteStore``
    (``synchronous=OFF``: only the rows matter here), each turn's writes recorded."""
    from phaseflow.stores.sqlite import SQLiteStore

    store = ProbeStore(SQLiteStore(path, synchronous="OFF"))
    backend = PhaseflowBackend(store)
    conv = await backend.conversation("probe")
    shapes = []
    for i in range(n):
        store.turn = TurnShape()
        await conv.turn(question(i))
        shapes.append(store.turn)
    await backend.close()
    return shapes


def save_shapes(shapes: list[TurnShape], path: Path) -> None:
    path.write_text(json.dumps([{"calls": dict(t.calls), "commits": [vars(c) for c in t.commits]}
                                for t in shapes]))


def load_shapes(path: Path) -> list[TurnShape]:
    return [TurnShape([CommitShape(**c) for c in t["commits"]], collections.Counter(t["calls"]))
            for t in json.loads(path.read_text())]


def describe_shapes(shapes: list[TurnShape], at: tuple[int, ...]) -> None:
    for i in at:
        if i >= len(shapes):
            continue
        t = shapes[i]
        parts = "; ".join(
            f"{k + 1}: {c.size():,} B (snapshot {len(c.snapshot):,}, {len(c.messages)} messages "
            f"{sum(map(len, c.messages)):,}, {len(c.marks)} marks, {len(c.events)} events "
            f"{sum(map(len, c.events)):,}{', release' if c.release else ''})"
            for k, c in enumerate(t.commits))
        calls = ", ".join(f"{k} {v}" for k, v in sorted(t.calls.items()))
        print(f"phaseflow's turn {i}: store calls {calls}; commits {parts}")


_FLOOR_SQLITE_DDL = """
CREATE TABLE IF NOT EXISTS head (id TEXT PRIMARY KEY, meta TEXT, version INTEGER NOT NULL,
    snapshot TEXT NOT NULL, lease_owner TEXT, lease_expires REAL,
    lease_epoch INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS messages (session_id TEXT NOT NULL, idx INTEGER NOT NULL,
    data TEXT NOT NULL, PRIMARY KEY (session_id, idx)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS marks (session_id TEXT NOT NULL, idx INTEGER NOT NULL,
    data TEXT NOT NULL, PRIMARY KEY (session_id, idx)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS events (session_id TEXT NOT NULL, idx INTEGER NOT NULL,
    data TEXT NOT NULL, PRIMARY KEY (session_id, idx)) WITHOUT ROWID;
"""

_FLOOR_PG_DDL = (
    "CREATE TABLE IF NOT EXISTS head (id TEXT PRIMARY KEY, meta TEXT, version BIGINT NOT NULL,"
    " snapshot TEXT NOT NULL, lease_owner TEXT, lease_expires DOUBLE PRECISION,"
    " lease_epoch BIGINT NOT NULL DEFAULT 0)",
    *(f"CREATE TABLE IF NOT EXISTS {t} (session_id TEXT NOT NULL, idx BIGINT NOT NULL,"
      " data TEXT NOT NULL, PRIMARY KEY (session_id, idx))"
      for t in ("messages", "marks", "events")),
)


class FloorConversation(Conversation):
    """A turn that is only phaseflow's durable transactions: the lease taken (not waiting
    for the disk, as phaseflow's), then its commits, each writing the rows phaseflow's
    commit of the same turn wrote (``SHAPES``), the last one giving the lease back."""

    def __init__(self, backend: FloorBackend, cid: str) -> None:
        self.backend, self.cid = backend, cid
        self.n = 0
        self.counts = [0, 0, 0]  # messages, marks, events written so far

    async def turn(self, text: str) -> None:
        shapes = self.backend.shapes
        shape = shapes[min(self.n, len(shapes) - 1)]
        self.n += 1
        await self.backend.lease(self.cid)
        for c in shape.commits:
            rows = []
            for k, (table, data) in enumerate((("messages", c.messages), ("marks", c.marks),
                                               ("events", c.events))):
                rows.append((table, self.counts[k], data))
                self.counts[k] += len(data)
            await self.backend.commit(self.cid, c, rows)


class FloorBackend(Backend):
    """The floor's store: SQLite on a thread of its own (as ``SQLiteStore``: one
    connection, WAL, the given ``synchronous``; the lease's transaction at ``NORMAL``), or
    Postgres through a psycopg pool (as ``PostgresStore``: autocommit connections; each
    transaction in one pipeline; the lease's with ``synchronous_commit`` off)."""

    shapes: list[TurnShape]
    kind: str  # "sqlite" or "postgres"
    sync: str  # SQLite's synchronous
    executor: Any  # SQLite: the connection's thread
    conn: sqlite3.Connection
    pool: Any  # Postgres: the psycopg pool

    @classmethod
    async def open(cls, kind: str, where: str, sync: str, shapes: list[TurnShape]
                   ) -> FloorBackend:
        if not shapes:
            raise SystemExit("the floor needs phaseflow's turns measured first (probe)")
        self = cls()
        self.kind, self.sync, self.shapes = kind, sync, shapes
        if kind == "sqlite":
            from concurrent.futures import ThreadPoolExecutor

            self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="floor")
            self.conn = await self._on_thread(lambda: self._sqlite_open(where))
        else:
            import psycopg
            from psycopg_pool import AsyncConnectionPool

            async with await psycopg.AsyncConnection.connect(where, autocommit=True) as conn:
                for statement in _FLOOR_PG_DDL:
                    await conn.execute(statement)
            self.pool = AsyncConnectionPool(where, min_size=1, max_size=4, open=False,
                                            kwargs={"autocommit": True})
            await self.pool.open(wait=True)
        return self

    def _sqlite_open(self, path: str) -> sqlite3.Connection:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={self.sync}")
        conn.executescript(_FLOOR_SQLITE_DDL)
        return conn

    async def _on_thread(self, fn: Callable[[], Any]) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn)

    async def conversation(self, cid: str) -> Conversation:
        return FloorConversation(self, cid)

    async def lease(self, cid: str) -> None:
        now = time.time()
        if self.kind == "sqlite":
            def take() -> None:
                conn = self.conn
                relaxed = self.sync in ("FULL", "EXTRA")
                if relaxed:
                    conn.execute("PRAGMA synchronous=NORMAL")
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("INSERT INTO head (id, version, snapshot, lease_owner,"
                             " lease_expires, lease_epoch) VALUES (?, 0, '{}', 'w', ?, 1)"
                             " ON CONFLICT (id) DO UPDATE SET lease_owner = 'w',"
                             " lease_expires = excluded.lease_expires,"
                             " lease_epoch = lease_epoch + 1", (cid, now + 30))
                conn.execute("COMMIT")
                if relaxed:
                    conn.execute(f"PRAGMA synchronous={self.sync}")
            await self._on_thread(take)
            return
        async with self.pool.connection() as pconn, pconn.pipeline(), pconn.transaction():
            await pconn.execute("SET LOCAL synchronous_commit TO OFF")
            await pconn.execute(
                "INSERT INTO head (id, version, snapshot, lease_owner, lease_expires,"
                " lease_epoch) VALUES (%s, 0, '{}', 'w', %s, 1) ON CONFLICT (id) DO UPDATE"
                " SET lease_owner = 'w', lease_expires = excluded.lease_expires,"
                " lease_epoch = head.lease_epoch + 1", (cid, now + 30))

    async def commit(self, cid: str, c: CommitShape, rows: list[tuple[str, int, list[str]]]
                     ) -> None:
        release = "lease_owner = NULL, lease_expires = NULL, " if c.release else ""
        if self.kind == "sqlite":
            def write() -> None:
                conn = self.conn
                conn.execute("BEGIN IMMEDIATE")
                conn.execute(f"UPDATE head SET {release}meta = ?, version = version + 1,"
                             " snapshot = ? WHERE id = ?", (c.meta, c.snapshot, cid))
                for table, start, data in rows:
                    if data:
                        conn.executemany(f"INSERT INTO {table} (session_id, idx, data)"
                                         " VALUES (?, ?, ?)",
                                         [(cid, start + k, d) for k, d in enumerate(data)])
                conn.execute("COMMIT")
            await self._on_thread(write)
            return
        async with self.pool.connection() as pconn, pconn.pipeline(), pconn.transaction():
            await pconn.execute(f"UPDATE head SET {release}meta = %s, version = version + 1,"
                                " snapshot = %s WHERE id = %s", (c.meta, c.snapshot, cid))
            for table, start, data in rows:
                if data:
                    await pconn.execute(
                        f"INSERT INTO {table} (session_id, idx, data) SELECT %s, %s + o - 1, d"
                        " FROM unnest(%s::text[]) WITH ORDINALITY AS t(d, o)",
                        (cid, start, data))

    async def close(self) -> None:
        if self.kind == "sqlite":
            await self._on_thread(self.conn.close)
            self.executor.shutdown()
        else:
            await self.pool.close()


# --- where the data goes ----------------------------------------------------------------


@dataclass
class Places:
    """The SQLite directory and the Postgres cluster (``None``: no Postgres here)."""

    tmp: Path
    cluster: Any = None
    dsns: dict[str, str] = field(default_factory=dict)

    def where(self, key: str) -> str:
        if VARIANTS[key][1] in ("sqlite", "memory"):
            return str(self.tmp / f"{key}.db")
        return self.dsns[key]

    def admin_dsn(self) -> str:
        return str(self.cluster.dsn)


def make_places(postgres: bool) -> Places:
    places = Places(Path(tempfile.mkdtemp(prefix="bench-durable-", dir="/tmp")))
    if not postgres:
        return places
    from tests.support import pgserver

    try:
        cluster = pgserver.start(durable=True)
    except pgserver.Unavailable as exc:
        print(f"skipping Postgres: {exc}")
        return places
    import psycopg

    places.cluster = cluster
    with psycopg.connect(cluster.dsn, autocommit=True) as conn:
        for key, (_, backend, _sync) in VARIANTS.items():
            if backend == "postgres":
                db = key.replace("-", "_")
                conn.execute(f"CREATE DATABASE {db}")
                places.dsns[key] = cluster.dsn.replace("dbname=phaseflow", f"dbname={db}")
        settings: dict[str, str] = dict(conn.execute(
            "SELECT name, setting FROM pg_settings WHERE name IN ('fsync', 'synchronous_commit',"
            " 'wal_sync_method', 'full_page_writes', 'server_version')").fetchall())
    print(f"Postgres cluster on port {cluster.port}: {settings}")
    return places


def server_cpu(cluster: Any) -> float:
    """CPU seconds of the postmaster, its live children and its reaped ones."""
    if cluster is None:
        return 0.0
    pid = int((cluster.root / "data" / "postmaster.pid").read_text().split()[0])
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        ppid = int(fields[1])
        if int(entry) == pid:
            total += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
        elif ppid == pid:
            total += int(fields[11]) + int(fields[12])
    return total / tick


# --- timing -----------------------------------------------------------------------------


Rounds = dict[str, dict[str, list[tuple[float, float, float]]]]


async def run_timing(places: Places, keys: list[str], rounds: int, turns: int, long: int
                     ) -> tuple[dict[str, dict[str, float]], Rounds]:
    """The medians (and min, max) per variant, and every round's (CPU, wall, server CPU)
    per variant and phase (``"s"``: fresh, ``"l"``: after ``long``), round by round."""
    backends = {k: await open_backend(k, places.where(k)) for k in keys}
    counter = collections.Counter[str]()

    async def fresh(k: str) -> Conversation:
        counter[k] += 1
        return await backends[k].conversation(f"{k}-c{counter[k]}")

    async def measure(k: str, conv: Conversation, first: int) -> tuple[float, float, float]:
        s0 = server_cpu(places.cluster) if VARIANTS[k][1] == "postgres" else 0.0
        cpu, wall = await timed(conv, first, turns)
        s1 = server_cpu(places.cluster) if VARIANTS[k][1] == "postgres" else 0.0
        return cpu, wall, (s1 - s0) / turns

    for k in keys:  # warm-up
        await timed(await fresh(k), 0, 3)
    short: dict[str, list[tuple[float, float, float]]] = {k: [] for k in keys}
    later: dict[str, list[tuple[float, float, float]]] = {k: [] for k in keys}
    print(f"{len(keys)} variants; {rounds} rounds of {turns} turns on a fresh conversation",
          flush=True)
    for r in range(rounds):
        for k in keys[r % len(keys):] + keys[: r % len(keys)]:
            short[k].append(await measure(k, await fresh(k), 0))
    print(f"building a {long}-turn conversation each ...", flush=True)
    longs: dict[str, Conversation] = {}
    for k in keys:
        conv = await fresh(k)
        t0 = time.perf_counter()
        for i in range(long):
            await conv.turn(question(i))
        longs[k] = conv
        print(f"  {VARIANTS[k][0]}: {time.perf_counter() - t0:.1f} s", flush=True)
    print(f"{rounds} rounds of {turns} more turns ...", flush=True)
    for r in range(rounds):
        for k in keys[r % len(keys):] + keys[: r % len(keys)]:
            later[k].append(await measure(k, longs[k], long + r * turns))
    for b in backends.values():
        await b.close()
    out: dict[str, dict[str, float]] = {}
    for k in keys:
        row: dict[str, float] = {}
        for label, xs in (("s", short[k]), ("l", later[k])):
            for i, what in enumerate(("cpu", "wall", "server")):
                vals = [x[i] for x in xs]
                row[f"{label}_{what}"] = statistics.median(vals)
                row[f"{label}_{what}_min"] = min(vals)
                row[f"{label}_{what}_max"] = max(vals)
        out[k] = row
    return out, {k: {"s": short[k], "l": later[k]} for k in keys}


async def run_paired(places: Places, keys: list[str], rounds: int, turns: int, long: int
                     ) -> None:
    """Growth measured in pairs: each round, ``turns`` turns of a fresh conversation
    then ``turns`` more of the long one, back to back, so a slow spell of the shared
    disk or CPUs hits both halves of a pair; the ratio of each pair, median of the
    rounds."""
    print(f"\ngrowth in pairs: {rounds} rounds of ({turns} turns fresh, {turns} turns after "
          f"{long}), back to back")
    print("| framework | fresh: wall | CPU | after: wall | CPU | ratio wall (min-max) | "
          "ratio CPU (min-max) |")
    print("|---|---|---|---|---|---|---|")
    for k in keys:
        backend = await open_backend(k, places.where(k))
        conv = await backend.conversation(f"{k}-paired-long")
        for i in range(long):
            await conv.turn(question(i))
        pairs = []
        for r in range(rounds):
            fresh = await backend.conversation(f"{k}-paired-{r}")
            a = await timed(fresh, 0, turns)
            b = await timed(conv, long + r * turns, turns)
            pairs.append((a, b))
        await backend.close()

        med = _pair_median(pairs)
        rw = [b[1] / a[1] for a, b in pairs]
        rc = [b[0] / a[0] for a, b in pairs]
        print(f"| {VARIANTS[k][0]} | {med(lambda p: p[0][1]) * 1e3:.2f} ms | "
              f"{med(lambda p: p[0][0]) * 1e3:.2f} ms | {med(lambda p: p[1][1]) * 1e3:.2f} ms"
              f" | {med(lambda p: p[1][0]) * 1e3:.2f} ms | {statistics.median(rw):.2f} "
              f"({min(rw):.2f}-{max(rw):.2f}) | {statistics.median(rc):.2f} "
              f"({min(rc):.2f}-{max(rc):.2f}) |", flush=True)


Pair = tuple[tuple[float, float], tuple[float, float]]


def _pair_median(pairs: list[Pair]) -> Callable[[Callable[[Pair], float]], float]:
    def med(f: Callable[[Pair], float]) -> float:
        return statistics.median(f(p) for p in pairs)
    return med


# --- counting durable commits -----------------------------------------------------------

_SYNC = re.compile(r"(fsync|fdatasync)\(\d+<([^>]*)>\)\s+=\s+0\s+<([\d.]+)>")


#: where ``SHAPES`` is saved for the ``--child`` processes (a floor replays them)
SHAPES_FILE: list[Path] = []


def _child_cmd(key: str, where: str, cid: str, warm: int, turns: int) -> list[str]:
    shapes = ["--shapes", str(SHAPES_FILE[0])] if SHAPES_FILE else []
    return [sys.executable, str(Path(__file__).resolve()), "--child", key, "--where", where,
            "--cid", cid, "--warm", str(warm), "--child-turns", str(turns), *shapes]


def _strace_child(key: str, where: str, cid: str, warm: int, turns: int
                  ) -> tuple[collections.Counter[str], float]:
    out = Path(tempfile.mktemp(prefix="strace-", suffix=".txt"))
    subprocess.run(["strace", "-f", "-y", "-T", "-qq", "-e", "trace=fsync,fdatasync", "-o",
                    str(out), *_child_cmd(key, where, cid, warm, turns)], check=True,
                   cwd=ROOT)
    by_file: collections.Counter[str] = collections.Counter()
    seconds = 0.0
    for line in out.read_text().splitlines():
        m = _SYNC.search(line)
        if m:
            name = m.group(2)
            kind = ("WAL" if name.endswith("-wal") else "journal" if name.endswith("-journal")
                    else "db" if name.endswith(".db") else "directory")
            by_file[f"{m.group(1)} {kind}"] += 1
            seconds += float(m.group(3))
    out.unlink()
    return by_file, seconds


def _pg_counters(admin: str, db: str) -> tuple[int, int, int]:
    import psycopg

    with psycopg.connect(admin, autocommit=True) as conn:
        for _ in range(200):  # the child's backends report their counts as they exit
            busy = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s",
                                (db,)).fetchone()
            if busy is not None and busy[0] == 0:
                break
            time.sleep(0.05)
        time.sleep(0.2)
        row = conn.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = %s",
                           (db,)).fetchone()
        wal = conn.execute("SELECT wal_sync, wal_write FROM pg_stat_wal").fetchone()
    assert row is not None and wal is not None
    return int(row[0]), int(wal[0]), int(wal[1])


def count_commits(places: Places, keys: list[str], turns: int, warm: int
                  ) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for key in keys:
        where = places.where(key)
        if VARIANTS[key][1] == "memory":
            continue
        if VARIANTS[key][1] == "sqlite":
            if shutil.which("strace") is None:
                print("no strace: SQLite syncs not counted (apt-get install strace)")
                continue
            # a fresh file each: creating it (its syncs) is the same in both runs
            base, t0 = _strace_child(key, str(places.tmp / f"count-{key}-0.db"),
                                     f"count-{key}-0", warm, 0)
            more, t1 = _strace_child(key, str(places.tmp / f"count-{key}-{turns}.db"),
                                     f"count-{key}-{turns}", warm, turns)
            row: dict[str, float] = {k: (more[k] - base[k]) / turns
                                     for k in set(base) | set(more)}
            row["syncs"] = sum(more.values()) / turns - sum(base.values()) / turns
            row["sync_ms"] = (t1 - t0) / turns * 1e3
            out[key] = row
        else:
            db = key.replace("-", "_")
            admin = places.admin_dsn()
            deltas = []
            for n in (0, turns):
                before = _pg_counters(admin, db)
                subprocess.run(_child_cmd(key, where, f"count-{key}-{n}", warm, n),
                               check=True, cwd=ROOT)
                after = _pg_counters(admin, db)
                deltas.append([a - b for a, b in zip(after, before, strict=True)])
            out[key] = {name: (deltas[1][i] - deltas[0][i]) / turns
                        for i, name in enumerate(("xact_commit", "wal_sync", "wal_write"))}
    return out


async def child(key: str, where: str, cid: str, warm: int, turns: int,
                shapes: str | None) -> None:
    if shapes:
        SHAPES[:] = load_shapes(Path(shapes))
    backend = await open_backend(key, where)
    conv = await backend.conversation(cid)
    for i in range(warm + turns):
        await conv.turn(question(i))
    await backend.close()


# --- phaseflow's durable turn, broken down -------------------------------------------------


class TimedStore:
    """A store whose every call is timed (wall, from the event loop)."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.calls: collections.Counter[str] = collections.Counter()
        self.seconds: collections.defaultdict[str, float] = collections.defaultdict(float)

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._store, name)
        if not asyncio.iscoroutinefunction(target):
            return target

        async def call(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return await target(*args, **kwargs)
            finally:
                self.calls[name] += 1
                self.seconds[name] += time.perf_counter() - t0
        return call


async def profile(places: Places, turns: int, long: int, top: int) -> None:
    from phaseflow.stores.postgres import PostgresStore
    from phaseflow.stores.sqlite import SQLiteStore

    for key in ("pf-sqlite", "pf-pg"):
        if key == "pf-pg" and places.cluster is None:
            continue
        raw: Any = (SQLiteStore(places.tmp / "profile.db") if key == "pf-sqlite"
                    else PostgresStore(places.where(key)))
        for history in (3, long):
            store = TimedStore(raw)
            backend = PhaseflowBackend(store)
            conv = await backend.conversation(f"profile-{history}")
            for i in range(history):
                await conv.turn(question(i))
            store.calls.clear()
            store.seconds.clear()
            prof = cProfile.Profile(time.perf_counter)
            gc.collect()
            w0 = time.perf_counter()
            prof.enable()
            for i in range(turns):
                await conv.turn(question(history + i))
            prof.disable()
            wall = (time.perf_counter() - w0) / turns
            print(f"\n=== {VARIANTS[key][0]} after {history} turns: {wall * 1e3:.2f} ms a turn"
                  " (profiled); store calls per turn ===")
            print("| store call | calls a turn | ms a turn | ms a call | share of the turn |")
            print("|---|---|---|---|---|")
            total = 0.0
            for name, n in store.calls.most_common():
                s = store.seconds[name] / turns
                total += s
                print(f"| `{name}` | {n / turns:g} | {s * 1e3:.2f} | "
                      f"{store.seconds[name] / n * 1e3:.2f} | {s / wall:.0%} |")
            print(f"| all store calls | | {total * 1e3:.2f} | | {total / wall:.0%} |")
            stats = pstats.Stats(prof)
            print(f"top {top} by cumulative wall time, per turn (event loop thread):")
            rows = []
            for (fn, line, func), (_, calls, own, cum, _c) in stats.stats.items():  # type: ignore[attr-defined]
                if "asyncio/" in fn or "bench_session" in fn:
                    continue
                where = fn.split("site-packages/", 1)[-1].replace(str(ROOT) + "/", "")
                rows.append((cum / turns, own / turns, calls / turns, f"{where}:{line}({func})"))
            for cum, own, calls, name in sorted(rows, reverse=True)[:top]:
                print(f"| {calls:g} | own {own * 1e3:.3f} ms | cum {cum * 1e3:.3f} ms | `{name}` |")
        result = raw.close()
        if asyncio.iscoroutine(result):
            await result


# --- the report -------------------------------------------------------------------------


def _ms(row: dict[str, float], prefix: str) -> str:
    return (f"{row[prefix] * 1e3:.2f} ms ({row[prefix + '_min'] * 1e3:.1f}-"
            f"{row[prefix + '_max'] * 1e3:.1f})")


def _commits(key: str, c: dict[str, float]) -> str:
    if not c:
        return "-"
    if VARIANTS[key][1] == "postgres":
        return f"{c['wal_sync']:.2f} WAL syncs, {c['xact_commit']:.2f} transactions"
    files = ", ".join(f"{n} {v:.2f}" for n, v in sorted(c.items())
                      if n not in ("syncs", "sync_ms") and abs(v) >= 0.005)
    return (f"{c['syncs']:.2f} syncs ({files + '; ' if files else ''}"
            f"{c['sync_ms']:.2f} ms in them)")


def report(timing: dict[str, dict[str, float]], counts: dict[str, dict[str, float]],
           turns: int, long: int, rounds: int) -> None:
    if not timing:
        for k, c in counts.items():
            print(f"{VARIANTS[k][0]}: {_commits(k, c)}")
        return
    print(f"\nper turn, median of {rounds} interleaved rounds (min-max of the rounds in "
          "brackets); growth: wall after / at")
    print(f"| framework | {turns} turns: wall | CPU | server CPU | after {long}: wall | CPU "
          "| server CPU | growth (wall) | durable commits a turn |")
    print("|---|---|---|---|---|---|---|---|---|")
    for k, row in timing.items():
        c = counts.get(k, {})
        server = VARIANTS[k][1] == "postgres"
        print(f"| {VARIANTS[k][0]} | {_ms(row, 's_wall')} | {_ms(row, 's_cpu')} | "
              + (f"{row['s_server'] * 1e3:.2f} ms" if server else "-")
              + f" | {_ms(row, 'l_wall')} | {_ms(row, 'l_cpu')} | "
              + (f"{row['l_server'] * 1e3:.2f} ms" if server else "-")
              + f" | {row['l_wall'] / row['s_wall']:.2f} | {_commits(k, c)} |")


def report_floors(per_round: Rounds, turns: int, long: int) -> None:
    """phaseflow's turn over its floor's, per store: the ratio of each round (the two ran
    in the same round, seconds apart), median and range of the rounds."""
    pairs = [(pf, fl) for pf, fl in FLOORS.items() if pf in per_round and fl in per_round]
    if not pairs:
        return
    print(f"\nphaseflow's turn / its floor (the same durable transactions alone), wall, per "
          f"round; target <= {FLOOR_TARGET}")
    mem = per_round.get("pf-memory")
    print(f"| store | floor at {turns} | ratio at {turns} (min-max) | floor after {long} | "
          f"ratio after {long} (min-max) | CPU ratio at {turns} | after {long} | "
          f"/ (floor + in-memory turn) at {turns} | after {long} | phaseflow - floor, wall "
          f"at {turns} | after {long} |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for pf, fl in pairs:
        cells, cpu, rest, extra = [], [], [], []
        for phase in ("s", "l"):
            a, b = per_round[pf][phase], per_round[fl][phase]
            extra.append(statistics.median(x[1] - y[1] for x, y in zip(a, b, strict=True)))
            ratios = [x[1] / y[1] for x, y in zip(a, b, strict=True)]
            cpu.append(statistics.median(x[0] / y[0] for x, y in zip(a, b, strict=True)))
            floor = statistics.median(y[1] for y in b)
            cells.append(f"{floor * 1e3:.2f} ms | **{statistics.median(ratios):.2f}** "
                         f"({min(ratios):.2f}-{max(ratios):.2f})")
            if mem is None:
                rest.append("-")
            else:
                left = statistics.median(x[1] / (y[1] + m[1])
                                         for x, y, m in zip(a, b, mem[phase], strict=True))
                rest.append(f"{left:.2f}")
        print(f"| {VARIANTS[pf][0]} | {cells[0]} | {cells[1]} | {cpu[0]:.2f} | {cpu[1]:.2f} | "
              f"{rest[0]} | {rest[1]} | {extra[0] * 1e3:.2f} ms | {extra[1] * 1e3:.2f} ms |",
              flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--long", type=int, default=500, help="history before the 2nd run")
    parser.add_argument("--count-turns", type=int, default=20)
    parser.add_argument("--only", default="", help="comma-separated variant keys: "
                        + ", ".join(VARIANTS))
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--skip-timing", action="store_true")
    parser.add_argument("--skip-counts", action="store_true")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--paired", action="store_true",
                        help="also measure the growth in back-to-back pairs")
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--where", help=argparse.SUPPRESS)
    parser.add_argument("--cid", help=argparse.SUPPRESS)
    parser.add_argument("--warm", type=int, default=3, help=argparse.SUPPRESS)
    parser.add_argument("--child-turns", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--shapes", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        asyncio.run(child(args.child, args.where, args.cid, args.warm, args.child_turns,
                          args.shapes))
        return
    places = make_places(not args.no_postgres)
    keys = [k for k in (args.only.split(",") if args.only else VARIANTS)
            if VARIANTS[k][1] != "postgres" or places.cluster is not None]
    try:
        timing: dict[str, dict[str, float]] = {}
        per_round: Rounds = {}
        counts: dict[str, dict[str, float]] = {}
        n = max(args.long + args.rounds * args.turns, args.warm + args.count_turns) + 1
        SHAPES[:] = asyncio.run(probe(places.tmp / "probe.db", n))
        SHAPES_FILE[:] = [places.tmp / "shapes.json"]
        save_shapes(SHAPES, SHAPES_FILE[0])
        describe_shapes(SHAPES, (0, 1, 10, args.long))
        if not args.skip_counts:
            counts = count_commits(places, keys, args.count_turns, args.warm)
        if not args.skip_timing:
            timing, per_round = asyncio.run(run_timing(places, keys, args.rounds, args.turns,
                                                       args.long))
        report(timing, counts, args.turns, args.long, args.rounds)
        report_floors(per_round, args.turns, args.long)
        if args.paired:
            asyncio.run(run_paired(places, keys, args.rounds, args.turns, args.long))
        if args.profile:
            asyncio.run(profile(places, args.turns, args.long, args.top))
    finally:
        if places.cluster is not None:
            places.cluster.stop()
        shutil.rmtree(places.tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
