"""``PostgresStore``: sessions in a PostgreSQL database, on psycopg 3 (an optional extra:
``pip install '.[postgres]'``).

The same schema and the same semantics as :class:`~phaseflow.stores.sqlite.SQLiteStore`
(tables ``sessions``, ``messages``, ``marks``, ``events``, ``captures``, ``inbox``, ``turns``,
``phaseflow_schema``; rows encoded by :mod:`phaseflow.stores.codec`), for several
processes on several machines:

- **Async natively**: an :class:`psycopg_pool.AsyncConnectionPool`, no thread. The pool
  opens on first use (or ``await store.open()`` / ``async with PostgresStore(dsn)``) in
  the running event loop and belongs to it; ``await store.close()`` gives it back. (The
  SQLite store's ``close()`` is synchronous, because its connection lives on a thread;
  this one is a coroutine, because the pool lives on the loop.)
- **One transaction per commit**: ``SELECT ... FOR UPDATE`` locks the session's row, so
  the compare-and-set on its version holds however many processes write; a first commit
  inserts the row with ``ON CONFLICT DO NOTHING``, so of two writers creating the same
  session one wins and the other gets ``StoreConflict``. The rule deciding on what was
  read is :mod:`phaseflow.stores.rules`, the same for every store; the commit and the
  lease are :mod:`phaseflow.stores.operations`' steps, which this store drives with its
  statements, and every call's checks and decoding are
  :class:`~phaseflow.stores.durable.DurableStore`'s, as for SQLite: this module is the
  I/O.
- **One round trip per commit and per lease**, as a rule: the transaction is one
  pipeline, and the row the rule decides on is not read but guessed, from what this
  store left it as (its last commit's version and counts, the lease that commit let
  go: :attr:`~phaseflow.stores.operations.ReadCommit.expected`). A guard statement
  locks the row and aborts the transaction unless the guess holds, so the writes and
  the ``COMMIT`` go out with it. A wrong guess (another worker wrote the session or
  took its lease since) writes nothing and costs one more try, with the locking read
  sent with ``BEGIN`` and the writes with the ``COMMIT``: two round trips, as every
  commit of a store that has no guess (its first after a load, a session's first).
- **The schema** is created when the store opens (or, for a store of an older schema
  version, migrated: the tables it lacks), under a transaction-scoped advisory
  lock (processes opening together do not race), in the schema the connection creates
  tables in (``current_schema()``) when none of phaseflow's table names is taken there:
  a ``sessions`` table of another program is refused before anything is created. A
  schema from a later phaseflow, or phaseflow's tables with other columns, are refused.
- **A load is one statement** (the row and its history rows from one snapshot, so a
  commit landing meanwhile cannot mix in), and it checks the history rows against the
  counts the row keeps: a lost row is an error, not a shorter session.
- **Queued messages** are inserted under a per-session advisory lock, so a session's
  queue ids become visible in increasing order and a commit that consumes "up to id N"
  never removes a message committed late with a smaller id.

Tables go where the connection's ``search_path`` puts them: to keep phaseflow in its own
schema, put ``options='-c search_path=phaseflow'`` in the DSN (the schema must exist).
Every database error becomes :class:`~phaseflow.stores.base.StoreError` with the server's
message, after the DSN as it was written with its password shown as ``***``
(:func:`phaseflow.stores.dsn.masked`). What is read back is checked by the codec, as
in the SQLite store (strict JSON, column types, the columns against the snapshot, events
numbered without a gap).
"""

from __future__ import annotations

import asyncio
import contextlib
import select
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from phaseflow.errors import install_hint
from phaseflow.stores import codec, operations, sql
from phaseflow.stores.base import CAPTURE_CHUNK, Lease, StoreError, chunk_index, chunk_key
from phaseflow.stores.dsn import masked
from phaseflow.stores.durable import DurableStore, LoadRow
from phaseflow.stores.operations import Steps

try:
    import psycopg
    from psycopg_pool import AsyncConnectionPool
except ImportError as exc:  # the optional extra is not installed
    _MISSING: str | None = str(exc)
else:
    _MISSING = None

T = TypeVar("T")

#: ``pg_advisory_xact_lock`` keys: one for creating the schema, one class for queues
_SCHEMA_LOCK = 0x7068_6673  # "phfs"
_INBOX_LOCK = 0x7068_6671  # "phfq"

_DDL = (
    "CREATE TABLE IF NOT EXISTS phaseflow_schema (version INTEGER NOT NULL)",
    """CREATE TABLE IF NOT EXISTS sessions (
        id TEXT PRIMARY KEY,
        workflow TEXT NOT NULL,
        workflow_hash TEXT NOT NULL,
        version BIGINT NOT NULL,
        status TEXT NOT NULL,
        phase TEXT NOT NULL,
        turn BIGINT NOT NULL,
        lease_owner TEXT,
        lease_expires DOUBLE PRECISION,
        lease_epoch BIGINT NOT NULL DEFAULT 0,
        snapshot TEXT NOT NULL,
        message_count BIGINT NOT NULL,
        mark_count BIGINT NOT NULL,
        event_count BIGINT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS messages (
        session_id TEXT NOT NULL, idx BIGINT NOT NULL, data TEXT NOT NULL,
        PRIMARY KEY (session_id, idx))""",
    """CREATE TABLE IF NOT EXISTS marks (
        session_id TEXT NOT NULL, idx BIGINT NOT NULL, data TEXT NOT NULL,
        PRIMARY KEY (session_id, idx))""",
    """CREATE TABLE IF NOT EXISTS events (
        session_id TEXT NOT NULL, seq BIGINT NOT NULL, data TEXT NOT NULL,
        PRIMARY KEY (session_id, seq))""",
    "CREATE TABLE IF NOT EXISTS captures (sha256 TEXT PRIMARY KEY, data BYTEA NOT NULL)",
    """CREATE TABLE IF NOT EXISTS inbox (
        id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        session_id TEXT NOT NULL, data TEXT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS inbox_session ON inbox (session_id, id)",
)

#: the tables a later schema version added (``codec.ADDED_IN``): made by a new store, and
#: by the migration of an older one
_ADDED: dict[str, tuple[str, ...]] = {
    "turns": ("""CREATE TABLE IF NOT EXISTS turns (
        session_id TEXT NOT NULL, turn BIGINT NOT NULL, version BIGINT NOT NULL,
        workflow TEXT NOT NULL, workflow_hash TEXT NOT NULL, status TEXT NOT NULL,
        phase TEXT NOT NULL, snapshot TEXT NOT NULL, message_count BIGINT NOT NULL,
        mark_count BIGINT NOT NULL, updated_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (session_id, turn))""",),
    "request_keys": ("""CREATE TABLE IF NOT EXISTS request_keys (
        session_id TEXT NOT NULL, key TEXT NOT NULL, fingerprint TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL, PRIMARY KEY (session_id, key))""",),
    "cancels": ("""CREATE TABLE IF NOT EXISTS cancels (
        session_id TEXT PRIMARY KEY, requested_at DOUBLE PRECISION NOT NULL)""",),
    # the sessions' paging indexes come with version 3's owners (one migration adds all)
    "owners": ("""CREATE TABLE IF NOT EXISTS owners (
        session_id TEXT PRIMARY KEY, owner TEXT NOT NULL)""",
               "CREATE INDEX IF NOT EXISTS owners_owner ON owners (owner, session_id)",
               "CREATE INDEX IF NOT EXISTS sessions_recent ON sessions (updated_at, id)",
               "CREATE INDEX IF NOT EXISTS sessions_status ON sessions (status, updated_at, id)"),
    "timers": ("""CREATE TABLE IF NOT EXISTS timers (
        session_id TEXT PRIMARY KEY, due_at DOUBLE PRECISION NOT NULL)""",
               "CREATE INDEX IF NOT EXISTS timers_due ON timers (due_at, session_id)"),
}

#: the record of a turn's end (one statement, so one snapshot: the turn's row and the
#: history rows below its counts)
_TURN = """SELECT t.version, t.workflow, t.workflow_hash, t.status, t.phase, t.turn,
    t.snapshot, t.message_count, t.mark_count, t.updated_at, s.created_at,
    ARRAY(SELECT idx FROM messages WHERE session_id = t.session_id
          AND idx < t.message_count ORDER BY idx),
    ARRAY(SELECT data FROM messages WHERE session_id = t.session_id
          AND idx < t.message_count ORDER BY idx),
    ARRAY(SELECT idx FROM marks WHERE session_id = t.session_id
          AND idx < t.mark_count ORDER BY idx),
    ARRAY(SELECT data FROM marks WHERE session_id = t.session_id
          AND idx < t.mark_count ORDER BY idx)
    FROM turns AS t JOIN sessions AS s ON s.id = t.session_id
    WHERE t.session_id = %s AND t.turn = %s"""

_KEEP_TURN = (f"INSERT INTO turns ({codec.TURN_COLUMNS}) VALUES"
              " (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
              " ON CONFLICT (session_id, turn) DO UPDATE SET version = EXCLUDED.version,"
              " workflow = EXCLUDED.workflow, workflow_hash = EXCLUDED.workflow_hash,"
              " status = EXCLUDED.status, phase = EXCLUDED.phase,"
              " snapshot = EXCLUDED.snapshot, message_count = EXCLUDED.message_count,"
              " mark_count = EXCLUDED.mark_count, updated_at = EXCLUDED.updated_at")

_LOAD = """SELECT id, workflow, workflow_hash, version, status, phase, turn, snapshot,
    created_at, updated_at, message_count, mark_count,
    ARRAY(SELECT idx FROM messages WHERE session_id = s.id ORDER BY idx),
    ARRAY(SELECT data FROM messages WHERE session_id = s.id ORDER BY idx),
    ARRAY(SELECT idx FROM marks WHERE session_id = s.id ORDER BY idx),
    ARRAY(SELECT data FROM marks WHERE session_id = s.id ORDER BY idx)
    FROM sessions AS s WHERE id = %s"""

#: the history columns a page of due sessions adds to :func:`sql.due_sessions`' (one
#: statement: the page and its history from one snapshot)
_DUE_HISTORY = """,
    ARRAY(SELECT idx FROM messages WHERE session_id = s.id ORDER BY idx),
    ARRAY(SELECT data FROM messages WHERE session_id = s.id ORDER BY idx),
    ARRAY(SELECT idx FROM marks WHERE session_id = s.id ORDER BY idx),
    ARRAY(SELECT data FROM marks WHERE session_id = s.id ORDER BY idx)"""

_EVENTS = """SELECT (SELECT event_count FROM sessions WHERE id = %(id)s),
    ARRAY(SELECT seq FROM events WHERE session_id = %(id)s AND seq > %(after)s ORDER BY seq),
    ARRAY(SELECT data FROM events WHERE session_id = %(id)s AND seq > %(after)s ORDER BY seq)"""

#: phaseflow's tables in the schema tables are created in, with their columns
_FOUND = """SELECT c.relname::text, ARRAY(
        SELECT a.attname::text FROM pg_attribute AS a
        WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum)
    FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
    WHERE n.nspname = current_schema() AND c.relname = ANY(%s)
      AND c.relkind IN ('r', 'p', 'v', 'm', 'f')"""

async def _check_if_dropped(conn: psycopg.AsyncConnection[Any]) -> None:
    """The pool's check of a connection before each use, without a round trip when
    nothing says it is needed. An idle connection has nothing to read; one the server
    dropped (a restart, ``idle_session_timeout``, a terminated backend) has the server's
    last message or the end of the stream waiting on its socket. Only then (or when
    psycopg knows it is broken) is the full check run, one empty round trip, which
    fails for a dropped connection so the pool replaces it. The full check before every
    use cost 6 of a turn's 17 round trips."""
    if conn.closed or conn.broken:
        raise psycopg.OperationalError("the connection is closed")
    if _has_news(conn.fileno()):
        await AsyncConnectionPool.check_connection(conn)


def _has_news(fd: int) -> bool:
    """Whether the socket has something to read or was hung up, without waiting. ``poll``
    where the system has it: ``select`` refuses a descriptor above 1,023, which a busy
    server's connections reach."""
    if hasattr(select, "poll"):
        watch = select.poll()
        watch.register(fd, select.POLLIN)
        return bool(watch.poll(0))
    readable, _, _ = select.select([fd], [], [], 0)
    return bool(readable)


def _store_error(where: str, exc: BaseException) -> StoreError:
    """What a database error is to the store's caller; a failed guard (the only
    statements that divide: :data:`_GUARD_COMMIT`, :data:`_GUARD_LEASE`) is a wrong
    guess, which the operation takes back and makes again with a read."""
    if isinstance(exc, psycopg.errors.DivisionByZero):
        return operations.Mispredicted(f"{where}: the row was not the one expected")
    return StoreError(f"{where}: {_message(exc)}")


def _message(exc: BaseException) -> str:
    """The server's or libpq's message, on one line."""
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


class PostgresStore(DurableStore):
    """Sessions in the PostgreSQL database ``dsn`` (a libpq connection string or URL).

    ``pool_size``: at most this many connections (one is kept open). ``connect_timeout``:
    seconds to wait for the server when connecting. ``pool_timeout``: seconds an
    operation waits for a free connection before it fails. ``check_connections``: check
    a pooled connection before each use, so one the server dropped (a restart, an idle
    timeout) is replaced instead of failing an operation (:func:`_check_if_dropped`: no
    round trip unless the connection's socket says something happened).
    """

    #: a read is a round trip: a running turn looks at its queue only when told that a
    #: steering message was stored for it (``phaseflow serve``: a notification)
    local_reads = False

    def __init__(self, dsn: str, *, pool_size: int = 4, connect_timeout: float = 10.0,
                 pool_timeout: float = 30.0, check_connections: bool = True) -> None:
        if _MISSING is not None:
            raise StoreError("PostgresStore needs psycopg 3 and psycopg-pool: "
                             f"{install_hint('postgres')} ({_MISSING})")
        if not isinstance(pool_size, int) or pool_size < 1:
            raise StoreError("pool_size must be a positive integer")
        self.dsn = dsn
        #: the store in messages: the DSN as written, its password shown as ``***``
        self.where = masked(dsn)
        self._pool_size = pool_size
        self._connect_timeout = connect_timeout
        self._pool_timeout = pool_timeout
        self._check = check_connections
        self._pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]] | None = None
        #: the lock that opening takes, and the event loop it belongs to
        self._opening: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        super().__init__()

    # --- opening and closing -------------------------------------------------------------

    async def open(self) -> None:
        """Connect, create the schema if needed and check its version. Every operation
        opens the store when it is not open yet; call this to find out early.

        The pool belongs to the event loop it was opened in. Used from another loop
        (each ``*_sync`` call of a session runs one), the store opens a new pool there
        and closes the old one's idle connections."""
        loop = asyncio.get_running_loop()
        if self._pool is not None and self._loop is loop:
            return
        # One lock per loop that opens, kept with that loop: every coroutine that meets
        # the store not yet open on this loop waits on the same lock, so one pool is
        # opened (a lock made per caller opened a pool each: "too many clients").
        if self._opening is None or self._opening[0] is not loop:
            self._opening = (loop, asyncio.Lock())
        async with self._opening[1]:
            if self._pool is not None and self._loop is loop:
                return
            if self._pool is not None:
                await _abandon(self._pool)
                self._pool = None
            await self._open_schema()
            pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]] = AsyncConnectionPool(
                self.dsn, min_size=1, max_size=self._pool_size, open=False,
                kwargs={"autocommit": True, "connect_timeout": max(1, int(self._connect_timeout))},
                timeout=self._pool_timeout, name="phaseflow",
                check=_check_if_dropped if self._check else None)
            try:
                await pool.open(wait=True, timeout=self._connect_timeout)
            except psycopg.Error as exc:
                await pool.close()
                raise StoreError(f"{self.where}: cannot open the session store: "
                                 f"{_message(exc)}") from None
            self._pool, self._loop = pool, loop

    async def _open_schema(self) -> None:
        try:
            conn = await psycopg.AsyncConnection.connect(
                self.dsn, autocommit=True, connect_timeout=max(1, int(self._connect_timeout)))
        except psycopg.Error as exc:
            raise StoreError(f"{self.where}: cannot open the session store: "
                             f"{_message(exc)}") from None
        try:
            # Read first: a database holding another program's tables of phaseflow's
            # names is refused before anything is created in it.
            found, version = await _found(conn)
            if codec.must_create(self.where, found, version) or codec.must_migrate(version):
                async with conn.transaction():
                    await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
                    found, version = await _found(conn)  # still, under the lock
                    if codec.must_create(self.where, found, version):
                        async with conn.pipeline():
                            for statement in (*_DDL, *(s for group in _ADDED.values()
                                                        for s in group)):
                                await conn.execute(statement)
                            await conn.execute(
                                "INSERT INTO phaseflow_schema (version) VALUES (%s)",
                                (codec.SCHEMA_VERSION,))
                    elif version is not None and codec.must_migrate(version):
                        # an older schema: the tables it lacks, and the version raised
                        async with conn.pipeline():
                            for table in codec.migrations(version):
                                for statement in _ADDED[table]:
                                    await conn.execute(statement)
                            await conn.execute("UPDATE phaseflow_schema SET version = %s",
                                               (codec.SCHEMA_VERSION,))
        except psycopg.Error as exc:
            raise StoreError(f"{self.where}: cannot create the session store's schema: "
                             f"{_message(exc)}") from None
        finally:
            await conn.close()

    async def close(self) -> None:
        """Close the pool's connections (the store can be used again: it reopens)."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        if self._loop is asyncio.get_running_loop():
            await pool.close()
        else:
            await _abandon(pool)

    async def __aenter__(self) -> PostgresStore:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def _run(self, fn: Callable[[psycopg.AsyncConnection[Any]], Awaitable[T]],
                   *, transaction: bool = False, pipeline: bool = False) -> T:
        """``fn`` on a pooled connection (inside one transaction when asked); database
        errors become :class:`StoreError`. ``pipeline``: the transaction in one
        pipeline, its ``BEGIN`` and ``COMMIT`` sent as statements of it (psycopg's
        ``transaction()`` waits for the server after ``BEGIN`` and again before
        ``COMMIT``): ``BEGIN`` goes out with the first read, the writes whose results
        are not read go out with the ``COMMIT``, and the server is waited for only
        where ``fn`` reads a result and once at the end (see :func:`_pipelined`)."""
        await self.open()
        pool = self._pool
        if pool is None:
            raise StoreError(f"{self.where}: the store was closed while in use")
        try:
            async with pool.connection() as conn:
                if not transaction:
                    return await fn(conn)
                if not pipeline:
                    async with conn.transaction():
                        return await fn(conn)
                return await _pipelined(conn, fn)
        except (psycopg.Error, UnicodeError) as exc:
            raise _store_error(self.where, exc) from None

    # --- the I/O of the protocol (phaseflow.stores.durable) -------------------------------

    async def _read_session(self, session_id: str) -> LoadRow | None:
        # One statement, so one snapshot: the row and the history rows it counts
        # (separate statements could see a commit land between them).
        return await self._one(_LOAD, (session_id,))

    async def _read_due(self, now: float, limit: int, after: tuple[float, str] | None,
                        workflows: Sequence[str]) -> list[Sequence[Any]]:
        statement = sql.due_sessions(after=after is not None, workflows=len(workflows),
                                     history=_DUE_HISTORY)
        return await self._all(statement, (now, *(after or ()), *workflows, limit))

    async def _drive_commit(self, steps: Steps[tuple[tuple[int, ...], codec.Known]]
                            ) -> tuple[tuple[int, ...], codec.Known]:
        async def write(conn: psycopg.AsyncConnection[Any]
                        ) -> tuple[tuple[int, ...], codec.Known]:
            return await operations.drive_async(steps, lambda step: _do(conn, step))
        return await self._run(write, transaction=True, pipeline=True)

    async def _read_turn(self, session_id: str, turn: int) -> Sequence[Any] | None:
        return await self._one(_TURN, (session_id, turn))

    async def _read_version(self, session_id: str) -> Sequence[Any] | None:
        return await self._one(_pg(sql.VERSION), (session_id,))

    async def _read_events(self, session_id: str, after: int
                           ) -> tuple[object, Iterable[tuple[Any, Any]]]:
        # One statement, so one snapshot: the count and the rows it counts.
        row = await self._one(_EVENTS, {"id": session_id, "after": after})
        count, seqs, rows = (None, [], []) if row is None else row
        return count, zip(seqs, rows, strict=True)

    async def _read_sessions(self) -> Iterable[Sequence[Any]]:
        return await self._all(sql.SESSIONS, ())

    async def _delete(self, session_id: str) -> bool:
        async def remove(conn: psycopg.AsyncConnection[Any]) -> bool:
            cur = await conn.execute("DELETE FROM sessions WHERE id = %s RETURNING version",
                                     (session_id,))
            row = await cur.fetchone()
            for statement in sql.DELETE_REST:
                await conn.execute(_pg(statement), (session_id,))
            return row is not None and row[0] > 0  # a lease placeholder is no session
        return await self._run(remove, transaction=True)

    async def _put_capture(self, reference: str, data: bytes) -> None:
        await self._all("INSERT INTO captures (sha256, data) VALUES (?, ?)"
                        " ON CONFLICT (sha256) DO NOTHING", (reference, data))

    async def _get_capture(self, reference: str) -> bytes | None:
        row = await self._one(_pg(sql.GET_CAPTURE), (reference,))
        return None if row is None else bytes(row[0])

    async def _read_capture(self, reference: str, offset: int, limit: int
                            ) -> tuple[bytes, int] | None:
        # (a bytea holds at most 1 GB: positions past an int's range read nothing more)
        at, count = min(offset + 1, 2**31 - 1), min(limit, 2**31 - 1)
        row = await self._one(_pg("SELECT substring(data from ?::int for ?::int), length(data)"
                                  " FROM captures WHERE sha256 = ?"), (at, count, reference))
        if row is not None:
            return bytes(row[0]), int(row[1])
        # kept in chunks (chunk_key): the last chunk's length gives the size, and only
        # the chunks of the range are read
        last = await self._one(_pg("SELECT sha256, length(data) FROM captures WHERE sha256 > ?"
                                   " AND sha256 < ? ORDER BY sha256 DESC LIMIT 1"),
                               (reference + ".", reference + "/"))
        if last is None:
            return None
        size = chunk_index(last[0]) * CAPTURE_CHUNK + int(last[1])
        if offset >= size or limit == 0:
            return b"", size
        end = min(size, offset + limit)
        first = offset // CAPTURE_CHUNK
        rows = await self._all("SELECT data FROM captures WHERE sha256 >= ? AND sha256 <= ?"
                               " ORDER BY sha256", (chunk_key(reference, first), chunk_key(
                                   reference, (end - 1) // CAPTURE_CHUNK)))
        joined = b"".join(bytes(r[0]) for r in rows)
        start = offset - first * CAPTURE_CHUNK
        return joined[start:start + end - offset], size

    async def _delete_captures(self, owner: str) -> None:
        await self._all("DELETE FROM captures WHERE sha256 >= ? AND sha256 < ?",
                        (f"{owner}-", f"{owner}."))

    async def _drive_lease(self, steps: Steps[Lease | None]) -> Lease | None:
        async def take(conn: psycopg.AsyncConnection[Any]) -> Lease | None:
            # Committed without waiting for the WAL flush: taking the turn is no commit
            # point of the session. A server crash may forget a lease taken just before
            # it, which every worker then sees alike (its holder's next commit is fenced);
            # any synchronous commit after it, of any worker, flushes it first (the WAL is
            # sequential), so nothing durable ever depends on a lease that was forgotten.
            await conn.execute("SET LOCAL synchronous_commit TO OFF")
            return await operations.drive_async(steps, lambda step: _do(conn, step))
        return await self._run(take, transaction=True, pipeline=True)

    async def _release(self, lease: Lease) -> None:
        await self._all(sql.RELEASE, (lease.session_id, lease.owner, lease.epoch))

    async def _read_lease(self, session_id: str) -> Sequence[Any] | None:
        return await self._one(_pg(sql.LEASE), (session_id,))

    async def _enqueue(self, session_id: str, text: str) -> int:
        async def put(conn: psycopg.AsyncConnection[Any]) -> int:
            # Serialised per session until the insert commits: a session's ids become
            # visible in order, so "consumed up to N" never covers one committed later.
            await conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))",
                               (_INBOX_LOCK, session_id))
            cur = await conn.execute("INSERT INTO inbox (session_id, data) VALUES (%s, %s)"
                                     " RETURNING id", (session_id, text))
            row = await cur.fetchone()
            return 0 if row is None else int(row[0])
        return await self._run(put, transaction=True)

    async def _read_queue(self, session_id: str) -> Iterable[tuple[Any, Any]]:
        return await self._all(sql.QUEUED, (session_id,))

    async def _one(self, statement: str, params: Sequence[Any] | Mapping[str, Any]
                   ) -> Sequence[Any] | None:
        """The first row of one statement, written in psycopg's marks (``None``: no
        row)."""
        async def read(conn: psycopg.AsyncConnection[Any]) -> Sequence[Any] | None:
            cur = await conn.execute(statement, params)
            row: Sequence[Any] | None = await cur.fetchone()
            return row
        return await self._run(read)

    async def _all(self, statement: str, params: Sequence[Any]) -> list[Any]:
        """Every row of one statement written as :mod:`phaseflow.stores.sql` writes
        them (none for a write)."""
        async def run(conn: psycopg.AsyncConnection[Any]) -> list[Any]:
            cur = await conn.execute(_pg(statement), params)
            return await cur.fetchall() if cur.description is not None else []
        return await self._run(run)


async def _do(conn: psycopg.AsyncConnection[Any], step: operations.Step) -> Any:
    """One step of an operation (:mod:`phaseflow.stores.operations`), as PostgreSQL runs
    it in the operation's pipeline: a step whose answer is read waits for the server
    (the locking read; the insert that may find the row created meanwhile), every other
    one is only queued, to go out with the ``COMMIT``. Dispatched by the step's type
    through a table (cheaper than a ``match`` on nine class patterns)."""
    return await _STEPS[type(step)](conn, step)


async def _read_commit(conn: psycopg.AsyncConnection[Any], step: operations.ReadCommit
                       ) -> Any:
    expected = step.expected
    if expected is None:
        cur = await conn.execute(_READ_COMMIT, (step.session_id,))
        return await cur.fetchone()
    # The guess taken, its guard only queued: the commit is one round trip.
    version, messages, marks, events, epoch, owner = expected
    await conn.execute(_GUARD_COMMIT, (step.session_id, version, messages, marks, events,
                                       owner, owner, epoch))
    return expected


async def _create_session(conn: psycopg.AsyncConnection[Any],
                          step: operations.CreateSession) -> bool:
    cur = await conn.execute(_CREATE_SESSION, (*step.values, step.session_id,
                                               step.created_at))
    return await cur.fetchone() is not None


async def _update_session(conn: psycopg.AsyncConnection[Any],
                          step: operations.UpdateSession) -> None:
    await conn.execute(_UPDATE_SESSION, (*step.values, step.placeholder, step.created_at,
                                         step.release, step.release, step.session_id))


async def _drop_history(conn: psycopg.AsyncConnection[Any], step: operations.DropHistory
                        ) -> None:
    for statement in _DROP_HISTORY:
        await conn.execute(statement, (step.session_id,))


async def _append(conn: psycopg.AsyncConnection[Any], step: operations.Append) -> None:
    # one statement, whatever their number (an ``unnest`` of the texts)
    await conn.execute(
        f"INSERT INTO {step.table} (session_id, {step.key}, data) SELECT %s, %s + o - 1, d"
        " FROM unnest(%s::text[]) WITH ORDINALITY AS t(d, o)",
        (step.session_id, step.start, list(step.rows)))


async def _consume(conn: psycopg.AsyncConnection[Any], step: operations.Consume) -> None:
    await conn.execute(_CONSUME, (step.session_id, step.upto))


async def _keep_turn(conn: psycopg.AsyncConnection[Any], step: operations.KeepTurn) -> None:
    await conn.execute(_KEEP_TURN, step.values)


async def _lock_lease(conn: psycopg.AsyncConnection[Any], step: operations.LockLease
                      ) -> Any:
    if step.expected is not None:  # as a commit's guess (_read_commit)
        owner, expires, epoch, version = step.expected
        await conn.execute(_GUARD_LEASE, (step.session_id, owner, expires, epoch, version))
        return step.expected
    await conn.execute(_PLACEHOLDER, (step.session_id, step.now, step.now))
    cur = await conn.execute(_LOCK_LEASE, (step.session_id,))
    return await cur.fetchone()  # None: deleted between the two statements


async def _set_lease(conn: psycopg.AsyncConnection[Any], step: operations.SetLease) -> None:
    await conn.execute(_SET_LEASE, (step.owner, step.expires, step.epoch, step.session_id))


async def _set_timer(conn: psycopg.AsyncConnection[Any], step: operations.SetTimer) -> None:
    if step.due_at is None:
        await conn.execute(_DROP_TIMER, (step.session_id,))
    else:
        await conn.execute(_SET_TIMER, (step.session_id, step.due_at))


#: how PostgreSQL runs each kind of step
_STEPS: dict[type[Any], Callable[[psycopg.AsyncConnection[Any], Any], Awaitable[Any]]] = {
    operations.ReadCommit: _read_commit, operations.CreateSession: _create_session,
    operations.UpdateSession: _update_session, operations.DropHistory: _drop_history,
    operations.Append: _append, operations.Consume: _consume,
    operations.KeepTurn: _keep_turn, operations.LockLease: _lock_lease,
    operations.SetLease: _set_lease, operations.SetTimer: _set_timer,
}

_pg = sql.for_psycopg
_READ_COMMIT = _pg(sql.READ_COMMIT) + " FOR UPDATE"
_SET_TIMER = _pg(sql.SET_TIMER)
_DROP_TIMER = _pg(sql.DROP_TIMER)
#: a predicted commit's guard (:attr:`operations.ReadCommit.expected`): it locks the row
#: where the row holds what was expected (a row another writer is changing is waited
#: for and looked at again as it committed), and divides by zero where not, which
#: aborts the transaction: the server skips what follows up to the sync, the ``COMMIT``
#: too. No other statement of a commit divides (:func:`_store_error`).
_GUARD_COMMIT = ("SELECT 1 / count(*) FROM (SELECT 1 FROM sessions WHERE id = %s"
                 " AND version = %s AND message_count = %s AND mark_count = %s"
                 " AND event_count = %s"
                 " AND (%s::text IS NULL OR (lease_owner = %s AND lease_epoch = %s))"
                 " FOR UPDATE) AS expected")
#: a predicted lease's guard, alike (:attr:`operations.LockLease.expected`)
_GUARD_LEASE = ("SELECT 1 / count(*) FROM (SELECT 1 FROM sessions WHERE id = %s"
                " AND lease_owner IS NOT DISTINCT FROM %s"
                " AND lease_expires IS NOT DISTINCT FROM %s AND lease_epoch = %s"
                " AND version = %s FOR UPDATE) AS expected")
_CREATE_SESSION = _pg(sql.INSERT_SESSION) + " ON CONFLICT (id) DO NOTHING RETURNING 1"
_UPDATE_SESSION = _pg(sql.UPDATE_SESSION)
_DROP_HISTORY = tuple(_pg(s) for s in sql.DROP_HISTORY)
_CONSUME = _pg(sql.CONSUME)
_PLACEHOLDER = _pg(sql.PLACEHOLDER) + " ON CONFLICT (id) DO NOTHING"
_LOCK_LEASE = _pg(sql.READ_LEASE) + " FOR UPDATE"
_SET_LEASE = _pg(sql.SET_LEASE)


async def _abandon(pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]]) -> None:
    """Close the idle connections of a pool whose event loop is gone (its tasks died with
    that loop, so ``pool.close()`` cannot run). Closing a connection is no I/O wait, so
    it works from any loop; the pool's own queue is psycopg-pool's (best effort)."""
    for conn in list(getattr(pool, "_pool", ())):
        with contextlib.suppress(Exception):  # already broken: nothing more to close
            await conn.close()


async def _pipelined(conn: psycopg.AsyncConnection[Any],
                     fn: Callable[[psycopg.AsyncConnection[Any]], Awaitable[T]]) -> T:
    """``fn`` in one transaction, in one pipeline, on an autocommit connection; the
    pipeline's end is the one sync after the ``COMMIT``. A statement that fails (a
    guard, :data:`_GUARD_COMMIT`) makes the server skip what follows it up to the sync
    (the ``COMMIT`` too); psycopg raises its error where it reads that result, in the
    pipeline or at its end. The error is raised after the pipeline's end, whose sync
    then only reports the statements skipped (psycopg would log that report as an error
    it ignored). Whenever the transaction did not end (that error, or ``fn`` raised),
    it is rolled back after the pipeline (:func:`_roll_back`)."""
    failed: psycopg.Error | None = None
    try:
        async with conn.pipeline():
            try:
                await conn.execute("BEGIN")
                result = await fn(conn)
                await conn.execute("COMMIT")
            except psycopg.Error as exc:
                failed = exc
    except psycopg.errors.PipelineAborted as aborted:
        failed = failed or aborted
    except BaseException:
        await _roll_back(conn)
        raise
    if failed is not None:
        await _roll_back(conn)
        raise failed
    return result


async def _roll_back(conn: psycopg.AsyncConnection[Any]) -> None:
    """End a transaction a pipeline left open. psycopg's ``rollback`` also forgets the
    statements it prepared, and has the server drop them: an aborted pipeline skips the
    statements after the one that failed, and psycopg may take the preparation of one
    of them for done. A connection that cannot be rolled back is left to the pool,
    which rolls back or discards what it is given back in a transaction."""
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        with contextlib.suppress(Exception):
            await conn.rollback()


async def _found(conn: psycopg.AsyncConnection[Any]) -> tuple[dict[str, list[str]],
                                                               int | None]:
    """phaseflow's tables in the schema tables are created in (name: columns), and the
    schema version ``phaseflow_schema`` holds there (``None``: none), read only."""
    cur = await conn.execute(_FOUND, (list(codec.TABLES),))
    found = {name: list(columns) for name, columns in await cur.fetchall()}
    version = None
    if "phaseflow_schema" in found:
        cur = await conn.execute("SELECT max(version) FROM phaseflow_schema")
        row = await cur.fetchone()
        version = None if row is None or row[0] is None else int(row[0])
    return found, version
