"""Which due timers a worker fires, and how many at once, as pure decisions.

A worker fires timers from pages of the store's index of deadlines
(:meth:`~phaseflow.stores.base.Store.due_sessions`: each due session with its record
and its lease, in one read). :func:`plan_page` decides, for one page, which sessions'
timer turns start now - at most as many as there are free slots, so a worker runs a
bounded number of turns at once - and which are passed over, and why: a session whose
turn already runs here, one whose lease another live worker holds (that worker's turn
boundary evaluates the timer, or its own loop fires it), one waiting for a human's
decision, a damaged one. It also says where the next page starts (keyset pagination:
a session passed over is not read again in the same sweep, so no page of sessions
that cannot fire hides the ones after it) and whether the sweep is over.

:func:`to_read` decides when the next page is read: as soon as half of the slots are
free, not when every turn of the page has ended, so a worker keeps its turns' commits
coming together (SQLite's group commit writes the commits that wait together in one
transaction) without a page's last turn holding up the next page.

Nothing here decides whether a timer fires at all: the turn does, under the session's
lease, once it is caught up with the store (:mod:`phaseflow.session.turn_order`). A
plan made from a page that is stale by then only costs a turn that finds its timer
spent; two workers planning the same page never fire a timer twice.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from phaseflow.stores import rules
from phaseflow.stores.base import DueSession

#: how many timer turns a worker runs at once, unless told otherwise
CONCURRENCY = 64

#: why a due session of a page is not fired now
IN_FLIGHT = "in_flight"  # a turn of it runs in this worker
LEASED = "leased"  # another live worker holds its lease
WAITING = "waiting"  # its turn waits for a human's decision (the decision's turn sees it)
FINISHED = "finished"  # the session has finished (no timer fires in a terminal phase)
OTHER_WORKFLOW = "other_workflow"  # a session of a workflow this worker does not serve

#: the statuses of a session whose timer's turn cannot start: a turn waiting for a
#: decision evaluates the timer when the decision is made; a finished session has none
_NOT_FIRED = {"awaiting_approval": WAITING, "finished": FINISHED}


@dataclass(frozen=True, slots=True)
class PagePlan:
    """What a worker does with one page of due sessions."""

    #: the sessions whose timer turn starts now, in the index's order
    fire: tuple[DueSession, ...]
    #: the sessions passed over, as ``(session id, reason)`` (the reasons above)
    skipped: tuple[tuple[str, str], ...]
    #: the damaged sessions, as ``(session id, problem)``: none of them can fire
    damaged: tuple[tuple[str, str], ...]
    #: where the next page of this sweep starts (the key of the last session this plan
    #: looked at); ``None`` with ``more`` False: the sweep is over
    after: tuple[float, str] | None
    #: the index may hold due sessions after ``after`` (the page was full, or the
    #: slots ran out before its end)
    more: bool


def plan_page(page: tuple[DueSession, ...], *, asked: int, slots: int, now: float,
              in_flight: Collection[str] = (), gone: Collection[str] = (),
              workflows: Collection[str] | None = None) -> PagePlan:
    """Plan one page (read with ``limit=asked``): fire at most ``slots`` of its
    sessions, in order, passing over those that cannot fire now. ``in_flight``: the
    sessions whose turn runs in this worker; ``gone``: lease holders known to be
    stopped processes (their lease is taken over, as a turn takes it:
    :func:`~phaseflow.stores.rules.take_lease` with ``replacing``); ``workflows``: the
    workflows this worker serves (``None``: any)."""
    fire: list[DueSession] = []
    skipped: list[tuple[str, str]] = []
    damaged: list[tuple[str, str]] = []
    last: tuple[float, str] | None = None
    for due in page:
        if len(fire) >= max(slots, 0):
            return PagePlan(tuple(fire), tuple(skipped), tuple(damaged), last, True)
        last = due.key
        reason = _passed_over(due, now, in_flight, gone, workflows)
        if due.record is None:
            damaged.append((due.session_id, due.problem or "the session cannot be read"))
        elif reason is not None:
            skipped.append((due.session_id, reason))
        else:
            fire.append(due)
    more = len(page) >= asked > 0
    return PagePlan(tuple(fire), tuple(skipped), tuple(damaged), last if more else None,
                    more)


def _passed_over(due: DueSession, now: float, in_flight: Collection[str],
                 gone: Collection[str], workflows: Collection[str] | None) -> str | None:
    record = due.record
    if record is None:
        return None
    if due.session_id in in_flight:
        return IN_FLIGHT
    if workflows is not None and record.workflow not in workflows:
        return OTHER_WORKFLOW
    reason = _NOT_FIRED.get(record.status)
    if reason is not None:
        return reason
    held = due.lease
    if held is not None and rules.take_lease(
            held.owner, held.expires, held.epoch, owner="", now=now,
            replacing=held if held.owner in gone else None) is None:
        return LEASED
    return None


def holders(page: tuple[DueSession, ...], now: float) -> frozenset[str]:
    """The workers holding an unexpired lease of a session of ``page``: those whose
    process the shell asks about (:func:`~phaseflow.session.workers.holder_is_gone`)."""
    return frozenset(d.lease.owner for d in page
                     if d.lease is not None and d.lease.expires > now)


def to_read(running: int, concurrency: int) -> int:
    """How many due sessions to read now, with ``running`` timer turns of at most
    ``concurrency`` running: the free slots once half of them (or more) are free, else
    none (the next page waits for more turns to end)."""
    free = concurrency - running
    return free if free > 0 and 2 * free >= concurrency else 0
