"""The one async runner: it performs the commands the pure core returns.

``drive(first_input)`` feeds the input to :func:`~phaseflow.session.core.step`,
performs each command in order (commit, call the provider, run tools, run a boundary,
sleep before a retry), feeds what each produced back in, and yields the events to the
host as they happen. It decides nothing about the turn: the order of commits and runs is
the core's. What it owns is everything with I/O or host code in it - the provider
stream, the tools, the machine's effects, the store, the clock - and cancellation,
which it turns into one :class:`~phaseflow.session.core.Cancel` input after stopping
whatever was running.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Literal, TypeVar

from phaseflow.errors import PhaseflowError
from phaseflow.expr.describe import describe_exception
from phaseflow.machine.machine import PhaseMachine
from phaseflow.machine.results import ModelTrigger
from phaseflow.machine.state import ReadOnlyMapping, State
from phaseflow.observe.observer import IDLE, TurnObserver
from phaseflow.providers.media import accepted_media
from phaseflow.providers.protocol import (
    ProviderFailure,
    ProviderReply,
    ProviderRequest,
)
from phaseflow.session import events as ev
from phaseflow.session.attachments import attach, history_media, load
from phaseflow.session.compaction import history_chars
from phaseflow.session.core import GO_TO_PHASE, step
from phaseflow.session.core_json import core_to_json
from phaseflow.session.lease_keeper import LeaseKeeper
from phaseflow.session.model_stream import pump_stream, summarize
from phaseflow.session.outputs import (
    READ_OUTPUT,
    READ_OUTPUT_TOOL,
    run_read_output,
)
from phaseflow.session.presentation import present
from phaseflow.session.records import message_json
from phaseflow.session.runner_config import RunnerConfig, for_provider
from phaseflow.session.timers import due_after, is_due, next_deadline, timer_note
from phaseflow.session.tool_calls import named_calls
from phaseflow.session.tool_threads import ToolThread, in_thread, timed_out
from phaseflow.session.turn_order import taken_into_turn
from phaseflow.session.values import (
    BoundaryDone,
    CallProvider,
    Cancel,
    Cancelling,
    Compact,
    Core,
    Done,
    Input,
    Pause,
    Persist,
    PhaseView,
    Planned,
    Replied,
    RequestFailed,
    RunBoundary,
    RunTools,
    Send,
    Sleep,
    ToolDone,
    TurnOver,
)
from phaseflow.session.view import (
    context_text,
    joined,
    phase_view,
    tool_specs,
    workflow_specs,
)
from phaseflow.spec.model import (
    DEFAULT_ROLE,
    ReplyShape,
    Tool,
    tree_catalogue,
)
from phaseflow.stores.base import Lease, SessionRecord
from phaseflow.tools.function import (
    ToolContext,
    ToolResult,
    output_text,
    split_return,
)
from phaseflow.turn.execution import Mode, PromptKind
from phaseflow.turn.inputs import evolve
from phaseflow.turn.media import MediaRefused
from phaseflow.turn.messages import (
    History,
    MediaPart,
    Message,
    TextPart,
    ToolCall,
    ToolOutcome,
    content_from_json,
)

T = TypeVar("T")

#: what request_cancel() puts into the stream's queue
_CANCEL = object()
#: what the stream's queue gets when the task reading the provider has ended
_PUMP_ENDED = object()


class Runner:
    """Owns one session's live parts: the core values, the machine, the state."""

    def __init__(self, config: RunnerConfig, core: Core, machine: PhaseMachine, state: State,
                 version: int, created_at: float) -> None:
        self.config = config
        self.core = core
        self.machine = machine
        self.state = state
        self.version = version
        self.created_at = created_at
        #: the session's next timer (wall clock; None: none ahead), as the last commit
        #: stored it, and when this runner last ran a turn boundary (which spends a due
        #: timer: session/timers.py)
        self.timer_at: float | None = None
        self.evaluated_at: float | None = None
        self._machine_snapshot: dict[str, Any] = machine.snapshot()
        self._cancel = asyncio.Event()
        #: the cancel is an interrupt (see request_cancel)
        self._restart = False
        self._commit_lock = asyncio.Lock()
        #: the queue the current model stream is read from, while one is read
        self._stream: asyncio.Queue[Any] | None = None
        #: the last request sent to the model (what a host's test inspects)
        self.last_request: ProviderRequest | None = None
        #: the lease this worker holds on the session while it runs a turn
        self.lease: Lease | None = None
        #: queued messages (up to this id) the next commit takes out of the store's queue
        self.consumed = 0
        #: let the lease go with a turn's last commit (the session sets it while it holds
        #: the turn); ``released`` says it was
        self.release_at_end = False
        self.released = False
        #: renews the lease while a turn holds it (see hold)
        self._keeper: LeaseKeeper | None = None
        #: what the current (or last) drive reports to (see phaseflow.observe.observer)
        self.obs: TurnObserver = IDLE
        #: outputs captured whose calls' results the core has not recorded yet (their
        #: bytes count against the session's capture quota meanwhile)
        self._capturing: dict[str, int] = {}
        #: the bytes of the session's attachments read for requests (read once)
        self._media: dict[str, bytes] = {}
        #: the history the last request was looked at for attachments, and those it named
        self._media_scan: tuple[History | None, frozenset[str]] = (None, frozenset())
        #: the threads of sync tools with a timeout, by call id, while they run
        self._threads: dict[str, ToolThread] = {}
        #: the threads a cancel found still running (the drive waits for them)
        self._lingering: list[ToolThread] = []
        #: another worker said it stored a steering message for this session (a store
        #: whose reads are not local is read only then: see _steering_due)
        self.steering_stored = False

    # --- the view --------------------------------------------------------------------

    def view(self) -> PhaseView:
        view = phase_view(self.machine, self.state, self.config.workflow, self.config.tools,
                          self.config.views)
        if self.core.captures and not view.terminal:
            # the session's own cut outputs can be read back in any phase
            view = replace(view, tools=(*view.tools, READ_OUTPUT_TOOL))
        return view

    # --- the lease --------------------------------------------------------------------

    def hold(self, lease: Lease) -> None:
        """A turn runs under ``lease`` now: commits carry it (fencing a stale worker),
        a keeper renews it while the turn waits between commits (on its model, on a
        tool), and the turn's last commit lets it go."""
        self.lease = lease
        self.released = False
        self.release_at_end = True
        if not self._commit_lock.locked():
            # a lock of this turn's loop: the keeper's renewals and the commits may wait
            # for each other, which binds a lock to its loop, and a host may drive one
            # session from several loops in turn (as the cancel event, see drive)
            self._commit_lock = asyncio.Lock()
        self._keeper = LeaseKeeper.start(self.config.lease, self.keep_lease)

    async def let_go(self, taken: Lease) -> Lease | None:
        """The turn is over here: the keeper stopped, and the lease still to release (the
        renewed one, or ``taken`` when none was held yet), or None when the last commit
        released it."""
        keeper, self._keeper = self._keeper, None
        if keeper is not None:
            await keeper.stop()
        self.release_at_end = False
        held = None if self.released else (self.lease or taken)
        self.lease = None
        self.released = False
        return held

    async def keep_lease(self) -> bool:
        """One renewal by the keeper, between commits (under the commit lock, so a commit
        never carries a lease being renewed): False when there is nothing more to keep
        (the last commit let it go, or another worker holds the session now)."""
        async with self._commit_lock:
            lease = self.lease
            if lease is None:
                return False
            renewed = await self.config.store.acquire(
                lease.session_id, lease.owner, self.config.lease, self.config.clock())
            if renewed is None:
                return False  # taken over: the next commit is refused (StoreFenced)
            self.lease = renewed
            return True

    # --- driving ----------------------------------------------------------------------

    async def feed(self, event: Input) -> list[ev.Event]:
        """An input that only needs committing (a message queued while a turn runs): the
        core's step with its commits performed. Any other command is a bug."""
        s = step(self.core, event, self.config.limits)
        self.core = s.core
        out: list[ev.Event] = []
        for command in s.commands:
            if not isinstance(command, Persist):
                raise PhaseflowError(f"{type(event).__name__} asked the runner for "
                                     f"{type(command).__name__} while a turn runs")
            out.extend(await self.persist(command))
        return out

    def request_cancel(self, *, restart: bool = False) -> None:
        """Stop the turn this runner executes (from another task). ``restart``: an
        interrupt - the queued messages start the next turn at once."""
        self._restart = self._restart or restart
        self._cancel.set()
        if self._stream is not None:
            self._stream.put_nowait(_CANCEL)

    async def drive(self, first: Input) -> AsyncIterator[ev.Event]:
        """Perform what ``first`` leads to until the turn pauses or ends."""
        # a new event per drive: an asyncio event is bound to the loop that first waits
        # on it, and a host may drive one session from several loops in turn (each
        # ``reply_sync`` is an ``asyncio.run`` of its own)
        self._cancel = asyncio.Event()
        self._restart = False
        self.obs = await self.config.observer.drive(
            self.core.session_id, self.core.turn, self.machine.current, isinstance(first, Send))
        inputs: deque[Input] = deque([first])
        while inputs:
            given = inputs.popleft()
            if isinstance(given, Cancel) and self._lingering:
                # a cancel that waits for its tools' threads (committed as cancelling)
                waited: list[Cancel] = []
                async for event in self._stopping(given, waited):
                    yield event
                given = waited[0]
                if self._restart and not given.restart:  # an interrupt came meanwhile
                    given = replace(given, restart=True)
                    self._restart = False
                    self._cancel.clear()
            if self._steering_due(given, more=bool(inputs)):
                for event in await self._take_steering():
                    yield event
            s = step(self.core, given, self.config.limits)
            self.core = s.core
            for position, command in enumerate(s.commands):
                if isinstance(command, Persist):
                    # A turn's last commit (only the end of the turn or a pause follows,
                    # nothing is waiting) lets the lease go in the same transaction.
                    last = not inputs and self.release_at_end and all(
                        isinstance(c, TurnOver | Pause) for c in s.commands[position + 1:]
                    ) and position + 1 < len(s.commands)
                    for event in await self.persist(command, release=last):
                        yield event
                elif isinstance(command, CallProvider):
                    async for item in self._call(command):
                        if isinstance(item, ev.TextDeltaEvent):
                            yield item
                        else:
                            inputs.append(item)
                elif isinstance(command, Compact):
                    work = asyncio.ensure_future(summarize(command, self.config, self.obs))
                    if await self._until_cancelled(work):
                        inputs.clear()
                        inputs.append(self._cancelled())
                        break
                    inputs.append(work.result())
                elif isinstance(command, RunTools):
                    inputs.extend(await self._run_tools(command))
                elif isinstance(command, RunBoundary):
                    inputs.append(await self.obs.boundary(self._boundary(command)))
                elif isinstance(command, Sleep):
                    cancelled = await self._until_cancelled(self.config.sleep(command.seconds))
                    if cancelled:
                        inputs.clear()
                        inputs.append(self._cancelled())
                        break
                elif isinstance(command, Pause | TurnOver):
                    continue

    # --- steering from other workers ------------------------------------------------------

    def _steering_due(self, given: Input, *, more: bool) -> bool:
        """Whether to look at the store's queue before stepping ``given``: before what
        leads to the turn's next model request - the last result of a batch of tool
        calls, a failed request that is retried (a reply without calls ends the turn,
        whose end reads the queue anyway). A store whose reads are local (SQLite,
        memory) is read then; another (PostgreSQL) only once a worker said it stored a
        steering message there (a notification), so a turn costs no round trip more."""
        if more or not isinstance(given, ToolDone | RequestFailed):
            return False
        if self.core.status != "running" or self._cancel.is_set():
            return False
        return self.steering_stored or bool(getattr(self.config.store, "local_reads", False))

    async def _take_steering(self) -> list[ev.Event]:
        """The messages other workers stored for this running turn, up to the last
        steering one (:func:`taken_into_turn`), taken into the core's queues as a message
        sent here would be, and out of the store's queue in the same commit: each is
        stored once and delivered once, with the turn's next model request."""
        self.steering_stored = False
        sid = self.core.session_id
        taken = taken_into_turn(tuple(await self.config.store.queued(sid)))
        if not taken:
            return []
        core, view = self.core, self.view()
        events: list[ev.Event] = []
        for queued in taken:
            kind = (PromptKind.STEERING if queued.data.get("kind") == "steering"
                    else PromptKind.FOLLOW_UP)
            s = step(core, Send(content_from_json(queued.data.get("content")), view, kind),
                     self.config.limits)
            for command in s.commands:
                if not isinstance(command, Persist) or command.writes:
                    raise PhaseflowError(f"a stored message asked the runner for "
                                         f"{type(command).__name__} while a turn runs")
                events.extend(command.events)
            core = s.core
        # the core and what the commit takes out of the queue change together (no await
        # between): any commit from here on carries both
        self.core = core
        self.consumed = taken[-1].id
        self.config.observer.queued(sid, [q.data for q in taken])
        return await self.commit(tuple(events))

    # --- commits ----------------------------------------------------------------------

    def record(self) -> SessionRecord:
        core = self.core
        now = self.config.clock()
        if not self.created_at:
            self.created_at = now  # the session's first commit
        return SessionRecord(
            session_id=core.session_id, workflow=self.config.workflow.name,
            workflow_hash=self.config.workflow_hash, version=self.version + 1,
            status=core.status, phase=self.machine.current, turn=core.turn,
            execution=core.execution, continuation=core.continuation,
            machine=self._machine_now(), state=self.state.to_dict(),
            core=core_to_json(core), created_at=self.created_at, updated_at=now,
            next_timer_at=self._deadline(now),
        )

    def _deadline(self, now: float) -> float | None:
        """The next timer's deadline a commit made ``now`` stores."""
        machine = self.machine
        phase = machine.current_phase  # the innermost workflow's, inside a call
        if phase is None:
            return None
        return next_deadline(self.timer_at, self.evaluated_at, phase,
                             machine.current_phase_duration(), now,
                             self.core.status == "finished")

    def timer_due(self) -> bool:
        """A timer's turn would run now (its deadline passed; no turn holds the session)."""
        return is_due(self.timer_at, self.config.clock(), self.core.status)

    def timer_content(self) -> str:
        """The note a timer's turn starts with: the phase and the timer that fired."""
        machine = self.machine
        seconds = machine.current_phase_duration()
        phase = machine.current_phase
        return timer_note(machine.current, due_after(phase, seconds) if phase else None,
                          seconds)

    def _machine_now(self) -> dict[str, Any]:
        """The machine's snapshot as of now. The snapshot is taken again only when the
        machine moved (open, a boundary); between, only the time in phase changes, so a
        commit stores the cached snapshot with the current ``elapsed`` (a reopening adds
        the time since this commit to it: it must be this commit's)."""
        elapsed = self.machine.current_phase_duration()
        if elapsed == self._machine_snapshot.get("elapsed") or not 0 <= elapsed < 2**53:
            return self._machine_snapshot
        return {**self._machine_snapshot, "elapsed": float(elapsed)}

    async def persist(self, command: Persist, *, release: bool = False) -> list[ev.Event]:
        """The core's ``Persist``: its writes applied first when it carries any (a
        cancelled turn's results, with no boundary after them), then one commit."""
        events = command.events
        if command.writes:
            events = (*self._apply_writes(command.writes), *events)
        return await self.commit(events, release=release)

    async def commit(self, events: tuple[ev.Event, ...], *, release: bool = False
                     ) -> list[ev.Event]:
        """One commit point: the values as they are now, and these events (stamped)."""
        async with self._commit_lock:
            now = self.config.clock()
            sid = self.core.session_id
            stamped = [evolve(e, session_id=sid, at=now, turn=e.turn or self.core.turn)
                       for e in events]
            record = self.record()
            await self._renew(now)
            release = release and self.lease is not None
            # The commit that ends a turn (its turn_finished, the session no longer in
            # it) is kept as that turn's record, which a fork starts from.
            keep = record.status not in ("running", "awaiting_approval", "cancelling") and any(
                isinstance(e, ev.TurnFinished) and e.turn == record.turn for e in stamped)
            seqs = await self.obs.commit(stamped, lambda data: self.config.store.commit(
                record, data, expected_version=self.version,
                lease=self.lease, consumed=self.consumed, release=release, keep_turn=keep))
            self.consumed = 0
            self.version = record.version
            self.timer_at = record.next_timer_at
            if release:
                self.lease = None
                self.released = True
            return [evolve(e, seq=seq) for e, seq in zip(stamped, seqs, strict=True)]

    async def _renew(self, now: float) -> None:
        """Keep the lease while the turn runs: renewed once half of it has passed (a lost
        lease shows at the commit, as ``StoreFenced``)."""
        lease = self.lease
        ttl = self.config.lease
        if lease is None or lease.expires - now > ttl / 2:
            return
        renewed = await self.config.store.acquire(lease.session_id, lease.owner, ttl, now)
        if renewed is not None:
            # Still ours (a new epoch if it had expired unclaimed meanwhile: the version
            # compare-and-set still refuses a commit if another worker wrote since).
            self.lease = renewed

    # --- cancellation -----------------------------------------------------------------

    async def _stopping(self, cancel: Cancel, out: list[Cancel]) -> AsyncIterator[ev.Event]:
        """The cancelled turn's sync tools whose threads still run: the session is
        committed ``cancelling``, then each thread is waited for until it ends (its
        result is kept, as a call that finished before the cancel) or reaches its
        deadline (given up on: ``unknown``). ``out`` gets the cancel that ends the turn."""
        lingering, self._lingering = self._lingering, []
        names = tuple(dict.fromkeys(t.call.name for t in lingering))
        s = step(self.core, Cancelling(names), self.config.limits)
        self.core = s.core
        for command in s.commands:
            if isinstance(command, Persist):
                for event in await self.persist(command):
                    yield event
        done = list(cancel.done)
        given_up: list[str] = []
        for t in lingering:
            remaining = t.deadline - time.perf_counter()
            if not t.ended.is_set() and remaining > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(t.ended.wait(), remaining)
            if t.ended.is_set():
                done.append(await self._thread_result(t))
            else:
                given_up.append(t.call.id)
        out.append(replace(cancel, done=tuple(done), given_up=tuple(given_up)))

    async def _thread_result(self, t: ToolThread) -> ToolDone:
        """The result of a sync tool whose thread ended after its turn was cancelled."""
        call = t.call
        duration = time.perf_counter() - t.started
        if t.error is not None:
            return ToolDone(call.id, Done(ToolOutcome.error(
                f"{call.name} failed: {describe_exception(t.error)}"), "error"), duration)
        entry = self._catalogue_entry(call.name)
        done = await self._outcome(call, t.value, entry.writes if entry is not None else ())
        return ToolDone(call.id, done, duration)

    def _catalogue_entry(self, name: str) -> Tool | None:
        """Tool ``name``'s catalogue entry (its ``timeout``, ``writes``): the current
        workflow's, inside a call, else the first of the tree's."""
        inner = self.machine.workflow
        if inner is not None and inner.tools is not None and name in inner.tools:
            return inner.tools[name]
        return (tree_catalogue(self.config.workflow) or {}).get(name)

    def _cancelled(self, done: tuple[ToolDone, ...] = ()) -> Cancel:
        """The input that says the host stopped the turn (``done``: calls that finished).
        An interrupt's cancel is spent by it: the turn it starts runs uncancelled."""
        restart = self._restart
        if restart:
            self._restart = False
            self._cancel.clear()
        return Cancel(self.config.clock(), done, restart=restart)

    async def _until_cancelled(self, work: Awaitable[T]) -> bool:
        """Await ``work``; True (and ``work`` stopped) when the host cancelled first."""
        task = asyncio.ensure_future(work)
        waiter = asyncio.ensure_future(self._cancel.wait())
        try:
            await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            # the runner itself is stopped (its host's task cancelled): what it waited
            # for stops too, and its outcome is collected (never left running, or
            # reported as an exception nobody retrieved)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            raise
        finally:
            waiter.cancel()
        if task.done():
            task.result()
            return False
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return True

    # --- the provider -----------------------------------------------------------------

    def build_request(self, command: CallProvider) -> tuple[ProviderRequest, PhaseView]:
        view = self.view()
        final = command.final or view.terminal
        config = self.config
        every = config.offer_tools == "workflow"
        context = context_text(self.machine, self.state, final=final,
                               plan=self.core.execution.mode is Mode.PLAN,
                               allowed=view.names if every else None)
        system = config.system.strip()
        if config.context_position == "system":
            system, context = joined(system, context), ""
        if every:  # the same tools in every request; the view decides what may run
            tools = workflow_specs(config.workflow, config.tools, config.views)
            choice: Literal["auto", "none"] = "none" if final or not view.tools else "auto"
        else:
            tools = () if final else tool_specs(view)
            choice = "none" if final or not tools else "auto"
        provider = config.role_provider(self.model_role())
        shape = self.reply_shape(final)
        history: Sequence[Any] = command.history
        folded_replies = command.folded_replies
        scope = self.machine.call_scope() if self.machine.call_depth else None
        if scope is not None:  # inside a call whose history is not 'full'
            from phaseflow.session.call_history import scoped_history, scoped_out_replies

            history = scoped_history(command.history, *scope, folded=command.folded)
            folded_replies += scoped_out_replies(command.history, history)
        request = ProviderRequest(
            model=config.model_of(provider), system=system,
            history=for_provider(history, provider, config),
            tools=tools, request_id=command.request_id, tool_choice=choice,
            max_output_tokens=config.max_output_tokens,
            folded_replies=folded_replies, context=context,
            reply_schema=None if shape is None else shape.schema_json(),
        )
        return request, view

    def reply_shape(self, final: bool = False) -> ReplyShape | None:
        """The current phase's structured reply (``reply:``), unless the request is the
        turn's last (the step limit's final request, answered in free text)."""
        if final:
            return None
        phase = self.machine.current_phase  # the innermost workflow's, inside a call
        return None if phase is None else phase.reply

    def model_role(self) -> str:
        """The model role the current phase runs on: its own ``model``, else its
        workflow's (the top workflow's rule; a called workflow's phases name their own)."""
        phase = self.machine.current_phase
        if phase is not None and phase.model:
            return phase.model
        return self.config.workflow.model or DEFAULT_ROLE

    def _sent_chars(self, request: ProviderRequest) -> int:
        """A request's size in characters, when the agent compacts its history (the
        core turns the reply's token usage into a ratio with it); 0 otherwise."""
        if self.config.limits.max_history_tokens is None:
            return 0
        return (len(request.system) + len(request.context) + history_chars(request.history)
                + sum(len(t.name) + len(t.description) + len(str(t.parameters))
                      for t in request.tools))

    async def _call(self, command: CallProvider) -> AsyncIterator[ev.TextDeltaEvent | Input]:
        """One model request: text deltas as they stream, then the reply (or the failure,
        or a Cancel when the host cancelled: the stream is closed at once)."""
        request, view = self.build_request(command)
        media = self._named_media(request.history)
        if media:  # the bytes of the attachments it names, for the provider's own form
            request = replace(request, attachments=await load(
                self.config.store, media, self._media))
        self.last_request = request
        if self._cancel.is_set():
            yield self._cancelled()
            return
        queue: asyncio.Queue[Any] = asyncio.Queue()
        self._stream = queue  # request_cancel() puts _CANCEL here: no task per item
        role = self.config.workflow.role_of(self.machine.current)
        provider = self.config.role_provider(role)
        pump = asyncio.ensure_future(pump_stream(request, queue, provider, self.obs))
        # a pump that ends without its last item (a provider that raised CancelledError
        # of its own) must not leave the turn waiting: its end is an item too
        pump.add_done_callback(lambda _: queue.put_nowait(_PUMP_ENDED))
        try:
            while True:
                item = await queue.get()
                if item is _PUMP_ENDED:
                    item = ProviderFailure("the provider's stream was cancelled", False)
                if item is _CANCEL:
                    pump.cancel()
                    await asyncio.gather(pump, return_exceptions=True)
                    yield self._cancelled()
                    return
                if isinstance(item, ev.TextDeltaEvent):
                    yield evolve(item, session_id=self.core.session_id, turn=self.core.turn,
                                 at=self.config.clock())
                    continue
                if isinstance(item, ProviderReply):
                    if item.carried is not None and provider is not self.config.provider:
                        item = replace(item, carried=replace(item.carried, role=role))
                    yield Replied(command.request_id, item, view, self._flagged(item, view),
                                  self._sent_chars(request),
                                  self.reply_shape(command.final or view.terminal))
                else:
                    yield RequestFailed(command.request_id, item, self.config.rng.random())
                return
        finally:
            self._stream = None
            if not pump.done():
                pump.cancel()

    def _flagged(self, reply: ProviderReply, view: PhaseView) -> frozenset[int]:
        """The positions of the calls the host's approval policy wants a human for,
        judged under the ids the core will give them (:func:`named_calls`)."""
        policy = self.config.approve
        if policy is None or reply.stop == "max_tokens" or self.core.final_request:
            return frozenset()  # (a cut reply's calls never run: nothing to ask about)
        flagged: set[int] = set()
        for position, call in enumerate(named_calls(reply.calls, self.core)):
            try:
                if policy(call, self._context(call.id)):
                    flagged.add(position)
            except Exception:
                flagged.add(position)  # a policy that fails asks the human: fail closed
        return frozenset(flagged)

    # --- tools ------------------------------------------------------------------------

    def _context(self, call_id: str) -> ToolContext:
        ranges = self.core.execution.edit_ranges
        return ToolContext(self.core.session_id, call_id, self.machine.current,
                           ReadOnlyMapping(self.state.to_dict()),
                           tuple((r.path, r.start, r.end) for r in ranges) if ranges else ())

    async def _run_tools(self, command: RunTools) -> list[Input]:
        """Run the admitted calls; one ToolDone each, in the order they finished (or
        one Cancel carrying those that finished, if the host cancelled)."""
        finished: list[ToolDone] = []
        limit = asyncio.Semaphore(1 if command.sequential else self.config.max_concurrency)

        async def one(p: Planned) -> None:
            async with limit:
                finished.append(await self.obs.tool(p.call, self._run_one(p)))

        if command.sequential:
            async def all_in_order() -> None:
                for p in command.calls:
                    await one(p)
            work: Awaitable[Any] = all_in_order()
        else:
            work = asyncio.gather(*(one(p) for p in command.calls))
        cancelled = await self._until_cancelled(work)
        if cancelled:
            ids = {p.call.id for p in command.calls}
            self._lingering = [t for cid, t in self._threads.items()
                               if cid in ids and not t.ended.is_set()]
            return [self._cancelled(tuple(finished))]
        return list(finished)

    async def _run_one(self, planned: Planned) -> ToolDone:
        call = planned.call
        started = time.perf_counter()
        if call.name == GO_TO_PHASE:
            done = await self._check_move(call)
            return ToolDone(call.id, done, time.perf_counter() - started)
        if call.name == READ_OUTPUT:
            return ToolDone(call.id, await run_read_output(
                self.config.store, self.core.session_id, self.core.captures, call),
                            time.perf_counter() - started)
        fn = self.config.tools.get(call.name)
        entry = self._catalogue_entry(call.name)
        if fn is None:  # offered, so implemented: only a host that changed its tools
            return ToolDone(call.id, Done(ToolOutcome.error(
                f"Tool {call.name!r} has no implementation."), "error"), 0.0)
        timeout = fn.timeout if fn.timeout is not None else (
            entry.timeout if entry is not None else None)
        threaded = bool(timeout) and not fn.is_async
        try:
            if not timeout:
                value = await fn.invoke(call.argument_value(), self._context(call.id))
            else:
                # a sync tool with a timeout runs in a thread of its own, so the deadline
                # ends the wait even while the function runs (see FunctionTool.invoke);
                # the runner keeps the thread, so that a cancel can wait for it
                work = asyncio.ensure_future(
                    in_thread(fn, call, self._context(call.id), started + timeout,
                              self._threads) if threaded else
                    fn.invoke(call.argument_value(), self._context(call.id)))
                try:
                    # the deadline is ours only when it passed: a TimeoutError the tool
                    # raised itself (a socket's) is the tool's own failure, below
                    done_, _ = await asyncio.wait({work}, timeout=timeout)
                except asyncio.CancelledError:
                    work.cancel()
                    raise
                if not done_:
                    work.cancel()
                    return ToolDone(call.id, timed_out(call, timeout, threaded),
                                    time.perf_counter() - started)
                value = work.result()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return ToolDone(call.id, Done(ToolOutcome.error(
                f"{call.name} failed: {describe_exception(exc)}"), "error"),
                time.perf_counter() - started)
        writes_allowed = entry.writes if entry is not None else ()
        done = await self._outcome(call, value, writes_allowed)
        return ToolDone(call.id, done, time.perf_counter() - started)

    async def _outcome(self, call: ToolCall, value: Any, allowed: tuple[str, ...]) -> Done:
        try:
            output, candidates = split_return(value, allowed)
            text = output_text(output)
        except Exception as exc:
            return Done(ToolOutcome.error(f"{call.name} returned a value that is not JSON: "
                                          f"{describe_exception(exc)}"), "error")
        # the writes asked for, as they came: the core judges them (catalogue, types)
        outcome, captured = await present(text, self.config, self.core.session_id,
                                          self._captured_bytes)
        if captured is not None:
            self._capturing[captured[0]] = captured[1]
        if isinstance(value, ToolResult) and value.attachments and not outcome.is_error:
            parts: list[MediaPart] = []
            for item in value.attachments:
                made = await attach(self.config.store, self.core.session_id, item.data,
                                    item.media_type, accepted_media(self.config.provider))
                if isinstance(made, MediaRefused):
                    return Done(ToolOutcome.error(
                        f"{call.name} returned an attachment that cannot be sent: {made}"),
                        "error", tuple(candidates.items()))
                parts.append(made)
            shown = outcome.content
            lead = (TextPart(shown),) if isinstance(shown, str) else shown
            outcome = ToolOutcome(outcome.status, (*lead, *parts))
        return Done(outcome, "error" if outcome.is_error else "ok", tuple(candidates.items()),
                    captured=captured)

    def _named_media(self, history: Sequence[Message]) -> frozenset[str]:
        """The stored attachments ``history`` names: the new messages since the last
        request looked at when it extends that request's history (a conversation's
        next request costs O(new messages), not O(history)), all of it otherwise."""
        last, named = self._media_scan
        if type(history) is History and last is not None and history.starts_with(last):
            tail = history.after(len(last))
            if tail:
                named = named | history_media(tail)
        else:
            named = frozenset(history_media(history))
        self._media_scan = (history if type(history) is History else None, named)
        return named

    def _captured_bytes(self) -> int:
        """The bytes of tool output this session keeps (its capture quota's count)."""
        recorded = self.core.captures
        known = {reference for reference, _ in recorded}
        for reference in [r for r in self._capturing if r in known]:
            del self._capturing[reference]  # recorded by the core since
        return sum(n for _, n in recorded) + sum(self._capturing.values())

    async def _check_move(self, call: ToolCall) -> Done:
        """``go_to_phase``: checked as the machine's ``request`` checks it; a target only
        missing required keys runs its preparations (as ``take_request`` does). The move
        itself happens after the group."""
        arguments = call.argument_value()
        target = arguments.get("phase") if isinstance(arguments, dict) else None
        if not isinstance(target, str):
            return Done(ToolOutcome.error("go_to_phase needs a phase name"), "refused")
        status = self.machine.move_status(target, self.state)
        if status is None:
            moves = self.machine.model_moves(self.state)
            shown = ", ".join(dict.fromkeys(t for t, s in moves if s.stopped_by != "when"))
            return Done(ToolOutcome.error(
                f"Cannot move to {target!r} from {self.machine.current}: phases you can move "
                f"to now: {shown or 'none'}."), "error")
        if status.verdict == "ready":
            return Done(ToolOutcome.ok(f"Moving to {target} after this step."), "ok",
                        move=target)
        if status.stopped_by == "when":
            return Done(ToolOutcome.error(
                f"Cannot move to {target!r} now: the condition of that move does not hold."),
                "error")
        #: the state the target's preparations fetched, shown beside the result
        prepared: tuple[ev.Event, ...] = ()
        if status.verdict == "preparable":
            before = self.state.to_dict()
            ready = await self.obs.prepare(target, self.machine.prepare_target(
                target, self.state, transcript=self._transcript()))
            prepared = tuple(self._state_events(before, "prepare"))
            if ready and self.machine.request(target, self.state):
                return Done(ToolOutcome.ok(f"Moving to {target} after this step."), "ok",
                            move=target, notes=prepared)
        if status.missing:
            keys = ", ".join(status.missing)
            return Done(ToolOutcome.error(
                f"Cannot move to {target!r} yet: it needs {keys}, which are not known."),
                "error", notes=prepared)
        return Done(ToolOutcome.error(
            f"Cannot move to {target!r} now: its entry condition does not hold."), "error",
            notes=prepared)

    # --- the boundary -----------------------------------------------------------------

    def _state_events(self, before: Mapping[str, Any], source: str) -> list[ev.Event]:
        changes = self.state.take_changes()
        if not changes:
            return []
        keys = list(dict.fromkeys(c.key for c in changes))
        after = self.state
        return [ev.StateChanged(keys=tuple(keys), old={k: before.get(k) for k in keys},
                                new={k: after.get(k) for k in keys}, source=source)]

    def _apply_writes(self, writes: tuple[tuple[str, str, str, Any], ...]) -> list[ev.Event]:
        """The tools' state writes, in the model's call order; their ``state_changed``."""
        before = self.state.to_dict()
        self.state.take_changes()
        for _call_id, _tool, key, value in writes:
            self.state.set(key, value)
        return self._state_events(before, "tools") if writes else []

    async def _boundary(self, command: RunBoundary) -> BoundaryDone:
        self.evaluated_at = self.config.clock()  # a due timer's transition is evaluated
        events = self._apply_writes(command.writes)
        before = self.state.to_dict()
        turn = self.core.turn
        from_phase = self.machine.current
        where = self.machine.path if self._composes() else None
        if command.move is not None:
            taken = await self.machine.take_request(command.move, self.state, turn=turn,
                                                    transcript=self._transcript())
            if self.machine.call_depth:
                self.machine.mark_calls(len(self.core.history()))
            if taken is not None:
                events.extend(self._machine_errors(taken.events))
                events.append(self._phase_changed(from_phase, taken.to_phase, "model"))
            else:
                events.append(ev.ErrorEvent(code="move_refused", message=(
                    f"the move to {command.move!r} no longer holds after this step's writes")))
        else:
            result_ = await self.machine.advance(self.state, turn=turn, counted=command.final,
                                                 transcript=self._transcript())
            if self.machine.call_depth:  # where each call entered began
                self.machine.mark_calls(len(self.core.history()))
            events.extend(self._machine_errors(result_.events))
            if result_.transition is not None:
                trigger = result_.transition.trigger
                events.append(self._phase_changed(
                    from_phase, result_.transition.to_phase,
                    "model" if isinstance(trigger, ModelTrigger) else trigger.kind))
            elif where is not None and self.machine.path != where:
                # an automatic hand-off moved the conversation without a move of its own
                events.append(self._phase_changed(from_phase, self.machine.current, "handoff"))
        events.extend(self._state_events(before, "effects"))
        self._machine_snapshot = self.machine.snapshot()
        return BoundaryDone(self.view(), tuple(events), command.final)

    def _transcript(self) -> tuple[dict[str, Any], ...] | None:
        """The conversation's last messages as hooks receive them (``ctx.transcript``:
        ``{role, content, ...}``, oldest first): as many as the workflow's widest
        ``transcript: N`` (each call is cut to its own); ``None`` when no hook takes any."""
        window = self.config.transcript_window
        if not window:
            return None
        history = self.core.history()
        return tuple(message_json(m) for m in history[max(0, len(history) - window):])

    def _phase_changed(self, from_phase: str, to_phase: str, trigger: str) -> ev.PhaseChanged:
        """The move's event: in a workflow that composes, the phase the move settled in
        (a call entered or returned from moves on past the move's own target) and its
        path; else the move's target."""
        if not self._composes():
            return ev.PhaseChanged(from_phase=from_phase, to_phase=to_phase, trigger=trigger)
        return ev.PhaseChanged(from_phase=from_phase, to_phase=self.machine.current,
                               trigger=trigger, path=self.machine.path)

    def _composes(self) -> bool:
        """Is the conversation in a workflow that composes others, or inside a call or
        past a hand-off?"""
        workflow = self.machine.workflow
        return (workflow is not None and workflow.composes) or self.machine.call_depth > 0 \
            or len(self.machine.path) > 2

    @staticmethod
    def _machine_errors(records: tuple[Any, ...]) -> list[ev.Event]:
        return [ev.ErrorEvent(code=r.kind, message=f"{r.phase}: {r.message}") for r in records]
