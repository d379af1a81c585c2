"""A fork: a new session that starts where another one stood at the end of one of its
past turns, the original untouched.

The store keeps the record of each turn's end (the commit that carries its
``turn_finished`` passes ``keep_turn``; see :meth:`~phaseflow.stores.base.Store.commit`),
so a fork is one read and one commit, whatever the session's length:

1. :meth:`~phaseflow.stores.base.Store.turn_record` gives the record of turn ``N``'s
   end (its history, state, phase, machine snapshot and call ledger; a turn ends with
   every call answered, so nothing of it is open and nothing runs again). A record is
   kept only when a turn ends, so one found is a turn that has ended; when there is
   none, the original's current record says why (the turn was not reached, has not
   ended - it runs or waits for approval -, or its end was not kept);
3. that record, under the new id (version 1, the workflow hash kept, the times of the
   fork), is committed with ``expected_version=0`` and one ``session_forked`` event:
   a session of that id that exists, or is created meanwhile by another writer, makes
   the commit lose (``StoreConflict``), and the fork is refused.

The original's events are not copied: they stay in its own log, which the fork's first
event names (``from_session``, ``at_turn``); the history the model needs is in the
record. Used by :meth:`Session.fork <phaseflow.session.agent.Session.fork>` and by
``phaseflow sessions fork`` (which has no workflow: :func:`fork_record` needs only the
store).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from phaseflow.errors import ConfigError, PhaseflowError
from phaseflow.session import events as ev
from phaseflow.session.core_json import core_from_json
from phaseflow.session.refusals import SessionError
from phaseflow.stores.base import SessionRecord, Store, StoreConflict, check_session_id

#: how many forks back a fork's earlier turns are looked for (a fork of a fork of ...)
MAX_LINEAGE = 64

#: the statuses of a session whose current turn has not ended
NOT_ENDED = {"running": "is running", "awaiting_approval": "waits for approval",
             "cancelling": "is stopping"}


class ForkRefused(SessionError):
    """A fork that cannot be made: the new id is taken, the turn was not reached or has
    not ended, or the store keeps no record of its end. Nothing was written."""


def check_turn(at_turn: object) -> int:
    """``at_turn`` when it is a turn number (an integer from 1); :class:`ConfigError`
    otherwise."""
    if not isinstance(at_turn, int) or isinstance(at_turn, bool) or at_turn < 1:
        raise ConfigError(f"at_turn is a turn number from 1, not {at_turn!r}")
    return at_turn


async def fork_record(store: Store, session_id: str, new_id: str, at_turn: int, *,
                      now: float, check: Callable[[SessionRecord], object] | None = None
                      ) -> tuple[SessionRecord, ev.SessionForked]:
    """Fork ``session_id`` at the end of its turn ``at_turn`` as ``new_id`` in ``store``:
    the committed record and event. ``check``: called with the new record before it is
    committed (an agent checks it can open it; what it raises refuses the fork).
    :class:`ForkRefused` (nothing written) for an id that exists, a turn not reached or
    not ended, a turn whose end the store has no record of."""
    check_session_id(new_id)
    at_turn = check_turn(at_turn)
    if not callable(getattr(store, "turn_record", None)):
        raise ForkRefused(f"the store ({type(store).__name__}) keeps no record of a turn's "
                          "end (it has no turn_record method): it cannot fork a session")
    if new_id == session_id or await store.version(new_id) != 0:
        raise ForkRefused(f"session {new_id!r} exists already: a fork is a new session "
                          "(name another id)")
    ended = await _turn_end(store, session_id, at_turn)
    if ended is None:
        # only now the session itself is read, to say why (a kept turn has ended, so the
        # fork needs no read of the session's whole current history)
        raise ForkRefused(await _why_not(store, session_id, at_turn))
    # The fork's clock starts again from the turn's end: its time in the phase is the
    # record's (aged from ``now``), so its next timer is as far ahead as it was then.
    timer = ended.next_timer_at
    record = replace(ended, session_id=new_id, version=1, created_at=now, updated_at=now,
                     core=_renamed(ended.core, new_id),
                     next_timer_at=None if timer is None else timer + (now - ended.updated_at))
    try:
        core_from_json(new_id, record.core, record.execution, record.continuation)
    except PhaseflowError as exc:
        raise ForkRefused(f"the record of the end of turn {at_turn} of session "
                          f"{session_id!r} cannot be opened: {exc}") from None
    if check is not None:
        check(record)
    forked = ev.SessionForked(from_session=session_id, at_turn=at_turn, session_id=new_id,
                              turn=at_turn, at=now)
    try:
        (seq,) = await store.commit(record, [forked.to_json()], expected_version=0,
                                    keep_turn=True)
    except StoreConflict:
        raise ForkRefused(f"session {new_id!r} exists already: another writer created it "
                          "while the fork was made (name another id)") from None
    return record, replace(forked, seq=seq)


async def _why_not(store: Store, session_id: str, at_turn: int) -> str:
    """Why the store has no record of the end of turn ``at_turn``: no such session, a
    turn not reached, one not ended, or none kept."""
    current = await store.load(session_id)
    if current is None:
        return f"no session {session_id!r} in the store"
    if at_turn > current.turn:
        return (f"session {session_id!r} has not reached turn {at_turn} (it is at turn "
                f"{current.turn})")
    if at_turn == current.turn and current.status in NOT_ENDED:
        return (f"turn {at_turn} of session {session_id!r} has not ended (it "
                f"{NOT_ENDED[current.status]}): a fork starts from the end of a turn")
    return (f"the store has no record of the end of turn {at_turn} of session "
            f"{session_id!r}: it keeps one for each turn that ends, since its schema "
            "version 2 (a store upgraded from version 1 has none for the turns before), "
            "except a turn whose end started the next one in the same commit (messages "
            "queued while it ran), and none from before the session's history was "
            "rewritten")


async def _turn_end(store: Store, session_id: str, turn: int) -> SessionRecord | None:
    """The record of the end of ``turn``: the session's own, or, for a fork, its
    original's when the turn is one the fork began with (a fork keeps only the turns it
    lived: its first turns are its original's, whose records are not copied). An
    original's record counts only when its history is a prefix of the fork's at the
    fork's first turn (an original deleted and made anew under its id is another
    conversation)."""
    sid = session_id
    anchor: SessionRecord | None = None
    for _ in range(MAX_LINEAGE):
        found = await store.turn_record(sid, turn)
        if found is not None:
            if anchor is not None and not anchor.continuation.messages.starts_with(
                    found.continuation.messages):
                return None
            return found
        origin = await _origin(store, sid)
        if origin is None or origin[1] < turn:
            return None
        if anchor is None:
            anchor = await store.turn_record(sid, origin[1])
            if anchor is None:
                return None
        sid = origin[0]
    return None


async def _origin(store: Store, session_id: str) -> tuple[str, int] | None:
    """The session a fork was made from and at which turn (its first event), or None."""
    first = await store.events(session_id, 0)
    data: Mapping[str, Any] = first[0].data if first else {}
    source, at = data.get("from_session"), data.get("at_turn")
    if data.get("type") != ev.SessionForked.type or not isinstance(source, str) or (
            not isinstance(at, int)):
        return None
    return source, at


def _renamed(core: Mapping[str, Any], new_id: str) -> Mapping[str, Any]:
    """The session core's JSON with the events it holds for the next commit (none at a
    turn's end, in practice) naming the new session: the one stored value that names the
    session id (request ids are closed at a turn's end, and new ones are made from the
    new id)."""
    pending = core.get("pending")
    if not isinstance(pending, list) or not pending:
        return core
    return {**core, "pending": [{**e, "session_id": new_id} if isinstance(e, dict) else e
                                for e in pending]}


# --- branches: the last message edited and asked again ------------------------------------

#: what separates a session's id from its branches' numbers: ``ID~1``, ``ID~2``, ...
BRANCH_MARK = "~"


def branch_number(session_id: str, candidate: str) -> int | None:
    """``k`` when ``candidate`` is named as branch ``k`` of ``session_id`` (``ID~k``)."""
    prefix = session_id + BRANCH_MARK
    rest = candidate[len(prefix):]
    if not candidate.startswith(prefix) or not rest.isascii() or not rest.isdigit():
        return None
    return int(rest) if rest == str(int(rest)) and int(rest) >= 1 else None


async def free_branch_id(store: Store, session_id: str) -> str:
    """The first ``ID~k`` (k = 1, 2, ...) no session has."""
    k = 1
    while await store.version(f"{session_id}{BRANCH_MARK}{k}") != 0:
        k += 1
    return f"{session_id}{BRANCH_MARK}{k}"


async def last_turn(store: Store, session_id: str) -> int:
    """The turn whose message an edit replaces: the session's last, which has ended
    and is not its first (:class:`ForkRefused` otherwise)."""
    current = await store.load(session_id)
    if current is None:
        raise ForkRefused(f"no session {session_id!r} in the store")
    if current.status in NOT_ENDED:
        raise ForkRefused(f"turn {current.turn} of session {session_id!r} has not ended (it "
                          f"{NOT_ENDED[current.status]}): its message is edited once it has")
    if current.turn < 2:
        raise ForkRefused(
            f"session {session_id!r} has {'no message' if current.turn < 1 else 'one turn'}:"
            " a branch starts from the end of the turn before the edited message, and the "
            "first has none (send the edited message to a new session)")
    return current.turn


async def branches(store: Store, session_id: str) -> tuple[str, ...]:
    """The ids of the branches of ``session_id`` (``ID~k``, forked from it), by ``k``. A
    session merely named like one (not forked from it) is not one."""
    found: list[tuple[int, str]] = []
    for summary in await store.sessions():
        k = branch_number(session_id, summary.session_id)
        if k is None or summary.problem is not None:
            continue
        origin = await _origin(store, summary.session_id)
        if origin is not None and origin[0] == session_id:
            found.append((k, summary.session_id))
    return tuple(sid for _, sid in sorted(found))
