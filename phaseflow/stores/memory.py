"""The in-memory store: the default, for one process and for tests.

It keeps the immutable values it is given (nothing is encoded), so a commit costs the
same on the first turn and the thousandth. It follows the protocol to the letter
(compare-and-set versions, atomic commits, ``seq`` from 1), so a session that works here
behaves the same on a durable store, and it refuses the session ids they refuse
(:func:`~phaseflow.stores.base.check_session_id`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from phaseflow.stores.base import (
    Lease,
    QueuedMessage,
    SessionRecord,
    SessionSummary,
    StoreConflict,
    StoredEvent,
    StoreFenced,
    check_session_id,
)


@dataclass(slots=True)
class _Entry:
    record: SessionRecord | None
    events: list[StoredEvent] = field(default_factory=list)
    lease: Lease | None = None
    epoch: int = 0
    queue: list[QueuedMessage] = field(default_factory=list)


class MemoryStore:
    """Sessions in a dict. Safe within one event loop (every method completes without
    awaiting, so a commit is atomic)."""

    def __init__(self) -> None:
        self._sessions: dict[str, _Entry] = {}
        self._captures: dict[str, bytes] = {}
        self._queue_ids = 0
        #: how many commits were made (for tests and benchmarks)
        self.commits = 0

    async def load(self, session_id: str) -> SessionRecord | None:
        check_session_id(session_id)
        entry = self._sessions.get(session_id)
        return None if entry is None else entry.record

    async def commit(
        self, record: SessionRecord, events: Sequence[Mapping[str, Any]], *,
        expected_version: int, lease: Lease | None = None, consumed: int = 0,
        release: bool = False,
    ) -> tuple[int, ...]:
        check_session_id(record.session_id)
        entry = self._sessions.get(record.session_id)
        if lease is not None and (entry is None or entry.lease is None
                                  or entry.lease.epoch != lease.epoch
                                  or entry.lease.owner != lease.owner):
            raise StoreFenced(f"session {record.session_id!r}: the lease of {lease.owner!r} "
                              f"(epoch {lease.epoch}) was taken over; this write is refused")
        stored = 0 if entry is None or entry.record is None else entry.record.version
        if stored != expected_version:
            raise StoreConflict(
                f"session {record.session_id!r}: stored version is {stored}, "
                f"this writer expected {expected_version}"
            )
        if record.version != expected_version + 1:
            raise StoreConflict(
                f"session {record.session_id!r}: a commit must raise the version by one"
            )
        if entry is None:
            entry = self._sessions[record.session_id] = _Entry(record)
        else:
            entry.record = record
        if consumed:
            entry.queue = [q for q in entry.queue if q.id > consumed]
        if release and lease is not None:
            entry.lease = None  # checked above: it was this lease
        start = len(entry.events) + 1
        seqs = tuple(range(start, start + len(events)))
        entry.events.extend(
            StoredEvent(record.session_id, seq, dict(data))
            for seq, data in zip(seqs, events, strict=True)
        )
        self.commits += 1
        return seqs

    async def version(self, session_id: str) -> int:
        check_session_id(session_id)
        entry = self._sessions.get(session_id)
        return 0 if entry is None or entry.record is None else entry.record.version

    async def events(self, session_id: str, after: int = 0) -> tuple[StoredEvent, ...]:
        check_session_id(session_id)
        entry = self._sessions.get(session_id)
        if entry is None:
            return ()
        return tuple(entry.events[max(after, 0):])

    async def sessions(self) -> tuple[SessionSummary, ...]:
        rows = [
            SessionSummary(r.session_id, r.workflow, r.status, r.phase, r.turn, r.version,
                           r.updated_at)
            for r in (e.record for e in self._sessions.values()) if r is not None
        ]
        rows.sort(key=lambda s: s.updated_at, reverse=True)
        return tuple(rows)

    async def delete(self, session_id: str) -> bool:
        check_session_id(session_id)
        entry = self._sessions.pop(session_id, None)
        return entry is not None and entry.record is not None

    async def acquire(self, session_id: str, owner: str, ttl: float, now: float, *,
                      force: bool = False, replacing: Lease | None = None) -> Lease | None:
        check_session_id(session_id)
        entry = self._sessions.get(session_id)
        if entry is None:
            entry = self._sessions[session_id] = _Entry(None)
        held = entry.lease
        if held is not None and held.owner == owner and held.expires > now and not force:
            entry.lease = Lease(session_id, owner, held.epoch, now + ttl, _version(entry))
            return entry.lease
        if held is not None and held.expires > now and not force and not _same(held,
                                                                                replacing):
            return None
        entry.epoch += 1
        entry.lease = Lease(session_id, owner, entry.epoch, now + ttl, _version(entry))
        return entry.lease

    async def release(self, lease: Lease) -> None:
        check_session_id(lease.session_id)
        entry = self._sessions.get(lease.session_id)
        held = None if entry is None else entry.lease
        if entry is not None and held is not None and (held.owner, held.epoch) == (
                lease.owner, lease.epoch):
            entry.lease = None

    async def lease(self, session_id: str) -> Lease | None:
        check_session_id(session_id)
        entry = self._sessions.get(session_id)
        return None if entry is None else entry.lease

    async def enqueue(self, session_id: str, data: Mapping[str, Any]) -> int:
        check_session_id(session_id)
        entry = self._sessions.get(session_id)
        if entry is None:
            entry = self._sessions[session_id] = _Entry(None)
        self._queue_ids += 1
        entry.queue.append(QueuedMessage(self._queue_ids, dict(data)))
        return self._queue_ids

    async def queued(self, session_id: str) -> tuple[QueuedMessage, ...]:
        check_session_id(session_id)
        entry = self._sessions.get(session_id)
        return () if entry is None else tuple(entry.queue)

    async def put_capture(self, data: bytes) -> str:
        reference = hashlib.sha256(data).hexdigest()
        self._captures.setdefault(reference, bytes(data))
        return reference

    async def get_capture(self, reference: str) -> bytes | None:
        return self._captures.get(reference)


def _same(held: Lease, replacing: Lease | None) -> bool:
    """``held`` is the lease a worker asked to replace (same holder, same epoch)."""
    return replacing is not None and (held.owner, held.epoch) == (replacing.owner,
                                                                  replacing.epoch)


def _version(entry: _Entry) -> int:
    return 0 if entry.record is None else entry.record.version
