"""``SQLiteStore``: sessions in one SQLite file, on the standard library's ``sqlite3``.

- **WAL** journal: readers never block the writer, and a commit is one append to the log.
- **One transaction per commit point** (``BEGIN IMMEDIATE``: the write lock is taken
  first, so two writers queue instead of failing halfway), with a compare-and-set on the
  session's version: a writer that lost the race gets ``StoreConflict`` and writes
  nothing.
- **Durable against a killed process** at any ``synchronous`` setting: a transaction is
  in the log completely or not at all. ``synchronous=FULL`` (the default here) also
  syncs the log at every commit, so a commit that returned survives a power loss;
  ``NORMAL`` syncs at checkpoints only: the last commits before a power loss may be
  lost (never half of one).
- **Incremental**: a commit writes the session row and appends the messages, marks and
  events it added (see :mod:`phaseflow.stores.codec`), so its cost does not grow with
  the conversation. Tool captures are stored once by their SHA-256.
- **Only its own file**: a new or empty file gets phaseflow's schema (a file of an older
  schema version gets the tables it lacks: :func:`~phaseflow.stores.codec.must_migrate`);
  a file holding
  tables of another program is refused before anything is written to it (not even the
  journal mode is changed), and so is one whose phaseflow tables lack columns.
- **Damage is an error**: everything read back is checked by the codec (strict JSON,
  column types, the columns against the snapshot, events numbered without a gap), so a
  row edited by hand is an error naming the session, never another session.

The blocking calls run on one thread of the store's own, so the event loop never waits
on the disk; the connection lives on that thread. This module is the I/O: the commit
and the lease are :mod:`phaseflow.stores.operations`' steps, driven here with SQLite's
statements, and every call's checks and decoding are
:class:`~phaseflow.stores.durable.DurableStore`'s, the same as PostgreSQL's.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from phaseflow.stores import codec, operations, sql
from phaseflow.stores.base import CAPTURE_CHUNK, Lease, StoreError, chunk_index, chunk_key
from phaseflow.stores.durable import DurableStore, LoadRow
from phaseflow.stores.operations import Steps

T = TypeVar("T")

_DDL = """
CREATE TABLE IF NOT EXISTS phaseflow_schema (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    workflow TEXT NOT NULL,
    workflow_hash TEXT NOT NULL,
    version INTEGER NOT NULL,
    status TEXT NOT NULL,
    phase TEXT NOT NULL,
    turn INTEGER NOT NULL,
    lease_owner TEXT,
    lease_expires REAL,
    lease_epoch INTEGER NOT NULL DEFAULT 0,
    snapshot TEXT NOT NULL,
    message_count INTEGER NOT NULL,
    mark_count INTEGER NOT NULL,
    event_count INTEGER NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
    session_id TEXT NOT NULL, idx INTEGER NOT NULL, data TEXT NOT NULL,
    PRIMARY KEY (session_id, idx)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS marks (
    session_id TEXT NOT NULL, idx INTEGER NOT NULL, data TEXT NOT NULL,
    PRIMARY KEY (session_id, idx)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS events (
    session_id TEXT NOT NULL, seq INTEGER NOT NULL, data TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS captures (sha256 TEXT PRIMARY KEY, data BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS inbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL, data TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS inbox_session ON inbox (session_id, id);
"""

#: the tables a later schema version added (``codec.ADDED_IN``): made by a new store, and
#: by the migration of an older one
_ADDED: dict[str, tuple[str, ...]] = {
    "turns": ("""CREATE TABLE IF NOT EXISTS turns (
    session_id TEXT NOT NULL, turn INTEGER NOT NULL, version INTEGER NOT NULL,
    workflow TEXT NOT NULL, workflow_hash TEXT NOT NULL, status TEXT NOT NULL,
    phase TEXT NOT NULL, snapshot TEXT NOT NULL, message_count INTEGER NOT NULL,
    mark_count INTEGER NOT NULL, updated_at REAL NOT NULL,
    PRIMARY KEY (session_id, turn)) WITHOUT ROWID""",),
    "request_keys": ("""CREATE TABLE IF NOT EXISTS request_keys (
    session_id TEXT NOT NULL, key TEXT NOT NULL, fingerprint TEXT NOT NULL,
    created_at REAL NOT NULL, PRIMARY KEY (session_id, key)) WITHOUT ROWID""",),
    "cancels": ("""CREATE TABLE IF NOT EXISTS cancels (
    session_id TEXT PRIMARY KEY, requested_at REAL NOT NULL) WITHOUT ROWID""",),
    # the sessions' paging indexes come with version 3's owners (one migration adds all)
    "owners": ("""CREATE TABLE IF NOT EXISTS owners (
    session_id TEXT PRIMARY KEY, owner TEXT NOT NULL) WITHOUT ROWID""",
               "CREATE INDEX IF NOT EXISTS owners_owner ON owners (owner, session_id)",
               "CREATE INDEX IF NOT EXISTS sessions_recent ON sessions (updated_at, id)",
               "CREATE INDEX IF NOT EXISTS sessions_status ON sessions (status, updated_at, id)"),
    "timers": ("""CREATE TABLE IF NOT EXISTS timers (
    session_id TEXT PRIMARY KEY, due_at REAL NOT NULL) WITHOUT ROWID""",
               "CREATE INDEX IF NOT EXISTS timers_due ON timers (due_at, session_id)"),
}

_SYNC = ("OFF", "NORMAL", "FULL", "EXTRA")

#: how a lease is written when the store syncs every commit: to the log without waiting
#: for the disk. A lease coordinates workers and is no commit point of the session: a
#: killed process loses nothing of it (the write is done when COMMIT returns), and a power
#: loss, which stops every worker on this machine at once, may forget a lease taken after
#: the last sync, which is the state of a turn that had not begun. The log is sequential,
#: so the turn's first commit, synced, makes the lease durable with it.
_LEASE_SYNC = "NORMAL"


class SQLiteStore(DurableStore):
    """Sessions in the SQLite file ``path`` (created with its schema when missing)."""

    #: a read is local (no server): a running turn looks at its queue between requests
    #: (messages other workers stored for it: steering)
    local_reads = True

    def __init__(self, path: str | Path, *, synchronous: str = "FULL",
                 timeout: float = 30.0) -> None:
        if synchronous.upper() not in _SYNC:
            raise StoreError(f"synchronous must be one of {', '.join(_SYNC)}")
        self.path = str(path)
        self._synchronous = synchronous.upper()
        self._timeout = timeout
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="phaseflow-sqlite")
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        #: commits waiting for the store's thread: the next batch takes them all
        self._waiting: list[_Waiting] = []
        self._waiting_lock = threading.Lock()
        super().__init__()

    # --- the connection, on the store's thread ------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        conn = self._conn
        if conn is None:
            try:
                conn = sqlite3.connect(self.path, timeout=self._timeout, isolation_level=None,
                                       check_same_thread=False)
            except sqlite3.Error as exc:
                raise StoreError(f"{self.path}: cannot open the session store: {exc}") from None
            try:
                # Read first: a file that is not phaseflow's is refused unchanged.
                found, version = self._found(conn)
                create = codec.must_create(self.path, found, version, whole=True)
                self._use_wal(conn)
                conn.execute(f"PRAGMA synchronous={self._synchronous}")
                if create:
                    self._create_schema(conn)
                elif codec.must_migrate(version):
                    self._migrate(conn)
            except sqlite3.Error as exc:
                conn.close()
                raise StoreError(f"{self.path}: cannot open the session store: {exc}") from None
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        return conn

    @staticmethod
    def _found(conn: sqlite3.Connection) -> tuple[dict[str, list[str]], int | None]:
        """The file's tables and views (name: columns) and the schema version it holds
        (``None``: none), read without writing anything."""
        found: dict[str, list[str]] = {}
        for table, column in conn.execute(
                "SELECT m.name, p.name FROM sqlite_master AS m, pragma_table_info(m.name) AS p"
                " WHERE m.type IN ('table', 'view') AND m.name NOT LIKE 'sqlite%'"):
            found.setdefault(table, []).append(column)
        version = None
        if "phaseflow_schema" in found:
            row = conn.execute("SELECT max(version) FROM phaseflow_schema").fetchone()
            version = row[0] if row is not None and type(row[0]) is int else None
        return found, version

    def _use_wal(self, conn: sqlite3.Connection) -> None:
        """Put the file in WAL mode. Switching the journal takes the database's lock
        without waiting for it (SQLite's busy timeout does not apply), so only a file not
        in WAL yet is switched (another connection may be committing to one that is),
        and a switch that finds the lock taken (several connections opening a new file
        at once) is tried again until the store's timeout."""
        deadline = time.monotonic() + self._timeout
        while True:
            mode = conn.execute("PRAGMA journal_mode").fetchone()
            if mode is not None and str(mode[0]).lower() == "wal":
                return
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
            time.sleep(0.005)

    def _create_schema(self, conn: sqlite3.Connection) -> None:
        """phaseflow's tables in an empty file, under the write lock; what was read
        before the lock is read again under it (another connection may have created
        them meanwhile, or written tables of its own)."""
        with _writing(conn):
            if codec.must_create(self.path, *self._found(conn), whole=True):
                for statement in _DDL.split(";"):
                    if statement.strip():
                        conn.execute(statement)
                for statements in _ADDED.values():
                    for statement in statements:
                        conn.execute(statement)
                conn.execute("INSERT INTO phaseflow_schema (version) VALUES (?)",
                             (codec.SCHEMA_VERSION,))

    def _migrate(self, conn: sqlite3.Connection) -> None:
        """An older schema brought to this version under the write lock (read again
        under it: another connection may have migrated the file meanwhile): the tables it
        lacks are created and the version raised, in one transaction; no row of the older
        tables is touched."""
        with _writing(conn):
            found, version = self._found(conn)
            codec.must_create(self.path, found, version, whole=True)
            if version is not None and codec.must_migrate(version):
                for table in codec.migrations(version):
                    for statement in _ADDED[table]:
                        conn.execute(statement)
                conn.execute("UPDATE phaseflow_schema SET version = ?",
                             (codec.SCHEMA_VERSION,))

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        loop = asyncio.get_running_loop()

        def call() -> T:
            with self._lock:
                return fn(self._connection())

        try:
            return await loop.run_in_executor(self._executor, call)
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: {exc}") from None

    def close(self) -> None:
        """Close the connection (the store can be used again: it reopens)."""
        def shut() -> None:
            with self._lock:
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None
        self._executor.submit(shut).result()

    # --- the I/O of the protocol (phaseflow.stores.durable) -------------------------------

    async def _read_session(self, session_id: str) -> LoadRow | None:
        def read(conn: sqlite3.Connection) -> LoadRow | None:
            with _reading(conn):  # one snapshot: a commit between the reads cannot mix in
                row = conn.execute(
                    "SELECT id, workflow, workflow_hash, version, status, phase, turn, snapshot,"
                    " created_at, updated_at, message_count, mark_count FROM sessions"
                    " WHERE id = ?", (session_id,)).fetchone()
                if row is None:
                    return None
                return (*row, *_history(conn, "messages", session_id),
                        *_history(conn, "marks", session_id))
        return await self._run(read)

    async def _read_due(self, now: float, limit: int, after: tuple[float, str] | None,
                        workflows: Sequence[str]) -> list[Sequence[Any]]:
        statement = sql.due_sessions(after=after is not None, workflows=len(workflows))
        params = (now, *(after or ()), *workflows, limit)

        def read(conn: sqlite3.Connection) -> list[Sequence[Any]]:
            with _reading(conn):  # one snapshot: the page and the history rows it counts
                rows = conn.execute(statement, params).fetchall()
                ids = [r[4] for r in rows]
                messages = _histories(conn, "messages", ids)
                marks = _histories(conn, "marks", ids)
            empty: tuple[list[Any], list[Any]] = ([], [])
            return [(*r, *messages.get(r[4], empty), *marks.get(r[4], empty)) for r in rows]
        return await self._run(read)

    async def _drive_commit(self, steps: Steps[tuple[tuple[int, ...], codec.Known]]
                            ) -> tuple[tuple[int, ...], codec.Known]:
        """Group commit: the commits that wait for the store's thread together (several
        sessions' turns at once) are written in one transaction, each inside a savepoint
        of its own, so they share one wait for the disk. Each is still all or nothing
        (a refused one is rolled back to its savepoint alone) and is answered only once
        the transaction holding it is durable; one alone is written as before."""
        return await self._batched(steps, synced=True)

    async def _batched(self, steps: Steps[T], *, synced: bool) -> T:
        """``steps`` written in the next batch of the store's thread (see
        :meth:`_drive_commit`); ``synced``: a commit point (a lease is not one: see
        :meth:`_drive_lease`)."""
        loop = asyncio.get_running_loop()
        waiting: _Waiting = _Waiting(steps, loop.create_future(), loop, synced)
        with self._waiting_lock:
            self._waiting.append(waiting)
            first = len(self._waiting) == 1
        if first:  # else a batch already asked for takes this one too
            self._executor.submit(self._commit_waiting)
        try:
            result: T = await waiting.done
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: {exc}") from None
        return result

    def _commit_waiting(self) -> None:
        """On the store's thread: every commit and lease waiting now, in one
        transaction (one alone without a savepoint); the answers handed to each event
        loop at once (one wake-up of the loop for the batch, not one per commit)."""
        with self._waiting_lock:
            batch, self._waiting = self._waiting, []
        # a commit whose caller gave up before it was written is not written
        batch = [w for w in batch if not w.done.cancelled()]
        if not batch:
            return
        # Leases alone are not synced (see _LEASE_SYNC); with a commit, they are
        # written in its transaction and synced with it (at no extra wait).
        relaxed = self._synchronous in ("FULL", "EXTRA") and not any(w.synced for w in batch)
        outcomes: list[tuple[bool, Any]] = []
        try:
            with self._lock:
                conn = self._connection()
                if relaxed:
                    conn.execute(f"PRAGMA synchronous={_LEASE_SYNC}")
                try:
                    with _writing(conn):
                        if len(batch) == 1:
                            outcomes.append(
                                (True, operations.drive(batch[0].steps,
                                                        lambda step: _do(conn, step))))
                        else:
                            for w in batch:
                                outcomes.append(_in_savepoint(conn, w.steps))
                finally:
                    if relaxed:
                        self._restore_sync(conn)
        except BaseException as exc:  # the transaction failed: nothing of it landed
            _answer_all(batch, [(False, exc)] * len(batch))
            if not isinstance(exc, Exception):
                raise
            return
        _answer_all(batch, outcomes)

    async def _read_turn(self, session_id: str, turn: int) -> Sequence[Any] | None:
        def read(conn: sqlite3.Connection) -> Sequence[Any] | None:
            with _reading(conn):  # one snapshot: the turn's row and the rows it counts
                row = conn.execute(
                    "SELECT t.version, t.workflow, t.workflow_hash, t.status, t.phase, t.turn,"
                    " t.snapshot, t.message_count, t.mark_count, t.updated_at, s.created_at"
                    " FROM turns AS t JOIN sessions AS s ON s.id = t.session_id"
                    " WHERE t.session_id = ? AND t.turn = ?", (session_id, turn)).fetchone()
                if row is None:
                    return None
                return (*row, *_history(conn, "messages", session_id, row[7]),
                        *_history(conn, "marks", session_id, row[8]))
        return await self._run(read)

    async def _read_version(self, session_id: str) -> Sequence[Any] | None:
        return await self._one(sql.VERSION, (session_id,))

    async def _read_events(self, session_id: str, after: int
                           ) -> tuple[object, Iterable[tuple[Any, Any]]]:
        def read(conn: sqlite3.Connection) -> tuple[object, Iterable[tuple[Any, Any]]]:
            with _reading(conn):  # the count and the rows it counts from one snapshot
                row = conn.execute("SELECT event_count FROM sessions WHERE id = ?",
                                   (session_id,)).fetchone()
                rows = conn.execute("SELECT seq, data FROM events WHERE session_id = ? AND"
                                    " seq > ? ORDER BY seq", (session_id, after)).fetchall()
            return None if row is None else row[0], rows
        return await self._run(read)

    async def _read_sessions(self) -> Iterable[Sequence[Any]]:
        return await self._all(sql.SESSIONS, ())

    async def _delete(self, session_id: str) -> bool:
        def remove(conn: sqlite3.Connection) -> bool:
            with _writing(conn):
                gone = conn.execute("DELETE FROM sessions WHERE id = ? AND version > 0",
                                    (session_id,)).rowcount
                conn.execute("DELETE FROM sessions WHERE id = ?", (session_id,))
                for statement in sql.DELETE_REST:
                    conn.execute(statement, (session_id,))
            return gone > 0
        return await self._run(remove)

    async def _put_capture(self, reference: str, data: bytes) -> None:
        await self._all("INSERT OR IGNORE INTO captures (sha256, data) VALUES (?, ?)",
                        (reference, data))

    async def _get_capture(self, reference: str) -> bytes | None:
        row = await self._one(sql.GET_CAPTURE, (reference,))
        return None if row is None else bytes(row[0])

    async def _read_capture(self, reference: str, offset: int, limit: int
                            ) -> tuple[bytes, int] | None:
        def read(conn: sqlite3.Connection) -> tuple[bytes, int] | None:
            row = conn.execute("SELECT rowid FROM captures WHERE sha256 = ?",
                               (reference,)).fetchone()
            if row is None:
                return _read_chunks(conn, reference, offset, limit)
            # incremental blob I/O: only the pages of the range are read
            with conn.blobopen("captures", "data", row[0], readonly=True) as blob:
                size = len(blob)
                if offset >= size or limit == 0:
                    return b"", size
                blob.seek(offset)
                return blob.read(min(limit, size - offset)), size
        return await self._run(read)

    async def _delete_captures(self, owner: str) -> None:
        # a range of the primary key (every reference of ``owner`` begins ``owner-``)
        await self._all("DELETE FROM captures WHERE sha256 >= ? AND sha256 < ?",
                        (f"{owner}-", f"{owner}."))

    async def _drive_lease(self, steps: Steps[Lease | None]) -> Lease | None:
        # Not synced (see _LEASE_SYNC): taking the turn is no commit point of the
        # session, and the log is sequential, so the turn's first commit, synced, makes
        # this write durable with it. Written in the next batch of the store's thread,
        # with the commits waiting there (so many turns starting at once take their
        # leases in one transaction).
        return await self._batched(steps, synced=False)

    def _restore_sync(self, conn: sqlite3.Connection) -> None:
        """Back to the store's ``synchronous`` after a lease; a connection that cannot
        be (left inside a transaction by a failure) is dropped, never kept relaxed."""
        try:
            conn.execute(f"PRAGMA synchronous={self._synchronous}")
        except sqlite3.Error:
            self._conn = None
            with contextlib.suppress(sqlite3.Error):
                conn.close()
            raise

    async def _release(self, lease: Lease) -> None:
        await self._all(sql.RELEASE, (lease.session_id, lease.owner, lease.epoch))

    async def _read_lease(self, session_id: str) -> Sequence[Any] | None:
        return await self._one(sql.LEASE, (session_id,))

    async def _enqueue(self, session_id: str, text: str) -> int:
        def put(conn: sqlite3.Connection) -> int:
            cursor = conn.execute("INSERT INTO inbox (session_id, data) VALUES (?, ?)",
                                  (session_id, text))
            return int(cursor.lastrowid or 0)
        return await self._run(put)

    async def _read_queue(self, session_id: str) -> Iterable[tuple[Any, Any]]:
        return await self._all(sql.QUEUED, (session_id,))

    async def _one(self, statement: str, params: Sequence[Any]) -> Sequence[Any] | None:
        """The first row of one statement (``None``: no row)."""
        def read(conn: sqlite3.Connection) -> Sequence[Any] | None:
            row: Sequence[Any] | None = conn.execute(statement, params).fetchone()
            return row
        return await self._run(read)

    async def _all(self, statement: str, params: Sequence[Any]) -> list[Any]:
        """Every row of one statement (none for a write)."""
        return await self._run(lambda conn: conn.execute(statement, params).fetchall())


@dataclass(slots=True)
class _Waiting:
    """A commit (or a lease) waiting for the store's thread, and where its answer goes
    (a future of the event loop that waits for it)."""

    steps: Steps[Any]
    done: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop
    #: a commit point (synced); a lease is not
    synced: bool


def _answer_all(batch: list[_Waiting], outcomes: list[tuple[bool, Any]]) -> None:
    """On the store's thread: each commit's outcome to its caller, by one call into each
    event loop of the batch (usually one)."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], bool, Any]]] = {}
    for w, (ok, value) in zip(batch, outcomes, strict=True):
        by_loop.setdefault(w.loop, []).append((w.done, ok, value))
    for loop, answers in by_loop.items():
        with contextlib.suppress(RuntimeError):  # a loop closed meanwhile: nobody waits
            loop.call_soon_threadsafe(_answer, answers)


def _answer(answers: list[tuple[asyncio.Future[Any], bool, Any]]) -> None:
    """On the event loop: the outcomes set (a caller that gave up meanwhile is skipped)."""
    for done, ok, value in answers:
        if done.done():
            continue
        if ok:
            done.set_result(value)
        else:
            done.set_exception(value)


def _in_savepoint(conn: sqlite3.Connection, steps: Steps[Any]) -> tuple[bool, Any]:
    """One commit of a batch, all or nothing: ``(True, its result)``, or ``(False, the
    exception)`` with its writes rolled back and the batch's others kept."""
    conn.execute("SAVEPOINT phaseflow_commit")
    try:
        value = operations.drive(steps, lambda step: _do(conn, step))
    except Exception as exc:
        conn.execute("ROLLBACK TO phaseflow_commit")
        conn.execute("RELEASE phaseflow_commit")
        return False, exc
    conn.execute("RELEASE phaseflow_commit")
    return True, value


def _do(conn: sqlite3.Connection, step: operations.Step) -> Any:
    """One step of an operation (:mod:`phaseflow.stores.operations`), as SQLite runs it
    inside the write transaction (``BEGIN IMMEDIATE``: nobody else writes until it
    ends, so no row read here changes before the writes). Dispatched by the step's
    type through a table: a ``match`` on nine class patterns costs a commit several
    microseconds more."""
    return _STEPS[type(step)](conn, step)


def _read_commit(conn: sqlite3.Connection, step: operations.ReadCommit) -> Any:
    return conn.execute(sql.READ_COMMIT, (step.session_id,)).fetchone()


def _create_session(conn: sqlite3.Connection, step: operations.CreateSession) -> bool:
    conn.execute(sql.INSERT_SESSION, (*step.values, step.session_id, step.created_at))
    return True  # the write lock was held since the read: nobody created it


def _update_session(conn: sqlite3.Connection, step: operations.UpdateSession) -> None:
    conn.execute(sql.UPDATE_SESSION, (*step.values, step.placeholder, step.created_at,
                                      step.release, step.release, step.session_id))


def _drop_history(conn: sqlite3.Connection, step: operations.DropHistory) -> None:
    for statement in sql.DROP_HISTORY:
        conn.execute(statement, (step.session_id,))


def _append(conn: sqlite3.Connection, step: operations.Append) -> None:
    sid, start = step.session_id, step.start
    conn.executemany(f"INSERT INTO {step.table} (session_id, {step.key}, data)"
                     " VALUES (?, ?, ?)",
                     [(sid, start + k, data) for k, data in enumerate(step.rows)])


def _consume(conn: sqlite3.Connection, step: operations.Consume) -> None:
    conn.execute(sql.CONSUME, (step.session_id, step.upto))


def _keep_turn(conn: sqlite3.Connection, step: operations.KeepTurn) -> None:
    conn.execute(_KEEP_TURN, step.values)


def _lock_lease(conn: sqlite3.Connection, step: operations.LockLease) -> Any:
    row = conn.execute(sql.READ_LEASE, (step.session_id,)).fetchone()
    if row is None:
        conn.execute(sql.PLACEHOLDER, (step.session_id, step.now, step.now))
        row = (None, None, 0, 0)
    return row


def _set_lease(conn: sqlite3.Connection, step: operations.SetLease) -> None:
    conn.execute(sql.SET_LEASE, (step.owner, step.expires, step.epoch, step.session_id))


def _set_timer(conn: sqlite3.Connection, step: operations.SetTimer) -> None:
    if step.due_at is None:
        conn.execute(sql.DROP_TIMER, (step.session_id,))
    else:
        conn.execute(sql.SET_TIMER, (step.session_id, step.due_at))


_KEEP_TURN = (f"INSERT OR REPLACE INTO turns ({codec.TURN_COLUMNS}) VALUES"
              " (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")

#: how SQLite runs each kind of step
_STEPS: dict[type[Any], Callable[[sqlite3.Connection, Any], Any]] = {
    operations.ReadCommit: _read_commit, operations.CreateSession: _create_session,
    operations.UpdateSession: _update_session, operations.DropHistory: _drop_history,
    operations.Append: _append, operations.Consume: _consume,
    operations.KeepTurn: _keep_turn, operations.LockLease: _lock_lease,
    operations.SetLease: _set_lease, operations.SetTimer: _set_timer,
}


def _history(conn: sqlite3.Connection, table: str, session_id: str,
             below: object = None) -> tuple[list[Any], list[Any]]:
    """A session's ``messages`` or ``marks`` rows (those with ``idx < below`` when
    given) as their indexes and their texts."""
    rows = conn.execute(
        f"SELECT idx, data FROM {table} WHERE session_id = ?"
        + (" ORDER BY idx" if below is None else " AND idx < ? ORDER BY idx"),
        (session_id,) if below is None else (session_id, below)).fetchall()
    return [i for i, _ in rows], [d for _, d in rows]


#: the most session ids one statement of :func:`_histories` names (well below SQLite's
#: limit of bound parameters)
_IDS_AT_ONCE = 500


def _histories(conn: sqlite3.Connection, table: str, session_ids: Sequence[str]
               ) -> dict[str, tuple[list[Any], list[Any]]]:
    """The ``messages`` or ``marks`` rows of several sessions (:func:`_history` of each),
    read by a statement per :data:`_IDS_AT_ONCE` sessions, not one per session."""
    found: dict[str, tuple[list[Any], list[Any]]] = {}
    for start in range(0, len(session_ids), _IDS_AT_ONCE):
        part = session_ids[start:start + _IDS_AT_ONCE]
        for sid, idx, data in conn.execute(
                f"SELECT session_id, idx, data FROM {table} WHERE session_id IN"
                f" ({', '.join('?' * len(part))}) ORDER BY session_id, idx", part):
            indexes, texts = found.setdefault(sid, ([], []))
            indexes.append(idx)
            texts.append(data)
    return found


@contextlib.contextmanager
def _writing(conn: sqlite3.Connection) -> Iterator[None]:
    """A write transaction: the write lock taken first (``BEGIN IMMEDIATE``: writers
    queue instead of failing halfway), committed at the end, rolled back on any error."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


@contextlib.contextmanager
def _reading(conn: sqlite3.Connection) -> Iterator[None]:
    """A read transaction: the statements inside read one snapshot."""
    conn.execute("BEGIN")
    try:
        yield
    finally:
        conn.execute("COMMIT")


def _read_chunks(conn: sqlite3.Connection, reference: str, offset: int, limit: int
                 ) -> tuple[bytes, int] | None:
    """A range of a capture kept in chunks (``chunk_key``): the last chunk's key and
    length (not its bytes) give the size; only the chunks of the range are read."""
    last = conn.execute("SELECT sha256, length(data) FROM captures WHERE sha256 > ? AND "
                        "sha256 < ? ORDER BY sha256 DESC LIMIT 1",
                        (reference + ".", reference + "/")).fetchone()
    if last is None:
        return None
    size = chunk_index(last[0]) * CAPTURE_CHUNK + int(last[1])
    if offset >= size or limit == 0:
        return b"", size
    end = min(size, offset + limit)
    first = offset // CAPTURE_CHUNK
    rows = conn.execute("SELECT data FROM captures WHERE sha256 >= ? AND sha256 <= ? "
                        "ORDER BY sha256", (chunk_key(reference, first),
                                            chunk_key(reference, (end - 1) // CAPTURE_CHUNK))
                        ).fetchall()
    joined = b"".join(bytes(r[0]) for r in rows)
    start = offset - first * CAPTURE_CHUNK
    return joined[start:start + end - offset], size
