"""The sessions this process serves right now: the one :class:`Session` object per
session that runs its turns here, the server-owned tasks, the followers of each
session's events, the ``Idempotency-Key`` memory, and the graceful stop.

One turn at a time per session holds through the store's lease, inside this process as
across processes: every request gets a ``Session`` object of its own, from an agent with
a worker id of its own (a pool per workflow, each agent lent to one task at a time). So
a message for a session whose turn runs, here or in another worker, takes the Session
API's multi-worker path: queued in the store for the holder of the lease, or refused
(``busy=reject``, nothing stored). No two objects of one worker id ever hold one
session.

Between requests, the objects of the sessions served last are kept open
(:mod:`phaseflow.serve.idle`, with the agent that opened each): the next message of such
a session reuses its object once a cheap read of the store shows nobody else committed
since, instead of reading the whole session again.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from phaseflow.errors import PhaseflowError
from phaseflow.serve.idle import KEPT, Idle, IdleSessions, Mark
from phaseflow.serve.logs import Log
from phaseflow.serve.problems import Problem
from phaseflow.serve.served import Served
from phaseflow.serve.turns import Accepted
from phaseflow.session import events as ev
from phaseflow.session.agent import (
    Agent,
    Session,
    SessionBusy,
    SessionError,
    SessionFinished,
)
from phaseflow.session.attachments import AttachmentRefused
from phaseflow.session.core import ResolutionRefused
from phaseflow.stores import rules
from phaseflow.stores.base import SessionRecord, StoreError, StoreFenced

#: how many Idempotency-Keys a process remembers (the oldest are forgotten first)
KEYS_KEPT = 10_000
#: how long an Idempotency-Key is remembered, in seconds
KEY_SECONDS = 24 * 3600
#: events a slow follower may fall behind before it reads the store instead
FOLLOWER_BACKLOG = 1_000

Action = Callable[[Session], AsyncIterator[ev.Event]]


@dataclass(eq=False)
class Follower:
    """One open events stream of a session: the live events of this process's turns."""

    queue: asyncio.Queue[ev.Event] = field(
        default_factory=lambda: asyncio.Queue(FOLLOWER_BACKLOG))
    lagging: bool = False
    #: set when another worker said it committed events of the session (read the store)
    poked: asyncio.Event = field(default_factory=asyncio.Event)


class Hub:
    def __init__(self, served: dict[str, Served], log: Log, *, kept: int = KEPT,
                 poll: float = 0.5) -> None:
        self.served = served
        first = next(iter(served.values()))
        self.store = first.agent.store
        self.log = log
        #: session id -> the objects of its tasks running here, with what each accepted
        self._objects: dict[str, dict[Session, Accepted]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._keys: OrderedDict[tuple[str, str], tuple[float, Accepted]] = OrderedDict()
        #: the sessions served last, kept open between requests (at most ``kept``)
        self.idle = IdleSessions(kept)
        self._followers: dict[str, set[Follower]] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.draining = False
        #: set when open event streams must end (a graceful stop)
        self.closing = asyncio.Event()
        #: told the id of a session whose events this process committed (NOTIFY)
        self.on_commit: Callable[[str], None] | None = None
        #: told the id of a session whose turn another worker runs, to cancel it there
        #: (PostgreSQL: NOTIFY); ``None``: the request is stored for its holder to read
        self.on_cancel: Callable[[str], None] | None = None
        #: told the id of a session for whose running turn a steering message was stored
        #: (PostgreSQL: NOTIFY, so its holder reads the queue before its next request);
        #: ``None``: the holder reads it between requests anyway (SQLite)
        self.on_steer: Callable[[str], None] | None = None
        #: seconds between the reads of stored cancel requests while turns run here
        self.poll = poll
        self._watcher: asyncio.Task[None] | None = None

    # --- followers ----------------------------------------------------------------------

    def follow(self, session_id: str) -> Follower:
        follower = Follower()
        self._followers.setdefault(session_id, set()).add(follower)
        return follower

    def unfollow(self, session_id: str, follower: Follower) -> None:
        followers = self._followers.get(session_id)
        if followers is not None:
            followers.discard(follower)
            if not followers:
                del self._followers[session_id]

    def poke(self, session_id: str) -> None:
        """Another worker committed events of ``session_id``: its streams here read the
        store now."""
        for follower in self._followers.get(session_id, ()):
            follower.poked.set()

    def _publish(self, session_id: str, event: ev.Event) -> None:
        if event.seq and self.on_commit is not None:
            self.on_commit(session_id)
        for follower in self._followers.get(session_id, ()):
            try:
                follower.queue.put_nowait(event)
            except asyncio.QueueFull:
                follower.lagging = True  # it reads the store instead

    # --- what runs here -----------------------------------------------------------------

    def running_here(self, session_id: str) -> bool:
        return bool(self._objects.get(session_id))

    def remembered(self, session_id: str, key: str) -> Accepted | None:
        entry = self._keys.get((session_id, key))
        if entry is None:
            return None
        if time.monotonic() - entry[0] > KEY_SECONDS:
            del self._keys[(session_id, key)]
            return None
        return entry[1]

    def _remember(self, session_id: str, key: str, accepted: Accepted) -> None:
        self._keys[(session_id, key)] = (time.monotonic(), accepted)
        while len(self._keys) > KEYS_KEPT:
            self._keys.popitem(last=False)

    def live_sessions(self) -> set[str]:
        """The sessions with a task here now."""
        return set(self._objects)

    def cancel(self, session_id: str) -> bool:
        """Cancel the turn running here (``Session.cancel``); whether one was."""
        found = False
        for session in self._objects.get(session_id, ()):
            session.cancel()
            found = True
        return found

    # --- what other workers run -----------------------------------------------------------

    async def claim(self, session_id: str, key: str, fingerprint: str) -> str | None:
        """Claim ``key`` in the store, where every worker sees it (:meth:`Store.claim_key`):
        ``None`` when this request claimed it, else the fingerprint of the request that
        did (a retry of it: answered, never run again)."""
        try:
            return await self.store.claim_key(session_id, key, fingerprint, time.time(),
                                              KEY_SECONDS)
        except StoreError as exc:
            raise Problem(503, "store_unavailable", f"the session store failed: {exc}",
                          headers={"Retry-After": "1"}) from None

    async def unclaim(self, session_id: str, key: str, fingerprint: str) -> None:
        """Let a claimed key go: its request was refused and stored nothing."""
        try:
            await self.store.drop_key(session_id, key, fingerprint)
        except StoreError as exc:
            self.log.line("error", "an Idempotency-Key could not be let go",
                          session=session_id, error=type(exc).__name__)

    async def cancel_elsewhere(self, session_id: str) -> None:
        """Ask the worker that runs the session's turn to cancel it: a notification
        (PostgreSQL) or a request stored for it to read (:meth:`_watch_cancels`)."""
        if self.on_cancel is not None:
            self.on_cancel(session_id)
            return
        try:
            await self.store.request_cancel(session_id, time.time())
        except StoreError as exc:
            raise Problem(503, "store_unavailable", f"the session store failed: {exc}",
                          headers={"Retry-After": "1"}) from None

    def cancel_asked(self, session_id: str, asked_at: float | None = None) -> bool:
        """Another worker asked to cancel the session's turn: cancelled here when it
        runs here (and, for a stored request, when it was asked during this turn's task:
        :func:`rules.cancel_applies`); whether one was."""
        found = False
        for session, accepted in list(self._objects.get(session_id, {}).items()):
            if asked_at is None or rules.cancel_applies(asked_at, accepted.started_at):
                session.cancel()
                found = True
        return found

    def steering_stored(self, session_id: str) -> None:
        """A worker stored a steering message for the session's turn: the turn running
        here (if it does) reads the store's queue before its next model request."""
        for session in list(self._objects.get(session_id, ())):
            session.steering_stored()

    def _watch(self) -> None:
        """Read stored cancel requests while turns run here (no notifications)."""
        if self.on_cancel is None and self._watcher is None:
            self._watcher = asyncio.get_running_loop().create_task(self._watch_cancels())

    async def _watch_cancels(self) -> None:
        try:
            while self._objects and not self.closing.is_set():
                await asyncio.sleep(self.poll)
                running = list(self._objects)
                if not running:
                    break
                try:
                    asked = await self.store.take_cancels(running)
                except StoreError as exc:
                    self.log.line("error", "cancel requests could not be read",
                                  error=type(exc).__name__)
                    continue
                for sid, at in asked.items():
                    self.cancel_asked(sid, at)
        finally:
            self._watcher = None

    async def submit(self, served: Served, session_id: str, action: Action, *,
                     busy: str = "queue", key: str | None = None,
                     fingerprint: str = "", claimed: bool = False,
                     record: SessionRecord | None = None) -> tuple[Accepted, bool]:
        """Start ``action`` on the session in a server-owned task; the
        :class:`Accepted` and whether it is a repeat of an earlier request (same
        ``key``). ``claimed``: the request claimed ``key`` in the store
        (:meth:`claim`); it is let go if the task stores nothing. ``record``: the
        session as just read from the store (a page of due timers), opened from it
        instead of reading it again."""
        lock = self._locks.setdefault(session_id, asyncio.Lock())
        async with lock:
            if key is not None:
                earlier = self.remembered(session_id, key)
                if earlier is not None:
                    if earlier.fingerprint != fingerprint:
                        raise Problem(
                            422, "idempotency_key_reused",
                            "this Idempotency-Key was used for another request on this "
                            "session", session_id=session_id)
                    return earlier, True
            if self.draining:
                raise Problem(503, "shutting_down", "the server is stopping; retry on "
                              "another worker", headers={"Retry-After": "1"})
            await self._past_turn_ends(session_id)
            role = "reject" if busy == "reject" else "queue"
            if role == "reject" and self.running_here(session_id):
                raise Problem(409, "session_busy", f"session {session_id!r} is running a "
                              "turn; busy=reject stores nothing", session_id=session_id)
            agent, session = await self._checkout(served, session_id, role, record)
            accepted = Accepted(session_id, fingerprint, session.phase)
            if claimed:
                accepted.key = key
            self._objects.setdefault(session_id, {})[session] = accepted
            self._watch()
            task = asyncio.get_running_loop().create_task(
                self._run(served, agent, session, action, accepted,
                          steering=busy == "steer"))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
            if key is not None:
                self._remember(session_id, key, accepted)
        return accepted, False

    async def _past_turn_ends(self, session_id: str) -> None:
        """Tasks of the session here whose turn is over (or waits for a human) and
        which are only letting it go (a last look at the queue, the lease released):
        waited for, so that a message sent as soon as the previous answer came finds the
        session free and its object kept, as if it had come a moment later. A task that
        starts another turn meanwhile (messages queued by other workers) is not waited
        for: the message meets that turn as its busy mode says."""
        for accepted in list(self._objects.get(session_id, {}).values()):
            while not accepted.done and accepted.turn_over():
                await accepted.wait(len(accepted.events))

    def kept(self, session_id: str) -> bool:
        """This worker keeps an idle object of the session (its next message checks it
        against the store instead of reading the whole session)."""
        return session_id in self.idle

    def forget(self, session_id: str) -> None:
        """Drop the kept object of a session (deleted here: never reused)."""
        idle = self.idle.take(session_id)
        if idle is not None:
            idle.served.give(idle.agent)

    async def _checkout(self, served: Served, session_id: str, role: str,
                        record: SessionRecord | None = None) -> tuple[Agent, Session]:
        """An agent of ``served`` and its object of the session, for one task: the kept
        one while it is still the session as stored, else a new one opened from the
        store (from ``record`` when given: read from the store a moment ago)."""
        idle = self.idle.take(session_id)
        if idle is not None:
            if idle.served is served and idle.agent.busy == role and await self._current(
                    idle, session_id):
                return idle.agent, idle.session
            idle.served.give(idle.agent)
        agent = served.take(role)
        try:
            return agent, await self._open(agent, session_id, record)
        except BaseException:
            served.give(agent)
            raise

    async def _current(self, idle: Idle, session_id: str) -> bool:
        """Whether the kept object is still the session as stored (see
        :mod:`phaseflow.serve.idle`); 404 when the session is gone."""
        try:
            stored = await self.store.events(session_id, idle.mark.seq - 1)
            if idle.mark.is_last(stored):
                return True
            if not stored and not await self.store.version(session_id):
                raise Problem(404, "session_not_found", f"no session {session_id!r}",
                              session_id=session_id)
        except StoreError as exc:
            raise Problem(503, "store_unavailable", f"the session store failed: {exc}",
                          headers={"Retry-After": "1"}) from None
        return False

    async def _open(self, agent: Agent, session_id: str,
                    record: SessionRecord | None = None) -> Session:
        try:
            if record is not None:
                return agent.session_from(record)
            return await agent.session(session_id)
        except SessionError as exc:
            raise Problem(409, "session_unusable", str(exc), session_id=session_id) from None
        except StoreError as exc:
            raise Problem(503, "store_unavailable", f"the session store failed: {exc}",
                          headers={"Retry-After": "1"}) from None

    async def _run(self, served: Served, agent: Agent, session: Session, action: Action,
                   accepted: Accepted, *, steering: bool = False) -> None:
        sid = accepted.session_id
        reusable = False
        try:
            await self._drive(served, session, action, accepted)
            if not accepted.events:
                if steering and self.on_steer is not None:
                    # stored for the turn another worker runs: it is told (it reads the
                    # queue before its next model request)
                    self.on_steer(sid)
                accepted.queued = await self._position(sid)
            reusable = True
        except SessionBusy as exc:
            accepted.problem = Problem(409, "session_busy", str(exc), session_id=sid)
        except SessionFinished as exc:
            accepted.problem = Problem(409, "session_finished", str(exc), session_id=sid)
        except ResolutionRefused as exc:
            accepted.problem = Problem(409, "resolution_refused", str(exc), session_id=sid)
        except SessionError as exc:
            accepted.problem = Problem(409, "session_unusable", str(exc), session_id=sid)
        except AttachmentRefused as exc:
            accepted.problem = Problem(422, "attachment_refused", str(exc),
                                       reason=exc.reason, session_id=sid)
        except StoreFenced:
            accepted.problem = Problem(
                409, "turn_interrupted", f"session {sid!r}: another message interrupted "
                "this turn and took it over; follow the session's events", session_id=sid)
        except StoreError as exc:
            accepted.problem = Problem(503, "store_unavailable",
                                       f"the session store failed: {exc}", session_id=sid,
                                       headers={"Retry-After": "1"})
        except PhaseflowError as exc:
            accepted.problem = Problem(400, "refused", str(exc), session_id=sid)
        except Exception as exc:  # a bug: logged by type, never shown to a client
            self.log.line("error", "a turn failed inside the server", session=sid,
                          error=type(exc).__name__)
            from phaseflow.serve.problems import internal_problem

            accepted.problem = internal_problem()
        finally:
            if accepted.key is not None and accepted.problem is not None and not any(
                    e.seq for e in accepted.events):
                await self.unclaim(sid, accepted.key, accepted.fingerprint)
            accepted.finish()
            objects = self._objects.get(sid)
            if objects is not None:
                objects.pop(session, None)
                if not objects:
                    del self._objects[sid]
            self._release(served, agent, session, accepted, reusable)
            lock = self._locks.get(sid)
            if not self.running_here(sid) and lock is not None and not lock.locked():
                del self._locks[sid]

    def _release(self, served: Served, agent: Agent, session: Session,
                 accepted: Accepted, reusable: bool) -> None:
        """After a task: its object kept for the session's next message when the task
        ended well and committed an event here (what it will be checked by), else its
        agent back to the pool."""
        mark = Mark.last_of(accepted.events) if reusable else None
        if (mark is None or accepted.problem is not None or self.draining
                or session.status == "running"):
            served.give(agent)
            return
        for dropped in self.idle.keep(accepted.session_id,
                                      Idle(served, agent, session, mark)):
            dropped.served.give(dropped.agent)

    async def _drive(self, served: Served, session: Session, action: Action,
                     accepted: Accepted) -> None:
        sid = accepted.session_id
        turn_started = time.monotonic()
        async for event in action(session):
            if isinstance(event, ev.TurnStartedEvent):
                turn_started = time.monotonic()
            accepted.add(event)
            self._publish(sid, event)
            if isinstance(event, ev.TurnFinished):
                self.log.turn(sid, event.turn, event.status, time.monotonic() - turn_started,
                              served.name)

    async def _position(self, session_id: str) -> int:
        """The queued message's place (from 1): in the store's queue for the turn that
        runs (here or in another worker), or in the session's own queue while it waits
        for an approval."""
        try:
            return max(1, len(await self.store.queued(session_id)))
        except StoreError:
            return 1

    # --- stopping -----------------------------------------------------------------------

    async def drain(self, grace: float) -> None:
        """A graceful stop: no new turn, open event streams closed (their clients
        reconnect elsewhere), running turns get ``grace`` seconds, then are cancelled as
        ``Session.cancel`` does (every call settled, the lease released)."""
        self.draining = True
        self.closing.set()
        pending = set(self.tasks)
        if pending:
            _, pending = await asyncio.wait(pending, timeout=grace)
        if pending:
            self.log.line("stop", f"cancelling {len(pending)} turn(s) after the grace period")
            for sid in list(self._objects):
                self.cancel(sid)
            _, pending = await asyncio.wait(pending, timeout=30)
        for task in pending:
            task.cancel()

    def stats(self) -> dict[str, Any]:
        return {"running": len(self.tasks), "followers": sum(map(len,
                                                                 self._followers.values()))}
