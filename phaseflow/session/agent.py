"""The host's view: an :class:`Agent` (a workflow, a model, tools, a store) opens
:class:`Session` objects, one per conversation.

Every coroutine has a synchronous twin (``agent.session_sync``, ``session.send_sync``,
``session.reply_sync``, ...) for hosts without an event loop; each twin runs its
coroutine to completion on a private loop and is nothing more.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from phaseflow.errors import ConfigError, PhaseflowError
from phaseflow.expr.jsonvalue import check_json_object
from phaseflow.machine.machine import PhaseMachine
from phaseflow.machine.state import ReadOnlyMapping, State
from phaseflow.observe.switch import observer_for
from phaseflow.providers.protocol import Provider, ProviderRequest
from phaseflow.session import events as ev
from phaseflow.session import firing
from phaseflow.session.agent_setup import (
    COMPACTION_ROLE,
    compiled_workflow,
    providers_by_role,
    tools_by_name,
    workflow_hash,
)
from phaseflow.session.compaction import DEFAULT_PROMPT, visible
from phaseflow.session.core_json import core_from_json
from phaseflow.session.driver import TurnDriver
from phaseflow.session.fire_timers import TimersFired, fire_due
from phaseflow.session.fork import (
    ForkRefused,
    branches,
    fork_record,
    free_branch_id,
    last_turn,
)
from phaseflow.session.host_inputs import CompactionRefused, ModeRefused
from phaseflow.session.refusals import SessionBusy, SessionError, SessionFinished, TurnFailed
from phaseflow.session.runner import Runner
from phaseflow.session.runner_config import ApprovalPolicy, RunnerConfig, transcript_window
from phaseflow.session.settings import check_agent
from phaseflow.session.tool_calls import arguments_hash
from phaseflow.session.trust import Trusted, trusted
from phaseflow.session.turn_order import BUSY_MODES, Busy, check_open
from phaseflow.session.values import (
    Cancel,
    ChangeTrust,
    CompactNow,
    Core,
    LimitEdits,
    Limits,
    Resolve,
    Send,
    SetMode,
)
from phaseflow.session.workers import new_worker_id
from phaseflow.spec.model import DEFAULT_ROLE, Workflow, tree_catalogue
from phaseflow.stores.base import SessionRecord, Store
from phaseflow.stores.memory import MemoryStore
from phaseflow.tools.state_types import check_state_type
from phaseflow.turn.execution import (
    ApprovalDecision,
    Mode,
    PromptKind,
    TrustEntry,
    TrustKey,
    TrustScope,
    TurnExecution,
)
from phaseflow.turn.media import MediaRefused
from phaseflow.turn.messages import Content, MediaPart, Message, ToolCall, freeze_content

if TYPE_CHECKING:
    from phaseflow.mcp.hub import McpHub

T = TypeVar("T")

#: the exceptions a host catches, importable from here as before
__all__ = ["Agent", "ForkRefused", "PendingApproval", "Reply", "Session", "SessionBusy",
           "SessionError", "SessionFinished", "TimersFired", "Trusted", "TurnFailed"]


class Reply(str):
    """The text of a turn's final reply (it *is* that string), with how the turn ended:
    ``status`` is ``completed``, ``step_limit`` (the text is the reply so far) or
    ``cut`` (the reply still cut at the model's output limit after the last
    continuation: the text is what it said), or
    ``awaiting_approval`` with ``approval`` the call to decide on."""

    status: str
    approval: PendingApproval | None

    def __new__(cls, text: str, *, status: str,
                approval: PendingApproval | None = None) -> Reply:
        reply = super().__new__(cls, text)
        reply.status = status
        reply.approval = approval
        return reply


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """The synchronous twins' one driver."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    raise ConfigError("a *_sync method was called inside a running event loop: "
                      "await the coroutine instead")


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


class Agent:
    """A guided agent: what every session of it shares. See ``docs/sessions.md``."""

    def __init__(
        self,
        workflow: Workflow | str | Path,
        provider: Provider | None = None,
        *,
        providers: Mapping[str, Provider] | None = None,
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
        mode: str = "exec",
        max_history_tokens: int | None = None,
        compaction_provider: Provider | None = None,
        compaction_prompt: str = DEFAULT_PROMPT,
        tracer_provider: Any = None,
        meter_provider: Any = None,
        mcp: str | Path | Mapping[str, Any] | None = None,
        context_position: str = "end",
        offer_tools: str = "phase",
        max_continuations: int = 2,
        capture_bytes: int = 10 * 2**20,
        session_capture_bytes: int = 100 * 2**20,
        trusted_tools: Iterable[str] = (),
    ) -> None:
        wf = compiled_workflow(workflow)
        roles = providers_by_role(wf, provider, providers, compaction_provider)
        provider = roles[DEFAULT_ROLE]
        if compaction_provider is None:
            compaction_provider = roles.get(COMPACTION_ROLE)
        host_tools = tools_by_name(tools)
        check_agent(
            workflow=wf, tools=host_tools, hooks=hooks,
            values={"max_steps": max_steps, "max_retries": max_retries,
                    "output_lines": output_lines, "output_chars": output_chars,
                    "lease": lease, "parallel_tools": parallel_tools, "system": system,
                    "max_output_tokens": max_output_tokens, "worker": worker,
                    "max_history_tokens": max_history_tokens,
                    "max_continuations": max_continuations,
                    "capture_bytes": capture_bytes,
                    "session_capture_bytes": session_capture_bytes},
            callables={"clock": clock, "phase_clock": phase_clock, "sleep": sleep,
                       "approve": approve})
        #: the phase machine's clock (``seconds_in_phase``): monotonic, so a wall-clock
        #: step never moves a time-based transition; ``clock`` stamps events and leases
        self.phase_clock = phase_clock
        if hooks:
            wf = replace(wf, registry={**wf.registry, **hooks})
        self.workflow = wf
        self.tools = host_tools
        catalogue = tree_catalogue(wf)  # a callee's tools are the session's too
        if catalogue is not None:
            unknown = sorted(set(self.tools) - set(catalogue))
            if unknown:
                raise ConfigError(
                    f"tools not in the workflow's catalogue: {', '.join(unknown)} "
                    f"(the catalogue has: {', '.join(catalogue) or 'none'})")
        if compaction_provider is not None and not callable(
                getattr(compaction_provider, "stream", None)):
            raise ConfigError("compaction_provider must have a stream(request) method (the "
                              f"Provider protocol), not {type(compaction_provider).__name__}")
        if not isinstance(compaction_prompt, str) or not compaction_prompt.strip():
            raise ConfigError("compaction_prompt must be a non-empty string")
        if busy not in BUSY_MODES:
            raise ConfigError(f"busy must be one of {', '.join(BUSY_MODES)}, not {busy!r}")
        self.busy: Busy = busy
        if context_position not in ("end", "system"):
            raise ConfigError("context_position must be 'end' or 'system', not "
                              f"{context_position!r}")
        if offer_tools not in ("phase", "workflow"):
            raise ConfigError(f"offer_tools must be 'phase' or 'workflow', not {offer_tools!r}")
        if mode not in ("exec", "plan"):
            raise ConfigError(f"mode must be 'exec' or 'plan', not {mode!r}")
        #: the mode a new session starts in (a stored session keeps its own)
        self.mode = Mode(mode)
        #: the MCP servers' connections (``mcp=``: a servers file or its mapping; see
        #: docs/mcp.md): their tools join the host's; ``close()`` stops the servers
        self.mcp: McpHub | None = None
        if mcp is not None:
            from phaseflow.mcp.attach import attach

            self.mcp = attach(mcp, wf, self.tools)
        #: the tools every new session trusts from its start (any arguments; a session
        #: can take each back with ``revoke_trust``; a stored session keeps its own)
        self.trusted_tools = _trusted_tools(trusted_tools, self.tools)
        self.provider = provider
        #: the providers by model role (``default`` is :attr:`provider`); see docs/sessions.md
        self.providers: Mapping[str, Provider] = MappingProxyType(roles)
        self.store: Store = store if store is not None else MemoryStore()
        self.observer = observer_for(wf.name, self.store, tracer_provider, meter_provider)
        if self.observer.traced:
            wf = self.workflow = replace(wf, registry=self.observer.hooks(wf.registry))
        self.config = RunnerConfig(
            workflow=wf, workflow_hash=workflow_hash(wf), provider=provider,
            tools=self.tools, store=self.store, system=system,
            model=model or getattr(provider, "model", "") or "",
            limits=Limits(max_steps=max_steps, max_retries=max_retries,
                          parallel_tools=parallel_tools,
                          max_history_tokens=max_history_tokens,
                          max_continuations=max_continuations,
                          compaction_provider=compaction_provider is not None),
            approve=approve, output_lines=output_lines, output_chars=output_chars,
            clock=clock, sleep=sleep, lease=float(lease),
            worker=worker or new_worker_id(), max_output_tokens=max_output_tokens,
            compaction_provider=compaction_provider, compaction_prompt=compaction_prompt,
            observer=self.observer,
            context_position="system" if context_position == "system" else "end",
            offer_tools="workflow" if offer_tools == "workflow" else "phase",
            capture_bytes=capture_bytes,
            session_capture_bytes=session_capture_bytes,
            transcript_window=transcript_window(wf),
            providers=self.providers,
        )
        if self.mcp is not None:  # a server's tools changed: offered anew from the next request
            self.mcp.listeners.append(lambda _server: self.config.views.clear())

    def close(self) -> None:
        """Stop what the agent started: its MCP servers (nothing else needs closing)."""
        if self.mcp is not None:
            self.mcp.close()

    async def aclose(self) -> None:
        """:meth:`close` from a coroutine (the servers stop without blocking the loop)."""
        if self.mcp is not None:
            await self.mcp.aclose()

    def __enter__(self) -> Agent:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Agent:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def fire_timers(self, *, limit: int = 1000,
                          concurrency: int = firing.CONCURRENCY) -> TimersFired:
        """Fire the due timers of this agent's workflow's sessions in its store: up to
        ``limit`` timer turns, soonest first, at most ``concurrency`` of them at once
        (their commits are written together: a SQLite store's group commit). The due
        sessions are read a page at a time with their records
        (:meth:`Store.due_sessions`), the next page once half of the slots are free
        (:mod:`phaseflow.session.firing`). Each turn runs as :meth:`Session.fire_timer`
        under the session's lease, so among workers doing the same, each timer fires
        once. The number of timer turns run here (a :class:`TimersFired`, an ``int``),
        with the sessions that could not fire (a damaged one, one whose turn failed
        with a store or session error) in its ``problems``: one such session stops no
        other."""
        return await fire_due(self.store, self.config.clock, self.workflow.name, self._fire,
                              limit=limit, concurrency=concurrency)

    async def _fire(self, record: SessionRecord) -> bool:
        """One timer turn from a page's record; whether it ran (the timer was still due
        and this worker took the lease)."""
        events = await self.session_from(record).fire_timer()
        return any(isinstance(e, ev.TurnStartedEvent) for e in events)

    def fire_timers_sync(self, *, limit: int = 1000,
                         concurrency: int = firing.CONCURRENCY) -> TimersFired:
        return _run(self.fire_timers(limit=limit, concurrency=concurrency))

    def session_from(self, record: SessionRecord) -> Session:
        """The session ``record`` describes (one of this agent's workflow, read from its
        store, e.g. by :meth:`Store.due_sessions`), opened without reading it again. A
        record older than the store's is no risk: a turn takes the session's lease
        first, and the lease says whether another worker committed since (the session
        is then read again). :class:`SessionError` for a session of another workflow,
        or in a phase this one no longer has."""
        return self._resume(record)

    def missing_tools(self) -> tuple[str, ...]:
        """Catalogue tools the host did not implement (never offered to the model), in
        the whole tree of workflows (a callee's too)."""
        catalogue = tree_catalogue(self.workflow) or {}
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
        trust = tuple(TrustEntry(TrustKey(t), TrustScope.SESSION) for t in self.trusted_tools)
        core = Core(session_id, execution=TurnExecution(mode=self.mode, trust=trust))
        runner = Runner(self.config, core, machine, state, 0, 0.0)
        return Session(self, runner)

    def _resume(self, record: SessionRecord) -> Session:
        session = Session(self, self._runner_from(record))
        if record.workflow_hash != self.config.workflow_hash:
            session._driver.notes.append(ev.ErrorEvent(
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
        inside = "calls" in record.machine or "route" in record.machine  # composed:
        if record.phase not in wf.phases and not inside:  # restore checks that phase
            raise SessionError(f"session {record.session_id!r} is in phase {record.phase!r}, "
                               f"which workflow {wf.name!r} no longer has")
        sid = record.session_id
        try:
            machine = PhaseMachine.restore(wf, _aged(record, self.config.clock()),
                                           clock=self.phase_clock)
            state = State(dict(record.state))
            core = core_from_json(sid, record.core, record.execution, record.continuation)
            runner = Runner(self.config, core, machine, state, record.version,
                            record.created_at)
            runner.timer_at = record.next_timer_at
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
    """One conversation: the host's door. It checks what the host asks and hands it to
    the session's :class:`~phaseflow.session.driver.TurnDriver`, which alone runs turns.
    Not thread-safe; one event loop."""

    def __init__(self, agent: Agent, runner: Runner) -> None:
        self._agent = agent
        self._driver = TurnDriver(runner, agent.store, agent._runner_from, agent.busy)

    @property
    def _runner(self) -> Runner:
        return self._driver.runner

    # --- what it is -------------------------------------------------------------------

    @property
    def id(self) -> str:
        return self._runner.core.session_id

    @property
    def phase(self) -> str:
        return self._runner.machine.current

    @property
    def path(self) -> tuple[str, ...]:
        """Where the conversation is when workflows compose: each workflow's name and
        its phase, outermost first (``("billing-desk", "verify", "identity-check",
        "find")``); ``(workflow, phase)`` otherwise."""
        return self._runner.machine.path

    @property
    def state(self) -> Mapping[str, Any]:
        """The session state, read-only (deeply)."""
        return ReadOnlyMapping(self._runner.state.to_dict())

    @property
    def status(self) -> str:
        return self._runner.core.status

    @property
    def next_timer_at(self) -> float | None:
        """When the session's next timer is due (wall-clock seconds, by the agent's
        ``clock``), as its last commit stored it; ``None``: no timer ahead (none in this
        phase, all spent, or the session finished). See docs/sessions.md, "Timers"."""
        return self._runner.timer_at

    async def fire_timer(self) -> tuple[ev.Event, ...]:
        """Run the turn of the session's due timer, if one is due: no user message, the
        model's input is the session's note, the timer's transition is taken first
        (``on_enter`` runs); the events (none when no timer is due, or another worker
        holds the session: its turn's boundary sees the timer)."""
        return tuple([e async for e in self.firing_timer()])

    async def firing_timer(self) -> AsyncIterator[ev.Event]:
        """:meth:`fire_timer`, its events as they happen."""
        driver = self._driver
        if driver.running:
            return  # the running turn's boundary evaluates the timer's transition
        async for e in driver.run(Send("", driver.runner.view(), timer=True)):
            yield e

    def fire_timer_sync(self) -> tuple[ev.Event, ...]:
        return _run(self.fire_timer())

    @property
    def turn(self) -> int:
        return self._runner.core.turn

    @property
    def history(self) -> tuple[Message, ...]:
        """The exact model messages the model sees now (no system message: it is rebuilt
        for every request from the phase). With history compaction, the summary of the
        folded part, then the messages after it; :attr:`transcript` has every one."""
        core = self._runner.core
        return visible(core.history(), core.compaction).to_tuple()

    @property
    def transcript(self) -> tuple[Message, ...]:
        """Every message of the conversation, compacted or not."""
        return self._runner.core.history().to_tuple()

    @property
    def pending_approval(self) -> PendingApproval | None:
        pending = self._runner.core.pending_approval
        if pending is None or self._runner.core.status != "awaiting_approval":
            return None
        return PendingApproval(pending.call.id, pending.call.name, pending.call.argument_value(),
                               arguments_hash(pending.call), pending.reason)

    @property
    def mode(self) -> str:
        """``exec`` (tools run) or ``plan`` (only ``read_only`` tools run; every other
        call is listed in :attr:`plan`)."""
        return self._runner.core.execution.mode.value

    @property
    def plan(self) -> tuple[ToolCall, ...]:
        """Plan mode's plan: the calls the model made that were listed, not run, since
        the session last entered plan mode, in order."""
        return self._runner.core.plan

    async def set_mode(self, mode: str) -> tuple[ev.Event, ...]:
        """Switch to ``plan`` or ``exec`` mode, between turns (a ``mode_changed`` event;
        nothing when the session is in that mode already). Entering plan mode starts an
        empty plan; switching to exec lets the next turn carry the plan out, with
        approvals as usual. :class:`ModeRefused` while a turn runs or waits."""
        if mode not in ("exec", "plan"):
            raise ConfigError(f"mode must be 'exec' or 'plan', not {mode!r}")
        if self._driver.running or self.status in ("running", "awaiting_approval",
                                                   "cancelling"):
            raise ModeRefused(f"session {self.id!r}: the mode changes between turns, and a "
                              f"turn is {self.status.replace('_', ' ')}")
        return tuple([e async for e in self._driver.run(SetMode(Mode(mode)))])

    def set_mode_sync(self, mode: str) -> tuple[ev.Event, ...]:
        return _run(self.set_mode(mode))

    @property
    def edit_ranges(self) -> tuple[tuple[str, int, int], ...]:
        """The host's edit limits: ``(path, first line, last line)``."""
        return tuple((r.path, r.start, r.end) for r in self._runner.core.execution.edit_ranges)

    async def limit_edits(self, path: str, start: int, end: int) -> None:
        """Let tools change only lines ``start..end`` (1-based, inclusive) of the file
        ``path`` (absolute), from the next call on: a tool reads it as
        ``ctx.may_edit(path, start, end)``. Stored with the session.
        :class:`EditLimitRefused` for a relative path or lines that are not a range."""
        await self._driver.apply(LimitEdits(path, start, end))

    async def lift_edit_limit(self, path: str) -> None:
        """Remove the edit limit of ``path``."""
        await self._driver.apply(LimitEdits(path))

    def limit_edits_sync(self, path: str, start: int, end: int) -> None:
        _run(self.limit_edits(path, start, end))

    def lift_edit_limit_sync(self, path: str) -> None:
        _run(self.lift_edit_limit(path))

    def trust(self) -> tuple[Trusted, ...]:
        """What this session trusts now: each entry a tool and what of it runs without
        asking (``covers``: ``any_arguments`` for a host's grant, ``same_arguments`` or
        ``same_command`` for a human's approval for the turn or the session), and for how
        long (``scope``: ``turn`` or ``session``)."""
        return trusted(self._runner.core.execution)

    async def grant_trust(self, tool: str) -> None:
        """Trust every call of ``tool`` (any arguments) for the rest of the session: it
        runs without asking a human. Stored with the session, a ``trust_changed`` event;
        nothing when it is granted already. :class:`ConfigError` for a tool the agent
        does not have."""
        if not isinstance(tool, str) or tool not in self._agent.tools:
            raise ConfigError(f"session {self.id!r}: no tool {tool!r} to trust (the agent's "
                              f"tools: {', '.join(sorted(self._agent.tools)) or 'none'})")
        await self._driver.apply(ChangeTrust(tool, grant=True))

    async def revoke_trust(self, tool: str) -> None:
        """Take back every trust of ``tool``: a host's grant and every approval for the
        turn or the session; its next call asks a human again (when its tool needs
        approval). A ``trust_changed`` event; nothing when nothing trusted it."""
        if not isinstance(tool, str) or not tool:
            raise ConfigError(f"a tool name is a non-empty string, not {tool!r}")
        await self._driver.apply(ChangeTrust(tool, grant=False))


    def grant_trust_sync(self, tool: str) -> None:
        _run(self.grant_trust(tool))

    def revoke_trust_sync(self, tool: str) -> None:
        _run(self.revoke_trust(tool))

    async def compact(self, *, max_tokens: int = 1024) -> tuple[ev.Event, ...]:
        """Fold everything before the last turn into a summary now, between turns (a
        ``history_compacted`` event; nothing when there is nothing to fold). The model
        sees the summary and the last turn from the next request on; the transcript
        keeps every message. :class:`CompactionRefused` while a turn runs or waits."""
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise ConfigError(f"max_tokens must be a positive integer, not {max_tokens!r}")
        if self._driver.running or self.status in ("running", "awaiting_approval",
                                                   "cancelling"):
            raise CompactionRefused(f"session {self.id!r}: a compaction asked by the host "
                                    f"waits for the turn to end (it is {self.status})")
        return tuple([e async for e in self._driver.run(CompactNow(max_tokens))])

    def compact_sync(self, *, max_tokens: int = 1024) -> tuple[ev.Event, ...]:
        return _run(self.compact(max_tokens=max_tokens))

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

    @property
    def outputs(self) -> tuple[tuple[str, int], ...]:
        """The session's captured tool outputs (cut for the model), ``(reference,
        bytes)``, oldest first: what :meth:`read_output` and the model's ``read_output``
        tool read."""
        return self._runner.core.captures

    async def read_output(self, reference: str, *, offset: int = 0,
                          limit: int | None = None) -> bytes:
        """At most ``limit`` bytes (default 20,000) of the captured output ``reference``
        of this session, from byte ``offset``; ``OutputNotFound`` (a ``SessionError``'s
        sibling under ``PhaseflowError``) for a reference that is not this session's."""
        from phaseflow.session.outputs import read_output

        data, _size = await read_output(self._agent.store, self.id, reference, offset, limit)
        return data

    def read_output_sync(self, reference: str, *, offset: int = 0,
                         limit: int | None = None) -> bytes:
        return _run(self.read_output(reference, offset=offset, limit=limit))

    # --- talking ----------------------------------------------------------------------

    async def send(self, message: Content, *, steering: bool = False,
                   busy: Busy | None = None) -> AsyncIterator[ev.Event]:
        """Send the user's message; the events of the turn (or turns, when messages were
        queued) as they happen. While a turn runs - here, or in another worker that
        holds the session's lease - ``busy`` (default: the agent's) decides: ``queue``
        stores the message and it starts the next turn; ``reject`` refuses it with
        :class:`SessionBusy`; ``steer`` delivers it into the running turn, with the
        model's next request (``steering=True`` says the same); ``interrupt`` cancels
        the running turn (as :meth:`cancel` does) and starts the next one with it."""
        driver = self._driver
        mode = busy if busy is not None else ("steer" if steering else driver.busy)
        if mode not in BUSY_MODES:
            raise ConfigError(f"busy must be one of {', '.join(BUSY_MODES)}, not {mode!r}")
        check_open(driver.runner.core, driver.runner.machine.current)
        if not isinstance(message, str):  # its attachments: stored, checked (or refused)
            message = await self._admit(message)
        is_busy = driver.running or driver.runner.core.status == "awaiting_approval"
        if is_busy and mode == "reject":
            raise SessionBusy(f"session {self.id!r} is busy with turn {self.turn}")
        if mode == "interrupt":
            async for e in driver.interrupt(message):
                yield e
            return
        kind = PromptKind.STEERING if mode == "steer" else PromptKind.FOLLOW_UP
        async for e in driver.join(Send(message, driver.runner.view(), kind), mode):
            yield e

    async def attach(self, data: bytes, media_type: str | None = None,
                     ) -> MediaPart | MediaRefused:
        """Keep an image or a file with this session (once, by the SHA-256 of its bytes)
        and return the part that names it in a message (``send((TextPart(...), part))``);
        or, as a value, why it cannot be sent: ``too_large`` (over
        ``phaseflow.turn.media.MAX_ATTACHMENT_BYTES``), ``unsupported_type`` (the
        provider does not take it), ``malformed`` (the bytes are not what the type
        says), ``empty``. ``media_type`` ``None``: read from the bytes."""
        from phaseflow.providers.media import accepted_media
        from phaseflow.session.attachments import attach

        return await attach(self._agent.store, self.id, data, media_type,
                            accepted_media(self._runner.config.provider))

    def attach_sync(self, data: bytes, media_type: str | None = None,
                    ) -> MediaPart | MediaRefused:
        return _run(self.attach(data, media_type))

    async def _admit(self, message: Content) -> Content:
        """``message`` with its attachments checked: ``AttachmentRefused`` (a
        ``PhaseflowError``) names one that is not this session's, is missing, or is of a
        type the provider does not take; a ``data:`` URL part is stored first."""
        from phaseflow.providers.media import accepted_media
        from phaseflow.session.attachments import admit, history_media

        content = freeze_content(message)
        if isinstance(content, str):
            return content
        return await admit(self._agent.store, self.id, content,
                           accepted_media(self._runner.config.provider),
                           frozenset(history_media(self._runner.core.history())))

    async def recover(self, *, force: bool = False) -> tuple[ev.Event, ...]:
        """Finish a turn that a stopped worker left (see ``docs/durability.md``), and
        send what was queued; the events. Nothing happens when no turn was left.
        :class:`SessionBusy` while another worker's lease has not expired, unless
        ``force`` (the operator knows that worker is gone: its late writes are fenced)."""
        return tuple([e async for e in self.recovering(force=force)])

    async def recovering(self, *, force: bool = False) -> AsyncIterator[ev.Event]:
        """:meth:`recover`, its events as they happen (a host that streams them)."""
        async for e in self._driver.run(None, force=force):
            yield e

    async def save(self) -> None:
        """Store a new session before its first message (``phaseflow serve``'s
        ``POST /v1/sessions``); nothing for one already stored. ``StoreConflict`` when
        another writer stored a session of this id first."""
        if self._runner.version == 0:
            await self._runner.commit(())

    def recover_sync(self, *, force: bool = False) -> tuple[ev.Event, ...]:
        return _run(self.recover(force=force))

    async def reply(self, message: Content, *, busy: Busy | None = None) -> Reply:
        """Send, drain the events, and return the outcome of *this message's* turn as a
        :class:`Reply`: the final text (a ``str``) with the turn's ``status``. A turn
        that failed (the model could not be reached, the provider broke) or was
        cancelled raises :class:`TurnFailed` with the reason, so that a host printing the
        reply never prints an empty one for a failure; a turn that waits for a human
        returns a reply whose ``status`` is ``awaiting_approval`` and whose ``approval``
        says what to decide; a message that was only queued (a turn is running, here or
        in another worker) returns an empty reply whose ``status`` is ``queued``. Turns
        that queued messages start after this one are drained, not reported."""
        return await self._reply_of(self.send(message, busy=busy))

    async def _reply_of(self, stream: AsyncIterator[ev.Event]) -> Reply:
        """The :class:`Reply` of the first turn ``stream`` finishes (or stops for a human);
        the rest of the stream drained. The one reading of a turn's end for :meth:`reply`,
        :meth:`approve` and :meth:`reject`."""
        text, status, turn, errors = "", "", 0, []
        async for e in stream:
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
        async for e in self._driver.run(event):
            yield e

    async def approve(self, call_id: str, *, scope: Literal["call", "turn", "session"] = "call",
                      arguments_hash: str | None = None) -> Reply:
        """Approve the pending call ``call_id`` and return the :class:`Reply` of the turn
        it resumes, as :meth:`reply` returns one (``status`` ``awaiting_approval`` again
        when the turn stops at another call; :class:`TurnFailed` when it fails).
        ``scope``: this ``call``; every call of this ``turn``; or the ``session``, for
        calls of the same trust key. Refusals as for :meth:`resolve`."""
        if scope not in _APPROVAL_SCOPES:
            raise ConfigError(f"scope must be call, turn or session, not {scope!r}")
        return await self._reply_of(self.resolve(call_id, _APPROVAL_SCOPES[scope],
                                                 arguments_hash=arguments_hash))

    async def reject(self, call_id: str, reason: str = "", *,
                     arguments_hash: str | None = None) -> Reply:
        """Reject the pending call ``call_id`` (the model is told ``reason``) and return
        the :class:`Reply` of the turn it resumes, as :meth:`approve` does."""
        return await self._reply_of(self.resolve(call_id, ApprovalDecision.REJECT,
                                                 reason=reason, arguments_hash=arguments_hash))

    def cancel(self) -> None:
        """Stop the current turn (from another task): the stream is closed, running tools
        are cancelled, every call gets a result, the turn ends as ``cancelled``."""
        if self._driver.running:
            self._runner.request_cancel()

    def steering_stored(self) -> None:
        """Another worker stored a steering message for the turn running here (it could
        not take the turn): the turn reads the store's queue before its next model
        request and delivers it there. Needed only for a store whose reads are round
        trips (PostgreSQL; ``phaseflow serve`` calls it on a notification): SQLite and
        memory stores are read between requests anyway."""
        if self._driver.running:
            self._runner.steering_stored = True

    async def cancel_pending(self) -> tuple[ev.Event, ...]:
        """Cancel a turn that waits for approval (nothing runs: it ends as cancelled)."""
        if self._runner.core.status != "awaiting_approval":
            return ()
        return tuple([e async for e in self._driver.run(Cancel(self._runner.config.clock()))])

    # --- forking ----------------------------------------------------------------------

    async def fork(self, new_id: str, *, at_turn: int) -> Session:
        """A new session ``new_id`` that starts where this one stood at the end of its
        turn ``at_turn``: the same history, state, phase, machine position and call
        ledger (its past calls are history: none runs again); this session is untouched.
        Its log begins with a ``session_forked`` event. :class:`ForkRefused` (nothing
        written) when ``new_id`` exists, when the turn was not reached or has not ended
        (it runs, or waits for approval), or when the store keeps no record of its end.
        See ``docs/sessions.md`` (Fork)."""
        agent = self._agent
        record, _ = await fork_record(agent.store, self.id, new_id, at_turn,
                                      now=agent.config.clock(), check=agent._runner_from)
        return agent._resume(record)

    def fork_sync(self, new_id: str, *, at_turn: int) -> Session:
        return _run(self.fork(new_id, at_turn=at_turn))

    async def edit_last(self, message: Content, *, branch: str | None = None) -> Session:
        """The last user message, edited, asked again as a branch: this session forked at
        the end of the turn before its last one, as ``branch`` (default: ``ID~1``,
        ``ID~2``, ...: the first free), and ``message`` sent there (the turn is run; its
        events are the branch's). This session, the earlier branch, is kept as it is;
        :meth:`branches` lists the branches. :class:`ForkRefused` when the last turn has
        not ended or is the first (nothing comes before it)."""
        store = self._agent.store
        turn = await last_turn(store, self.id)
        new_id = branch if branch is not None else await free_branch_id(store, self.id)
        forked = await self.fork(new_id, at_turn=turn - 1)
        async for _ in forked.send(message):
            pass
        return forked

    def edit_last_sync(self, message: Content, *, branch: str | None = None) -> Session:
        return _run(self.edit_last(message, branch=branch))

    async def branches(self) -> tuple[str, ...]:
        """The ids of this session's branches (``ID~k``, made by :meth:`edit_last`), in
        order; open one with ``agent.session(id)``. Reads every stored session's summary
        (and each branch's first event): a listing, not a per-turn call."""
        return await branches(self._agent.store, self.id)

    def branches_sync(self) -> tuple[str, ...]:
        return _run(self.branches())

    # --- synchronous twins --------------------------------------------------------------

    def send_sync(self, message: Content, *, steering: bool = False,
                  busy: Busy | None = None) -> list[ev.Event]:
        return _run(_collect(self.send(message, steering=steering, busy=busy)))

    def reply_sync(self, message: Content, *, busy: Busy | None = None) -> Reply:
        return _run(self.reply(message, busy=busy))

    def approve_sync(self, call_id: str, *, scope: Literal["call", "turn", "session"] = "call",
                     arguments_hash: str | None = None) -> Reply:
        return _run(self.approve(call_id, scope=scope, arguments_hash=arguments_hash))

    def reject_sync(self, call_id: str, reason: str = "", *,
                    arguments_hash: str | None = None) -> Reply:
        return _run(self.reject(call_id, reason, arguments_hash=arguments_hash))

    def resolve_sync(self, call_id: str, decision: str | ApprovalDecision, *,
                     reason: str = "", arguments_hash: str | None = None) -> list[ev.Event]:
        return _run(_collect(self.resolve(call_id, decision, reason=reason,
                                          arguments_hash=arguments_hash)))


#: :meth:`Session.approve`'s scopes and the decision each is
_APPROVAL_SCOPES: Mapping[str, ApprovalDecision] = {
    "call": ApprovalDecision.APPROVE, "turn": ApprovalDecision.APPROVE_TURN,
    "session": ApprovalDecision.APPROVE_SESSION}


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



def _trusted_tools(names: Iterable[str], tools: Mapping[str, Any]) -> tuple[str, ...]:
    if isinstance(names, str):
        raise ConfigError(f"trusted_tools is a list of tool names, not the string {names!r}")
    out: list[str] = []
    for name in names:
        if not isinstance(name, str) or name not in tools:
            raise ConfigError(f"trusted_tools: no tool {name!r} (the agent's tools: "
                              f"{', '.join(sorted(tools)) or 'none'})")
        if name not in out:
            out.append(name)
    return tuple(out)
