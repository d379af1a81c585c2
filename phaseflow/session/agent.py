"""The host's view: an :class:`Agent` (a workflow, a model, tools, a store) opens
:class:`Session` objects, one per conversation.

Every coroutine has a synchronous twin (``agent.session_sync``, ``session.send_sync``,
``session.reply_sync``, ...) for hosts without an event loop; each twin runs its
coroutine to completion on a private loop and is nothing more.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, TypeVar

from phaseflow.errors import ConfigError, PhaseflowError
from phaseflow.expr.jsonvalue import check_json_object
from phaseflow.machine.machine import PhaseMachine
from phaseflow.machine.state import ReadOnlyMapping, State
from phaseflow.providers.protocol import Provider, ProviderRequest
from phaseflow.session import events as ev
from phaseflow.session.core import (
    ResolutionRefused,
    check_resolution,
    joined_content,
    step,
    unanswered,
)
from phaseflow.session.core_json import core_from_json
from phaseflow.session.runner import ApprovalPolicy, Runner, RunnerConfig
from phaseflow.session.settings import check_agent
from phaseflow.session.values import Cancel, Core, Input, Limits, Resolve, Resume, Send
from phaseflow.session.workers import holder_is_gone, new_worker_id
from phaseflow.spec.model import Workflow
from phaseflow.stores.base import Lease, SessionRecord, Store
from phaseflow.stores.memory import MemoryStore
from phaseflow.tools.function import FunctionTool
from phaseflow.tools.function import tool as make_tool
from phaseflow.tools.state_types import check_state_type
from phaseflow.turn.execution import ApprovalDecision, PromptKind
from phaseflow.turn.messages import Content, Message, content_from_json, content_to_json

T = TypeVar("T")

Busy = Literal["queue", "reject"]


class SessionBusy(PhaseflowError):
    """A message arrived while a turn runs and the agent was built with
    ``busy="reject"``."""


class SessionFinished(PhaseflowError):
    """The session reached a terminal phase: it takes no more messages."""


class TurnFailed(PhaseflowError):
    """``Session.reply``: the turn failed or was cancelled; ``status`` says which and
    ``error`` the first error event's code and message (``provider_error: ...``)."""

    def __init__(self, message: str, *, status: str, error: str) -> None:
        super().__init__(message)
        self.status = status
        self.error = error


class Reply(str):
    """The text of a turn's final reply (it *is* that string), with how the turn ended:
    ``status`` is ``completed`` or ``step_limit`` (the text is the reply so far), or
    ``awaiting_approval`` with ``approval`` the call to decide on."""

    status: str
    approval: PendingApproval | None

    def __new__(cls, text: str, *, status: str,
                approval: PendingApproval | None = None) -> Reply:
        reply = super().__new__(cls, text)
        reply.status = status
        reply.approval = approval
        return reply


class SessionError(PhaseflowError):
    """A session that cannot be opened as asked (another workflow, a removed phase)."""


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """The synchronous twins' one driver."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    raise ConfigError("a *_sync method was called inside a running event loop: "
                      "await the coroutine instead")


def workflow_hash(workflow: Workflow) -> str:
    """The content hash a session is pinned to (the file's bytes when it has one)."""
    if workflow.path:
        try:
            return hashlib.sha256(Path(workflow.path).read_bytes()).hexdigest()
        except OSError:
            pass
    return hashlib.sha256(repr(sorted(workflow.phases)).encode()).hexdigest()


def _aged(record: SessionRecord, now: float) -> Mapping[str, Any]:
    """The machine's snapshot with the time since it was committed added to the time in
    phase. A worker that reopens a session (after a crash, a deploy, or another worker's
    turn) counts the time the session spent stored, by the wall clock (the one clock two
    processes share; the machine's own is monotonic and per process), so a restart never
    delays a time-based transition. A clock behind the commit's adds nothing."""
    snapshot = record.machine
    elapsed = snapshot.get("elapsed")
    waited = now - record.updated_at
    if (record.updated_at <= 0 or not isinstance(elapsed, int | float)
            or isinstance(elapsed, bool) or not math.isfinite(elapsed)
            or not math.isfinite(waited) or waited <= 0):
        return snapshot  # (a malformed snapshot is refused by restore, naming the field)
    return {**snapshot, "elapsed": float(elapsed) + waited}


def _load(workflow: Workflow | str | Path) -> Workflow:
    if isinstance(workflow, Workflow):
        return workflow
    if isinstance(workflow, str | Path):
        from phaseflow.spec.loader import load_workflow

        loaded: Workflow = load_workflow(str(workflow))
        return loaded
    raise ConfigError(f"workflow must be a path or a Workflow, not {type(workflow).__name__}")


def _tools(tools: Iterable[Any] | Mapping[str, Any] | None) -> dict[str, FunctionTool]:
    """The host's tools by the name the workflow uses: ``@tool`` functions, plain
    callables (made tools by their name), or a mapping from name to either."""
    out: dict[str, FunctionTool] = {}
    if tools is None:
        return out
    items: Iterable[tuple[str | None, Any]] = (
        tools.items() if isinstance(tools, Mapping) else ((None, t) for t in tools))
    for name, value in items:
        if isinstance(value, FunctionTool):
            fn = value if name is None or name == value.name else value.with_name(name)
        elif callable(value):
            fn = make_tool(name=name)(value) if name else make_tool(value)
        else:
            raise ConfigError(f"tool {name or value!r} is not a callable")
        if fn.name in out:
            raise ConfigError(f"two tools are named {fn.name!r}")
        out[fn.name] = fn
    return out


class Agent:
    """A guided agent: what every session of it shares. See ``docs/sessions.md``."""

    def __init__(
        self,
        workflow: Workflow | str | Path,
        provider: Provider,
        *,
        tools: Iterable[Any] | Mapping[str, Any] | None = None,
        hooks: Mapping[str, Callable[..., Any]] | None = None,
        store: Store | None = None,
        system: str = "",
        model: str | None = None,
        approve: ApprovalPolicy | None = None,
        busy: Busy = "queue",
        max_steps: int = 10,
        max_retries: int = 4,
        parallel_tools: bool = True,
        output_lines: int = 200,
        output_chars: int = 20_000,
        clock: Callable[[], float] = time.time,
        phase_clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Any] = asyncio.sleep,
        lease: float = 30.0,
        worker: str | None = None,
        max_output_tokens: int | None = None,
    ) -> None:
        wf = _load(workflow)
        if not callable(getattr(provider, "stream", None)):
            raise ConfigError(f"provider must have a stream(request) method (the Provider "
                              f"protocol), not {type(provider).__name__}")
        host_tools = _tools(tools)
        check_agent(
            workflow=wf, tools=host_tools, hooks=hooks,
            values={"max_steps": max_steps, "max_retries": max_retries,
                    "output_lines": output_lines, "output_chars": output_chars,
                    "lease": lease, "parallel_tools": parallel_tools, "system": system,
                    "max_output_tokens": max_output_tokens, "worker": worker},
            callables={"clock": clock, "phase_clock": phase_clock, "sleep": sleep,
                       "approve": approve})
        #: the phase machine's clock (``seconds_in_phase``): monotonic, so a wall-clock
        #: step never moves a time-based transition; ``clock`` stamps events and leases
        self.phase_clock = phase_clock
        if hooks:
            wf = replace(wf, registry={**wf.registry, **hooks})
        self.workflow = wf
        self.tools = host_tools
        catalogue = wf.tools
        if catalogue is not None:
            unknown = sorted(set(self.tools) - set(catalogue))
            if unknown:
                raise ConfigError(
                    f"tools not in the workflow's catalogue: {', '.join(unknown)} "
                    f"(the catalogue has: {', '.join(catalogue) or 'none'})")
        if busy not in ("queue", "reject"):
            raise ConfigError(f"busy must be 'queue' or 'reject', not {busy!r}")
        self.busy: Busy = busy
        self.provider = provider
        self.store: Store = store if store is not None else MemoryStore()
        self.config = RunnerConfig(
            workflow=wf, workflow_hash=workflow_hash(wf), provider=provider,
            tools=self.tools, store=self.store, system=system,
            model=model or getattr(provider, "model", "") or "",
            limits=Limits(max_steps=max_steps, max_retries=max_retries,
                          parallel_tools=parallel_tools),
            approve=approve, output_lines=output_lines, output_chars=output_chars,
            clock=clock, sleep=sleep, lease=float(lease),
            worker=worker or new_worker_id(), max_output_tokens=max_output_tokens,
        )

    def missing_tools(self) -> tuple[str, ...]:
        """Catalogue tools the host did not implement (never offered to the model)."""
        catalogue = self.workflow.tools or {}
        return tuple(n for n in catalogue if n not in self.tools)

    async def session(self, session_id: str, *, state: Mapping[str, Any] | None = None
                      ) -> Session:
        """Open session ``session_id``: resumed where it stood when the store has it,
        new otherwise. ``state``: the first values of a new session (over the workflow's
        defaults; each a JSON value of its key's declared type); ignored on resume."""
        if not isinstance(session_id, str) or not session_id:
            raise ConfigError("a session id is a non-empty string")
        record = await self.store.load(session_id)
        if record is None:
            return self._new(session_id, state)
        return self._resume(record)

    def session_sync(self, session_id: str, *, state: Mapping[str, Any] | None = None
                     ) -> Session:
        return _run(self.session(session_id, state=state))

    def _initial_state(self, state: Mapping[str, Any] | None) -> dict[str, Any]:
        values = self.workflow.defaults()
        if state is None:
            return values
        checked = check_json_object(state)
        if checked.problem:
            raise ConfigError(f"the initial state is not JSON: {checked.problem}")
        for key, value in checked.value.items():
            declared = self.workflow.state.get(key)
            problem = check_state_type(value, declared.type) if declared is not None else None
            if problem is not None:
                raise ConfigError(f"initial state key {key!r}: {problem}")
            values[key] = value
        return values

    def _new(self, session_id: str, initial: Mapping[str, Any] | None = None) -> Session:
        wf = self.workflow
        machine = PhaseMachine.from_workflow(wf, clock=self.phase_clock)
        state = State(self._initial_state(initial))
        runner = Runner(self.config, Core(session_id), machine, state, 0, 0.0)
        return Session(self, runner)

    def _resume(self, record: SessionRecord) -> Session:
        session = Session(self, self._runner_from(record))
        if record.workflow_hash != self.config.workflow_hash:
            session._notes.append(ev.ErrorEvent(
                code="workflow_changed", session_id=record.session_id, message=(
                    f"the workflow changed since this session was stored; it continues in "
                    f"phase {record.phase!r}")))
        return session

    def _runner_from(self, record: SessionRecord) -> Runner:
        """A runner exactly where ``record`` left the session. A session of another
        workflow, or in a phase this workflow no longer has, is refused."""
        wf = self.workflow
        if record.workflow != wf.name:
            raise SessionError(f"session {record.session_id!r} belongs to workflow "
                               f"{record.workflow!r}, not {wf.name!r}")
        if record.phase not in wf.phases:
            raise SessionError(f"session {record.session_id!r} is in phase {record.phase!r}, "
                               f"which workflow {wf.name!r} no longer has")
        sid = record.session_id
        try:
            machine = PhaseMachine.restore(wf, _aged(record, self.config.clock()),
                                           clock=self.phase_clock)
            state = State(dict(record.state))
            core = core_from_json(sid, record.core, record.execution, record.progress,
                                  record.continuation)
            runner = Runner(self.config, core, machine, state, record.version,
                            record.created_at)
            runner.core = replace(runner.core, view=runner.view())
        except PhaseflowError as exc:
            # Damaged or foreign contents: an error that names the session, never a
            # session other than the one that was stored.
            message = str(exc)
            if repr(sid) not in message:
                message = f"session {sid!r}: the stored session cannot be opened: {message}"
            raise SessionError(message) from None
        return runner


class Session:
    """One conversation. Not thread-safe; one event loop."""

    def __init__(self, agent: Agent, runner: Runner) -> None:
        self._agent = agent
        self._runner = runner
        self._running = False
        self._notes: list[ev.Event] = []

    # --- what it is -------------------------------------------------------------------

    @property
    def id(self) -> str:
        return self._runner.core.session_id

    @property
    def phase(self) -> str:
        return self._runner.machine.current

    @property
    def state(self) -> Mapping[str, Any]:
        """The session state, read-only (deeply)."""
        return ReadOnlyMapping(self._runner.state.to_dict())

    @property
    def status(self) -> str:
        return self._runner.core.status

    @property
    def turn(self) -> int:
        return self._runner.core.turn

    @property
    def history(self) -> tuple[Message, ...]:
        """The exact model messages so far (no system message: it is rebuilt for every
        request from the phase)."""
        return self._runner.core.history().to_tuple()

    @property
    def pending_approval(self) -> PendingApproval | None:
        pending = self._runner.core.pending_approval
        if pending is None or self._runner.core.status != "awaiting_approval":
            return None
        from phaseflow.session.core import arguments_hash

        return PendingApproval(pending.call.id, pending.call.name, pending.call.argument_value(),
                               arguments_hash(pending.call), pending.reason)

    @property
    def machine(self) -> PhaseMachine:
        """The phase machine (read it; moving it by hand bypasses the session)."""
        return self._runner.machine

    @property
    def last_request(self) -> ProviderRequest | None:
        return self._runner.last_request

    async def events(self, after: int = 0) -> tuple[ev.Event, ...]:
        """What was persisted, in order (``after``: only events with a larger ``seq``)."""
        stored = await self._agent.store.events(self.id, after)
        out = []
        for s in stored:
            try:
                out.append(replace(ev.event_from_json(s.data), seq=s.seq))
            except PhaseflowError as exc:
                raise SessionError(f"session {self.id!r}: stored event {s.seq} cannot be "
                                   f"read: {exc}") from None
        return tuple(out)

    def events_sync(self, after: int = 0) -> tuple[ev.Event, ...]:
        return _run(self.events(after))

    # --- talking ----------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._runner.core.status == "finished":
            raise SessionFinished(f"session {self.id!r} has finished (phase {self.phase!r} is "
                                  "terminal); it takes no more messages")

    async def send(self, message: Content, *, steering: bool = False
                   ) -> AsyncIterator[ev.Event]:
        """Send the user's message; the events of the turn (or turns, when messages were
        queued) as they happen. While a turn runs - here, or in another worker that
        holds the session's lease - the message is queued and starts the next turn (or
        is refused with :class:`SessionBusy` when the agent has ``busy="reject"``)."""
        self._check_open()
        kind = PromptKind.STEERING if steering else PromptKind.FOLLOW_UP
        runner = self._runner
        busy = self._running or runner.core.status == "awaiting_approval"
        if busy and self._agent.busy == "reject":
            raise SessionBusy(f"session {self.id!r} is busy with turn {self.turn}")
        while self._running and not runner.core.execution.active:
            # The turn is over and its loop is letting go: wait for it, then this message
            # starts a turn of its own (a queue nobody would read again is no place).
            await asyncio.sleep(0.001)
            runner = self._runner
        if self._running:
            # This object runs a turn now: the message joins its queue, and that turn's
            # loop sends it when the turn ends.
            s = step(runner.core, Send(message, runner.view(), kind), runner.config.limits)
            runner.core = s.core
            for e in await runner.commit(()):
                yield e
            return
        async for e in self._turns(Send(message, runner.view(), kind)):
            yield e

    async def _turns(self, first: Input | None, *, force: bool = False
                     ) -> AsyncIterator[ev.Event]:
        """Run ``first`` (and what it leads to) holding the session's lease: finish a
        turn a stopped worker left, then ``first``, then the messages other workers
        queued meanwhile. Without the lease (another worker runs a turn) a message is
        stored in the session's queue for that worker."""
        agent, store = self._agent, self._agent.store
        config = self._runner.config
        lease = await store.acquire(self.id, config.worker, config.lease, config.clock(),
                                    force=force)
        if lease is None:
            # A holder that is a killed process of this machine is replaced at once, not
            # waited for until its lease expires (see phaseflow.session.workers).
            held = await store.lease(self.id)
            if held is not None and holder_is_gone(held.owner):
                lease = await store.acquire(self.id, config.worker, config.lease,
                                            config.clock(), replacing=held)
        if lease is None:
            if isinstance(first, Send) and agent.busy == "queue":
                await store.enqueue(self.id, {"content": content_to_json(first.content),
                                              "kind": first.kind.value})
                # The holder may have looked at the queue for the last time before this
                # message was stored, and let the turn go since: when the turn is free
                # now, this worker takes it, so the message is never left behind.
                lease = await store.acquire(self.id, config.worker, config.lease,
                                            config.clock())
                if lease is None:
                    return
                first = None
            else:
                raise SessionBusy(f"session {self.id!r}: another worker is running its turn")
        while True:
            async for e in self._holding(lease, first):
                yield e
            # A worker that found the turn taken may have stored its message after this
            # one's last look at the queue: answered now, when the turn is still free.
            if self._runner.core.status not in ("idle", "failed", "finished") or (
                    not await store.queued(self.id)):
                return
            again = await store.acquire(self.id, config.worker, config.lease, config.clock())
            if again is None:
                return  # its holder looks at the queue before it lets the turn go
            lease, first = again, None

    async def _holding(self, lease: Lease, first: Input | None) -> AsyncIterator[ev.Event]:
        """Run ``first`` with the session's lease held, then let the lease go."""
        store = self._agent.store
        self._running = True
        try:
            await self._refresh(lease.version)
            self._runner.lease = lease
            self._runner.released = False
            self._runner.release_at_end = True
            if isinstance(first, Resolve):
                problem = check_resolution(self._runner.core, first)
                if problem is not None:
                    raise ResolutionRefused(f"session {self.id!r}: {problem}")
            if isinstance(first, Send):
                self._check_open()
            while self._notes:
                for e in await self._runner.commit((self._notes.pop(0),)):
                    yield e
            if self._runner.core.status == "running":
                runner = self._runner
                if isinstance(first, Send):
                    # The message takes its place in the queue first (committed), then
                    # the interrupted turn is finished; its end sends what is queued.
                    s = step(runner.core, Send(first.content, runner.view(), first.kind),
                             runner.config.limits)
                    runner.core = s.core
                    for e in await runner.commit(()):
                        yield e
                    first = None
                async for e in runner.drive(self._resume_input()):
                    yield e
            if first is not None and not (isinstance(first, Send)
                                          and self._runner.core.status == "finished"):
                if isinstance(first, Send):
                    first = Send(first.content, self._runner.view(), first.kind)
                async for e in self._runner.drive(first):
                    yield e
            if not self._runner.released:
                async for e in self._drain_queue():
                    yield e
        finally:
            self._running = False
            runner = self._runner
            runner.release_at_end = False
            if not runner.released:  # the turn's last commit did not let it go
                held = runner.lease or lease  # renewed while the turn ran
                runner.lease = None
                await store.release(held)
            runner.released = False

    def _resume_input(self) -> Resume:
        catalogue = self._agent.workflow.tools or {}
        idempotent = frozenset(n for n, t in catalogue.items() if t.idempotent)
        return Resume(self._runner.view(), idempotent)

    async def _refresh(self, stored: int = -1) -> None:
        """Another worker may have committed since this object last did: reopen from the
        store. ``stored``: the version the lease was taken at (read in the same
        transaction); -1 when not known, then it is read (one cheap read)."""
        store = self._agent.store
        if stored < 0:
            stored = await store.version(self.id)
        if stored == self._runner.version:
            return
        record = await store.load(self.id)
        if record is not None:
            self._runner = self._agent._runner_from(record)

    async def _drain_queue(self) -> AsyncIterator[ev.Event]:
        """The messages other workers stored while this one held the turn: sent as the
        next turn, in order, once the current one is over."""
        store = self._agent.store
        if self._runner.core.status == "finished" and not self._runner.released:
            # Messages stored for a turn that then finished the session: taken out of
            # the queue, recorded as unanswered (never left there unseen for good).
            queued = await store.queued(self.id)
            if queued:
                self._runner.consumed = queued[-1].id
                contents = tuple(content_from_json(q.data.get("content")) for q in queued)
                for e in await self._runner.commit((unanswered(contents, self.turn),)):
                    yield e
            return
        while self._runner.core.status in ("idle", "failed") and not self._runner.released:
            # (a turn's last commit may have let the lease go: the caller takes it again
            # before it looks at the queue once more)
            queued = await store.queued(self.id)
            if not queued:
                return
            contents = tuple(content_from_json(q.data.get("content")) for q in queued)
            self._runner.consumed = queued[-1].id
            content = contents[0] if len(contents) == 1 else joined_content(contents)
            async for e in self._runner.drive(Send(content, self._runner.view())):
                yield e

    async def recover(self, *, force: bool = False) -> tuple[ev.Event, ...]:
        """Finish a turn that a stopped worker left (see ``docs/durability.md``), and
        send what was queued; the events. Nothing happens when no turn was left.
        :class:`SessionBusy` while another worker's lease has not expired, unless
        ``force`` (the operator knows that worker is gone: its late writes are fenced)."""
        return tuple([e async for e in self._turns(None, force=force)])

    async def save(self) -> None:
        """Store a new session before its first message (``phaseflow serve``'s
        ``POST /v1/sessions``); nothing for one already stored. ``StoreConflict`` when
        another writer stored a session of this id first."""
        if self._runner.version == 0:
            await self._runner.commit(())

    def recover_sync(self, *, force: bool = False) -> tuple[ev.Event, ...]:
        return _run(self.recover(force=force))

    async def reply(self, message: Content) -> Reply:
        """Send, drain the events, and return the outcome of *this message's* turn as a
        :class:`Reply`: the final text (a ``str``) with the turn's ``status``. A turn
        that failed (the model could not be reached, the provider broke) or was
        cancelled raises :class:`TurnFailed` with the reason, so that a host printing the
        reply never prints an empty one for a failure; a turn that waits for a human
        returns a reply whose ``status`` is ``awaiting_approval`` and whose ``approval``
        says what to decide; a message that was only queued (a turn is running, here or
        in another worker) returns an empty reply whose ``status`` is ``queued``. Turns
        that queued messages start after this one are drained, not reported."""
        text, status, turn, errors = "", "", 0, []
        async for e in self.send(message):
            if status:
                continue  # a later turn (queued messages): drained, not this reply's
            if isinstance(e, ev.TurnFinished):
                text, status, turn = e.reply, e.status, e.turn
            elif isinstance(e, ev.ErrorEvent):
                errors.append(e)
            elif isinstance(e, ev.ApprovalRequested):
                status = "awaiting_approval"
        if status == "awaiting_approval":
            return Reply(text, status=status, approval=self.pending_approval)
        if status in ("failed", "cancelled"):
            cause = next((e for e in errors if e.code == "provider_error"),
                         errors[-1] if errors else None)
            error = f"{cause.code}: {cause.message}" if cause is not None else ""
            raise TurnFailed(f"session {self.id!r}: turn {turn} {status}"
                             + (f" ({error})" if error else ""), status=status, error=error)
        return Reply(text, status=status or "queued")

    async def resolve(self, call_id: str, decision: str | ApprovalDecision, *,
                      reason: str = "", arguments_hash: str | None = None
                      ) -> AsyncIterator[ev.Event]:
        """Decide on the pending approval: ``approve`` (this call), ``approve_turn``,
        ``approve_session`` (trust by the call's trust key), or ``reject`` (the model
        sees ``reason``). A decision for another call, or for other arguments
        (``arguments_hash``), is refused: :class:`ResolutionRefused`."""
        try:
            decided = ApprovalDecision(decision)
        except ValueError:
            raise ConfigError(f"unknown decision {decision!r}: approve, approve_turn, "
                              "approve_session or reject") from None
        event = Resolve(call_id, decided, reason, arguments_hash)
        async for e in self._turns(event):
            yield e

    def cancel(self) -> None:
        """Stop the current turn (from another task): the stream is closed, running tools
        are cancelled, every call gets a result, the turn ends as ``cancelled``."""
        if self._running:
            self._runner.request_cancel()

    async def cancel_pending(self) -> tuple[ev.Event, ...]:
        """Cancel a turn that waits for approval (nothing runs: it ends as cancelled)."""
        if self._runner.core.status != "awaiting_approval":
            return ()
        return tuple([e async for e in self._turns(Cancel(self._runner.config.clock()))])

    # --- synchronous twins --------------------------------------------------------------

    def send_sync(self, message: Content, *, steering: bool = False) -> list[ev.Event]:
        return _run(_collect(self.send(message, steering=steering)))

    def reply_sync(self, message: Content) -> Reply:
        return _run(self.reply(message))

    def resolve_sync(self, call_id: str, decision: str | ApprovalDecision, *,
                     reason: str = "", arguments_hash: str | None = None) -> list[ev.Event]:
        return _run(_collect(self.resolve(call_id, decision, reason=reason,
                                          arguments_hash=arguments_hash)))


async def _collect(stream: AsyncIterator[ev.Event]) -> list[ev.Event]:
    return [e async for e in stream]


@dataclass(frozen=True, slots=True)
class PendingApproval:
    """The call waiting for a human: what they must see to decide (``arguments_hash``
    binds a decision to these very arguments)."""

    call_id: str
    name: str
    arguments: Any
    arguments_hash: str
    reason: str
