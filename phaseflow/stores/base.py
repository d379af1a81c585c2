"""What a session persists, and the protocol every store implements.

A session commits at the points ``docs/sessions.md`` lists (a turn started, a tool group
admitted, its results, a turn boundary, the turn's end, an approval asked or resolved).
Each commit is one call of :meth:`Store.commit`: the session's new :class:`SessionRecord`
and the events that happened since the last commit, applied together or not at all, and
only if the stored version is still the one the session last saw (compare-and-set), so
two writers can never both win.

The record carries the turn core's own immutable values, not their JSON: a store decides
how to encode them. The memory store keeps the values themselves (nothing to encode, and
the cost of a commit does not grow with the conversation); a durable store encodes them,
storing the history incrementally (``Continuation.messages`` is a persistent list whose
new tail is ``messages.after(stored_length)``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from phaseflow.errors import PhaseflowError
from phaseflow.turn.continuation import Continuation
from phaseflow.turn.execution import TurnExecution
from phaseflow.turn.progress import TurnProgress


class StoreError(PhaseflowError):
    """A store cannot do what was asked (bad contents, unreachable, misuse)."""


class StoreConflict(StoreError):
    """Another writer committed first: the session's version moved on. The session must
    reopen from the store before it writes again (it never overwrites)."""


class StoreFenced(StoreConflict):
    """The writer's lease was taken over (its epoch is stale): its writes are refused."""


@dataclass(frozen=True, slots=True)
class Lease:
    """A worker's right to run a session's turns: ``owner`` (a worker id), ``epoch``
    (raised every time the lease changes hands: a fencing token) and ``expires`` (wall
    clock seconds)."""

    session_id: str
    owner: str
    epoch: int
    expires: float
    #: the session's stored version when ``acquire`` took the lease (0: never committed;
    #: -1: not known), so the worker knows without another read whether someone else
    #: committed since it last looked
    version: int = field(default=-1, compare=False)


@dataclass(frozen=True, slots=True)
class QueuedMessage:
    """A message stored for a session whose turn another worker holds."""

    id: int
    data: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """Everything needed to reopen a session exactly where it stood.

    ``machine`` is the phase machine's snapshot (plain JSON), ``state`` the session state
    (plain JSON), ``core`` the session core's own small JSON (the open tool group, the
    request count of the turn, ...). ``version`` increases by one with every commit.
    """

    session_id: str
    workflow: str
    workflow_hash: str
    version: int
    status: str
    phase: str
    turn: int
    execution: TurnExecution
    progress: TurnProgress
    continuation: Continuation
    machine: Mapping[str, Any]
    state: Mapping[str, Any]
    core: Mapping[str, Any] = field(default_factory=dict)
    created_at: float = 0.0
    updated_at: float = 0.0


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """One persisted event: its place in the session's log (``seq``, from 1) and its
    JSON form (``type``, ``turn``, ``at`` and the event's own fields)."""

    session_id: str
    seq: int
    data: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class SessionSummary:
    session_id: str
    workflow: str
    status: str
    phase: str
    turn: int
    version: int
    updated_at: float


class Store(Protocol):
    """Where sessions live. Every method is a coroutine; a store that does blocking I/O
    runs it off the event loop. See :mod:`phaseflow.stores.base`."""

    async def load(self, session_id: str) -> SessionRecord | None:
        """The stored record, or ``None`` for a session never committed."""
        ...

    async def commit(
        self, record: SessionRecord, events: Sequence[Mapping[str, Any]], *,
        expected_version: int, lease: Lease | None = None, consumed: int = 0,
        release: bool = False,
    ) -> tuple[int, ...]:
        """Store ``record`` (whose ``version`` is ``expected_version + 1``) and append
        ``events``, atomically; the events' ``seq`` numbers. :class:`StoreConflict` when
        the stored version is not ``expected_version`` (0: the session must not exist);
        :class:`StoreFenced` when ``lease`` is given and is no longer the session's.
        ``consumed``: queued messages up to this id were taken into the record, and are
        removed in the same transaction. ``release``: give ``lease`` up in the same
        transaction (a turn's last commit: no separate write to let the turn go)."""
        ...

    async def acquire(self, session_id: str, owner: str, ttl: float, now: float, *,
                      force: bool = False, replacing: Lease | None = None) -> Lease | None:
        """Take (or renew) the lease of ``session_id`` for ``owner`` until ``now + ttl``:
        when nobody holds it, it expired, or ``owner`` holds it already (renewed, same
        epoch); ``force`` takes it whatever; ``replacing`` takes it also while it is still
        exactly that lease (same owner and epoch: a holder known to be gone), so two
        workers replacing the same holder cannot both win. A lease that changes hands gets
        a new epoch. ``None`` when another owner holds an unexpired lease."""
        ...

    async def release(self, lease: Lease) -> None:
        """Give the lease up (nothing happens if it is no longer ``lease``)."""
        ...

    async def lease(self, session_id: str) -> Lease | None:
        """The session's lease as stored (its holder, epoch and expiry, expired or not);
        ``None`` when nobody holds it. A read: what a worker that could not take the
        lease tells its user, and how it recognises a holder that is gone."""
        ...

    async def enqueue(self, session_id: str, data: Mapping[str, Any]) -> int:
        """Store a message for the session's next turn; its id (increasing)."""
        ...

    async def queued(self, session_id: str) -> tuple[QueuedMessage, ...]:
        """The messages waiting for the session, oldest first."""
        ...

    async def version(self, session_id: str) -> int:
        """The stored version of the session (0: never committed): a cheap check of
        whether another worker committed since."""
        ...

    async def events(self, session_id: str, after: int = 0) -> tuple[StoredEvent, ...]:
        """The session's events with ``seq > after``, in order."""
        ...

    async def sessions(self) -> tuple[SessionSummary, ...]:
        """Every stored session, most recently updated first."""
        ...

    async def delete(self, session_id: str) -> bool:
        """Remove a session and its events; whether it existed."""
        ...

    async def put_capture(self, data: bytes) -> str:
        """Keep a tool's full output; its reference (the SHA-256 of the bytes: stored once
        however often it is put)."""
        ...

    async def get_capture(self, reference: str) -> bytes | None:
        ...
