"""The durable stores' commit and lease, each written once as a generator of I/O steps
that every backend drives (psycopg's ``generators.py`` and ``waiting.py``: one protocol,
two drivers).

An operation here reads what its rule needs, decides with :mod:`phaseflow.stores.rules`,
and says what to write, in order, as :class:`Step` values it ``yield``\\ s; the value
sent back is what the step read (``None`` for a write). It does no I/O and knows no
SQL. A backend's driver turns each step into its own statement: SQLite's on the store's
thread (:func:`drive`), PostgreSQL's in one pipeline on the event loop
(:func:`drive_async`), where a step whose answer is not read is only queued, so the
writes go out with the ``COMMIT``; a read the backend may answer with a guess behind a
guard (:attr:`ReadCommit.expected`) makes a commit one round trip there. What was
written twice before (the order of a commit's writes, the session row's values, the
lease's read-decide-write) now stands here once; the backends keep their statements,
their transactions and their connections.

A step a backend does in its own way is one step here, however many statements it
takes there: :class:`LockLease` is a select then an insert of the placeholder on
SQLite (the write lock is held already) and an upsert then a ``SELECT ... FOR UPDATE``
on PostgreSQL.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from phaseflow.stores import codec, rules
from phaseflow.stores.base import (
    Lease,
    SessionRecord,
    StoreConflict,
    StoreError,
    check_session_id,
)

T = TypeVar("T")


@dataclass(slots=True)
class ReadCommit:
    """Read (and, where the database can, lock) the session's row as
    :data:`codec.COMMIT_READ`; the answer: the row, or ``None``.

    ``expected``: the row as the read would give it if nobody else wrote the session
    since this store's last commit (:func:`expected_commit_row`). A backend for which
    a read costs a round trip may answer with it instead of reading, provided it queues
    a guard that locks the row and aborts the transaction unless the row holds exactly
    that (its version and counts, and its lease where ``lease_owner`` is not ``None``:
    a commit without a lease reads none), so nothing is written on a wrong guess; the
    driver then raises :class:`Mispredicted`, and the operation runs again with a
    read. Either way the rule decides on the row's values and nothing else."""

    session_id: str
    expected: tuple[Any, ...] | None = None


@dataclass(slots=True)
class DropHistory:
    """Delete the session's message and mark rows and its turns' records (a commit that
    rewrites the history: those records name rows that are gone)."""

    session_id: str


@dataclass(slots=True)
class Append:
    """Insert ``rows`` into ``table`` (``messages``, ``marks`` or ``events``) at
    positions ``start, start + 1, ...`` of its ``key`` column."""

    table: str
    key: str
    session_id: str
    start: int
    rows: tuple[str, ...]


@dataclass(slots=True)
class CreateSession:
    """Insert the session's row: ``values`` in the order of :data:`codec.SESSION_COLUMNS`,
    then its ``created_at``. The answer: whether the row was inserted (``False``: another
    writer created it since it was read)."""

    session_id: str
    values: tuple[Any, ...]
    created_at: float


@dataclass(slots=True)
class UpdateSession:
    """Update the session's row with ``values`` (as :class:`CreateSession`'s); a lease's
    placeholder gets ``created_at`` (``placeholder``), and ``release`` clears the lease
    columns, in the same statement."""

    session_id: str
    values: tuple[Any, ...]
    placeholder: bool
    created_at: float
    release: bool


@dataclass(slots=True)
class Consume:
    """Delete the session's queued messages up to id ``upto``."""

    session_id: str
    upto: int


@dataclass(slots=True)
class KeepTurn:
    """Insert or replace a ``turns`` row: ``values`` in the order of
    :data:`codec.TURN_COLUMNS`."""

    values: tuple[Any, ...]


@dataclass(slots=True)
class SetTimer:
    """Write the session's ``timers`` row: its next timer's deadline, or no row
    (``due_at`` None: no timer ahead)."""

    session_id: str
    due_at: float | None


@dataclass(slots=True)
class LockLease:
    """Read the session's lease columns and version (``lease_owner, lease_expires,
    lease_epoch, version``), holding the row until the transaction ends, creating the
    lease's placeholder row (version 0, stamped ``now``) when there is none. The answer:
    the row, or ``None`` when the session was deleted meanwhile. ``expected``: the row
    as this store left it when its last commit let the lease go
    (:func:`expected_lease_row`), which a backend may answer with, as
    :attr:`ReadCommit.expected` says (the guard checks all four columns)."""

    session_id: str
    now: float
    expected: tuple[Any, ...] | None = None


@dataclass(slots=True)
class SetLease:
    """Write the lease columns of the session's row."""

    session_id: str
    owner: str
    expires: float
    epoch: int


class Mispredicted(StoreError):
    """A guard found the row other than the step's ``expected`` said (another writer
    moved the session on, or took its lease): the transaction was rolled back and
    nothing was written. :class:`~phaseflow.stores.durable.DurableStore` runs the
    operation again with a read, where the rule decides on what is there; it never
    reaches a caller."""


# The steps are not frozen: one lives for a single send, and a frozen dataclass's
# ``__init__`` (``object.__setattr__`` per field) costs about four times a plain one's,
# six times a commit (measured: ~1.7 against ~0.4 microseconds each).
Step = (ReadCommit | DropHistory | Append | CreateSession | UpdateSession | Consume
        | KeepTurn | LockLease | SetLease | SetTimer)

#: an operation: steps out, what each read in, its result at the end
Steps = Generator[Step, Any, T]


@dataclass(frozen=True, slots=True)
class CommitRequest:
    """:meth:`~phaseflow.stores.base.Store.commit`'s options, as one value."""

    expected_version: int
    lease: Lease | None = None
    consumed: int = 0
    release: bool = False
    keep_turn: bool = False


class CommitEntry(ABC):
    """:meth:`~phaseflow.stores.base.Store.commit` as every store takes it, written once:
    the session id checked (:func:`check_session_id`, the same refusal by every store),
    the options gathered into a :class:`CommitRequest` for the store's own ``_commit``."""

    async def commit(
        self, record: SessionRecord, events: Sequence[Mapping[str, Any]], *,
        expected_version: int, lease: Lease | None = None, consumed: int = 0,
        release: bool = False, keep_turn: bool = False,
    ) -> tuple[int, ...]:
        check_session_id(record.session_id)
        return await self._commit(record, events, CommitRequest(
            expected_version, lease, consumed, release, keep_turn))

    @abstractmethod
    async def _commit(self, record: SessionRecord, events: Sequence[Mapping[str, Any]],
                      request: CommitRequest) -> tuple[int, ...]:
        """Store ``record`` and ``events`` as :meth:`commit` says."""


def commit(record: SessionRecord, events: Sequence[Mapping[str, Any]],
           known: codec.Known | None, request: CommitRequest, *, predict: bool = True
           ) -> Steps[tuple[tuple[int, ...], codec.Known]]:
    """A durable commit: the record and events encoded (now, before any step: a value
    that is not JSON is refused before a transaction begins), the row read (or, with
    ``predict``, expected: :attr:`ReadCommit.expected`), the commit rule applied, then
    the writes in one order for every backend. The result: the events' ``seq`` numbers
    and what the store then holds of the session (to remember once the transaction
    committed, never before: a commit that fails leaves what the store knew
    unchanged)."""
    sid = record.session_id
    written, after = codec.encode(record, known)
    expected = expected_commit_row(known, request) if predict else None
    return _commit(record, written, after, tuple(codec.encode_events(sid, events)), request,
                   expected, codec.timer_changed(known, record.next_timer_at))


def expected_commit_row(known: codec.Known | None, request: CommitRequest
                        ) -> tuple[Any, ...] | None:
    """The row (:data:`codec.COMMIT_READ`) a commit finds when nobody else wrote the
    session since this store's last commit of it: the version the writer expects, the
    counts this store wrote, the lease the writer holds (no lease asked: the rule
    reads none, and the guess names none). ``None`` where there is nothing to go by: a
    session this store has not committed since it was loaded, or its first commit
    (the row may be a lease's placeholder, or missing)."""
    if known is None or known.events is None or request.expected_version < 1:
        return None
    lease = request.lease
    return (request.expected_version, len(known.messages), known.marks, known.events,
            0 if lease is None else lease.epoch, None if lease is None else lease.owner)


def expected_lease_row(known: codec.Known | None) -> tuple[Any, ...] | None:
    """The lease columns and version (as :class:`LockLease` reads them) of a session
    whose lease this store's last commit let go, when nobody wrote it since: no holder,
    that lease's epoch, the version committed (``None``: the last commit did not)."""
    if known is None or known.released is None or known.version is None:
        return None
    return (None, None, known.released, known.version)


def _commit(record: SessionRecord, written: codec.Written, after: codec.Known,
            event_rows: tuple[str, ...], request: CommitRequest,
            expected: tuple[Any, ...] | None, timer: bool = True
            ) -> Steps[tuple[tuple[int, ...], codec.Known]]:
    sid = record.session_id
    plan = rules.plan_commit(
        sid, codec.stored(sid, (yield ReadCommit(sid, expected))), version=record.version,
        expected_version=request.expected_version, lease=request.lease,
        events=len(event_rows), history=written.history, consumed=request.consumed,
        release=request.release)
    values = (record.workflow, record.workflow_hash, record.version, record.status,
              record.phase, record.turn, written.snapshot, plan.message_count,
              plan.mark_count, plan.event_count, record.updated_at)
    if plan.create:
        if not (yield CreateSession(sid, values, record.created_at)):
            raise rules.lost_creation(sid)
    else:
        yield UpdateSession(sid, values, plan.placeholder, record.created_at, plan.release)
    if plan.rewrite:
        yield DropHistory(sid)
    for table, key, start, rows in (("messages", "idx", written.message_from, written.messages),
                                    ("marks", "idx", written.mark_from, written.marks),
                                    ("events", "seq", plan.event_from, event_rows)):
        if rows:
            yield Append(table, key, sid, start, rows)
    if plan.consumed:
        yield Consume(sid, plan.consumed)
    if request.keep_turn:
        yield KeepTurn(codec.turn_values(record, written, plan.message_count,
                                         plan.mark_count))
    if timer and not (plan.create and record.next_timer_at is None):
        # (a session's first commit finds no row to take out of the index)
        yield SetTimer(sid, record.next_timer_at)
    released = request.lease.epoch if plan.release and request.lease is not None else None
    return plan.seqs, codec.Known(after.messages, after.marks, plan.event_count,
                                  record.version, released, record.next_timer_at)


def acquire(session_id: str, owner: str, ttl: float, now: float, *, force: bool,
            replacing: Lease | None, expected: tuple[Any, ...] | None = None
            ) -> Steps[Lease | None]:
    """A lease taken: the row read and held (made when missing), or ``expected``
    (:attr:`LockLease.expected`), the lease rule (:func:`rules.take_lease`) applied to
    its columns, the lease written when taken."""
    row = yield LockLease(session_id, now, expected)
    if row is None:
        raise StoreConflict(f"session {session_id!r} was deleted while its lease was "
                            "being taken")
    (version,) = codec.counts(session_id, row[3:])
    epoch = rules.take_lease(*codec.lease(session_id, *row[:3]), owner=owner, now=now,
                             force=force, replacing=replacing)
    if epoch is None:
        return None
    yield SetLease(session_id, owner, now + ttl, epoch)
    return Lease(session_id, owner, epoch, now + ttl, version)


def drive(steps: Steps[T], do: Callable[[Step], Any]) -> T:
    """Run an operation with a blocking ``do`` (one step, its answer)."""
    try:
        step = next(steps)
        while True:
            step = steps.send(do(step))
    except StopIteration as done:
        result: T = done.value
        return result


async def drive_async(steps: Steps[T], do: Callable[[Step], Awaitable[Any]]) -> T:
    """Run an operation with a coroutine ``do`` (one step, its answer)."""
    try:
        step = next(steps)
        while True:
            step = steps.send(await do(step))
    except StopIteration as done:
        result: T = done.value
        return result
