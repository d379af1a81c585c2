"""The session under concurrent use: a message queued by a second worker while the first
finishes the session, two replies at once on one session, and one session driven from a
new event loop each turn."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from phaseflow.providers import ScriptedProvider
from phaseflow.providers.protocol import (
    ProviderRequest,
)
from phaseflow.session import Agent
from phaseflow.session.events import Event
from phaseflow.stores import SQLiteStore
from tests.support.hostile_desk import TOOLS, collect_async, workflow


class Held:
    """A provider whose replies wait until the test lets them go."""

    def __init__(self, replies: list[Any]) -> None:
        self.inner = ScriptedProvider(replies)
        self.go = asyncio.Event()
        self.asked = asyncio.Event()

    async def stream(self, request: ProviderRequest) -> AsyncIterator[Any]:
        self.asked.set()
        await self.go.wait()
        async for item in self.inner.stream(request):
            yield item


def test_a_message_queued_for_a_turn_that_finishes_the_session_is_recorded(
        tmp_path: Path) -> None:
    """Two workers on one store: the second's message is queued while the first runs the
    turn that finishes the session. It is taken out of the queue and recorded as
    unanswered (a ``session_finished`` error event), never left there for good."""
    path = tmp_path / "s.db"

    async def scenario() -> tuple[list[Event], list[Event], Any]:
        held = Held([{"calls": [{"pay": {"amount": 1}}]}, "bye"])
        first = Agent(workflow(), held, tools=TOOLS, store=SQLiteStore(path),
                      approve=None, worker="w1")
        one = await first.session("s")
        held.go.set()
        async for _ in one.send("pay 1"):
            pass
        pending = one.pending_approval
        assert pending is not None
        held.go.clear()
        held.asked.clear()
        finishing = asyncio.ensure_future(
            collect_async(one.resolve(pending.call_id, "approve")))
        await held.asked.wait()  # the finishing turn holds the lease now
        second = Agent(workflow(), ScriptedProvider([]), tools=TOOLS,
                       store=SQLiteStore(path), worker="w2")
        two = await second.session("s")
        queued = await collect_async(two.send("one more thing"))
        held.go.set()
        events = await finishing
        store = SQLiteStore(path)
        return events, queued, (await store.queued("s"), one.status,
                                [e async for e in _stored(one)])

    _, queued, (left, status, stored) = asyncio.run(asyncio.wait_for(scenario(), 30))
    assert queued == []  # told nothing yet: the message waits for the turn
    assert status == "finished"
    assert not left  # nothing stays in the queue
    notes = [e for e in stored if e.type == "error" and e.code == "session_finished"]
    assert len(notes) == 1 and "one more thing" in notes[0].message


async def _stored(session: Any) -> AsyncIterator[Event]:
    for e in await session.events():
        yield e


def test_reply_is_this_message_s_turn_and_a_queued_message_says_so() -> None:
    """Two replies at once on one session: the second message is queued behind the
    first turn (status ``queued``, no text), and the first caller gets its own turn's
    answer, not the one its turn's end sent for the queued message."""
    held = Held(["answer one", "answer two"])
    session = Agent(workflow(), held, tools=TOOLS).session_sync("s")

    async def scenario() -> tuple[Any, Any]:
        first = asyncio.ensure_future(session.reply("one"))
        await held.asked.wait()
        second = await session.reply("two")
        held.go.set()
        return await first, second

    first, second = asyncio.run(asyncio.wait_for(scenario(), 20))
    assert (first, first.status) == ("answer one", "completed")
    assert (second, second.status) == ("", "queued")
    assert [str(m.content) for m in session.history if m.role == "user"] == ["one", "two"]


def test_one_session_driven_from_a_new_event_loop_each_turn(tmp_path: Path) -> None:
    """Each ``reply_sync`` is an ``asyncio.run`` of its own: nothing of one turn's loop
    (the cancellation event) may be waited on by the next (it was taken for a cancel)."""
    provider = ScriptedProvider([{"calls": [{"lookup": {"q": "a"}}]}, "one",
                                 {"calls": [{"lookup": {"q": "b"}}]}, "two"])
    session = Agent(workflow(), provider, tools=TOOLS,
                    store=SQLiteStore(tmp_path / "s.db")).session_sync("s")
    assert session.reply_sync("first") == "one"
    assert session.reply_sync("second") == "two"
