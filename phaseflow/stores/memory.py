"""The in-memory store: the default, for one process and for tests.

It keeps the immutable values it is given (nothing is encoded), so a commit costs the
same on the first turn and the thousandth. It follows the protocol to the letter
(compare-and-set versions, atomic commits, ``seq`` from 1), so a session that works here
behaves the same on a durable store.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from phaseflow.stores.base import (
    SessionRecord,
    SessionSummary,
    StoreConflict,
    StoredEvent,
)


@dataclass(slots=True)
class _Entry:
    record: SessionRecord
    events: list[StoredEvent] = field(default_factory=list)


class MemoryStore:
    """Sessions in a dict. Safe within one event loop (every method completes without
    awaiting, so a commit is atomic)."""

    def __init__(self) -> None:
        self._sessions: dict[str, _Entry] = {}
        self._captures: dict[str, bytes] = {}
        #: how many commits were made (for tests and benchmarks)
        self.commits = 0

    async def load(self, session_id: str) -> SessionRecord | None:
        entry = self._sessions.get(session_id)
        return None if entry is None else entry.record

    async def commit(
        self, record: SessionRecord, events: Sequence[Mapping[str, Any]], *, expected_version: int
    ) -> tuple[int, ...]:
        entry = self._sessions.get(record.session_id)
        stored = 0 if entry is None else entry.record.version
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
        start = len(entry.events) + 1
        seqs = tuple(range(start, start + len(events)))
        entry.events.extend(
            StoredEvent(record.session_id, seq, dict(data))
            for seq, data in zip(seqs, events, strict=True)
        )
        self.commits += 1
        return seqs

    async def events(self, session_id: str, after: int = 0) -> tuple[StoredEvent, ...]:
        entry = self._sessions.get(session_id)
        if entry is None:
            return ()
        return tuple(entry.events[max(after, 0):])

    async def sessions(self) -> tuple[SessionSummary, ...]:
        rows = [
            SessionSummary(r.session_id, r.workflow, r.status, r.phase, r.turn, r.version,
                           r.updated_at)
            for r in (e.record for e in self._sessions.values())
        ]
        rows.sort(key=lambda s: s.updated_at, reverse=True)
        return tuple(rows)

    async def delete(self, session_id: str) -> bool:
        return self._sessions.pop(session_id, None) is not None

    async def put_capture(self, data: bytes) -> str:
        reference = hashlib.sha256(data).hexdigest()
        self._captures.setdefault(reference, bytes(data))
        return reference

    async def get_capture(self, reference: str) -> bytes | None:
        return self._captures.get(reference)
