"""Running an eval: every scenario's trials as real sessions, some at once.

The imperative shell around the pure core (criteria, scoring, funnel): it opens a
session per trial in the given store (the session id names the eval run, the scenario
and the trial: ``eval-RUN-SCENARIO-tN``, so ``phaseflow sessions show`` opens it), lets
the simulated user and the agent talk until the workflow reaches a final phase, the user
ends it, or the user's ``max_turns`` are spent, answers approvals as the scenario says,
and keeps the conversation's events. ``concurrency`` conversations run at once; a budget
(cost, turns) stops new turns once spent; :meth:`EvalRun.stop` (Ctrl-C) cancels what
runs and keeps what finished.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from phaseflow.errors import ConfigError, PhaseflowError
from phaseflow.evals.evalfile import EvalFile, EvalScenario
from phaseflow.evals.standins import StandIns
from phaseflow.evals.transcript import Conversation, Judgement
from phaseflow.evals.users import User, UserFailed, ask_judge
from phaseflow.providers.protocol import Provider, ProviderEvent, ProviderRequest
from phaseflow.session import events as ev
from phaseflow.session.agent import Agent, Session
from phaseflow.spec.model import Workflow
from phaseflow.stores.base import Store

__all__ = ["Budget", "EvalRun", "Job", "Prices", "RunOptions", "session_id"]


@dataclass(frozen=True, slots=True)
class Job:
    """One trial of one scenario."""

    file: EvalFile
    workflow: Workflow
    scenario: EvalScenario
    trial: int


@dataclass(frozen=True, slots=True)
class Prices:
    """USD per million tokens, of the agent's model (input, output) and the user's."""

    input: float = 0.0
    output: float = 0.0
    user: float = 0.0

    def cost(self, input_tokens: int, output_tokens: int, user_tokens: int) -> float:
        return (input_tokens * self.input + output_tokens * self.output
                + user_tokens * self.user) / 1_000_000


@dataclass(slots=True)
class Budget:
    """What the run may spend in all: ``max_cost`` USD, ``max_turns`` user messages."""

    max_cost: float | None = None
    max_turns: int | None = None
    cost: float = 0.0
    turns: int = 0

    def spent(self) -> bool:
        return ((self.max_cost is not None and self.cost >= self.max_cost)
                or (self.max_turns is not None and self.turns >= self.max_turns))


@dataclass(slots=True)
class RunOptions:
    run_id: str
    store: Store
    #: the agent's model for a scenario (a scripted one replays the scenario's ``model``)
    agent_provider: Callable[[EvalScenario], Provider]
    #: the simulated user of a scenario
    user: Callable[[EvalScenario], User]
    model: str = ""
    judge: Provider | None = None
    judge_model: str = ""
    concurrency: int = 4
    budget: Budget = field(default_factory=Budget)
    prices: Prices = field(default_factory=Prices)
    tools: Mapping[str, Any] | None = None
    hooks: Mapping[str, Callable[..., Any]] | None = None
    #: called with each conversation as it ends (the progress bar)
    on_done: Callable[[Conversation], None] | None = None
    #: how each model request is laid out (``Agent(context_position=, offer_tools=)``)
    context_position: Literal["end", "system"] = "end"
    offer_tools: Literal["phase", "workflow"] = "phase"


def session_id(run_id: str, scenario: str, trial: int) -> str:
    """``eval-RUN-SCENARIO-tN``, the scenario's name made a slug."""
    slug = re.sub(r"[^a-z0-9]+", "-", scenario.lower()).strip("-")[:60] or "scenario"
    return f"eval-{run_id}-{slug}-t{trial}"


class _Timed:
    """The agent's provider, its time spent answering added up."""

    def __init__(self, provider: Provider) -> None:
        self.provider = provider
        self.seconds = 0.0
        self.model = getattr(provider, "model", "")

    async def stream(self, request: ProviderRequest) -> AsyncIterator[ProviderEvent]:
        started = time.perf_counter()
        try:
            async for event in self.provider.stream(request):
                yield event
        finally:
            self.seconds += time.perf_counter() - started


@dataclass(slots=True)
class _Talk:
    """One conversation's running record."""

    events: list[Mapping[str, Any]] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    reply: str = ""

    def observe(self, event: ev.Event) -> None:
        self.events.append(event.to_json())
        if isinstance(event, ev.TurnFinished):
            self.input_tokens += event.input_tokens
            self.output_tokens += event.output_tokens
            self.reply = event.reply


class EvalRun:
    """Runs jobs; :attr:`conversations` holds those that ended, in the order they did."""

    def __init__(self, options: RunOptions) -> None:
        self.options = options
        self.conversations: list[Conversation] = []
        self.stopped = ""  # "interrupted" or "budget" when the run did not run every job
        self._tasks: set[asyncio.Task[None]] = set()

    def stop(self) -> None:
        """Cancel the conversations in progress (Ctrl-C): the finished ones are kept."""
        self.stopped = "interrupted"
        for task in list(self._tasks):
            task.cancel()

    async def run(self, jobs: list[Job]) -> list[Conversation]:
        """Play ``jobs``; :class:`ConfigError` before any starts when two would share a
        session id, or the store already has one of them (an earlier run's id)."""
        ids: dict[str, Job] = {}
        for job in jobs:
            sid = session_id(self.options.run_id, job.scenario.name, job.trial)
            first = ids.setdefault(sid, job)
            if first is not job:
                raise ConfigError(f"scenario '{job.scenario.name}' of {job.file.path} and "
                                  f"'{first.scenario.name}' of {first.file.path} would both "
                                  f"be stored as session {sid}: rename one")
        for sid in ids:
            if await self.options.store.load(sid) is not None:
                raise ConfigError(f"the store already has session {sid}: give another "
                                  "--run-id")
        queue: asyncio.Queue[Job] = asyncio.Queue()
        for job in jobs:
            queue.put_nowait(job)

        async def worker() -> None:
            while not self.stopped:
                try:
                    job = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                if self.options.budget.spent():
                    self.stopped = "budget"
                    return
                conversation = await self.converse(job)
                if not conversation.complete:
                    if conversation.ended == "budget":
                        self.stopped = "budget"
                    continue
                self.conversations.append(conversation)
                if self.options.on_done is not None:
                    self.options.on_done(conversation)

        workers = [asyncio.ensure_future(worker())
                   for _ in range(max(1, min(self.options.concurrency, len(jobs))))]
        self._tasks.update(workers)
        try:
            await asyncio.gather(*workers, return_exceptions=True)
        finally:
            self._tasks.clear()
        return self.conversations

    async def converse(self, job: Job) -> Conversation:
        options = self.options
        scenario = job.scenario
        talk = _Talk()
        stand_ins = StandIns(scenario, job.workflow, talk.events)
        provider = _Timed(options.agent_provider(scenario))
        user = options.user(scenario)
        sid = session_id(options.run_id, scenario.name, job.trial)
        started = time.perf_counter()
        turns = 0
        ended, error = "", ""
        session: Session | None = None
        try:
            agent = Agent(job.workflow, provider, tools=stand_ins.tools(options.tools),
                          hooks=stand_ins.hooks(options.hooks), store=options.store,
                          model=options.model or None,
                          context_position=options.context_position,
                          offer_tools=options.offer_tools)
            session = await agent.session(sid, state=scenario.state or None)
            reply: str | None = None
            while True:
                if turns >= scenario.user.max_turns:
                    ended = "max_turns"
                    break
                if options.budget.spent():
                    ended = "budget"
                    break
                message = await user.next(reply)
                if message is None:
                    ended = "user_done"
                    break
                turns += 1
                options.budget.turns += 1
                before = talk.input_tokens, talk.output_tokens
                async for event in session.send(message):
                    talk.observe(event)
                await self._approvals(session, scenario, talk)
                options.budget.cost += options.prices.cost(
                    talk.input_tokens - before[0], talk.output_tokens - before[1], 0)
                reply = talk.reply
                if session.status == "failed":
                    ended = "failed"
                    break
                if session.status == "finished":
                    ended = "finished"
                    break
        except asyncio.CancelledError:
            ended = "interrupted"
        except (PhaseflowError, UserFailed) as exc:
            ended, error = "error", str(exc)
        judgement = None
        if scenario.judge is not None and ended not in ("interrupted", "budget"):
            judgement = await self._judge(scenario.judge.rubric, talk.events)
        options.budget.cost += options.prices.cost(0, 0, user.tokens)
        return Conversation(
            workflow=job.workflow.name, eval_file=job.file.path, scenario=scenario.name,
            trial=job.trial,
            session_id=sid, initial_phase=job.workflow.initial,
            initial_state=_initial_state(job.workflow, scenario),
            events=tuple(talk.events), ended=ended,
            status=session.status if session is not None else "",
            turns=turns, input_tokens=talk.input_tokens, output_tokens=talk.output_tokens,
            user_tokens=user.tokens, seconds=time.perf_counter() - started,
            model_seconds=provider.seconds,
            cost=options.prices.cost(talk.input_tokens, talk.output_tokens, user.tokens),
            data=stand_ins.data, data_after=stand_ins.data_after, judgement=judgement,
            error=error)

    async def _approvals(self, session: Session, scenario: EvalScenario,
                         talk: _Talk) -> None:
        while session.status == "awaiting_approval":
            pending = session.pending_approval
            if pending is None:
                return
            policy = scenario.approve
            answer = policy.get(pending.name, "never") if isinstance(policy, dict) else policy
            decision = "approve" if answer == "always" else "reject"
            reason = "" if decision == "approve" else "not approved (the eval scenario says no)"
            async for event in session.resolve(pending.call_id, decision, reason=reason):
                talk.observe(event)

    async def _judge(self, rubric: str, events: list[Mapping[str, Any]]) -> Judgement:
        judge = self.options.judge
        if judge is None:
            return Judgement(rubric, None, "not judged: no --judge-provider given")
        try:
            passed, reason = await ask_judge(judge, self.options.judge_model, rubric,
                                             plain_transcript(events))
        except UserFailed as exc:
            return Judgement(rubric, False, str(exc))
        return Judgement(rubric, passed, reason)


def _initial_state(workflow: Workflow, scenario: EvalScenario) -> dict[str, Any]:
    """The state a session of the scenario starts with: the defaults, then its own."""
    defaults = {name: key.default for name, key in workflow.state.items()
                if key.has_default}
    return {**defaults, **scenario.state}


def plain_transcript(events: list[Mapping[str, Any]]) -> str:
    """The conversation as lines of text: who said what, which tools ran."""
    lines: list[str] = []
    for event in events:
        kind = event.get("type")
        if kind == "turn_started" and event.get("message"):
            lines.append(f"Customer: {event['message']}")
        elif kind == "tool_result":
            lines.append(f"[tool {event.get('name')}: {event.get('status')}]")
        elif kind == "turn_finished" and event.get("reply"):
            lines.append(f"Agent: {event['reply']}")
    return "\n".join(lines)


__all__ += ["plain_transcript"]
