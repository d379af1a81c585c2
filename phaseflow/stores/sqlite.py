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
on the disk; the connection lives on that thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from phaseflow.stores import codec, rules
from phaseflow.stores.base import (
    Lease,
    QueuedMessage,
    SessionRecord,
    SessionSummary,
    StoreConflict,
    StoredEvent,
    StoreError,
    check_session_id,
)

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
_ADDED = {
    "turns": """CREATE TABLE IF NOT EXISTS turns (
    session_id TEXT NOT NULL, turn INTEGER NOT NULL, version INTEGER NOT NULL,
    workflow TEXT NOT NULL, workflow_hash TEXT NOT NULL, status TEXT NOT NULL,
    phase TEXT NOT NULL, snapshot TEXT NOT NULL, message_count INTEGER NOT NULL,
    mark_count INTEGER NOT NULL, updated_at REAL NOT NULL,
    PRIMARY KEY (session_id, turn)) WITHOUT ROWID""",
}

_SESSION_COLUMNS = ("workflow, workflow_hash, version, status, phase, turn, snapshot,"
                    " message_count, mark_count, event_count, updated_at")
_SESSION_SET = ("workflow = ?, workflow_hash = ?, version = ?, status = ?, phase = ?,"
                " turn = ?, snapshot = ?, message_count = ?, mark_count = ?,"
                " event_count = ?, updated_at = ?")
#: the rest of a commit's update: the creation time of a lease's placeholder (the
#: session is created now), the lease cleared when the commit releases it
_CREATED_RELEASED = ("created_at = CASE WHEN ? THEN ? ELSE created_at END,"
                     " lease_owner = CASE WHEN ? THEN NULL ELSE lease_owner END,"
                     " lease_expires = CASE WHEN ? THEN NULL ELSE lease_expires END")

_SYNC = ("OFF", "NORMAL", "FULL", "EXTRA")

#: how a lease is written when the store syncs every commit: to the log without waiting
#: for the disk. A lease coordinates workers and is no commit point of the session: a
#: killed process loses nothing of it (the write is done when COMMIT returns), and a power
#: loss, which stops every worker on this machine at once, may forget a lease taken after
#: the last sync, which is the state of a turn that had not begun. The log is sequential,
#: so the turn's first commit, synced, makes the lease durable with it.
_LEASE_SYNC = "NORMAL"


class SQLiteStore:
    """Sessions in the SQLite file ``path`` (created with its schema when missing)."""

    def __init__(self, path: str | Path, *, synchronous: str = "FULL",
                 timeout: float = 30.0) -> None:
        if synchronous.upper() not in _SYNC:
            raise StoreError(f"synchronous must be one of {', '.join(_SYNC)}")
        self.path = str(path)
        self._synchronous = synchronous.upper()
        self._timeout = timeout
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="phaseflow-sqlite")
        self._conn: sqlite3.Connection | None = None
        self._known: dict[str, codec.Known] = {}
        self._lock = threading.Lock()
        #: commits made by this store object (tests and benchmarks count them)
        self.commits = 0

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
        conn.execute("BEGIN IMMEDIATE")
        try:
            if codec.must_create(self.path, *self._found(conn), whole=True):
                for statement in _DDL.split(";"):
                    if statement.strip():
                        conn.execute(statement)
                for statement in _ADDED.values():
                    conn.execute(statement)
                conn.execute("INSERT INTO phaseflow_schema (version) VALUES (?)",
                             (codec.SCHEMA_VERSION,))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def _migrate(self, conn: sqlite3.Connection) -> None:
        """An older schema brought to this version under the write lock (read again
        under it: another connection may have migrated the file meanwhile): the tables it
        lacks are created and the version raised, in one transaction; no row of the older
        tables is touched."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            found, version = self._found(conn)
            codec.must_create(self.path, found, version, whole=True)
            if version is not None and codec.must_migrate(version):
                for table in codec.migrations(version):
                    conn.execute(_ADDED[table])
                conn.execute("UPDATE phaseflow_schema SET version = ?",
                             (codec.SCHEMA_VERSION,))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

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

    # --- the protocol ---------------------------------------------------------------------

    async def load(self, session_id: str) -> SessionRecord | None:
        check_session_id(session_id)

        def read(conn: sqlite3.Connection) -> SessionRecord | None:
            conn.execute("BEGIN")  # one snapshot: a commit between the reads cannot mix in
            try:
                row = conn.execute(
                    "SELECT id, workflow, workflow_hash, version, status, phase, turn, snapshot,"
                    " created_at, updated_at, message_count, mark_count FROM sessions"
                    " WHERE id = ?", (session_id,)).fetchone()
                if row is None or row[3] == 0:  # version 0: only a lease was taken
                    return None
                messages = conn.execute("SELECT idx, data FROM messages WHERE session_id = ?"
                                        " ORDER BY idx", (session_id,)).fetchall()
                marks = conn.execute("SELECT idx, data FROM marks WHERE session_id = ?"
                                     " ORDER BY idx", (session_id,)).fetchall()
            finally:
                conn.execute("COMMIT")
            record, known = codec.decode(
                codec.Row(*row[:10]),
                codec.complete("messages", session_id, row[10], [i for i, _ in messages],
                               [m for _, m in messages]),
                codec.complete("marks", session_id, row[11], [i for i, _ in marks],
                               [m for _, m in marks]))
            self._known[session_id] = known
            return record
        return await self._run(read)

    async def commit(
        self, record: SessionRecord, events: Sequence[Mapping[str, Any]], *,
        expected_version: int, lease: Lease | None = None, consumed: int = 0,
        release: bool = False, keep_turn: bool = False,
    ) -> tuple[int, ...]:
        sid = check_session_id(record.session_id)
        written, known = codec.encode(record, self._known.get(sid))
        event_rows = codec.encode_events(sid, events)

        def write(conn: sqlite3.Connection) -> tuple[int, ...]:
            conn.execute("BEGIN IMMEDIATE")
            try:
                seqs = self._write(conn, record, written, event_rows, expected_version,
                                   lease, consumed, release, keep_turn)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            return seqs

        try:
            seqs = await self._run(write)
        except StoreConflict:
            self._known.pop(sid, None)
            raise
        self._known[sid] = known
        self.commits += 1
        return seqs

    @staticmethod
    def _write(conn: sqlite3.Connection, record: SessionRecord, written: codec.Written,
               event_rows: list[str], expected_version: int, lease: Lease | None,
               consumed: int, release: bool, keep_turn: bool) -> tuple[int, ...]:
        """The commit rule (:func:`rules.plan_commit`) on the row as read, carried out."""
        sid = record.session_id
        plan = rules.plan_commit(
            sid, codec.stored(sid, conn.execute(
                f"SELECT {codec.COMMIT_READ} FROM sessions WHERE id = ?", (sid,)).fetchone()),
            version=record.version, expected_version=expected_version, lease=lease,
            events=len(event_rows), history=written.history, consumed=consumed,
            release=release)
        if plan.rewrite:
            conn.execute("DELETE FROM messages WHERE session_id = ?", (sid,))
            conn.execute("DELETE FROM marks WHERE session_id = ?", (sid,))
            # the records of earlier turns' ends name history rows that are gone
            conn.execute("DELETE FROM turns WHERE session_id = ?", (sid,))
        for table, key, start, rows in (
                ("messages", "idx", written.message_from, written.messages),
                ("marks", "idx", written.mark_from, written.marks),
                ("events", "seq", plan.event_from, event_rows)):
            conn.executemany(f"INSERT INTO {table} (session_id, {key}, data) VALUES (?, ?, ?)",
                             [(sid, start + k, data) for k, data in enumerate(rows)])
        values = (record.workflow, record.workflow_hash, record.version, record.status,
                  record.phase, record.turn, written.snapshot, plan.message_count,
                  plan.mark_count, plan.event_count, record.updated_at)
        if plan.create:
            conn.execute(f"INSERT INTO sessions ({_SESSION_COLUMNS}, id, created_at)"
                         " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                         (*values, sid, record.created_at))
        else:  # one statement: a placeholder's creation time, and a release, with it
            conn.execute(f"UPDATE sessions SET {_SESSION_SET}, {_CREATED_RELEASED}"
                         " WHERE id = ?", (*values, plan.placeholder, record.created_at,
                                           plan.release, plan.release, sid))
        if plan.consumed:
            conn.execute("DELETE FROM inbox WHERE session_id = ? AND id <= ?",
                         (sid, plan.consumed))
        if keep_turn:
            conn.execute(f"INSERT OR REPLACE INTO turns ({codec.TURN_COLUMNS}) VALUES"
                         " (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                         codec.turn_values(record, written, plan.message_count,
                                           plan.mark_count))
        return plan.seqs

    async def turn_record(self, session_id: str, turn: int) -> SessionRecord | None:
        check_session_id(session_id)
        if not codec.is_turn(turn):
            return None  # no turn a store holds (nor one its integers can name)

        def read(conn: sqlite3.Connection) -> SessionRecord | None:
            conn.execute("BEGIN")  # one snapshot: the turn's row and the rows it counts
            try:
                row = conn.execute(
                    "SELECT t.version, t.workflow, t.workflow_hash, t.status, t.phase, t.turn,"
                    " t.snapshot, t.message_count, t.mark_count, t.updated_at, s.created_at"
                    " FROM turns AS t JOIN sessions AS s ON s.id = t.session_id"
                    " WHERE t.session_id = ? AND t.turn = ?", (session_id, turn)).fetchone()
                if row is None:
                    return None
                messages = conn.execute(
                    "SELECT idx, data FROM messages WHERE session_id = ? AND idx < ?"
                    " ORDER BY idx", (session_id, row[7])).fetchall()
                marks = conn.execute(
                    "SELECT idx, data FROM marks WHERE session_id = ? AND idx < ?"
                    " ORDER BY idx", (session_id, row[8])).fetchall()
            finally:
                conn.execute("COMMIT")
            return codec.turn_record(session_id, turn, row,
                                     ([i for i, _ in messages], [m for _, m in messages]),
                                     ([i for i, _ in marks], [m for _, m in marks]))
        return await self._run(read)

    async def version(self, session_id: str) -> int:
        check_session_id(session_id)

        def read(conn: sqlite3.Connection) -> int:
            row = conn.execute("SELECT version FROM sessions WHERE id = ?",
                               (session_id,)).fetchone()
            return 0 if row is None else codec.counts(session_id, row)[0]
        return await self._run(read)

    async def events(self, session_id: str, after: int = 0) -> tuple[StoredEvent, ...]:
        check_session_id(session_id)

        def read(conn: sqlite3.Connection) -> tuple[StoredEvent, ...]:
            conn.execute("BEGIN")  # the count and the rows it counts from one snapshot
            try:
                row = conn.execute("SELECT event_count FROM sessions WHERE id = ?",
                                   (session_id,)).fetchone()
                rows = conn.execute("SELECT seq, data FROM events WHERE session_id = ? AND"
                                    " seq > ? ORDER BY seq", (session_id, after)).fetchall()
            finally:
                conn.execute("COMMIT")
            return codec.stored_events(session_id, after, None if row is None else row[0],
                                       rows)
        return await self._run(read)

    async def sessions(self) -> tuple[SessionSummary, ...]:
        def read(conn: sqlite3.Connection) -> tuple[SessionSummary, ...]:
            return tuple(codec.summary(r) for r in conn.execute(
                "SELECT id, workflow, status, phase, turn, version, updated_at, snapshot"
                " FROM sessions WHERE version != 0 ORDER BY updated_at DESC"))
        return await self._run(read)

    async def delete(self, session_id: str) -> bool:
        check_session_id(session_id)

        def remove(conn: sqlite3.Connection) -> bool:
            conn.execute("BEGIN IMMEDIATE")
            try:
                gone = conn.execute("DELETE FROM sessions WHERE id = ? AND version > 0",
                                    (session_id,)).rowcount
                conn.execute("DELETE FROM sessions WHERE id = ?", (session_id,))
                for table in ("messages", "marks", "events", "inbox", "turns"):
                    conn.execute(f"DELETE FROM {table} WHERE session_id = ?", (session_id,))
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            return gone > 0
        self._known.pop(session_id, None)
        return await self._run(remove)

    async def put_capture(self, data: bytes) -> str:
        reference = hashlib.sha256(data).hexdigest()

        def put(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT OR IGNORE INTO captures (sha256, data) VALUES (?, ?)",
                         (reference, bytes(data)))
        await self._run(put)
        return reference

    async def get_capture(self, reference: str) -> bytes | None:
        def get(conn: sqlite3.Connection) -> bytes | None:
            row = conn.execute("SELECT data FROM captures WHERE sha256 = ?",
                               (reference,)).fetchone()
            return None if row is None else bytes(row[0])
        return await self._run(get)

    # --- leases and the queue ---------------------------------------------------------

    async def acquire(self, session_id: str, owner: str, ttl: float, now: float, *,
                      force: bool = False, replacing: Lease | None = None) -> Lease | None:
        check_session_id(session_id)

        def take(conn: sqlite3.Connection) -> Lease | None:
            # Not synced (see _LEASE_SYNC): taking the turn is no commit point of the
            # session, and the log is sequential, so the turn's first commit, synced,
            # makes this write durable with it.
            relaxed = self._synchronous in ("FULL", "EXTRA")
            if relaxed:
                conn.execute(f"PRAGMA synchronous={_LEASE_SYNC}")
            try:
                return _take(conn)
            finally:
                if relaxed:
                    self._restore_sync(conn)

        def _take(conn: sqlite3.Connection) -> Lease | None:
            conn.execute("BEGIN IMMEDIATE")
            try:
                row = conn.execute("SELECT lease_owner, lease_expires, lease_epoch, version"
                                   " FROM sessions WHERE id = ?", (session_id,)).fetchone()
                if row is None:
                    conn.execute(
                        "INSERT INTO sessions (id, workflow, workflow_hash, version, status,"
                        " phase, turn, snapshot, message_count, mark_count, event_count,"
                        " created_at, updated_at) VALUES (?, '', '', 0, 'new', '', 0, '{}',"
                        " 0, 0, 0, ?, ?)", (session_id, now, now))
                    row = (None, None, 0, 0)
                (version,) = codec.counts(session_id, row[3:])
                epoch = rules.take_lease(*codec.lease(session_id, *row[:3]), owner=owner,
                                         now=now, force=force, replacing=replacing)
                if epoch is None:
                    conn.execute("COMMIT")
                    return None
                conn.execute("UPDATE sessions SET lease_owner = ?, lease_expires = ?,"
                             " lease_epoch = ? WHERE id = ?", (owner, now + ttl, epoch,
                                                               session_id))
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            return Lease(session_id, owner, epoch, now + ttl, int(version))
        return await self._run(take)

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

    async def release(self, lease: Lease) -> None:
        check_session_id(lease.session_id)

        def give_up(conn: sqlite3.Connection) -> None:
            conn.execute("UPDATE sessions SET lease_owner = NULL, lease_expires = NULL"
                         " WHERE id = ? AND lease_owner = ? AND lease_epoch = ?",
                         (lease.session_id, lease.owner, lease.epoch))
        await self._run(give_up)

    async def lease(self, session_id: str) -> Lease | None:
        check_session_id(session_id)

        def read(conn: sqlite3.Connection) -> Lease | None:
            row = conn.execute("SELECT lease_owner, lease_expires, lease_epoch FROM sessions"
                               " WHERE id = ?", (session_id,)).fetchone()
            return None if row is None else codec.stored_lease(session_id, *row)
        return await self._run(read)

    async def enqueue(self, session_id: str, data: Mapping[str, Any]) -> int:
        text = codec.encode_queued(check_session_id(session_id), data)

        def put(conn: sqlite3.Connection) -> int:
            cursor = conn.execute("INSERT INTO inbox (session_id, data) VALUES (?, ?)",
                                  (session_id, text))
            return int(cursor.lastrowid or 0)
        return await self._run(put)

    async def queued(self, session_id: str) -> tuple[QueuedMessage, ...]:
        check_session_id(session_id)

        def read(conn: sqlite3.Connection) -> tuple[QueuedMessage, ...]:
            return codec.queued(session_id, conn.execute(
                "SELECT id, data FROM inbox WHERE session_id = ? ORDER BY id", (session_id,)))
        return await self._run(read)
