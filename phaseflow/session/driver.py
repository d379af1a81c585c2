"""A session's turns, driven: the one place that executes the exactly-once order.

The order itself - take the lease, catch up, finish a turn a stopped worker left, run the
input, drain the queue, let go - is decided in :mod:`phaseflow.session.turn_order`, a
pure plan of commands. :class:`TurnDriver` performs each command against the store and
the runner and sends the answer back, as psycopg's ``waiting.py`` drives its
``generators.py``: nothing here decides what comes next.

The :class:`~phaseflow.session.agent.Session` is the host's door and decides nothing:
it checks what the host asked, then hands it here. The runner
(:mod:`phaseflow.session.runner`) alone steps the core and executes its commands.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

from phaseflow.session import events as ev
from phaseflow.session.runner import Runner
from phaseflow.session.turn_order import (
    BUSY_MODES as BUSY_MODES,
)
from phaseflow.session.turn_order import (
    Busy,
    Command,
    CommitEvents,
    CommitNotes,
    Hold,
    Holder,
    LetGo,
    Message,
    Now,
    ReadHolder,
    ReadQueue,
    ReadVersion,
    ResumeLeft,
    Run,
    StoreMessage,
    TakeLease,
    turn_order,
)
from phaseflow.session.values import Input, Interrupt, Resume, Send
from phaseflow.session.workers import holder_is_gone
from phaseflow.spec.model import tree_catalogue
from phaseflow.stores.base import SessionRecord, Store
from phaseflow.turn.execution import PromptKind
from phaseflow.turn.messages import Content, content_to_json

__all__ = ["BUSY_MODES", "Busy", "TurnDriver"]


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

    # --- the order, executed --------------------------------------------------------

    async def run(self, first: Input | None, *, force: bool = False, busy: Busy | None = None
                  ) -> AsyncIterator[ev.Event]:
        """Run ``first`` (and what it leads to) holding the session's lease: finish a
        turn a stopped worker left, then ``first``, then the messages other workers
        queued meanwhile (the order: :func:`~phaseflow.session.turn_order.turn_order`).
        Without the lease a message is stored for the worker that holds it (or refused
        with :class:`SessionBusy` when the agent has ``busy="reject"``), anything else is
        refused with :class:`SessionBusy`."""
        plan = turn_order(first, self._now, busy=busy or self.busy, force=force)
        answer: Any = None
        failure: BaseException | None = None
        while True:
            try:
                command = plan.send(answer) if failure is None else plan.throw(failure)
            except StopIteration:
                return
            answer, failure = None, None
            try:
                if isinstance(command, Run | CommitNotes | CommitEvents):
                    async for e in self._events_of(command):
                        yield e
                else:
                    answer = await self._perform(command)
            except BaseException as exc:  # the plan lets the lease go, then re-raises
                failure = exc

    def _now(self) -> Now:
        runner = self.runner
        return Now(runner.core, runner.machine.current, runner.version, runner.released,
                   runner.timer_due())

    async def _perform(self, command: Command) -> Any:
        """A command whose answer is a value (a lease, the queue, a version)."""
        store, config, sid = self.store, self.runner.config, self.session_id
        if isinstance(command, TakeLease):
            return await store.acquire(sid, config.worker, config.lease, config.clock(),
                                       force=command.force, replacing=command.replacing)
        if isinstance(command, ReadHolder):
            held = await store.lease(sid)
            return Holder(held, held is not None and holder_is_gone(held.owner))
        if isinstance(command, StoreMessage):
            send = command.send
            await store.enqueue(sid, {"content": content_to_json(send.content),
                                      "kind": send.kind.value,
                                      **config.observer.carrier(sid)})
            return None
        if isinstance(command, ReadQueue):
            return tuple(await store.queued(sid))
        if isinstance(command, ReadVersion):
            return await store.version(sid)
        if isinstance(command, Hold):
            self.running = True
            self._let_go = asyncio.Event()
            if command.reopen:
                record = await store.load(sid)
                if record is not None:
                    self.runner = self._reopen(record)
            self.runner.hold(command.lease)
            return None
        if isinstance(command, LetGo):
            self.running = False
            let_go, self._let_go = self._let_go, None
            try:
                held = await self.runner.let_go(command.lease)
                if held is not None:  # the turn's last commit did not let it go
                    await store.release(held)
            finally:
                if let_go is not None:
                    let_go.set()
            return None
        raise AssertionError(f"no executor for {command!r}")  # pragma: no cover

    async def _events_of(self, command: Run | CommitNotes | CommitEvents
                         ) -> AsyncIterator[ev.Event]:
        """A command whose answer is the events it commits (given to the caller)."""
        runner = self.runner
        if isinstance(command, CommitNotes):
            while self.notes:
                for e in await runner.commit((self.notes.pop(0),)):
                    yield e
            return
        if isinstance(command, CommitEvents):
            runner.consumed = command.consumed
            for e in await runner.commit(command.events):
                yield e
            return
        if command.queued:
            runner.config.observer.queued(self.session_id, list(command.queued))
        if command.consumed:
            runner.consumed = command.consumed
        first = self._fresh(command.input)
        if command.feed:
            for e in await runner.feed(first):
                yield e
            return
        async for e in runner.drive(first):
            yield e

    def _fresh(self, what: Input | Message | ResumeLeft) -> Input:
        """The input with the phase view of the moment it runs (the machine may have
        moved, or been reopened, since it was asked)."""
        runner = self.runner
        if isinstance(what, Message):
            return Send(what.content, runner.view(), PromptKind(what.kind))
        if isinstance(what, ResumeLeft):
            catalogue = tree_catalogue(runner.config.workflow) or {}  # callees' too
            idempotent = frozenset(n for n, t in catalogue.items() if t.idempotent)
            return Resume(runner.view(), idempotent)
        if isinstance(what, Send) and what.timer:  # the note says what fired, as of now
            return Send(runner.timer_content(), runner.view(), what.kind, timer=True)
        if isinstance(what, Send):
            return Send(what.content, runner.view(), what.kind)
        if isinstance(what, Interrupt):
            return Interrupt(what.content, runner.view(), what.now)
        return what
