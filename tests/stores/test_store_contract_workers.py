"""The store contract, the same tests for every store (memory, SQLite, Postgres): two
workers, one session; a message for a session another worker runs is queued and run by
it, and each queued message is taken once."""

from __future__ import annotations

import asyncio

from tests.support.store_backends import Backend
from tests.support.store_sessions import (
    drain,
    renumber,
    seed,
)

_BUSY = """\
phaseflow: 1
name: busy
initial: talk
tools:
  wait: {}
phases:
  talk:
    goal: Chat.
    tools: [wait]
"""


def test_a_message_for_a_session_another_worker_runs_is_queued_and_run_by_it(
        store: Backend) -> None:
    """Worker B sends while worker A's turn runs: B stores the message (A holds the
    lease); A runs it as its next turn; the stored session has both turns, once."""
    import phaseflow
    from phaseflow.providers import ScriptedProvider
    from phaseflow.session import Agent
    from phaseflow.tools import tool

    async def body() -> None:
        started, release = asyncio.Event(), asyncio.Event()

        @tool
        async def wait() -> str:
            started.set()
            await release.wait()
            return "waited"

        wf = phaseflow.load_workflow_text(_BUSY)
        a = Agent(wf, ScriptedProvider([{"calls": [{"wait": {}}]}, "First done.",
                                        "Second done."]),
                  tools=[wait], store=await store.open(), worker="A")
        b = Agent(wf, ScriptedProvider([]), tools=[wait], store=await store.open(),
                  worker="B")
        session_a = await a.session("shared")
        running = asyncio.ensure_future(drain(session_a.send("first")))
        await started.wait()
        session_b = await b.session("shared")
        assert await drain(session_b.send("second")) == []  # stored for A
        assert len(await (await store.open()).queued("shared")) == 1
        release.set()
        events = await running
        assert [e.reply for e in events if e.type == "turn_finished"] == [
            "First done.", "Second done."]
        reader = await store.open()
        assert await reader.queued("shared") == ()
        final = await Agent(wf, ScriptedProvider([]), tools=[wait], store=reader
                            ).session("shared")
        users = [m.content for m in final.history if type(m).__name__ == "UserMessage"]
        assert users == ["first", "second"]
        assert final.status == "idle" and final.turn == 2
    store.run(body)


def test_messages_queued_while_a_worker_consumes_are_each_taken_once(store: Backend) -> None:
    """Producers on other connections queue while a worker takes what is queued in its
    commits ("consumed up to id N"): every message is taken exactly once, none lost."""
    async def body() -> None:
        worker = await store.open()
        producers = [await store.open() for _ in range(3)]
        first = await seed(worker, "inbox", events=0)
        sent: list[int] = []
        taken: list[int] = []

        async def produce(p: object, k: int) -> None:
            for n in range(12):
                sent.append(await p.enqueue("inbox", {"p": k, "n": n}))  # type: ignore[attr-defined]
                await asyncio.sleep(0)

        async def consume() -> None:
            version = 1
            while len(taken) < 36:
                queued = await worker.queued("inbox")
                if queued:
                    await worker.commit(renumber(first, version + 1), [],
                                        expected_version=version, consumed=queued[-1].id)
                    version += 1
                    taken.extend(q.id for q in queued)
                await asyncio.sleep(0)

        await asyncio.wait_for(asyncio.gather(
            consume(), *(produce(p, k) for k, p in enumerate(producers))), timeout=60)
        assert sorted(taken) == sorted(sent) and len(set(taken)) == 36
        assert await worker.queued("inbox") == ()
    store.run(body)
