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

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from phaseflow.errors import PhaseflowError
from phaseflow.turn.continuation import Continuation
from phaseflow.turn.execution import TurnExecution


class StoreError(PhaseflowError):
    """A store cannot do what was asked (bad contents, unreachable, misuse)."""


class StoreConflict(StoreError):
    """Another writer committed first: the session's version moved on. The session must
    reopen from the store before it writes again (it never overwrites)."""


class StoreFenced(StoreConflict):
    """The writer's lease was taken over (its epoch is stale): its writes are refused."""


class InvalidSessionId(StoreError):
    """A session id no store can keep (see :func:`check_session_id`): refused before any
    store is touched, the same way by every store."""


#: the longest session id, in bytes of UTF-8 (a PostgreSQL index entry holds at most
#: 2,704 bytes; an id far below it leaves room for the keys it is part of)
MAX_SESSION_ID_BYTES = 1024


def check_session_id(session_id: object) -> str:
    """``session_id`` when every store can keep it: a non-empty string of Unicode text
    (no lone surrogate, which has no UTF-8 form), without NUL (which PostgreSQL text
    cannot hold), of at most :data:`MAX_SESSION_ID_BYTES` bytes in UTF-8. Otherwise
    :class:`InvalidSessionId` naming the id and what is wrong: the one rule every store
    applies on entry, so an id is accepted or refused alike by all of them."""
    if not isinstance(session_id, str) or not session_id:
        raise InvalidSessionId(f"a session id is a non-empty string, not {session_id!r}")
    if session_id.isascii():
        size = len(session_id)
    else:
        try:
            size = len(session_id.encode("utf-8"))
        except UnicodeEncodeError as exc:
            raise InvalidSessionId(
                f"session id {session_id!r} is not text a database can store: it holds a "
                f"lone surrogate ({session_id[exc.start]!r} at index {exc.start})") from None
    if "\x00" in session_id:
        raise InvalidSessionId(f"session id {session_id!r} is not text a database can "
                               "store: it holds a NUL character")
    if size > MAX_SESSION_ID_BYTES:
        raise InvalidSessionId(f"a session id is at most {MAX_SESSION_ID_BYTES} bytes of "
                               f"UTF-8; this one has {size} ({session_id[:40]!r}...)")
    return session_id


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
    (plain JSON), ``core`` the session core's own small JSON (its status and turn, the
    open tool group, the request count of the turn, ...). ``version`` increases by one
    with every commit.

    ``status``, ``turn`` and ``phase`` (and ``workflow``, when the machine names one) are
    what ``core`` and ``machine`` say, repeated so that a store can list sessions without
    reading their snapshots: one truth, checked when a record is made
    (:func:`record_problem`), so a record that says two things cannot exist.
    """

    session_id: str
    workflow: str
    workflow_hash: str
    version: int
    status: str
    phase: str
    turn: int
    execution: TurnExecution
    continuation: Continuation
    machine: Mapping[str, Any]
    state: Mapping[str, Any]
    core: Mapping[str, Any]
    created_at: float = 0.0
    updated_at: float = 0.0
    #: when the session's next timer is due (wall clock seconds; None: no timer ahead),
    #: kept in a column of its own so a store finds due sessions without reading them
    next_timer_at: float | None = None

    def __post_init__(self) -> None:
        check_session_id(self.session_id)
        problem = record_problem(self.status, self.phase, self.turn, self.workflow,
                                 self.machine, self.core)
        if problem is not None:
            name, said, truth, source = problem
            raise StoreError(f"session {self.session_id!r}: the record's {name} is {said!r} "
                             f"where its {source} says {truth!r}")


def record_problem(status: object, phase: object, turn: object, workflow: object,
                   machine: object, core: object) -> tuple[str, object, object, str] | None:
    """Which of a session's ``status``, ``phase``, ``turn`` and ``workflow`` is not what
    its ``core`` and ``machine`` say, as ``(field, value, what they say, which of them)``;
    ``None`` when all are. The rule that makes them one truth: a record is made only when
    it holds, and a store reading a row back applies it to the row's columns, so a column
    edited by hand is damage, not another session."""
    said_core = core if isinstance(core, Mapping) else {}
    said_machine = machine if isinstance(machine, Mapping) else {}
    for name, value, truth, source in (
            ("status", status, said_core.get("status"), "core"),
            ("turn", turn, said_core.get("turn"), "core"),
            ("phase", phase, said_machine.get("phase"), "machine")):
        if type(value) is not type(truth) or value != truth:
            return name, value, truth, source
    named = said_machine.get("workflow")
    if named is not None and (type(named) is not type(workflow) or named != workflow):
        return "workflow", workflow, named, "machine"
    return None


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """One persisted event: its place in the session's log (``seq``, from 1) and its
    JSON form (``type``, ``turn``, ``at`` and the event's own fields)."""

    session_id: str
    seq: int
    data: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class SessionSummary:
    """A stored session as listed: what opening it gives (a durable store checks the
    row's columns against the snapshot they repeat). ``problem``: ``None``, or why the
    session cannot be read back, naming it (a damaged row); the other fields are then
    empty (``""``, ``0``): nothing such a row says is to be trusted."""

    session_id: str
    workflow: str
    status: str
    phase: str
    turn: int
    version: int
    updated_at: float
    problem: str | None = None


@dataclass(frozen=True, slots=True)
class DueSession:
    """A session whose timer is due, as :meth:`Store.due_sessions` reads it: its record
    (what opening it gives, so firing its timer reads nothing more) and its lease as
    stored (expired or not; ``None``: nobody holds it). ``problem``: ``None``, or why
    the session cannot be read back, naming it (a damaged row); ``record`` is then
    ``None`` (a damaged row hides no other session of the page)."""

    session_id: str
    due_at: float
    record: SessionRecord | None
    lease: Lease | None = None
    problem: str | None = None

    @property
    def key(self) -> tuple[float, str]:
        """Its place in the index of timers: the ``after`` of the page that follows."""
        return self.due_at, self.session_id


@dataclass(frozen=True, slots=True)
class SessionsPage:
    """What :meth:`Store.sessions_page` is asked for: at most ``limit`` sessions, most
    recently updated first (by ``updated_at``, then id, both descending), those before
    ``before`` (the ``(updated_at, id)`` of the last one of the previous page; ``None``:
    from the newest), of ``owner`` only (``None``: anyone's), of ``workflow`` and in
    ``status`` when given."""

    limit: int
    before: tuple[float, str] | None = None
    owner: str | None = None
    workflow: str | None = None
    status: str | None = None


class Store(Protocol):
    """Where sessions live. Every method is a coroutine; a store that does blocking I/O
    runs it off the event loop. See :mod:`phaseflow.stores.base`."""

    async def load(self, session_id: str) -> SessionRecord | None:
        """The stored record, or ``None`` for a session never committed."""
        ...

    async def commit(
        self, record: SessionRecord, events: Sequence[Mapping[str, Any]], *,
        expected_version: int, lease: Lease | None = None, consumed: int = 0,
        release: bool = False, keep_turn: bool = False,
    ) -> tuple[int, ...]:
        """Store ``record`` (whose ``version`` is ``expected_version + 1``) and append
        ``events``, atomically; the events' ``seq`` numbers. :class:`StoreConflict` when
        the stored version is not ``expected_version`` (0: the session must not exist);
        :class:`StoreFenced` when ``lease`` is given and is no longer the session's.
        ``consumed``: queued messages up to this id were taken into the record, and are
        removed in the same transaction. ``release``: give ``lease`` up in the same
        transaction (a turn's last commit: no separate write to let the turn go).
        ``keep_turn``: ``record`` is the end of turn ``record.turn`` (the commit that
        carries its ``turn_finished``): keep it, in the same transaction, as that turn's
        record (:meth:`turn_record`). A commit whose history does not extend the stored
        one (a compaction or a rewind rewrote it) drops the records of earlier turns:
        their history is no longer the session's."""
        ...

    async def turn_record(self, session_id: str, turn: int) -> SessionRecord | None:
        """The record kept at the end of turn ``turn`` (a commit with ``keep_turn``), its
        history exactly the session's at that point; ``None`` when the store keeps none
        (the turn has not ended, never did, or ended before the store kept such records
        or before the history was rewritten). What a fork starts from."""
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
        """Every stored session, most recently updated first; a damaged one is listed
        too, with its ``problem`` (so one damaged row hides no other session)."""
        ...

    async def sessions_page(self, page: SessionsPage) -> tuple[SessionSummary, ...]:
        """One page of the stored sessions (:class:`SessionsPage`), read from an index
        (the cost does not grow with the number of sessions stored); a damaged one is
        listed with its ``problem``, as :meth:`sessions` lists it."""
        ...

    async def delete(self, session_id: str) -> bool:
        """Remove a session, its events, its turns' records, its request keys, its
        cancel request and its owner; whether it existed."""
        ...

    async def claim_key(self, session_id: str, key: str, fingerprint: str, now: float,
                        ttl: float) -> str | None:
        """Claim a request's ``Idempotency-Key`` for the session, atomically: ``None``
        when this caller claimed it (no claim of it, or one older than ``ttl`` seconds),
        else the fingerprint of the request that claimed it first (every worker of the
        store sees the same claims, so of two racing claims exactly one wins)."""
        ...

    async def drop_key(self, session_id: str, key: str, fingerprint: str) -> None:
        """Let a claim go (its request was refused and stored nothing: a retry runs)."""
        ...

    async def request_cancel(self, session_id: str, now: float) -> None:
        """Ask the worker that runs the session's turn to cancel it (it reads the
        request with :meth:`take_cancels`)."""
        ...

    async def take_cancels(self, session_ids: Sequence[str]) -> dict[str, float]:
        """The cancel requests of ``session_ids`` (session id: when it was asked),
        removed as they are read."""
        ...

    async def due_timers(self, now: float, limit: int) -> tuple[tuple[str, float], ...]:
        """Up to ``limit`` sessions whose next timer is due at ``now`` (wall clock), soonest
        first, as (session id, deadline): read from the store's index of deadlines, never
        by reading every session."""
        ...

    async def due_sessions(self, now: float, limit: int, *,
                           after: tuple[float, str] | None = None,
                           workflows: Sequence[str] | None = None
                           ) -> tuple[DueSession, ...]:
        """One page of the sessions whose next timer is due at ``now``, with their
        records, in one read (never a read per session): at most ``limit``, in the
        index's order (deadline, then id), those after ``after`` (the :attr:`DueSession.key`
        of the last one of the previous page; ``None``: from the soonest), of
        ``workflows`` only when given. A damaged session is listed with its
        ``problem``."""
        ...

    async def claim_owner(self, session_id: str, owner: str) -> str:
        """Make ``owner`` the session's owner unless it has one: the owner it has now."""
        ...

    async def owner(self, session_id: str) -> str | None:
        """The identity the session belongs to (``None``: nobody's, made without an
        identity)."""
        ...

    async def put_capture(self, data: bytes, *, session_id: str | None = None) -> str:
        """Keep a tool's full output; its reference (the SHA-256 of the bytes: stored once
        however often it is put). With ``session_id`` the capture is that session's
        (:func:`capture_reference`): it goes when the session is deleted."""
        ...

    async def get_capture(self, reference: str) -> bytes | None:
        ...

    async def read_capture(self, reference: str, offset: int, limit: int
                           ) -> tuple[bytes, int] | None:
        """At most ``limit`` bytes of a capture from byte ``offset``, and the capture's
        whole size; ``None`` when there is no such capture. Reads only that range (a
        read near the end of a large capture costs what its bytes cost)."""
        ...


def capture_owner(session_id: str) -> str:
    """The prefix of every capture reference of ``session_id`` (16 hex digits of its
    SHA-256): what a session's deletion removes, and what says a reference is its."""
    return hashlib.sha256(session_id.encode()).hexdigest()[:16]


def capture_reference(data: bytes, session_id: str | None) -> str:
    """A capture's reference: the SHA-256 of its bytes, after its session's
    :func:`capture_owner` prefix when it belongs to one."""
    digest = hashlib.sha256(data).hexdigest()
    return digest if session_id is None else f"{capture_owner(session_id)}-{digest}"


#: a capture larger than this is kept in chunks of this many bytes, under its reference
#: with ``.NNNNNN`` after it (a read fetches only the chunks of its range)
CAPTURE_CHUNK = 256 * 1024


def chunk_key(reference: str, index: int) -> str:
    """The key of chunk ``index`` of a chunked capture (ordered as the chunks are)."""
    return f"{reference}.{index:06d}"


def chunk_index(key: str) -> int:
    return int(key.rpartition(".")[2])
