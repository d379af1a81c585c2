"""Running a conversation scenario: a real session, a scripted model, stand-in tools.

The scenario's ``model:`` steps are one script for the whole conversation (the scripted
provider answers the request whose history holds N-1 assistant messages with reply N),
so a conversation resumed after a ``crash`` continues where it stood. The steps between
two user-side steps are one turn's: the runner knows, before a turn starts, which
replies it may ask for and which ``expect`` steps are checked before which reply. The
provider is wrapped so that an ``expect`` between two ``model:`` steps is checked when the
session asks for the next reply - nothing is raised inside the stream: a failed check is
recorded and reported when the turn is over, with the step's line.

``cancel: true`` cancels the turn in progress at its first wait after the replies
written before it: while the stand-in tools of the last reply run (every stand-in
called in that tool group waits until the turn is cancelled), or, when that reply runs
no stand-in (or no reply was written yet), while the session waits for the next reply.
A turn that waits for an approval is cancelled as the host does it
(``cancel_pending``).
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from typing import Any

from phaseflow.errors import ConfigError, PhaseflowError
from phaseflow.providers.protocol import ProviderEvent, ProviderFailure, ProviderRequest
from phaseflow.providers.scripted import ScriptedProvider
from phaseflow.session import events as ev
from phaseflow.session.agent import Agent, Session
from phaseflow.spec.model import Workflow
from phaseflow.stores.memory import MemoryStore
from phaseflow.testing.calls import CallLog
from phaseflow.testing.convchecks import Seen, check
from phaseflow.testing.coverage import Coverage
from phaseflow.testing.testfile import Scenario, ScenarioStep, Spot, TestFile
from phaseflow.tools.function import ToolContext
from phaseflow.tools.function import tool as make_tool
from phaseflow.turn.messages import AssistantMessage

__all__ = ["TURN_TIMEOUT", "run_conversation"]

#: a turn that has not ended after this many seconds fails the scenario (a safety net
#: against a turn that waits forever; the scripted turns take milliseconds)
TURN_TIMEOUT = 30.0
SESSION_ID = "conversation-test"


class _Failed(Exception):
    """Internal: stops the conversation at the failing step."""


@dataclass(slots=True)
class _Turn:
    """What the runner knows about the turn in progress before it starts."""

    opener: ScenarioStep
    first: int  # the number of the first reply written for it
    last: int  # the number of its last reply (first - 1 when none is written)
    before: dict[int, list[ScenarioStep]] = field(default_factory=dict)  # checks before reply N
    models: dict[int, ScenarioStep] = field(default_factory=dict)
    cancel: bool = False  # the next step is `cancel: true`
    cancelled: bool = False  # the cancellation happened
    checked: set[int] = field(default_factory=set)
    #: `steer` / `interrupt` steps, each after the reply number written before it
    inline: list[tuple[int, ScenarioStep]] = field(default_factory=list)
    done: set[int] = field(default_factory=set)  # the inline steps sent (by line)
    crash: ScenarioStep | None = None  # the next step is a `crash` that stops this turn
    crashed: bool = False  # the worker was stopped

    def pending(self, after: int) -> ScenarioStep | None:
        """The inline step to send once reply ``after`` was given, if not sent yet."""
        for written_after, step in self.inline:
            if written_after == after and step.line not in self.done:
                return step
        return None


class _Model:
    """The provider the session talks to: the scripted provider, with the checks of
    the ``expect`` steps written before a reply run when the session asks for it."""

    def __init__(self, run: _Conversation, script: ScriptedProvider) -> None:
        self.run = run
        self.script = script
        self.answered = 0  # the number of the reply the session got last
        self.furthest = 0
        self.last_request: ProviderRequest | None = None

    async def stream(self, request: ProviderRequest) -> AsyncIterator[ProviderEvent]:
        run = self.run
        self.last_request = request
        if run.offset:  # (a fork: the script's replies after its turn are not its own)
            request = replace(request, folded_replies=request.folded_replies + run.offset)
        number = 1 + request.folded_replies + sum(
            m.replies for m in request.history if isinstance(m, AssistantMessage))
        if request.purpose == "compaction":
            async for item in self.script.stream(request):
                yield item
            return
        turn = run.turn
        if turn is not None:
            await run.inline(turn.pending(number - 1), in_tool=False)
        if turn is not None and number > turn.last:
            if turn.crash is not None and turn.crash.value is True:
                await run.crash_here()
            if turn.cancel:
                await run.cancel_here()
            line = turn.models[turn.last].line if turn.last in turn.models else turn.opener.line
            written = turn.last - turn.first + 1
            run.record(f"{run.path}:{line}: the turn asks for another reply (reply {number} "
                       f"of the conversation), but {written} "
                       f"{'is' if written == 1 else 'are'} written for it; add a model step")
            yield ProviderFailure("the conversation test has no more replies for this turn")
            return
        if turn is not None and number not in turn.checked:
            turn.checked.add(number)
            for step in turn.before.get(number, ()):
                run.check(step, request)
        self.answered = number
        self.furthest = max(self.furthest, number)
        async for item in self.script.stream(request):
            yield item


class _Conversation:
    """One conversation scenario's run."""

    def __init__(self, test: TestFile, scenario: Scenario, workflow: Workflow,
                 coverage: Coverage, used: set[Spot]) -> None:
        assert scenario.conversation is not None
        self.path = test.path
        self.scenario = scenario
        self.steps = scenario.conversation
        self.workflow = workflow
        self.coverage = coverage
        self.log = CallLog(used)
        self.hooks = self.log.hooks(workflow, {**test.mocks, **scenario.mocks})
        self.stand_ins = {**test.tools, **scenario.tools}
        self.unstubbed: list[str] = []
        replies = [step.value for step in self.steps if step.kind == "model"]
        self.model = _Model(self, ScriptedProvider(replies))
        #: how the agent lays its requests out (``Agent(context_position=, offer_tools=)``)
        self.layout = {"context_position": "end", "offer_tools": "phase"}
        self.store = MemoryStore()
        self.turn: _Turn | None = None
        self.failures: list[str] = []
        self.session: Session | None = None
        self.now = 0.0  # the phase clock's reading, in seconds
        #: the calls of the last tool group, in the model's order, and every result
        self.group: list[str] = []
        self.names: dict[str, str] = {}
        self.results: dict[str, ev.ToolResultEvent] = {}
        self._in_group = False
        self._group_base = 0
        self._group_positions: list[int] = []
        self.seen_history = 0
        #: how the last turn ended (its status, or the step limit's message)
        self.ended = ""
        #: the session the steps talk to (a fork's, after a ``fork`` step)
        self.session_id = SESSION_ID
        #: replies of the script that a fork's history does not hold (the turns after
        #: the one it was forked at): the script goes on after them
        self.offset = 0
        #: the task draining the turn in progress (a crash cancels it)
        self.drain: asyncio.Task[None] | None = None
        #: the last turn was stopped by a crash: the next replies are its resumption
        self.crashed = False

    # --- the parts ----------------------------------------------------------------------

    def agent(self) -> Agent:
        """An agent as a host builds it; a ``crash`` builds a new one on the same store."""
        names = list(self.workflow.tools) if self.workflow.tools is not None else list(
            self.stand_ins)
        # the tools of every workflow it calls or hands off to, which the host serves too
        for used in self.workflow.used():
            names += [n for n in (used.tools or ()) if n not in names]
        tools = {name: self._tool(name) for name in names}
        return Agent(self.workflow, self.model, tools=tools, hooks=self.hooks,
                     store=self.store, clock=self.wall_clock, phase_clock=self.phase_clock,
                     context_position=self.layout["context_position"],
                     offer_tools=self.layout["offer_tools"])

    def phase_clock(self) -> float:
        """The machine's time: it moves only at a ``wait`` step (0 at the start)."""
        return self.now

    def wall_clock(self) -> float:
        """The session's wall clock (events, leases, the time a stored session waited):
        the real one, and every ``wait`` on top."""
        return time.time() + self.now

    def _tool(self, name: str) -> Any:
        stand_in = self.stand_ins.get(name)

        async def call(ctx: ToolContext, **arguments: Any) -> Any:
            self._called_tool(name, ctx.call_id)
            if stand_in is not None:
                self.log.used.add(stand_in.spot)
            turn = self.turn
            if turn is not None:
                await self.inline(turn.pending(self.model.answered), in_tool=True)
            if turn is not None and self.model.answered == turn.last and (
                    turn.crash is not None and turn.crash.value == {"during": name}):
                await self.crash_here()
            if turn is not None and turn.cancel and self.model.answered == turn.last:
                await self.cancel_here()
            if stand_in is None:
                self.unstubbed.append(name)
                return None
            if stand_in.raises is not None:
                raise RuntimeError(stand_in.raises)
            if stand_in.echo:
                return copy.deepcopy(arguments)
            return copy.deepcopy(stand_in.returns)

        return make_tool(name=name, parameters={"type": "object"})(call)

    def _called_tool(self, name: str, call_id: str) -> None:
        """Log a stand-in's call in the model's call order within its tool group (the
        calls of a group run concurrently: the order they start in is not the test's)."""
        position = self.group.index(call_id) if call_id in self.group else len(self.group)
        before = sum(1 for p in self._group_positions if p < position)
        self.log.called.insert(min(self._group_base + before, len(self.log.called)), name)
        self._group_positions.append(position)

    async def cancel_here(self) -> None:
        """Cancel the running turn, as the host's ``session.cancel()`` does, and wait
        for it (the session stops the tool or the stream that waits here)."""
        assert self.turn is not None and self.session is not None
        self.turn.cancelled = True
        self.session.cancel()
        await asyncio.Event().wait()

    async def inline(self, step: ScenarioStep | None, *, in_tool: bool) -> None:
        """Send a ``steer`` or ``interrupt`` step's message into the running turn, as a
        user typing while the agent works: a steering message goes with the turn's next
        request (the caller goes on); an interrupt cancels the turn, whose next one it
        starts (the caller waits to be cancelled)."""
        if step is None or self.turn is None or self.session is None:
            return
        self.turn.done.add(step.line)
        busy: Any = "steer" if step.kind == "steer" else "interrupt"
        async for event in self.session.send(step.value, busy=busy):
            self.observe(event)
        if step.kind == "interrupt":
            await asyncio.Event().wait()

    async def crash_here(self) -> None:
        """The worker dies here: its turn's task is cancelled, nothing after its last
        commit happens (the next step reopens the session from the store)."""
        assert self.turn is not None and self.drain is not None
        self.turn.crashed = True
        self.drain.cancel()
        await asyncio.Event().wait()

    def record(self, failure: str) -> None:
        self.failures.append(failure)

    def fail(self, step: ScenarioStep, message: str) -> _Failed:
        return _Failed(f"{self.path}:{step.line}: {message}")

    # --- events -------------------------------------------------------------------------

    def observe(self, event: ev.Event) -> None:
        if isinstance(event, ev.ToolCallEvent):
            if not self._in_group:
                self.group = []
                self._group_base = len(self.log.called)
                self._group_positions = []
            self._in_group = True
            self.group.append(event.call_id)
            self.names[event.call_id] = event.name
            return
        self._in_group = False
        if isinstance(event, ev.ToolResultEvent):
            self.results[event.call_id] = event
        elif isinstance(event, ev.TurnFinished) and not self.ended.startswith("step_limit"):
            self.ended = event.status
        elif isinstance(event, ev.ErrorEvent) and event.code == "step_limit":
            self.ended = f"step_limit: {event.message}"

    def covered(self) -> None:
        """Credit the transitions the machine took since the last look."""
        if self.session is None:
            return
        history = self.session.machine.history
        for record in history[self.seen_history:]:
            self.coverage.phase(record.to_phase)
            self.coverage.taken(record.from_phase, record.to_phase, record.trigger)
        self.seen_history = len(history)

    # --- running ------------------------------------------------------------------------

    async def run(self) -> str | None:
        self.coverage.phase(self.workflow.initial)
        try:
            agent = self.agent()
            self.session = await self._open(agent)
            await self._steps()
        except _Failed as failed:
            return str(failed)
        finally:
            self.covered()
        return None

    async def _open(self, agent: Agent) -> Session:
        """The scenario's session: a new one, starting from the workflow's defaults with
        the scenario's ``state`` over them (as ``Agent.session(id, state=...)``)."""
        scenario = self.scenario
        try:
            return await agent.session(self.session_id, state=scenario.state or None)
        except ConfigError as exc:  # a value of the wrong type: where that key is written
            line = next((spot.line for key, spot in scenario.state_spots.items()
                         if f"key {key!r}:" in str(exc)), scenario.line)
            raise _Failed(f"{self.path}:{line}: scenario '{scenario.name}' state: "
                          f"{exc}") from None

    async def _steps(self) -> None:
        steps = self.steps
        reply = 0
        index = 0
        while index < len(steps):
            step = steps[index]
            index += 1
            if step.kind == "expect":
                self.check(step, None)
            elif step.kind in ("user", "approve", "reject") or (
                    step.kind == "wait" and index < len(steps)
                    and steps[index].kind == "model") or (
                    step.kind == "crash" and index < len(steps)
                    and steps[index].kind in ("model", "expect", "steer", "interrupt")
                    and (self.crashed or steps[index].kind != "expect")):
                if step.kind == "crash":
                    await self._reopen(step)
                if step.kind == "wait":  # the clock moves, then the due timer's turn
                    self.now += step.value
                turn = _Turn(step, reply + 1, reply)
                waiting: list[ScenarioStep] = []
                while index < len(steps) and steps[index].kind in (
                        "model", "expect", "steer", "interrupt"):
                    item = steps[index]
                    index += 1
                    if item.kind == "expect":
                        waiting.append(item)
                        continue
                    if item.kind in ("steer", "interrupt"):
                        turn.inline.append((reply, item))
                        continue
                    reply += 1
                    turn.before[reply], waiting = waiting, []
                    turn.models[reply] = item
                turn.last = reply
                following = steps[index] if index < len(steps) else None
                turn.cancel = following is not None and following.kind == "cancel"
                turn.crash = following if following is not None and (
                    following.kind == "crash") else None
                await self._turn(turn)
                for item in waiting:
                    self.check(item, None)
            elif step.kind == "cancel":
                await self._cancel(step)
            elif step.kind == "crash":
                await self._reopen(step)
            elif step.kind == "wait":
                self.now += step.value
            elif step.kind in ("mode", "compact", "fork"):
                await self._between_turns(step)
            self._raise_recorded()

    async def _reopen(self, step: ScenarioStep) -> None:
        """A restarted process: a new agent on the same store opens the session (a turn
        the crash stopped is finished by the steps that follow, as ``recover`` does)."""
        self.crashed = False
        self.session = None
        try:
            self.session = await self.agent().session(self.session_id)
        except PhaseflowError as error:
            raise self.fail(step, f"crash: the session cannot be reopened: "
                                  f"{error}") from None

    async def _fork(self, session: Session, at: int) -> tuple[ev.Event, ...]:
        """Go on in a fork of the session at the end of turn ``at``: the steps after
        talk to the fork; its model's next reply is the next ``model:`` step written."""
        fork = await session.fork(f"{SESSION_ID}~{self.session_id.count('~') + 1}",
                                  at_turn=at)
        held = sum(m.replies for m in fork.transcript if isinstance(m, AssistantMessage))
        self.offset = self.model.furthest - held
        self.session, self.session_id = fork, fork.id
        self.seen_history = 0
        return await fork.events()

    async def _between_turns(self, step: ScenarioStep) -> None:
        session = self.session
        assert session is not None
        try:
            if step.kind == "mode":
                events = await session.set_mode(step.value)
            elif step.kind == "fork":
                events = await self._fork(session, step.value)
            else:
                events = await session.compact()
        except PhaseflowError as error:
            raise self.fail(step, f"{step.kind}: {error}") from None
        for event in events:
            self.observe(event)

    def _raise_recorded(self) -> None:
        if self.failures:
            raise _Failed(self.failures[0])

    async def _turn(self, turn: _Turn) -> None:
        session = self.session
        assert session is not None
        step = turn.opener
        self.turn = turn
        self.ended = ""
        try:
            if step.kind == "user":
                stream = session.send(step.value)
            elif step.kind == "crash":
                stream = session.recovering()
            elif step.kind == "wait":
                stream = session.firing_timer()
            else:
                stream = self._resolve(session, step)
            self.drain = asyncio.ensure_future(self._drain(stream))
            try:
                await asyncio.wait_for(asyncio.shield(self.drain), TURN_TIMEOUT)
            except asyncio.CancelledError:
                if not turn.crashed:
                    raise
                self.crashed = True  # the worker died: the crash step reopens it
                return
            except TimeoutError:
                self.drain.cancel()
                raise self.fail(step, f"the turn did not end within {TURN_TIMEOUT:g} s "
                                      f"(status {session.status})") from None
            except PhaseflowError as error:
                raise self.fail(step, f"{step.kind}: {error}") from None
        finally:
            self.covered()
        self._raise_recorded()
        if self.log.unmocked:
            names = ", ".join(sorted(set(self.log.unmocked)))
            raise self.fail(step, f"the workflow called {names}, which the test file does "
                                  "not mock; add it under 'mocks'")
        if self.unstubbed:
            names = ", ".join(sorted(set(self.unstubbed)))
            raise self.fail(step, f"the model called {names}, which the test file has no "
                                  "stand-in for; add it under 'tools'")
        unused = turn.last - max(self.model.furthest, turn.first - 1)
        if unused > 0 and not turn.cancelled and session.status != "failed":
            first = turn.models[turn.last - unused + 1]
            how = ("paused for an approval" if session.status == "awaiting_approval"
                   else f"ended ({self.ended})" if self.ended.startswith("step_limit")
                   else "ended")
            raise self.fail(first, f"this reply was never asked for: the turn {how} after "
                                   f"{turn.last - turn.first + 1 - unused} of its "
                                   f"{turn.last - turn.first + 1} replies (status "
                                   f"{session.status})")

    async def _resolve(self, session: Session, step: ScenarioStep) -> AsyncIterator[ev.Event]:
        decision: dict[str, str] = step.value
        pending = session.pending_approval
        if pending is None:
            raise self.fail(step, f"{step.kind} {decision['tool']}: no approval is pending "
                                  f"(status {session.status})")
        if pending.name != decision["tool"]:
            raise self.fail(step, f"{step.kind} {decision['tool']}: the pending approval is "
                                  f"for {pending.name}")
        async for event in session.resolve(pending.call_id, decision["decision"],
                                           reason=decision["reason"]):
            yield event

    async def _drain(self, stream: AsyncIterator[ev.Event]) -> None:
        async for event in stream:
            self.observe(event)

    async def _cancel(self, step: ScenarioStep) -> None:
        session = self.session
        assert session is not None
        turn = self.turn
        if turn is not None and turn.cancelled:
            return
        if session.status == "awaiting_approval":
            for event in await session.cancel_pending():
                self.observe(event)
            return
        raise self.fail(step, f"cancel: no turn is running or waiting for an approval "
                              f"(status {session.status})")

    # --- checks -------------------------------------------------------------------------

    def check(self, step: ScenarioStep, request: ProviderRequest | None) -> None:
        """Run an ``expect`` step. ``request``: the request the next reply answers (a
        check between two replies); ``None`` for a check at rest (the session's most
        recent request)."""
        session = self.session
        assert session is not None
        if request is None:
            request = session.last_request or self.model.last_request
        seen = Seen(session, request, self.log.take(), self.group, self.names, self.results,
                    self.workflow)
        problems = [p for p in (check(key, expected, seen)
                                for key, expected in step.expect.items()) if p]
        if problems:
            self.record(f"{self.path}:{step.line}: expect failed:\n  " + "\n  ".join(problems))


def run_conversation(test: TestFile, scenario: Scenario, workflow: Workflow,
                     coverage: Coverage, used: set[Spot], *, context_position: str = "end",
                     offer_tools: str = "phase") -> str | None:
    """Run a conversation scenario; its failure (``path:line: ...``) or ``None``.
    ``used`` collects where the mocks and tool stand-ins it called are written; the
    agent lays its requests out as ``context_position`` and ``offer_tools`` say."""
    run = _Conversation(test, scenario, workflow, coverage, used)
    run.layout = {"context_position": context_position, "offer_tools": offer_tools}
    return asyncio.run(run.run())

