"""The host's view: an :class:`Agent` (a workflow, a model, tools, a store) opens
:class:`Session` objects, one per conversation.

Every coroutine has a synchronous twin (``agent.session_sync``, ``session.send_sync``,
``session.reply_sync``, ...) for hosts without an event loop; each twin runs its
coroutine to completion on a private loop and is nothing more.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal, TypeVar

from phaseflow.errors import ConfigError, PhaseflowError
from phaseflow.machine.machine import PhaseMachine
from phaseflow.machine.state import ReadOnlyMapping, State
from phaseflow.session import events as ev
from phaseflow.session.core import (
    Core,
    Limits,
    Resolve,
    Send,
    check_resolution,
)
from phaseflow.session.core_json import core_from_json
from phaseflow.session.provider import Provider
from phaseflow.session.runner import ApprovalPolicy, Runner, RunnerConfig
from phaseflow.session.tools import FunctionTool
from phaseflow.session.tools import tool as make_tool
from phaseflow.spec.model import Workflow
from phaseflow.stores.base import SessionRecord, Store
from phaseflow.stores.memory import MemoryStore
from phaseflow.turn.execution import ApprovalDecision, PromptKind
from phaseflow.turn.messages import Content, Message

T = TypeVar("T")

Busy = Literal["queue", "reject"]


class SessionBusy(PhaseflowError):
    """A message arrived while a turn runs and the agent was built with
    ``busy="reject"``."""


class SessionFinished(PhaseflowError):
    """The session reached a terminal phase: it takes no more messages."""


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
        sleep: Callable[[float], Any] = asyncio.sleep,
    ) -> None:
        wf = _load(workflow)
        if hooks:
            wf = replace(wf, registry={**wf.registry, **hooks})
        self.workflow = wf
        self.tools = _tools(tools)
        catalogue = wf.tools
        if catalogue is not None:
            unknown = sorted(set(self.tools) - set(catalogue))
            if unknown:
                raise ConfigError(
                    f"tools not in the workflow's catalogue: {', '.join(unknown)} "
                    f"(the catalogue has: {', '.join(catalogue) or 'none'})")
        if busy not in ("queue", "reject"):
            raise ConfigError(f"busy must be 'queue' or 'reject', not {busy!r}")
        if not isinstance(max_steps, int) or max_steps < 1:
            raise ConfigError("max_steps must be a positive integer")
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
            clock=clock, sleep=sleep,
        )

    def missing_tools(self) -> tuple[str, ...]:
        """Catalogue tools the host did not implement (never offered to the model)."""
        catalogue = self.workflow.tools or {}
        return tuple(n for n in catalogue if n not in self.tools)

    async def session(self, session_id: str) -> Session:
        """Open session ``session_id``: resumed where it stood when the store has it,
        new otherwise."""
        if not isinstance(session_id, str) or not session_id:
            raise ConfigError("a session id is a non-empty string")
        record = await self.store.load(session_id)
        if record is None:
            return self._new(session_id)
        return self._resume(record)

    def session_sync(self, session_id: str) -> Session:
        return _run(self.session(session_id))

    def _new(self, session_id: str) -> Session:
        wf = self.workflow
        machine = PhaseMachine.from_workflow(wf)
        state = State(wf.defaults())
        runner = Runner(self.config, Core(session_id), machine, state, 0, 0.0)
        return Session(self, runner)

    def _resume(self, record: SessionRecord) -> Session:
        wf = self.workflow
        if record.workflow != wf.name:
            raise SessionError(f"session {record.session_id!r} belongs to workflow "
                               f"{record.workflow!r}, not {wf.name!r}")
        if record.phase not in wf.phases:
            raise SessionError(f"session {record.session_id!r} is in phase {record.phase!r}, "
                               f"which workflow {wf.name!r} no longer has")
        machine = PhaseMachine.restore(wf, record.machine)
        state = State(dict(record.state))
        core = core_from_json(record.session_id, record.core, record.execution,
                              record.progress, record.continuation)
        runner = Runner(self.config, core, machine, state, record.version, record.created_at)
        session = Session(self, runner)
        if record.workflow_hash != self.config.workflow_hash:
            session._notes.append(ev.ErrorEvent(
                code="workflow_changed", session_id=record.session_id, message=(
                    f"the workflow changed since this session was stored; it continues in "
                    f"phase {record.phase!r}")))
        core_view = runner.view()
        runner.core = replace(runner.core, view=core_view)
        return session


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
    def last_request(self) -> Any:
        return getattr(self._runner, "last_request", None)

    async def events(self, after: int = 0) -> tuple[ev.Event, ...]:
        """What was persisted, in order (``after``: only events with a larger ``seq``)."""
        stored = await self._agent.store.events(self.id, after)
        return tuple(replace(ev.event_from_json(s.data), seq=s.seq) for s in stored)

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
        queued) as they happen. While a turn runs, the message is queued (or refused
        with :class:`SessionBusy` when the agent has ``busy="reject"``)."""
        self._check_open()
        kind = PromptKind.STEERING if steering else PromptKind.FOLLOW_UP
        runner = self._runner
        busy = self._running or runner.core.status == "awaiting_approval"
        if busy and self._agent.busy == "reject":
            raise SessionBusy(f"session {self.id!r} is busy with turn {self.turn}")
        event = Send(message, runner.view(), kind)
        if self._running:
            # Queue it: the running turn's loop sends it when that turn ends.
            from phaseflow.session.core import step

            s = step(runner.core, event, runner.config.limits)
            runner.core = s.core
            for e in await runner.commit(()):
                yield e
            return
        async for e in self._drive(event):
            yield e

    async def _drive(self, first: Any) -> AsyncIterator[ev.Event]:
        self._running = True
        try:
            while self._notes:
                note = self._notes.pop(0)
                for e in await self._runner.commit((note,)):
                    yield e
            async for e in self._runner.drive(first):
                yield e
        finally:
            self._running = False

    async def reply(self, message: Content) -> str:
        """Send, drain the events, return the final text of the turn."""
        text = ""
        async for e in self.send(message):
            if isinstance(e, ev.TurnFinished):
                text = e.reply
        return text

    async def resolve(self, call_id: str, decision: str | ApprovalDecision, *,
                      reason: str = "", arguments_hash: str | None = None
                      ) -> AsyncIterator[ev.Event]:
        """Decide on the pending approval: ``approve`` (this call), ``approve_turn``,
        ``approve_session`` (trust by the call's trust key), or ``reject`` (the model
        sees ``reason``). A decision for another call, or for other arguments
        (``arguments_hash``), is refused."""
        try:
            decided = ApprovalDecision(decision)
        except ValueError:
            raise ConfigError(f"unknown decision {decision!r}: approve, approve_turn, "
                              "approve_session or reject") from None
        event = Resolve(call_id, decided, reason, arguments_hash)
        problem = check_resolution(self._runner.core, event)
        if problem is not None:
            from phaseflow.session.core import ResolutionRefused

            raise ResolutionRefused(f"session {self.id!r}: {problem}")
        async for e in self._drive(event):
            yield e

    def cancel(self) -> None:
        """Stop the current turn (from another task): the stream is closed, running tools
        are cancelled, every call gets a result, the turn ends as ``cancelled``."""
        if self._running:
            self._runner.request_cancel()

    async def cancel_pending(self) -> tuple[ev.Event, ...]:
        """Cancel a turn that waits for approval (nothing runs: it ends as cancelled)."""
        from phaseflow.session.core import Cancel

        if self._runner.core.status != "awaiting_approval":
            return ()
        out = []
        async for e in self._drive(Cancel(self._runner.config.clock())):
            out.append(e)
        return tuple(out)

    # --- synchronous twins --------------------------------------------------------------

    def send_sync(self, message: Content, *, steering: bool = False) -> list[ev.Event]:
        return _run(_collect(self.send(message, steering=steering)))

    def reply_sync(self, message: Content) -> str:
        return _run(self.reply(message))

    def resolve_sync(self, call_id: str, decision: str | ApprovalDecision, *,
                     reason: str = "", arguments_hash: str | None = None) -> list[ev.Event]:
        return _run(_collect(self.resolve(call_id, decision, reason=reason,
                                          arguments_hash=arguments_hash)))


async def _collect(stream: AsyncIterator[ev.Event]) -> list[ev.Event]:
    return [e async for e in stream]


class PendingApproval:
    """The call waiting for a human: what they must see to decide."""

    __slots__ = ("arguments", "arguments_hash", "call_id", "name", "reason")

    def __init__(self, call_id: str, name: str, arguments: Any, arguments_hash: str,
                 reason: str) -> None:
        self.call_id = call_id
        self.name = name
        self.arguments = arguments
        self.arguments_hash = arguments_hash
        self.reason = reason

    def __repr__(self) -> str:
        return f"PendingApproval({self.call_id!r}, {self.name!r}, {self.arguments!r})"

