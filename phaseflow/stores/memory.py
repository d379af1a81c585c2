"""The in-memory store: the default, for one process and for tests.

It keeps the immutable values it is given (nothing is encoded), so a commit costs the
same on the first turn and the thousandth. It follows the protocol to the letter
(compare-and-set versions, atomic commits, ``seq`` from 1), so a session that works here
behaves the same on a durable store, and it refuses the session ids they refuse
(:func:`~phaseflow.stores.base.check_session_id`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from phaseflow.stores import rules
from phaseflow.stores.base import (
    DueSession,
    Lease,
    QueuedMessage,
    SessionRecord,
    SessionsPage,
    SessionSummary,
    StoredEvent,
    capture_owner,
    capture_reference,
    check_session_id,
)
from phaseflow.stores.operations import CommitEntry, CommitRequest


@dataclass(slots=True)
class _Entry:
    record: SessionRecord | None
    events: list[StoredEvent] = field(default_factory=list)
    lease: Lease | None = None
    epoch: int = 0
    queue: list[QueuedMessage] = field(default_factory=list)
    #: the record of each turn's end (``keep_turn``): the immutable record itself
    turns: dict[int, SessionRecord] = field(default_factory=dict)


class MemoryStore(CommitEntry):
    """Sessions in a dict. Safe within one event loop (every method completes without
    awaiting, so a commit is atomic)."""

    #: a read costs no round trip: a running turn looks at its queue between requests
    #: (messages other workers stored for it: steering)
    local_reads = True

    def __init__(self) -> None:
        self._sessions: dict[str, _Entry] = {}
        self._captures: dict[str, bytes] = {}
        self._queue_ids = 0
        #: (session id, Idempotency-Key) -> (fingerprint, claimed at)
        self._keys: dict[tuple[str, str], tuple[str, float]] = {}
        self._cancels: dict[str, float] = {}
        #: each session's next timer (the index a durable store keeps in ``timers``)
        self._timers: dict[str, float] = {}
        self._owners: dict[str, str] = {}
        #: how many commits were made (for tests and benchmarks)
        self.commits = 0

    async def load(self, session_id: str) -> SessionRecord | None:
        check_session_id(session_id)
        entry = self._sessions.get(session_id)
        return None if entry is None else entry.record

    async def _commit(self, record: SessionRecord, events: Sequence[Mapping[str, Any]],
                      request: CommitRequest) -> tuple[int, ...]:
        sid = record.session_id
        entry = self._sessions.get(sid)
        held = None if entry is None else entry.lease
        plan = rules.plan_commit(
            sid, None if entry is None else rules.Stored(
                _version(entry), len(entry.events), None if held is None else held.owner,
                entry.epoch),
            version=record.version, expected_version=request.expected_version,
            lease=request.lease, events=len(events), consumed=request.consumed,
            release=request.release)
        if entry is None:
            entry = self._sessions[sid] = _Entry(record)
        else:
            if entry.record is not None and rewritten(entry.record, record):
                entry.turns.clear()  # as a durable store, whose history rows it replaces
            entry.record = record
        if record.next_timer_at is None:
            self._timers.pop(sid, None)
        else:
            self._timers[sid] = record.next_timer_at
        if request.keep_turn:
            entry.turns[record.turn] = record
        if plan.consumed:
            entry.queue = [q for q in entry.queue if q.id > plan.consumed]
        if plan.release:
            entry.lease = None
        entry.events.extend(StoredEvent(sid, seq, dict(data))
                            for seq, data in zip(plan.seqs, events, strict=True))
        self.commits += 1
        return plan.seqs

    async def turn_record(self, session_id: str, turn: int) -> SessionRecord | None:
        check_session_id(session_id)
        entry = self._sessions.get(session_id)
        return None if entry is None else entry.turns.get(turn)

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

    async def sessions_page(self, page: SessionsPage) -> tuple[SessionSummary, ...]:
        """Sorted here (a dict has no index: the memory store is for one process and
        tests, not for millions of sessions)."""
        rows = [s for s in await self.sessions()
                if (page.owner is None or self._owners.get(s.session_id) == page.owner)
                and (page.workflow is None or s.workflow == page.workflow)
                and (page.status is None or s.status == page.status)
                and (page.before is None or (s.updated_at, s.session_id) < page.before)]
        rows.sort(key=lambda s: (s.updated_at, s.session_id), reverse=True)
        return tuple(rows[:page.limit])

    async def delete(self, session_id: str) -> bool:
        check_session_id(session_id)
        entry = self._sessions.pop(session_id, None)
        for key in [k for k in self._keys if k[0] == session_id]:
            del self._keys[key]
        self._cancels.pop(session_id, None)
        self._timers.pop(session_id, None)
        self._owners.pop(session_id, None)
        owner = capture_owner(session_id) + "-"
        for reference in [r for r in self._captures if r.startswith(owner)]:
            del self._captures[reference]
        return entry is not None and entry.record is not None

    async def claim_key(self, session_id: str, key: str, fingerprint: str, now: float,
                        ttl: float) -> str | None:
        check_session_id(session_id)
        held = self._keys.get((session_id, key))
        if rules.key_claimed(held, now, ttl):
            self._keys[(session_id, key)] = (fingerprint, now)
            return None
        assert held is not None
        return held[0]

    async def drop_key(self, session_id: str, key: str, fingerprint: str) -> None:
        check_session_id(session_id)
        held = self._keys.get((session_id, key))
        if held is not None and held[0] == fingerprint:
            del self._keys[(session_id, key)]

    async def request_cancel(self, session_id: str, now: float) -> None:
        self._cancels[check_session_id(session_id)] = now

    async def due_timers(self, now: float, limit: int) -> tuple[tuple[str, float], ...]:
        due = sorted((at, sid) for sid, at in self._timers.items() if at <= now)
        return tuple((sid, at) for at, sid in due[:limit])

    async def due_sessions(self, now: float, limit: int, *,
                           after: tuple[float, str] | None = None,
                           workflows: Sequence[str] | None = None
                           ) -> tuple[DueSession, ...]:
        """Sorted here (a dict has no index: see :meth:`sessions_page`)."""
        page: list[DueSession] = []
        for at, sid in sorted((at, sid) for sid, at in self._timers.items() if at <= now):
            if len(page) >= limit:
                break
            entry = self._sessions.get(sid)
            record = None if entry is None else entry.record
            if record is None or (after is not None and (at, sid) <= after) or (
                    workflows is not None and record.workflow not in workflows):
                continue
            page.append(DueSession(sid, at, record, entry.lease if entry else None))
        return tuple(page)

    async def take_cancels(self, session_ids: Sequence[str]) -> dict[str, float]:
        return {s: self._cancels.pop(s) for s in session_ids if s in self._cancels}

    async def claim_owner(self, session_id: str, owner: str) -> str:
        return self._owners.setdefault(check_session_id(session_id), owner)

    async def owner(self, session_id: str) -> str | None:
        return self._owners.get(check_session_id(session_id))

    async def acquire(self, session_id: str, owner: str, ttl: float, now: float, *,
                      force: bool = False, replacing: Lease | None = None) -> Lease | None:
        check_session_id(session_id)
        entry = self._sessions.get(session_id)
        if entry is None:
            entry = self._sessions[session_id] = _Entry(None)
        held = entry.lease
        epoch = rules.take_lease(None if held is None else held.owner,
                                 None if held is None else held.expires, entry.epoch,
                                 owner=owner, now=now, force=force, replacing=replacing)
        if epoch is None:
            return None
        entry.epoch = epoch
        entry.lease = Lease(session_id, owner, epoch, now + ttl, _version(entry))
        return entry.lease

    async def release(self, lease: Lease) -> None:
        check_session_id(lease.session_id)
        entry = self._sessions.get(lease.session_id)
        if entry is not None and entry.lease is not None and rules.is_lease(
                entry.lease.owner, entry.lease.epoch, lease):
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

    async def put_capture(self, data: bytes, *, session_id: str | None = None) -> str:
        reference = capture_reference(bytes(data), session_id)
        self._captures.setdefault(reference, bytes(data))
        return reference

    async def get_capture(self, reference: str) -> bytes | None:
        return self._captures.get(reference)

    async def read_capture(self, reference: str, offset: int, limit: int
                           ) -> tuple[bytes, int] | None:
        data = self._captures.get(reference)
        if data is None:
            return None
        return data[max(offset, 0):max(offset, 0) + max(limit, 0)], len(data)


def rewritten(before: SessionRecord, after: SessionRecord) -> bool:
    """Whether ``after``'s history does not extend ``before``'s (a compaction or a
    rewind replaced it): the rule by which a durable store rewrites its history rows
    (``codec.encode``), and drops the records of past turns' ends with them. Cheap: the
    histories share their nodes, so the walk stops where they meet."""
    old, new = before.continuation, after.continuation
    return not (len(new.messages) >= len(old.messages)
                and new.messages.starts_with(old.messages)
                and len(new.marks) >= len(old.marks))


def _version(entry: _Entry) -> int:
    return 0 if entry.record is None else entry.record.version
