"""A session's turns, driven: the one place that takes the lease, runs an input through
the runner and lets the lease go.

The exactly-once order reads here top to bottom, for every way a turn starts
(a message, a decision, a recovery):

1. **take the lease** (:meth:`TurnDriver.run`): a store compare-and-set; a holder that
   is a killed process of this machine is replaced at once; without the lease a message
   is stored in the session's queue for the holder (or refused with ``busy="reject"``);
2. **catch up** (:meth:`TurnDriver._catch_up`): another worker may have committed since
   this object last did: the runner is reopened from the store;
3. **finish a turn a stopped worker left** (the core's :class:`Resume` input decides
   what each interrupted call becomes);
4. **run the input**: the runner steps the pure core and performs its commands, in
   order - ``Persist`` (the admission) strictly before ``RunTools`` (the effect); the
   turn's last commit lets the lease go in the same transaction;
5. **drain the queue**: messages other workers stored meanwhile start the next turn;
6. **let go**: the lease is released if the last commit did not release it.

The :class:`~phaseflow.session.agent.Session` is the host's door and decides nothing:
it checks what the host asked, then hands it here. The runner
(:mod:`phaseflow.session.runner`) alone steps the core and executes its commands.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Literal, get_args

from phaseflow.session import events as ev
from phaseflow.session.core import (
    ResolutionRefused,
    check_resolution,
    joined_content,
    unanswered,
)
from phaseflow.session.refusals import SessionBusy, SessionFinished
from phaseflow.session.runner import Runner
from phaseflow.session.values import Input, Interrupt, Resolve, Resume, Send
from phaseflow.session.workers import holder_is_gone
from phaseflow.stores.base import Lease, SessionRecord, Store
from phaseflow.turn.execution import PromptKind
from phaseflow.turn.messages import Content, content_from_json, content_to_json

#: what a message does when a turn runs (double texting); see docs/sessions.md
Busy = Literal["queue", "reject", "steer", "interrupt"]
BUSY_MODES: tuple[str, ...] = get_args(Busy)


def check_open(runner: Runner) -> None:
    """A finished session takes no more messages (:class:`SessionFinished`)."""
    if runner.core.status == "finished":
        raise SessionFinished(
            f"session {runner.core.session_id!r} has finished (phase "
            f"{runner.machine.current!r} is terminal); it takes no more messages")


class TurnDriver:
    """One session's turns in this process: its runner, whether a turn runs here, and
    what must be committed before the next one (notes the door made on opening)."""

    def __init__(self, runner: Runner, store: Store,
                 reopen: Callable[[SessionRecord], Runner], busy: Busy) -> None:
        self.runner = runner
        self.store = store
        self._reopen = reopen
        self.busy: Busy = busy
        #: a turn runs here now (this object holds the lease)
        self.running = False
        #: events the door made on opening (a changed workflow) for the first commit
        self.notes: list[ev.Event] = []
        #: set when this object lets the lease go (created by the turn that holds it:
        #: an asyncio event belongs to the loop that made it)
        self._let_go: asyncio.Event | None = None

    @property
    def session_id(self) -> str:
        return self.runner.core.session_id

    # --- a message while a turn runs here ----------------------------------------------

    async def join(self, send: Send, busy: Busy) -> AsyncIterator[ev.Event]:
        """``send`` for a session whose turn may run now. While this object runs the
        turn, the core queues the message (committed now; a steering one goes with the
        turn's next model request), and the running loop sends it when the turn ends;
        otherwise it starts a turn of its own (see :meth:`run`)."""
        await self._past_letting_go()
        if self.running:
            for e in await self.runner.feed(Send(send.content, self.runner.view(), send.kind)):
                yield e
            return
        async for e in self.run(Send(send.content, self.runner.view(), send.kind), busy=busy):
            yield e

    async def interrupt(self, content: Content) -> AsyncIterator[ev.Event]:
        """A message that cancels the running turn (as ``cancel()`` does) and starts the
        next one. This object's own turn is stopped and its loop starts the next turn;
        a turn that waits for a human is cancelled here; another worker's turn is taken
        over (its lease forced: that worker's next commit is refused, ``StoreFenced``)."""
        await self._past_letting_go()
        runner = self.runner
        if self.running:
            events = await runner.feed(Send(content, runner.view(), PromptKind.FOLLOW_UP))
            runner.request_cancel(restart=True)
            for e in events:
                yield e
            return
        first = Interrupt(content, runner.view(), runner.config.clock())
        async for e in self.run(first, busy="interrupt"):
            yield e

    async def apply(self, setting: Input) -> None:
        """A host's setting that only needs committing (an edit limit): fed to the turn
        this object runs now, or run under the lease like any input."""
        await self._past_letting_go()
        if self.running:
            await self.runner.feed(setting)
            return
        async for _ in self.run(setting):
            pass

    async def _past_letting_go(self) -> None:
        while self.running and not self.runner.core.execution.active:
            # The turn is over and its loop is letting go: a queue nobody would read
            # again is no place for a message, so wait until it has let go.
            let_go = self._let_go
            if let_go is None:
                break
            await let_go.wait()

    # --- 1. the lease ------------------------------------------------------------------

    async def run(self, first: Input | None, *, force: bool = False, busy: Busy | None = None
                  ) -> AsyncIterator[ev.Event]:
        """Run ``first`` (and what it leads to) holding the session's lease: finish a
        turn a stopped worker left, then ``first``, then the messages other workers
        queued meanwhile. Without the lease (another worker runs a turn) a message is
        stored in the session's queue for that worker (or refused with
        :class:`SessionBusy` when the agent has ``busy="reject"``), anything else is
        refused with :class:`SessionBusy`."""
        store, config = self.store, self.runner.config
        sid = self.session_id
        lease = await store.acquire(sid, config.worker, config.lease, config.clock(),
                                    force=force)
        if lease is None:
            # A holder that is a killed process of this machine is replaced at once, not
            # waited for until its lease expires (see phaseflow.session.workers).
            held = await store.lease(sid)
            if held is not None and holder_is_gone(held.owner):
                lease = await store.acquire(sid, config.worker, config.lease,
                                            config.clock(), replacing=held)
        busy = busy or self.busy
        if lease is None and isinstance(first, Interrupt):
            # An interrupt takes the turn over: the holder's late writes are fenced, and
            # its turn is cancelled here as it stood at its last commit.
            lease = await store.acquire(sid, config.worker, config.lease, config.clock(),
                                        force=True)
        if lease is None:
            if not (isinstance(first, Send) and busy in ("queue", "steer")):
                raise SessionBusy(f"session {sid!r}: another worker is running its turn")
            await store.enqueue(sid, {"content": content_to_json(first.content),
                                      "kind": first.kind.value,
                                      **config.observer.carrier(sid)})
            # The holder may have looked at the queue for the last time before this
            # message was stored, and let the turn go since: when the turn is free now,
            # this worker takes it, so the message is never left behind.
            lease = await store.acquire(sid, config.worker, config.lease, config.clock())
            if lease is None:
                return
            first = None
        while True:
            async for e in self._holding(lease, first):
                yield e
            # A worker that found the turn taken may have stored its message after this
            # one's last look at the queue: answered now, when the turn is still free.
            if self.runner.core.status not in ("idle", "failed", "finished") or (
                    not await store.queued(sid)):
                return
            again = await store.acquire(sid, config.worker, config.lease, config.clock())
            if again is None:
                return  # its holder looks at the queue before it lets the turn go
            lease, first = again, None

    async def _holding(self, lease: Lease, first: Input | None) -> AsyncIterator[ev.Event]:
        """Steps 2 to 6 with the session's lease held."""
        self.running = True
        self._let_go = asyncio.Event()
        try:
            await self._catch_up(lease.version)  # 2.
            runner = self.runner
            runner.hold(lease)
            if isinstance(first, Resolve):
                problem = check_resolution(runner.core, first)
                if problem is not None:
                    raise ResolutionRefused(f"session {self.session_id!r}: {problem}")
            if isinstance(first, Send | Interrupt):
                check_open(runner)
            while self.notes:
                for e in await runner.commit((self.notes.pop(0),)):
                    yield e
            if runner.core.status == "running" and not isinstance(first, Interrupt):  # 3.
                if isinstance(first, Send):
                    # The message takes its place in the queue first (committed), then
                    # the interrupted turn is finished; its end sends what is queued.
                    for e in await runner.feed(Send(first.content, runner.view(), first.kind)):
                        yield e
                    first = None
                async for e in runner.drive(self._resume_input()):
                    yield e
            if first is not None and not (isinstance(first, Send)
                                          and runner.core.status == "finished"):
                if isinstance(first, Send):
                    first = Send(first.content, runner.view(), first.kind)
                elif isinstance(first, Interrupt):
                    first = Interrupt(first.content, runner.view(), first.now)
                async for e in runner.drive(first):  # 4.
                    yield e
            if not runner.released:
                async for e in self._drain_queue():  # 5.
                    yield e
        finally:
            self.running = False
            let_go, self._let_go = self._let_go, None
            try:
                held = self.runner.let_go(lease)
                if held is not None:  # 6. the turn's last commit did not let it go
                    await self.store.release(held)
            finally:
                let_go.set()

    # --- 2. catching up ------------------------------------------------------------------

    async def _catch_up(self, stored: int = -1) -> None:
        """Another worker may have committed since this object last did: reopen from the
        store. ``stored``: the version the lease was taken at (read in the same
        transaction); -1 when not known, then it is read (one cheap read)."""
        if stored < 0:
            stored = await self.store.version(self.session_id)
        if stored == self.runner.version:
            return
        record = await self.store.load(self.session_id)
        if record is not None:
            self.runner = self._reopen(record)

    # --- 3. a turn a stopped worker left -------------------------------------------------

    def _resume_input(self) -> Resume:
        catalogue = self.runner.config.workflow.tools or {}
        idempotent = frozenset(n for n, t in catalogue.items() if t.idempotent)
        return Resume(self.runner.view(), idempotent)

    # --- 5. the queue --------------------------------------------------------------------

    async def _drain_queue(self) -> AsyncIterator[ev.Event]:
        """The messages other workers stored while this one held the turn: sent as the
        next turn, in order, once the current one is over."""
        runner, store, sid = self.runner, self.store, self.session_id
        if runner.core.status == "finished" and not runner.released:
            # Messages stored for a turn that then finished the session: taken out of
            # the queue, recorded as unanswered (never left there unseen for good).
            queued = await store.queued(sid)
            if queued:
                runner.consumed = queued[-1].id
                contents = tuple(content_from_json(q.data.get("content")) for q in queued)
                for e in await runner.commit((unanswered(contents, runner.core.turn),)):
                    yield e
            return
        while runner.core.status in ("idle", "failed") and not runner.released:
            # (a turn's last commit may have let the lease go: the caller takes it again
            # before it looks at the queue once more)
            queued = await store.queued(sid)
            if not queued:
                return
            # steering messages first, each kind in order (as a finished turn's queue)
            ordered = sorted(queued, key=lambda q: q.data.get("kind") != "steering")
            contents = tuple(content_from_json(q.data.get("content")) for q in ordered)
            runner.config.observer.queued(sid, [q.data for q in queued])
            runner.consumed = queued[-1].id
            content = contents[0] if len(contents) == 1 else joined_content(contents)
            async for e in runner.drive(Send(content, runner.view())):
                yield e
