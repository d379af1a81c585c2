"""Double texting: a message that arrives while a turn runs, by ``busy``: ``queue``
(stored; it starts the next turn), ``reject`` (refused), ``steer`` (delivered into the
running turn, with the model's next request), ``interrupt`` (the running turn is cancelled
as ``cancel()`` cancels it, and the message starts the next turn) - in one process and
across workers on one store. A message is never dropped."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import phaseflow
from phaseflow.errors import ConfigError
from phaseflow.providers import ScriptedProvider
from phaseflow.session import Agent, SessionBusy
from phaseflow.session import events as ev
from phaseflow.session.core import step
from phaseflow.session.values import (
    BoundaryDone,
    CallProvider,
    Core,
    Done,
    Persist,
    Replied,
    Resume,
    Send,
    ToolDone,
)
from phaseflow.stores import SQLiteStore, StoreFenced
from phaseflow.tools import tool
from phaseflow.turn.execution import PromptKind
from phaseflow.turn.messages import ToolOutcome, ToolResultMessage, UserMessage
from tests.support.session_fakes import Trace, call, offered, reply, view

WORKFLOW = """\
phaseflow: 1
name: desk
initial: work
state:
  paid: {type: number}
tools:
  wait: {}
  pay: {approval: always, writes: [paid]}
phases:
  work:
    goal: Help.
    tools: [wait, pay]
"""

#: what the tools did (a tool that ran twice shows twice); the gate a waiting tool waits on
RAN: list[str] = []
GATE: dict[str, asyncio.Event] = {}
STARTED: dict[str, asyncio.Event] = {}


@tool
async def wait(what: str) -> str:
    """Wait until the test lets the call finish."""
    STARTED[what].set()
    await GATE[what].wait()
    RAN.append(f"wait {what}")
    return f"waited for {what}"


@tool
def pay(amount: float) -> dict[str, Any]:
    """Pay."""
    RAN.append(f"pay {amount}")
    return {"paid": amount}


def fresh(*names: str) -> None:
    RAN.clear()
    for name in names:
        GATE[name] = asyncio.Event()
        STARTED[name] = asyncio.Event()


def agent(script: list[Any], **options: Any) -> Agent:
    return Agent(phaseflow.load_workflow_text(WORKFLOW), ScriptedProvider(script),
                 tools=[wait, pay], **options)


async def collect(stream: AsyncIterator[ev.Event]) -> list[ev.Event]:
    return [e async for e in stream]


def kinds(events: list[ev.Event]) -> list[str]:
    return [e.type for e in events if e.type != "text_delta"]


def bounded(coro: Any) -> Any:
    async def run() -> Any:
        return await asyncio.wait_for(coro, 20)
    return asyncio.run(run())


# --- steer ----------------------------------------------------------------------------------


def test_a_steering_message_goes_with_the_running_turn_s_next_request() -> None:
    async def scenario() -> tuple[Any, list[ev.Event], list[ev.Event]]:
        fresh("a")
        session = await agent([{"calls": [{"wait": {"what": "a"}}]}, "Done, in blue.",
                               ]).session("s")
        turn = asyncio.ensure_future(collect(session.send("paint it")))
        await STARTED["a"].wait()
        steered = await collect(session.send("make it blue", busy="steer"))
        GATE["a"].set()
        return session, steered, await turn

    session, steered, events = bounded(scenario())
    assert kinds(steered) == []  # queued in the running turn, committed
    assert kinds(events) == ["turn_started", "tool_call", "tool_result", "message_steered",
                             "turn_finished"]
    assert [e.turn for e in events if e.type == "turn_finished"] == [1]
    delivered = next(e for e in events if isinstance(e, ev.MessageSteered))
    assert delivered.message == "make it blue"
    second = session._agent.provider.requests[1].history.to_tuple()
    assert isinstance(second[-2], ToolResultMessage)
    assert second[-1] == UserMessage("make it blue")
    assert session.history[-2] == UserMessage("make it blue")
    assert session.turn == 1


def test_a_steering_message_for_a_turn_that_ends_first_starts_the_next_turn() -> None:
    async def scenario() -> list[ev.Event]:
        fresh("a")
        gate = asyncio.Event()
        asked = asyncio.Event()

        class Slow(ScriptedProvider):
            async def stream(self, request: Any) -> AsyncIterator[Any]:
                asked.set()
                await gate.wait()
                async for item in super().stream(request):
                    yield item

        session = await Agent(phaseflow.load_workflow_text(WORKFLOW),
                              Slow(["Hello.", "Blue it is."]), tools=[wait, pay]).session("s")
        turn = asyncio.ensure_future(collect(session.send("hi")))
        await asked.wait()
        await collect(session.send("make it blue", steering=True))
        gate.set()
        return await turn

    events = bounded(scenario())
    assert kinds(events) == ["turn_started", "turn_finished", "turn_started", "turn_finished"]
    assert [e.message for e in events if isinstance(e, ev.TurnStartedEvent)] == [
        "hi", "make it blue"]


def test_a_delivered_steering_message_is_sent_again_by_a_worker_that_resumes() -> None:
    """Committed with the request that carries it: the resumed request has it too."""
    work = view("work", offered("wait"))
    t = Trace(Core("s"))
    t.feed(Send("paint it", work))
    rid = [c for c in t.commands if isinstance(c, CallProvider)][-1].request_id
    t.feed(Replied(rid, reply("", call("c1", "wait", {"what": "a"})), work))
    t.feed(Send("make it blue", work, PromptKind.STEERING))
    t.feed(ToolDone("c1", Done(ToolOutcome.ok("waited"), "ok")))
    commands = t.feed(BoundaryDone(work))
    assert isinstance(commands[0], Persist)
    assert [type(e) for e in commands[0].events] == [ev.MessageSteered]
    sent = commands[1]
    assert isinstance(sent, CallProvider)
    assert sent.history.to_tuple()[-1] == UserMessage("make it blue")
    resumed = step(t.core, Resume(work))  # the values as that commit stored them
    again = [c for c in resumed.commands if isinstance(c, CallProvider)]
    assert again and again[0].history.to_tuple() == sent.history.to_tuple()


# --- interrupt ------------------------------------------------------------------------------


def test_an_interrupt_cancels_the_running_turn_and_starts_the_next_with_it() -> None:
    async def scenario() -> tuple[Any, list[ev.Event]]:
        fresh("a")
        session = await agent([{"calls": [{"wait": {"what": "a"}}]}, "Stopped. Hello!",
                               ]).session("s")
        turn = asyncio.ensure_future(collect(session.send("paint it")))
        await STARTED["a"].wait()
        await collect(session.send("no, stop: say hello", busy="interrupt"))
        return session, await turn

    session, events = bounded(scenario())
    assert kinds(events) == ["turn_started", "tool_call", "tool_result", "turn_finished",
                             "turn_started", "turn_finished"]
    finished = [e for e in events if isinstance(e, ev.TurnFinished)]
    assert [f.status for f in finished] == ["cancelled", "completed"]
    result = next(e for e in events if isinstance(e, ev.ToolResultEvent))
    assert result.status == "cancelled" and "unknown" in result.content.lower()
    assert RAN == []  # the tool was stopped, never finished
    assert finished[-1].reply == "Stopped. Hello!"
    assert session.history[-2] == UserMessage("no, stop: say hello")


def test_an_interrupt_while_waiting_for_a_human_cancels_the_call_unrun() -> None:
    fresh()
    session = agent([{"calls": [{"pay": {"amount": 5}}]}, "Fine, nothing paid."]
                    ).session_sync("s")
    session.send_sync("pay 5")
    assert session.status == "awaiting_approval"
    events = session.send_sync("wait, don't pay", busy="interrupt")
    assert kinds(events) == ["tool_result", "turn_finished", "turn_started", "turn_finished"]
    assert next(e for e in events if isinstance(e, ev.ToolResultEvent)).status == "cancelled"
    assert RAN == [] and session.pending_approval is None
    assert session.status == "idle"


def test_an_interrupt_on_an_idle_session_is_a_message() -> None:
    session = agent(["Hello."]).session_sync("s")
    assert kinds(session.send_sync("hi", busy="interrupt")) == ["turn_started",
                                                               "turn_finished"]


# --- reject, and unknown modes ---------------------------------------------------------------


def test_reject_refuses_a_message_while_a_turn_runs_and_stores_nothing() -> None:
    async def scenario() -> tuple[Any, list[ev.Event]]:
        fresh("a")
        session = await agent([{"calls": [{"wait": {"what": "a"}}]}, "Done."]).session("s")
        turn = asyncio.ensure_future(collect(session.send("go")))
        await STARTED["a"].wait()
        with pytest.raises(SessionBusy):
            await collect(session.send("and this?", busy="reject"))
        GATE["a"].set()
        return session, await turn

    session, events = bounded(scenario())
    assert kinds(events)[-1] == "turn_finished" and session.turn == 1
    assert "and this?" not in str(session.history)


def test_an_unknown_busy_mode_is_a_configuration_error() -> None:
    with pytest.raises(ConfigError, match="busy must be one of"):
        agent([], busy="later")
    session = agent(["Hello."]).session_sync("s")
    with pytest.raises(ConfigError, match="busy must be one of"):
        session.send_sync("hi", busy="later")  # type: ignore[arg-type]


# --- across workers on one store ------------------------------------------------------------


def test_across_workers_an_interrupt_takes_the_turn_over_and_the_holder_is_fenced(
        tmp_path: Path) -> None:
    path = tmp_path / "s.db"

    async def scenario() -> tuple[list[ev.Event], BaseException | None, Any]:
        fresh("a")
        one = await agent([{"calls": [{"wait": {"what": "a"}}]}, "never said"],
                          store=SQLiteStore(path), worker="w1").session("s")
        held = asyncio.ensure_future(collect(one.send("paint it")))
        await STARTED["a"].wait()
        two = await agent([{"calls": [{"wait": {"what": "a"}}]}, "Hello instead."],
                          store=SQLiteStore(path), worker="w2").session("s")
        taken = await collect(two.send("no: say hello", busy="interrupt"))
        GATE["a"].set()  # the first worker's tool finishes late: its commit is refused
        try:
            await held
            fenced = None
        except StoreFenced as exc:
            fenced = exc
        return taken, fenced, two

    taken, fenced, two = bounded(scenario())
    assert fenced is not None and "taken over" in str(fenced)
    assert kinds(taken) == ["tool_result", "turn_finished", "turn_started", "turn_finished"]
    assert [e.status for e in taken if isinstance(e, ev.TurnFinished)] == [
        "cancelled", "completed"]
    result = next(e for e in taken if isinstance(e, ev.ToolResultEvent))
    assert result.status == "cancelled" and "unknown" in result.content.lower()
    stored = asyncio.run(SQLiteStore(path).events("s"))
    results = [s.data for s in stored if s.data["type"] == "tool_result"]
    assert len(results) == 1  # the call has one result: the late one was never written
    assert two.history[-1].content == "Hello instead."  # type: ignore[union-attr]


def test_across_workers_queue_waits_for_the_holder_steer_joins_its_turn_reject_refuses(
        tmp_path: Path) -> None:
    path = tmp_path / "s.db"

    async def scenario() -> tuple[list[ev.Event], list[ev.Event], Any]:
        fresh("a")
        one = await agent([{"calls": [{"wait": {"what": "a"}}]}, "Painted.", "Noted both."],
                          store=SQLiteStore(path), worker="w1").session("s")
        held = asyncio.ensure_future(collect(one.send("paint it")))
        await STARTED["a"].wait()
        two = await agent([], store=SQLiteStore(path), worker="w2").session("s")
        with pytest.raises(SessionBusy):
            await collect(two.send("refused", busy="reject"))
        queued = await collect(two.send("then sign it", busy="queue"))
        queued += await collect(two.send("in blue", busy="steer"))
        GATE["a"].set()
        return queued, await held, one

    queued, events, one = bounded(scenario())
    assert queued == []  # stored in the session's queue for the holder
    started = [e.message for e in events if isinstance(e, ev.TurnStartedEvent)]
    # the steering message went with the holder's next model request (its turn); the
    # queued one waited for the turn's end
    assert started == ["paint it", "then sign it"]
    assert [(e.turn, e.message) for e in events if isinstance(e, ev.MessageSteered)] == [
        (1, "in blue")]
    users = [m.content for m in one.history if isinstance(m, UserMessage)]
    assert users == ["paint it", "in blue", "then sign it"]
    assert "refused" not in str(one.history)
