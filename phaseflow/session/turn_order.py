"""The exactly-once order of a session's turns under the lease, as a plan of commands.

Every way a turn starts (a message, a decision, a recovery, an interrupt) goes through
:func:`turn_order`, top to bottom:

1. **take the lease** - a store compare-and-set. A holder that is a killed process of
   this machine is replaced at once; an interrupt forces the lease (the old holder's
   late writes are then refused: ``StoreFenced``). Without the lease a message is stored
   in the session's queue for the holder (``busy="queue"`` or ``"steer"``), anything
   else is refused (:class:`SessionBusy`);
2. **catch up** - another worker may have committed since this process last did: the
   session is reopened from the store (the lease says the stored version, so this costs
   no read when nothing changed);
3. **finish a turn a stopped worker left** - the core's :class:`Resume` input decides
   what each interrupted call becomes;
4. **run the input** - the runner steps the pure core and performs its commands, in
   order: ``Persist`` (the admission) strictly before ``RunTools`` (the effect); the
   turn's last commit lets the lease go in the same transaction;
5. **drain the queue** - messages other workers stored meanwhile start the next turn
   (steering ones first); on a finished session they are recorded as unanswered;
6. **let go** - the lease is released if the last commit did not release it, also when
   the turn raised.

This module decides and performs nothing: :func:`turn_order` is a generator that yields
what must happen (:class:`TakeLease`, :class:`ReadQueue`, :class:`Run`, ...) and is sent
each answer, like psycopg's ``generators.py``. The one driver,
:class:`~phaseflow.session.driver.TurnDriver`, executes the commands against the store and
the runner; ``tests/session/test_turn_order.py`` walks the order with scripted answers,
with no store, runner or event loop.

The plan reads the session's values (never changes them) through ``now``: a
:class:`Now` of the core, the stored version this process last committed and whether the
last commit let the lease go.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from phaseflow.session.core import ResolutionRefused, check_resolution
from phaseflow.session.events import Event
from phaseflow.session.prompt_text import joined_content, unanswered
from phaseflow.session.refusals import SessionBusy, SessionFinished
from phaseflow.session.values import Core, Input, Interrupt, Resolve, Send
from phaseflow.stores.base import Lease, QueuedMessage
from phaseflow.turn.messages import Content, content_from_json

#: what a message does when a turn runs (double texting); see docs/sessions.md
Busy = Literal["queue", "reject", "steer", "interrupt"]
BUSY_MODES: tuple[str, ...] = get_args(Busy)


# --- what the plan reads ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Now:
    """The session's values as the plan may read them between commands."""

    core: Core
    #: the machine's current phase (named when a finished session refuses a message)
    phase: str
    #: the stored version this process's runner last committed (or opened)
    version: int
    #: the last commit let the lease go (a turn's last commit does)
    released: bool
    #: a timer's deadline has passed and no turn holds the session (session/timers.py)
    timer_due: bool = False


@dataclass(frozen=True, slots=True)
class Holder:
    """Who holds a lease this process could not take, and whether that holder is a
    process of this machine that is gone (then its lease is replaced at once)."""

    lease: Lease | None
    gone: bool


# --- the commands (answers in brackets) -----------------------------------------------


@dataclass(frozen=True, slots=True)
class TakeLease:
    """Take the session's lease [``Lease | None``]. ``force``: take it from a live
    holder (an interrupt); ``replacing``: the lease of a holder known to be gone."""

    force: bool = False
    replacing: Lease | None = None


@dataclass(frozen=True, slots=True)
class ReadHolder:
    """Read the lease another worker holds [:class:`Holder`]."""


@dataclass(frozen=True, slots=True)
class StoreMessage:
    """Store ``send`` in the session's queue for the worker that holds the turn [None]."""

    send: Send


@dataclass(frozen=True, slots=True)
class ReadQueue:
    """Read the messages stored in the session's queue [``tuple[QueuedMessage, ...]``]."""


@dataclass(frozen=True, slots=True)
class ReadVersion:
    """Read the session's stored version [``int``] (only when the lease did not say it)."""


@dataclass(frozen=True, slots=True)
class Hold:
    """A turn runs here under ``lease`` now: reopen the session from the store when
    ``reopen`` (another worker committed since), then let the runner's commits carry the
    lease [None]."""

    lease: Lease
    reopen: bool


@dataclass(frozen=True, slots=True)
class CommitNotes:
    """Commit the notes the door made on opening (a changed workflow), each on its own,
    before anything else runs [None; the events are the caller's]."""


@dataclass(frozen=True, slots=True)
class Message:
    """A user message that runs now (the driver gives it the phase view of the moment)."""

    content: Content
    kind: str = "follow_up"


@dataclass(frozen=True, slots=True)
class ResumeLeft:
    """Finish the turn a stopped worker left (the driver builds the core's ``Resume``
    with the phase view of the moment and the catalogue's idempotent tools)."""


@dataclass(frozen=True, slots=True)
class Run:
    """Drive the runner from ``input`` until the turn pauses or ends [None; events are
    the caller's]. ``feed``: only commit it (a message joining the turn, queued first).
    ``consumed``: the queued messages (up to this id) the next commit takes out of the
    store's queue, ``queued`` their data (for the observer's links)."""

    input: Input | Message | ResumeLeft
    feed: bool = False
    consumed: int = 0
    queued: tuple[Mapping[str, Any], ...] = field(default=())


@dataclass(frozen=True, slots=True)
class CommitEvents:
    """Commit ``events``, taking the queued messages up to ``consumed`` out of the
    store's queue [None; the events are the caller's]."""

    events: tuple[Event, ...]
    consumed: int = 0


@dataclass(frozen=True, slots=True)
class LetGo:
    """The turn is over here: release ``lease`` unless the last commit did [None]."""

    lease: Lease


Command = (TakeLease | ReadHolder | StoreMessage | ReadQueue | ReadVersion | Hold
           | CommitNotes | Run | CommitEvents | LetGo)
#: a plan: yields commands, is sent their answers
Plan = Generator[Command, Any, None]


# --- the order --------------------------------------------------------------------------


def check_open(core: Core, phase: str) -> None:
    """A finished session takes no more messages (:class:`SessionFinished`)."""
    if core.status == "finished":
        raise SessionFinished(
            f"session {core.session_id!r} has finished (phase {phase!r} is terminal); it "
            "takes no more messages")


def turn_order(first: Input | None, now: Callable[[], Now], *, busy: Busy,
               force: bool = False) -> Plan:
    """Run ``first`` (and what it leads to) holding the session's lease, then the
    messages other workers queued meanwhile; ``first`` None: only finish what a stopped
    worker left and drain the queue. ``first`` a timer's ``Send``: run only when the
    lease is free and the timer is still due once the session is caught up (never
    queued, never twice: the turn's commits move the deadline past it)."""
    lease: Lease | None = yield TakeLease(force=force)
    if lease is None:
        holder: Holder = yield ReadHolder()
        if holder.lease is not None and holder.gone:
            lease = yield TakeLease(replacing=holder.lease)
    if lease is None and isinstance(first, Interrupt):
        # An interrupt takes the turn over: the holder's late writes are fenced, and its
        # turn is cancelled here as it stood at its last commit.
        lease = yield TakeLease(force=True)
    if lease is None and _is_timer(first):
        return  # another worker holds the turn: its boundary, or its own tick, sees it
    if lease is None:
        sid = now().core.session_id
        if not (isinstance(first, Send) and busy in ("queue", "steer")):
            raise SessionBusy(f"session {sid!r}: another worker is running its turn")
        yield StoreMessage(first)
        # The holder may have looked at the queue for the last time before this message
        # was stored, and let the turn go since: when the turn is free now, this worker
        # takes it, so the message is never left behind.
        lease = yield TakeLease()
        if lease is None:
            return
        first = None
    while True:
        yield from _holding(lease, first, now)
        # A worker that found the turn taken may have stored its message after this
        # one's last look at the queue: answered now, when the turn is still free.
        if now().core.status not in ("idle", "failed", "finished"):
            return
        queued: tuple[QueuedMessage, ...] = yield ReadQueue()
        if not queued:
            return
        again: Lease | None = yield TakeLease()
        if again is None:
            return  # its holder looks at the queue before it lets the turn go
        lease, first = again, None


def _holding(lease: Lease, first: Input | None, now: Callable[[], Now]) -> Plan:
    """Steps 2 to 6 with the session's lease held. The lease is let go whatever happens
    (the driver throws a failed command's exception in here)."""
    try:
        stored = lease.version
        if stored < 0:  # the store could not say it with the lease: one cheap read
            stored = yield ReadVersion()
        yield Hold(lease, reopen=stored != now().version)  # 2.
        seen = now()
        core = seen.core
        if isinstance(first, Resolve):
            problem = check_resolution(core, first)
            if problem is not None:
                raise ResolutionRefused(f"session {core.session_id!r}: {problem}")
        if isinstance(first, Send | Interrupt) and not _is_timer(first):
            check_open(core, seen.phase)
        yield CommitNotes()
        if now().core.status in ("running", "cancelling") and not isinstance(  # 3.
                first, Interrupt):
            if isinstance(first, Send) and not _is_timer(first):
                # The message takes its place in the queue first (committed), then the
                # interrupted turn is finished; its end sends what is queued.
                yield Run(first, feed=True)
                first = None
            yield Run(ResumeLeft())
        if _is_timer(first) and not now().timer_due:
            # spent meanwhile (another worker fired it, or a turn's boundary ran after it,
            # the left turn's included): a timer is never a queued message
            first = None
        if first is not None and not (isinstance(first, Send)
                                      and now().core.status == "finished"):
            yield Run(first)  # 4.
        if not now().released:
            yield from _drain_queue(now)  # 5.
    finally:
        yield LetGo(lease)  # 6.


def _is_timer(first: Input | None) -> bool:
    return isinstance(first, Send) and first.timer


def _drain_queue(now: Callable[[], Now]) -> Plan:
    """The messages other workers stored while this one held the turn: sent as the next
    turn, in order, once the current one is over."""
    seen = now()
    if seen.core.status == "finished":
        # Messages stored for a turn that then finished the session: taken out of the
        # queue, recorded as unanswered (never left there unseen for good).
        queued: tuple[QueuedMessage, ...] = yield ReadQueue()
        if queued:
            yield CommitEvents((unanswered(_contents(queued), seen.core.turn),),
                               consumed=queued[-1].id)
        return
    while (seen := now()).core.status in ("idle", "failed") and not seen.released:
        # (a turn's last commit may have let the lease go: the caller takes it again
        # before it looks at the queue once more)
        queued = yield ReadQueue()
        if not queued:
            return
        # steering messages first, each kind in order (as a finished turn's queue)
        ordered = sorted(queued, key=lambda q: q.data.get("kind") != "steering")
        contents = _contents(tuple(ordered))
        content = contents[0] if len(contents) == 1 else joined_content(contents)
        yield Run(Message(content), consumed=queued[-1].id,
                  queued=tuple(q.data for q in queued))


def taken_into_turn(queued: tuple[QueuedMessage, ...]) -> tuple[QueuedMessage, ...]:
    """The messages other workers stored that the running turn takes in between two
    model requests: everything up to the last steering one (the store's queue is taken
    in order, so the follow-ups before it join the turn's queue too, and are sent when
    the turn ends, as the drain would send them); none while no steering message waits
    (the queue is then left to the drain at the turn's end)."""
    last = max((n for n, q in enumerate(queued) if q.data.get("kind") == "steering"),
               default=-1)
    return queued[:last + 1]


def _contents(queued: tuple[QueuedMessage, ...]) -> tuple[Content, ...]:
    return tuple(content_from_json(q.data.get("content")) for q in queued)

