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
import contextvars
import random
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeVar

from phaseflow.errors import PhaseflowError
from phaseflow.expr.describe import describe_exception
from phaseflow.machine.machine import PhaseMachine
from phaseflow.machine.results import ModelTrigger
from phaseflow.machine.state import ReadOnlyMapping, State
from phaseflow.observe.observer import IDLE, NOOP, Observer, TurnObserver
from phaseflow.providers.assembly import ReplyAssembler
from phaseflow.providers.media import accepted_media
from phaseflow.providers.protocol import (
    Provider,
    ProviderFailure,
    ProviderReply,
    ProviderRequest,
    TextDelta,
)
from phaseflow.session import events as ev
from phaseflow.session.attachments import attach, history_media, load
from phaseflow.session.compaction import DEFAULT_PROMPT, history_chars, summary_input
from phaseflow.session.core import GO_TO_PHASE, step
from phaseflow.session.core_json import core_to_json
from phaseflow.session.outputs import (
    READ_OUTPUT,
    READ_OUTPUT_TOOL,
    OutputNotFound,
    read_output,
    tool_text,
)
from phaseflow.session.records import message_json
from phaseflow.session.timers import due_after, is_due, next_deadline, timer_note
from phaseflow.session.tool_calls import named_calls
from phaseflow.session.turn_order import taken_into_turn
from phaseflow.session.values import (
    BoundaryDone,
    CallProvider,
    Cancel,
    Cancelling,
    Compact,
    Compacted,
    Core,
    Done,
    Input,
    Limits,
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
    ViewCache,
    context_text,
    joined,
    phase_view,
    tool_specs,
    workflow_specs,
)
from phaseflow.spec.model import (
    DEFAULT_ROLE,
    CallEffect,
    ReplyShape,
    Tool,
    Workflow,
    tree_catalogue,
    tree_phases,
)
from phaseflow.stores.base import Lease, SessionRecord, Store, StoreError
from phaseflow.tools.function import (
    FunctionTool,
    ToolContext,
    ToolResult,
    output_text,
    split_return,
)
from phaseflow.turn.execution import Mode, PromptKind
from phaseflow.turn.inputs import evolve
from phaseflow.turn.media import MediaRefused
from phaseflow.turn.messages import (
    AssistantMessage,
    History,
    MediaPart,
    Message,
    TextPart,
    ToolCall,
    ToolOutcome,
    UserMessage,
    content_from_json,
)
from phaseflow.turn.output import (
    Capture,
    CaptureComplete,
    CaptureIncomplete,
    CaptureReason,
    OutputReference,
    PresentationComplete,
    PresentationTruncated,
    Selection,
    SelectionKind,
    SelectionUnit,
    ToolOutput,
    present_lines,
    result,
)
from phaseflow.turn.rejections import Rejected

T = TypeVar("T")

#: who decides whether a call needs a human: ``approve(call, ctx) -> bool``
ApprovalPolicy = Callable[[ToolCall, ToolContext], bool]


def transcript_window(workflow: Workflow) -> int:
    """The widest ``transcript: N`` of the ``call`` effects and preparations of the
    workflow and every workflow it uses (each without one: the default); 0 when none
    has a call."""
    widest = 0
    for phase in tree_phases(workflow):
        effects = (*phase.on_enter, *phase.on_exit, *(p.effect for p in phase.prepare))
        for effect in effects:
            if isinstance(effect, CallEffect):
                widest = max(widest, effect.transcript_window)
    return widest


@dataclass(frozen=True, slots=True)
class RunnerConfig:
    """An agent's settings, shared by its sessions."""

    workflow: Workflow
    workflow_hash: str
    provider: Provider
    tools: Mapping[str, FunctionTool]
    store: Store
    system: str = ""
    model: str = ""
    limits: Limits = field(default_factory=Limits)
    approve: ApprovalPolicy | None = None
    #: lines of a tool's output the model is shown; the rest is kept by the store
    output_lines: int = 200
    #: characters of a tool's output the model is shown (after the line limit)
    output_chars: int = 20_000
    #: the most bytes of one tool output kept for ``read_output`` (capture_byte_limit)
    capture_bytes: int = 10 * 2**20
    #: the most bytes of tool output one session keeps (session_disk_quota)
    session_capture_bytes: int = 100 * 2**20
    max_concurrency: int = 8
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    rng: random.Random = field(default_factory=random.Random)
    #: seconds a worker's lease on a session lasts (renewed while a turn runs)
    lease: float = 30.0
    #: this worker's name in leases
    worker: str = ""
    #: the most tokens a model reply may have, sent with every request (None: no limit)
    max_output_tokens: int | None = None
    #: what each phase offers, worked out once per phase (see ViewCache)
    views: ViewCache = field(default_factory=ViewCache)
    #: the most messages a ``call`` effect or preparation of the workflow receives
    #: (``transcript: N``; 0: none has a call, and no transcript is built)
    transcript_window: int = 0
    #: who summarizes a compacted history (None: ``provider``), and what it is told
    compaction_provider: Provider | None = None
    compaction_prompt: str = DEFAULT_PROMPT
    #: who watches the turns (traces and metrics; see phaseflow.observe)
    observer: Observer = NOOP
    #: where the phase's instructions and the navigation block go: ``end`` (after the
    #: history, ``ProviderRequest.context``) or ``system`` (in the system text)
    context_position: Literal["end", "system"] = "end"
    #: the tools each request offers: the ``phase``'s, or every tool of the ``workflow``
    #: in one stable order (the phase's view still decides what may run)
    offer_tools: Literal["phase", "workflow"] = "phase"
    #: the providers by model role (``default`` is ``provider``): a phase's requests go
    #: to its role's (``Workflow.role_of``); empty: ``provider`` for every phase
    providers: Mapping[str, Provider] = field(default_factory=dict)

    def role_provider(self, role: str) -> Provider:
        """The provider of ``role`` (``provider`` for ``default`` or an unmapped role)."""
        return self.providers.get(role, self.provider)

    def model_of(self, provider: Provider) -> str:
        """The model name a request to ``provider`` carries: the agent's ``model`` for its
        default provider, otherwise the provider's own ``model``."""
        if provider is self.provider:
            return self.model
        return getattr(provider, "model", "") or self.model


def for_provider(history: Sequence[Message], provider: Provider, config: RunnerConfig
                 ) -> Sequence[Message]:
    """``history`` as a request to ``provider`` sends it: an assistant message whose
    carried parts were made by another provider object (another model role's) loses them,
    its text and calls kept. The history itself when nothing is dropped (no copy: an agent
    with one provider, or a conversation that stayed on one role)."""
    if not config.providers or len(set(map(id, config.providers.values()))) == 1:
        return history

    def foreign(message: Message) -> bool:
        if not isinstance(message, AssistantMessage) or message.carried is None:
            return False
        return config.providers.get(message.carried.role or DEFAULT_ROLE) is not provider

    if not any(foreign(m) for m in history):
        return history
    return tuple(replace(m, carried=None) if isinstance(m, AssistantMessage) and foreign(m)
                 else m for m in history)


def _ok_value(value: T | Rejected) -> T:
    """A turn-core value built from values the runner made itself: a rejection is a bug."""
    if isinstance(value, Rejected):
        raise PhaseflowError(f"turn core refused the runner's value: {value}")
    return value


@dataclass(slots=True)
class _ToolThread:
    """A sync tool's thread: its call, when it started and its deadline
    (``time.perf_counter``), and, once ``ended``, what it returned or raised."""

    call: ToolCall
    started: float
    deadline: float
    ended: asyncio.Event
    value: Any = None
    error: BaseException | None = None


class _LeaseKeeper:
    """Renews a running turn's lease every third of its length, whatever the turn waits
    for. A turn renews it at its commits too, but between two commits it may wait longer
    than the lease lasts (a model streaming for seconds on a loaded worker, a slow tool):
    unrenewed, the lease would expire under a live turn, and another worker's sweep would
    take the turn over and fence this one's next commit. A renewal that fails (the store
    unreachable) is tried again at the next tick; one refused (another worker took the
    session) ends the keeping: the turn's next commit is refused."""

    def __init__(self, runner: Runner) -> None:
        self._runner = runner
        self._loop = asyncio.get_running_loop()
        self._every = max(runner.config.lease / 3, 0.01)
        self._stopped = False
        #: the next renewal's timer (a turn shorter than a third of the lease costs only
        #: this); a renewal runs as a task of its own while it is due
        self._handle: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None

    @classmethod
    def start(cls, runner: Runner) -> _LeaseKeeper:
        keeper = cls(runner)
        keeper._handle = keeper._loop.call_later(keeper._every, keeper._due)
        return keeper

    def _due(self) -> None:
        self._handle = None
        if not self._stopped:
            self._task = self._loop.create_task(self._renew())

    async def _renew(self) -> None:
        try:
            kept = await self._runner.keep_lease()
        except (StoreError, OSError):
            kept = True  # the store is unreachable now: the next tick tries again
        if kept and not self._stopped:
            self._handle = self._loop.call_later(self._every, self._due)

    async def stop(self) -> None:
        """Stop renewing (a renewal under way finishes first: never cut mid-query)."""
        self._stopped = True
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        task = self._task
        if task is None:
            return
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:
            task.cancel()
            raise
        error = None if task.cancelled() else task.exception()
        if error is not None:  # not the store's (those are retried): shown where it lets go
            raise error


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
        self._keeper: _LeaseKeeper | None = None
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
        self._threads: dict[str, _ToolThread] = {}
        #: the threads a cancel found still running (the drive waits for them)
        self._lingering: list[_ToolThread] = []
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
        self._keeper = _LeaseKeeper.start(self)

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
                    work = asyncio.ensure_future(self._summarize(command))
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

    async def _thread_result(self, t: _ToolThread) -> ToolDone:
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

    async def _summarize(self, command: Compact) -> Compacted:
        """One compaction request: the folded messages (and the earlier summary) as one
        user message, the agent's compaction prompt as the system text, no tools. Its
        text is the summary; a failure or an empty text leaves the history as it was."""
        provider = self.config.compaction_provider or self.config.provider
        request = ProviderRequest(
            model=self.config.model_of(provider), system=self.config.compaction_prompt,
            history=(UserMessage(summary_input(command.previous, command.messages)),),
            tools=(), request_id=command.request_id, tool_choice="none",
            max_output_tokens=command.max_tokens, purpose="compaction")
        assembler = ReplyAssembler()
        try:
            stream = self.obs.stream(provider, request)
            try:
                async for item in stream:
                    outcome = assembler.add(item)
                    if isinstance(outcome, ProviderFailure):
                        return Compacted(command.request_id, None, outcome.message)
                    if outcome == "end":
                        break
            finally:
                closing = getattr(stream, "aclose", None)
                if closing is not None:
                    await closing()
            reply = assembler.reply()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a provider that raises: its message, never a traceback
            return Compacted(command.request_id, None, describe_exception(exc))
        if isinstance(reply, ProviderFailure):
            return Compacted(command.request_id, None, reply.message)
        if not reply.text.strip():
            return Compacted(command.request_id, None, "the summary was empty")
        return Compacted(command.request_id, reply.text.strip())

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
        pump = asyncio.ensure_future(self._pump(request, queue, provider))
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

    async def _pump(self, request: ProviderRequest, queue: asyncio.Queue[Any],
                    provider: Provider) -> None:
        """Read the stream into ``queue``: text deltas as they come, then the whole reply
        or the failure. Every event is checked as it comes (``ReplyAssembler``); a
        provider that raises, or yields what the protocol does not allow, is a
        non-retryable failure. Whatever happens, the queue gets its last item, so the
        turn reading it never waits for ever; only the host's cancellation (and an
        interpreter exit) leaves here as an exception."""
        assembler = ReplyAssembler()
        last: Any = None
        try:
            # closed as soon as the reply ends: a `break` would leave the provider's
            # stream to be finalised later by the loop, perhaps after it closed
            stream = self.obs.stream(provider, request)
            try:
                async for item in stream:
                    outcome = assembler.add(item)
                    if isinstance(outcome, TextDelta):
                        await queue.put(ev.TextDeltaEvent(text=outcome.text))
                    elif isinstance(outcome, ProviderFailure):
                        last = outcome
                        break
                    elif outcome == "end":
                        break
            finally:
                closing = getattr(stream, "aclose", None)
                if closing is not None:
                    await closing()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # a provider that raises: its message, not a traceback
            if last is None:
                last = ProviderFailure(describe_exception(exc), retryable=False)
            if isinstance(exc, KeyboardInterrupt | SystemExit):
                queue.put_nowait(last)
                raise  # the process is stopping: the turn ends, the process decides
        queue.put_nowait(last if last is not None else assembler.reply())

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
            return ToolDone(call.id, await self._read_output(call),
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
                    self._in_thread(fn, call, started + timeout) if threaded else
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
                    return ToolDone(call.id, self._timed_out(call, timeout, threaded),
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

    async def _in_thread(self, fn: FunctionTool, call: ToolCall, deadline: float) -> Any:
        """``fn`` called in a daemon thread of its own, awaited without blocking the loop;
        the thread is kept (``_threads``) until it ends, so that a cancelled turn can
        wait for it. A wait that is cancelled leaves the thread to finish on its own."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        t = _ToolThread(call, time.perf_counter(), deadline, asyncio.Event())
        arguments, ctx = call.argument_value(), self._context(call.id)
        context = contextvars.copy_context()

        def ended(value: Any, error: BaseException | None) -> None:
            t.value, t.error = value, error
            t.ended.set()
            if self._threads.get(call.id) is t:
                del self._threads[call.id]
            if future.done():
                return  # the wait was cancelled (a timeout, a cancel): read from ``t``
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(value)

        def work() -> None:
            try:
                value, error = context.run(asyncio.run, fn.invoke(arguments, ctx)), None
            except BaseException as exc:  # handed to the awaiting coroutine, not lost here
                value, error = None, exc
            with contextlib.suppress(RuntimeError):  # (a loop closed meanwhile)
                loop.call_soon_threadsafe(ended, value, error)

        self._threads[call.id] = t
        threading.Thread(target=work, name="phaseflow-tool", daemon=True).start()
        return await future

    @staticmethod
    def _timed_out(call: ToolCall, timeout: float, threaded: bool) -> Done:
        """A call past its deadline. An async tool was cancelled at its ``await``: an
        error. A sync tool's thread runs on (nothing can stop it), so what it does is
        not known: ``unknown``, and the model is told not to take it as a failure."""
        if not threaded:
            return Done(ToolOutcome.error(f"{call.name} timed out after {timeout:g} s"),
                        "error")
        return Done(ToolOutcome.error(
            f"{call.name} timed out after {timeout:g} s; it may still complete, so its "
            f"outcome is unknown: do not assume it failed, and do not call it again to "
            f"retry"), "unknown")

    async def _outcome(self, call: ToolCall, value: Any, allowed: tuple[str, ...]) -> Done:
        try:
            output, candidates = split_return(value, allowed)
            text = output_text(output)
        except Exception as exc:
            return Done(ToolOutcome.error(f"{call.name} returned a value that is not JSON: "
                                          f"{describe_exception(exc)}"), "error")
        # the writes asked for, as they came: the core judges them (catalogue, types)
        outcome, captured = await self._present(text)
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

    async def _present(self, text: str) -> tuple[ToolOutcome, tuple[str, int] | None]:
        """The model's view of a tool's output, cut by the turn core's presentation rules
        (whole lines, at most ``output_lines`` of them and ``output_chars`` characters; a
        first line longer than that is cut by bytes), the whole capture kept by the
        store under a reference of the session the note names (``read_output`` reads
        it back), and that capture. An output larger than the capture bounds
        (``capture_bytes`` an output, ``session_capture_bytes`` a session) is kept as
        far as they allow, and the result is an error naming why (never a silent cut)."""
        limit_lines, limit_chars = self.config.output_lines, self.config.output_chars
        lines = text.splitlines(keepends=True)
        if len(lines) <= limit_lines and len(text) <= limit_chars:
            return ToolOutcome.ok(text), None
        data = text.encode()
        room = max(0, self.config.session_capture_bytes - self._captured_bytes())
        keep = min(len(data), self.config.capture_bytes, room)
        capture: Capture = CaptureComplete()
        if keep < len(data):
            capture = CaptureIncomplete(CaptureReason.CAPTURE_BYTE_LIMIT
                                        if keep == self.config.capture_bytes
                                        else CaptureReason.SESSION_DISK_QUOTA)
            text = data[:keep].decode(errors="ignore")  # the part that could be kept
            data = text.encode()
            lines = text.splitlines(keepends=True)
        fit, size = 0, 0
        for line in lines[:limit_lines]:
            size += len(line)
            if size > limit_chars:
                break
            fit += 1
        if fit == len(lines) or not data:  # what could be kept is all shown
            whole = ToolOutput.create(text, capture, PresentationComplete())
            return result(_ok_value(whole)), None
        token = await self.config.store.put_capture(data, session_id=self.core.session_id)
        self._capturing[token] = len(data)
        digest = token.rpartition("-")[2]
        reference = _ok_value(OutputReference.create(token, "text/plain", len(data), digest))
        captured = (token, len(data))
        if fit:
            return result(_ok_value(present_lines(text, fit, capture=capture,
                                                  reference=reference))), captured
        prefix = data[:limit_chars].decode(errors="ignore")
        shown = len(prefix.encode())
        selection = _ok_value(Selection.create(SelectionKind.CAPTURED_PREFIX,
                                               SelectionUnit.BYTES, 0, shown, len(data)))
        output = ToolOutput.create(prefix, capture, PresentationTruncated(len(data) - shown),
                                   selection, reference)
        return result(_ok_value(output)), captured

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

    async def _read_output(self, call: ToolCall) -> Done:
        """``read_output``: a range of one of this session's captured outputs."""
        arguments = call.argument_value()
        if not isinstance(arguments, dict):
            return Done(ToolOutcome.error("read_output needs a reference"), "refused")
        reference = arguments.get("reference")
        offset = arguments.get("offset", 0)
        limit = arguments.get("limit")
        try:
            data, size = await read_output(self.config.store, self.core.session_id,
                                           str(reference), offset, limit)
        except OutputNotFound as missing:
            known = ", ".join(r for r, _ in self.core.captures) or "none"
            return Done(ToolOutcome.error(f"{missing}; this session's outputs: {known}"),
                        "error")
        return Done(ToolOutcome.ok(tool_text(str(reference), data, offset, size)), "ok")

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
