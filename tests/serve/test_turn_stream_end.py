"""A turn's SSE answer whose task ends before its turn does (the store failed mid-turn,
another message took the turn over) ends with an ``error`` frame naming the problem,
never with a stream that just stops (a client could not tell it from a cut connection)."""

from __future__ import annotations

import asyncio
import json

import httpx

from phaseflow.serve.logs import Log
from phaseflow.serve.problems import Problem
from phaseflow.serve.streams import TurnStream
from phaseflow.serve.turns import Accepted
from phaseflow.session import events as ev


def _data(body: str) -> list[dict]:
    return [json.loads(line[5:]) for line in body.split("\n") if line.startswith("data:")]


async def _streamed(accepted: Accepted, finish: object) -> list[dict]:
    async def app(scope, receive, send):  # type: ignore[no-untyped-def]
        await TurnStream(accepted, 5.0, Log())(scope, receive, send)

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        reading = asyncio.ensure_future(client.post("/"))
        await asyncio.sleep(0.05)
        finish()  # type: ignore[operator]
        response = await reading
    return _data(response.text)


def _started(sid: str) -> Accepted:
    accepted = Accepted(sid, "f", "talk")
    accepted.add(ev.TurnStartedEvent(session_id=sid, turn=1, seq=4, message="hi"))
    return accepted


def test_a_task_that_fails_mid_turn_ends_the_stream_with_its_problem() -> None:
    accepted = _started("s1")

    def fail() -> None:
        accepted.problem = Problem(503, "store_unavailable", "the session store failed: x",
                                   session_id="s1")
        accepted.finish()

    got = asyncio.run(_streamed(accepted, fail))
    assert [e["type"] for e in got] == ["turn_started", "error"]
    assert got[-1]["code"] == "store_unavailable"
    assert got[-1]["message"] == "the session store failed: x"
    assert got[-1]["problem"]["status"] == 503 and got[-1]["seq"] == 0


def test_a_turn_that_finishes_ends_with_turn_finished_and_no_error() -> None:
    accepted = _started("s2")

    def end() -> None:
        accepted.add(ev.TurnFinished(session_id="s2", turn=1, seq=5, reply="ok",
                                     status="completed"))
        accepted.finish()

    got = asyncio.run(_streamed(accepted, end))
    assert [e["type"] for e in got] == ["turn_started", "turn_finished"]
