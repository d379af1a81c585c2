"""The stores' commit and lease rules, each written once: pure decisions that every
store (memory, SQLite, PostgreSQL) drives.

An operation reads what a rule needs (the session's row: its version, counts and
lease columns, or the memory store's entry), hands it to the rule, and carries out what
the rule decides: a :class:`CommitPlan` (which rows to write, from which positions, whether
the row is created, whether the queue is trimmed and the lease let go), the epoch of a
lease taken (:func:`take_lease`), or the error to raise (:class:`StoreConflict`,
:class:`StoreFenced`). The rules do no I/O and know no SQL; the stores know no rule.

Why plain functions, with the I/O around them in :mod:`phaseflow.stores.operations`:
a rule is a decision on what was read, testable without any store or driver, and the
memory store asks the same rules of its entry, which has no I/O to sequence. The
durable stores' sequence of reads and writes around a rule (psycopg's generator
protocol, one operation driven by each backend) is written once there; the one step
whose answer decides again, a PostgreSQL insert that finds the row created meanwhile,
has its own rule (:func:`lost_creation`).
"""

from __future__ import annotations

from dataclasses import dataclass

from phaseflow.stores.base import Lease, StoreConflict, StoreFenced


@dataclass(frozen=True, slots=True)
class Stored:
    """What a commit reads of the session before it writes (``None`` in its place: no
    row). ``message_count`` / ``mark_count``: the history rows a durable store holds
    (the memory store keeps values, so it passes 0 and never asks for history rows)."""

    version: int
    event_count: int
    lease_owner: str | None
    lease_epoch: int
    message_count: int = 0
    mark_count: int = 0


@dataclass(frozen=True, slots=True)
class History:
    """What a commit appends to the session's history: rows from ``message_from`` /
    ``mark_from`` (``codec.Written``'s), ``messages`` / ``marks`` of them, ``rewrite``:
    the store's copy is replaced rather than extended."""

    message_from: int = 0
    mark_from: int = 0
    messages: int = 0
    marks: int = 0
    rewrite: bool = False


@dataclass(frozen=True, slots=True)
class CommitPlan:
    """What a commit writes, as decided by :func:`plan_commit`.

    ``create``: no row yet (insert one); ``placeholder``: the row is a lease's
    placeholder (version 0), the session is created now (its ``created_at`` is set);
    otherwise the row is updated. ``rewrite``: delete the stored history rows first.
    ``seqs``: the numbers of the commit's events. ``message_count`` / ``mark_count`` /
    ``event_count``: the row's counts after the commit. ``consumed``: delete the queued
    messages up to this id (0: none). ``release``: clear the lease columns (the lease
    was checked to be the writer's)."""

    create: bool
    placeholder: bool
    rewrite: bool
    seqs: tuple[int, ...]
    message_count: int
    mark_count: int
    event_count: int
    consumed: int
    release: bool

    @property
    def event_from(self) -> int:
        """The ``seq`` of the commit's first event (its events are numbered on)."""
        return self.event_count - len(self.seqs) + 1


def plan_commit(session_id: str, stored: Stored | None, *, version: int,
                expected_version: int, lease: Lease | None, events: int,
                history: History = History(), consumed: int = 0,
                release: bool = False) -> CommitPlan:
    """The commit rule. Refused, in this order: :class:`StoreFenced` when ``lease`` is
    given and the row's lease is not that one (another owner or epoch: it was taken
    over, or let go); :class:`StoreConflict` when the stored version is not
    ``expected_version`` (0: the session must not exist), when the record's ``version``
    is not one more, or when the history is appended from positions other than the
    stored counts (another store object wrote this session since: what this one knew is
    no prefix any more, so it never appends to a history it did not see). Otherwise
    the plan of the writes, all in one transaction."""
    if lease is not None and (stored is None or not is_lease(stored.lease_owner,
                                                             stored.lease_epoch, lease)):
        raise StoreFenced(f"session {session_id!r}: the lease of {lease.owner!r} (epoch "
                          f"{lease.epoch}) was taken over; this write is refused")
    current = 0 if stored is None else stored.version
    if current != expected_version:
        raise StoreConflict(f"session {session_id!r}: stored version is {current}, this "
                            f"writer expected {expected_version}")
    if version != expected_version + 1:
        raise StoreConflict(f"session {session_id!r}: a commit must raise the version by one")
    message_count = 0 if stored is None else stored.message_count
    mark_count = 0 if stored is None else stored.mark_count
    event_count = 0 if stored is None else stored.event_count
    rewrite = history.rewrite or history.message_from != message_count or (
        history.mark_from != mark_count)
    if rewrite and (history.message_from or history.mark_from):
        raise StoreConflict(f"session {session_id!r}: the stored history is not the one "
                            "this writer extended")
    return CommitPlan(
        create=stored is None, placeholder=stored is not None and stored.version == 0,
        rewrite=rewrite, seqs=tuple(range(event_count + 1, event_count + 1 + events)),
        message_count=history.message_from + history.messages,
        mark_count=history.mark_from + history.marks, event_count=event_count + events,
        consumed=consumed, release=release and lease is not None)


def lost_creation(session_id: str) -> StoreConflict:
    """A first commit whose insert found the row there (another writer created the
    session between the read and the write): the conflict it raises."""
    return StoreConflict(f"session {session_id!r}: stored version is no longer 0, this "
                         "writer expected 0")


def take_lease(holder: str | None, expires: float | None, epoch: int, *, owner: str,
               now: float, force: bool = False, replacing: Lease | None = None) -> int | None:
    """The lease rule: the epoch of the lease ``owner`` takes, given the row's lease
    columns (``holder``, ``expires``, ``epoch``: the last epoch given, kept when the
    lease is let go); ``None`` when another owner holds an unexpired lease and neither
    ``force`` nor ``replacing`` (that very lease: same holder and epoch) overrides it.
    The owner's own unexpired lease is renewed with its epoch; a lease that changes hands
    (or is forced) gets the next epoch, the fencing token its old holder's writes are
    refused by."""
    live = holder is not None and expires is not None and expires > now
    if live and holder != owner and not force and not is_lease(holder, epoch, replacing):
        return None
    if live and holder == owner and not force:
        return epoch
    return epoch + 1


def is_lease(holder: str | None, epoch: int, lease: Lease | None) -> bool:
    """The row's lease (``holder``, ``epoch``) is ``lease``: the test of a release, of a
    replacement, and (in :func:`plan_commit`) of fencing."""
    return lease is not None and holder == lease.owner and epoch == lease.epoch


def key_claimed(held: tuple[str, float] | None, now: float, ttl: float) -> bool:
    """The rule of an ``Idempotency-Key``'s claim, given the claim stored for it
    (``(fingerprint, claimed at)``; ``None``: none): a new claim wins when there is
    none, or when the one there is older than ``ttl`` seconds (forgotten: the key may be
    used again). The durable stores apply it in their upsert's condition."""
    return held is None or held[1] < now - ttl


def cancel_applies(requested_at: float, started_at: float, *, skew: float = 1.0) -> bool:
    """Whether a cancel request read by the worker that runs a turn is for that turn:
    asked after the turn's task started (less ``skew`` seconds: the workers' clocks are
    not one), not a stale request of an earlier turn that ended before it was read."""
    return requested_at >= started_at - skew
