"""What the SQLite and PostgreSQL stores do alike, written once: every protocol method
(:class:`~phaseflow.stores.base.Store`) as the checks, the rule and the decoding around
one I/O hook that each backend implements.

A method here checks the session id, asks its backend for rows (or drives an operation
of :mod:`phaseflow.stores.operations` through it), and turns what comes back into the
protocol's values with :mod:`phaseflow.stores.codec`, which checks everything read. The
backend (:class:`~phaseflow.stores.sqlite.SQLiteStore`,
:class:`~phaseflow.stores.postgres.PostgresStore`) keeps its connection, its statements
and its transactions, and nothing else: a rule, a check or a decoding step written in
one of them would be one the other could miss.

The store remembers what it wrote per session (:class:`codec.Known`), so a commit
writes only the history added since; what it remembers changes only when a commit's
transaction has committed, and is forgotten on a conflict (another writer moved the
session on: the next load reads it again).
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from phaseflow.stores import codec, operations, sql
from phaseflow.stores.base import (
    CAPTURE_CHUNK,
    DueSession,
    Lease,
    QueuedMessage,
    SessionRecord,
    SessionsPage,
    SessionSummary,
    StoreConflict,
    StoredEvent,
    StoreError,
    capture_owner,
    capture_reference,
    check_session_id,
    chunk_key,
)
from phaseflow.stores.operations import CommitEntry, CommitRequest, Steps

#: a row as a load reads it: the ten columns of :class:`codec.Row`, then
#: ``message_count, mark_count``, the message rows' indexes and texts, the mark rows'
#: indexes and texts
LoadRow = Sequence[Any]


class DurableStore(CommitEntry, ABC):
    """The protocol on a database; a subclass gives the I/O (the ``_`` hooks below)."""

    def __init__(self) -> None:
        self._known: dict[str, codec.Known] = {}
        #: commits made by this store object (tests and benchmarks count them)
        self.commits = 0

    # --- the hooks: one database's I/O ----------------------------------------------------

    @abstractmethod
    async def _read_session(self, session_id: str) -> LoadRow | None:
        """The session's row and its history rows, from one snapshot (:data:`LoadRow`)."""

    @abstractmethod
    async def _read_due(self, now: float, limit: int, after: tuple[float, str] | None,
                        workflows: Sequence[str]) -> list[Sequence[Any]]:
        """The rows of :func:`sql.due_sessions` (``workflows``: none means any), each
        followed by the session's message indexes and texts and its mark indexes and
        texts, all from one snapshot."""

    @abstractmethod
    async def _drive_commit(self, steps: Steps[tuple[tuple[int, ...], codec.Known]]
                            ) -> tuple[tuple[int, ...], codec.Known]:
        """Run a commit's steps in one transaction (the write lock taken first)."""

    @abstractmethod
    async def _read_turn(self, session_id: str, turn: int) -> Sequence[Any] | None:
        """The ``turns`` row as :func:`codec.turn_record` takes it (its eleven columns),
        then the session's message indexes and texts below its count, and its mark
        indexes and texts: from one snapshot."""

    @abstractmethod
    async def _read_version(self, session_id: str) -> Sequence[Any] | None:
        """``(version,)`` of the session's row."""

    @abstractmethod
    async def _read_events(self, session_id: str, after: int
                           ) -> tuple[object, Iterable[tuple[Any, Any]]]:
        """The row's ``event_count`` (``None``: no row) and the event rows ``(seq,
        data)`` after ``after``, in order, from one snapshot."""

    @abstractmethod
    async def _read_sessions(self) -> Iterable[Sequence[Any]]:
        """The rows of :data:`sql.SESSIONS`."""

    @abstractmethod
    async def _delete(self, session_id: str) -> bool:
        """Delete every row of the session; whether it was a session (not a lease's
        placeholder)."""

    @abstractmethod
    async def _put_capture(self, reference: str, data: bytes) -> None:
        """Keep ``data`` under ``reference`` unless it is kept already."""

    @abstractmethod
    async def _get_capture(self, reference: str) -> bytes | None:
        ...

    @abstractmethod
    async def _read_capture(self, reference: str, offset: int, limit: int
                            ) -> tuple[bytes, int] | None:
        """A range of a capture, read as a range (not the whole value), and its size."""

    @abstractmethod
    async def _delete_captures(self, owner: str) -> None:
        """Remove the captures whose reference begins ``owner-`` (a deleted session's)."""

    @abstractmethod
    async def _drive_lease(self, steps: Steps[Lease | None]) -> Lease | None:
        """Run the lease's steps in one transaction, without waiting for the disk (a
        lease is no commit point of the session)."""

    @abstractmethod
    async def _release(self, lease: Lease) -> None:
        """Clear the lease columns where they still say ``lease``."""

    @abstractmethod
    async def _read_lease(self, session_id: str) -> Sequence[Any] | None:
        """``(lease_owner, lease_expires, lease_epoch)`` of the session's row."""

    @abstractmethod
    async def _enqueue(self, session_id: str, text: str) -> int:
        """Insert a queued message; its id."""

    @abstractmethod
    async def _read_queue(self, session_id: str) -> Iterable[tuple[Any, Any]]:
        """The session's queued rows ``(id, data)``, in order of id."""

    @abstractmethod
    async def _all(self, statement: str, params: Sequence[Any]) -> list[Any]:
        """Every row of one statement written as :mod:`phaseflow.stores.sql` writes
        them, run on its own (none for a write)."""

    # --- the protocol ------------------------------------------------------------------

    async def load(self, session_id: str) -> SessionRecord | None:
        row = await self._read_session(check_session_id(session_id))
        if row is None or row[3] == 0:  # version 0: only a lease was taken
            return None
        record, known = codec.decode(
            codec.Row(*row[:10]),
            codec.complete("messages", session_id, row[10], row[12], row[13]),
            codec.complete("marks", session_id, row[11], row[14], row[15]))
        self._known[session_id] = known
        return record

    async def _commit(self, record: SessionRecord, events: Sequence[Mapping[str, Any]],
                      request: CommitRequest) -> tuple[int, ...]:
        sid = record.session_id
        known = self._known.get(sid)
        try:
            try:
                seqs, after = await self._drive_commit(
                    operations.commit(record, events, known, request))
            except operations.Mispredicted:  # nothing written: again, with a read
                seqs, after = await self._drive_commit(
                    operations.commit(record, events, known, request, predict=False))
        except StoreConflict:
            self._known.pop(sid, None)
            raise
        self._known[sid] = after
        self.commits += 1
        return seqs

    async def turn_record(self, session_id: str, turn: int) -> SessionRecord | None:
        check_session_id(session_id)
        if not codec.is_turn(turn):
            return None  # no turn a store holds (nor one its integers can name)
        row = await self._read_turn(session_id, turn)
        if row is None:
            return None
        return codec.turn_record(session_id, turn, row[:11], (row[11], row[12]),
                                 (row[13], row[14]))

    async def version(self, session_id: str) -> int:
        row = await self._read_version(check_session_id(session_id))
        return 0 if row is None else codec.counts(session_id, row)[0]

    async def events(self, session_id: str, after: int = 0) -> tuple[StoredEvent, ...]:
        count, rows = await self._read_events(check_session_id(session_id), after)
        return codec.stored_events(session_id, after, count, rows)

    async def sessions(self) -> tuple[SessionSummary, ...]:
        return tuple(codec.summary(r) for r in await self._read_sessions())

    async def sessions_page(self, page: SessionsPage) -> tuple[SessionSummary, ...]:
        params: list[Any] = [v for v in (page.owner, page.workflow, page.status)
                             if v is not None]
        if page.before is not None:
            params += page.before
        statement = sql.sessions_page(
            owner=page.owner is not None, workflow=page.workflow is not None,
            status=page.status is not None, before=page.before is not None)
        rows = await self._all(statement, (*params, page.limit))
        return tuple(_placed(codec.summary(r), r[6]) for r in rows)

    async def delete(self, session_id: str) -> bool:
        self._known.pop(check_session_id(session_id), None)
        gone = await self._delete(session_id)
        await self._delete_captures(capture_owner(session_id))
        return gone

    async def claim_key(self, session_id: str, key: str, fingerprint: str, now: float,
                        ttl: float) -> str | None:
        check_session_id(session_id)
        for _ in range(3):  # a claim dropped between the two statements: claim again
            if await self._all(sql.CLAIM_KEY, (session_id, key, fingerprint, now,
                                               now - ttl)):
                return None
            held = await self._all(sql.KEY, (session_id, key))
            if held:
                return str(held[0][0])
        raise StoreError(f"session {session_id!r}: the Idempotency-Key {key!r} is claimed "
                         "and let go again and again")

    async def drop_key(self, session_id: str, key: str, fingerprint: str) -> None:
        await self._all(sql.DROP_KEY, (check_session_id(session_id), key, fingerprint))

    async def request_cancel(self, session_id: str, now: float) -> None:
        await self._all(sql.REQUEST_CANCEL, (check_session_id(session_id), now))

    async def take_cancels(self, session_ids: Sequence[str]) -> dict[str, float]:
        if not session_ids:
            return {}
        ids = [check_session_id(s) for s in session_ids]
        # a read first: the common answer is none, and a read takes no write lock
        asked = [str(r[0]) for r in await self._all(sql.cancels(len(ids)), ids)]
        if not asked:
            return {}
        rows = await self._all(sql.take_cancels(len(asked)), asked)
        return {str(sid): float(at) for sid, at in rows}

    async def due_timers(self, now: float, limit: int) -> tuple[tuple[str, float], ...]:
        rows = await self._all(sql.DUE_TIMERS, (now, int(limit)))
        return tuple((str(r[0]), float(r[1])) for r in rows)

    async def due_sessions(self, now: float, limit: int, *,
                           after: tuple[float, str] | None = None,
                           workflows: Sequence[str] | None = None
                           ) -> tuple[DueSession, ...]:
        if int(limit) <= 0 or (workflows is not None and not workflows):
            return ()
        rows = await self._read_due(now, int(limit), after, tuple(workflows or ()))
        return tuple(self._due(row) for row in rows)

    def _due(self, row: Sequence[Any]) -> DueSession:
        """One row of a page of due sessions, decoded as :meth:`load` decodes one (a
        damaged one named in its ``problem``)."""
        sid, due_at = str(row[4]), float(row[0])
        try:
            lease = codec.stored_lease(sid, row[1], row[2], row[3])
            record, known = codec.decode(
                codec.Row(*row[4:14]),
                codec.complete("messages", sid, row[14], row[16], row[17]),
                codec.complete("marks", sid, row[15], row[18], row[19]))
        except StoreError as exc:
            return DueSession(sid, due_at, None, problem=str(exc))
        self._known[sid] = known
        return DueSession(sid, due_at, record, lease)

    async def claim_owner(self, session_id: str, owner: str) -> str:
        await self._all(sql.CLAIM_OWNER, (check_session_id(session_id), owner))
        found = await self.owner(session_id)
        if found is None:
            raise StoreError(f"session {session_id!r}: its owner was not kept")
        return found

    async def owner(self, session_id: str) -> str | None:
        rows = await self._all(sql.OWNER, (check_session_id(session_id),))
        return str(rows[0][0]) if rows else None

    async def put_capture(self, data: bytes, *, session_id: str | None = None) -> str:
        data = bytes(data)
        reference = capture_reference(data, session_id)
        if len(data) <= CAPTURE_CHUNK:
            await self._put_capture(reference, data)
            return reference
        # kept in chunks, so that a read near the end fetches only the chunks it needs
        # (a row's large value is a chain of pages that a seek walks from its start)
        for index, start in enumerate(range(0, len(data), CAPTURE_CHUNK)):
            await self._put_capture(chunk_key(reference, index),
                                    data[start:start + CAPTURE_CHUNK])
        return reference

    async def get_capture(self, reference: str) -> bytes | None:
        data = await self._get_capture(reference)
        if data is None:
            whole = await self._read_capture(reference, 0, 2**62)
            return None if whole is None else whole[0]
        return data

    async def read_capture(self, reference: str, offset: int, limit: int
                           ) -> tuple[bytes, int] | None:
        return await self._read_capture(reference, max(offset, 0), max(limit, 0))

    async def acquire(self, session_id: str, owner: str, ttl: float, now: float, *,
                      force: bool = False, replacing: Lease | None = None) -> Lease | None:
        sid = check_session_id(session_id)
        known = self._known.get(sid)
        expected = operations.expected_lease_row(known)
        try:
            lease = await self._drive_lease(operations.acquire(
                sid, owner, ttl, now, force=force, replacing=replacing, expected=expected))
        except operations.Mispredicted:  # nothing written: again, with a read
            lease = await self._drive_lease(operations.acquire(
                sid, owner, ttl, now, force=force, replacing=replacing))
        current = self._known.get(sid)
        if current is not None and current.released is not None:
            # the lease let go is no guess for the next one (taken now, or by another)
            self._known[sid] = dataclasses.replace(current, released=None)
        return lease

    async def release(self, lease: Lease) -> None:
        check_session_id(lease.session_id)
        await self._release(lease)

    async def lease(self, session_id: str) -> Lease | None:
        row = await self._read_lease(check_session_id(session_id))
        return None if row is None else codec.stored_lease(session_id, *row)

    async def enqueue(self, session_id: str, data: Mapping[str, Any]) -> int:
        return await self._enqueue(session_id, codec.encode_queued(
            check_session_id(session_id), data))

    async def queued(self, session_id: str) -> tuple[QueuedMessage, ...]:
        return codec.queued(session_id, await self._read_queue(check_session_id(session_id)))


def _placed(summary: SessionSummary, updated_at: object) -> SessionSummary:
    """A damaged row's summary keeps the place the index gave it (its ``updated_at``
    column, when that is a number), so the next page starts after it, not at the
    start of time."""
    if summary.problem is None or isinstance(updated_at, bool) or not isinstance(
            updated_at, int | float):
        return summary
    return dataclasses.replace(summary, updated_at=float(updated_at))
