"""A worker keeps the sessions it served last open between requests
(``phaseflow.serve.idle``): never at the cost of a lost, doubled or stale turn. Two real
servers on one SQLite file take turns on one session; a session deleted and created
again under the same id, by the other server, behind the back of the one that keeps it,
is the new session there (two workers in this process, with a model that repeats the
user messages it was sent: one that saw a stale history says so).

The desk's scripted model answers turn N with ``reply N``, counting the assistant
messages of the history it is sent: a server that ran a turn on a stale copy of the
session would answer with an earlier number, and its history would lack the other
server's turns.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from phaseflow.serve.idle import Idle, IdleSessions, Mark
from tests.support.phaseflow_cli import cli_env
from tests.support.serve_server import Server, start, write_desk


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Server, Path]]:
    """Two servers of the desk on one SQLite file; the file every tool run writes to."""
    folder = tmp_path_factory.mktemp("kept")
    args = write_desk(folder)
    effects = folder / "effects.txt"
    env = cli_env(DESK_DELAY="0", DESK_EFFECTS=str(effects))
    common = [*args, "--store", str(folder / "sessions.db"), "--grace", "5"]
    a = start(common, folder / "a.log", cwd=folder, env=env)
    b = start(common, folder / "b.log", cwd=folder, env=env)
    yield a, b, effects
    a.stop()
    b.stop()


def _send(client: httpx.Client, sid: str, text: str) -> dict:
    r = client.post(f"/v1/sessions/{sid}/messages", json={"text": text})
    assert r.status_code == 200, r.text
    out: dict = r.json()
    assert out["status"] == "completed", out
    return out


def _events(client: httpx.Client, sid: str) -> list[dict]:
    r = client.get(f"/v1/sessions/{sid}/events", params={"follow": "false"})
    assert r.status_code == 200, r.text
    events: list[dict] = r.json()
    return events


def _user_texts(client: httpx.Client, sid: str) -> list[str]:
    r = client.get(f"/v1/sessions/{sid}/history")
    assert r.status_code == 200, r.text
    return [m["content"] for m in r.json()["messages"] if m["role"] == "user"]


def test_two_servers_taking_turns_on_one_session(pair: tuple[Server, Server, Path]) -> None:
    a, b, effects = pair
    sid = f"k-{uuid.uuid4().hex[:8]}"
    # A twice (its object kept and reused), then B (A's object is now behind), then
    # strictly alternating: every turn sees every earlier one, whoever ran it
    order = "AABABBABAB"
    with httpx.Client(base_url=a.base, timeout=30) as ca, \
            httpx.Client(base_url=b.base, timeout=30) as cb:
        assert ca.post("/v1/sessions", json={"id": sid}).status_code == 201
        texts = []
        for n, who in enumerate(order, start=1):
            text = f"message {n} via {who}"
            texts.append(text)
            out = _send(ca if who == "A" else cb, sid, text)
            assert out["reply"] == f"reply {n}", (n, who, out)
            assert out["turn"] == n
        assert _user_texts(ca, sid) == _user_texts(cb, sid) == texts
        events = _events(cb, sid)
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
        assert _events(ca, sid) == events
        started = [e["message"] for e in events if e["type"] == "turn_started"]
        assert started == texts  # each message in exactly one turn, once, in order
    mine = [line for line in effects.read_text().splitlines() if line.startswith(sid + " ")]
    assert len(mine) == len(set(mine)) == len(order)  # one tool run per turn, none twice


def test_a_session_deleted_and_created_again_elsewhere_is_the_new_one(
        pair: tuple[Server, Server, Path]) -> None:
    a, b, _ = pair
    sid = f"d-{uuid.uuid4().hex[:8]}"
    with httpx.Client(base_url=a.base, timeout=30) as ca, \
            httpx.Client(base_url=b.base, timeout=30) as cb:
        assert ca.post("/v1/sessions", json={"id": sid}).status_code == 201
        assert _send(ca, sid, "old first")["reply"] == "reply 1"  # A keeps it open
        # B deletes it and creates it again (A's kept object is not told); A then
        # continues the new session (that it answers from the new history, not the old
        # one, the in-process test below shows: here both have as many turns)
        assert cb.delete(f"/v1/sessions/{sid}").status_code == 204
        assert cb.post("/v1/sessions", json={"id": sid}).status_code == 201
        assert _send(cb, sid, "new first")["reply"] == "reply 1"
        out = _send(ca, sid, "new second")
        assert out["reply"] == "reply 2" and out["turn"] == 2
        assert _user_texts(cb, sid) == ["new first", "new second"]
        # and deleted there, it is gone for A too (its kept object is not the session)
        assert cb.delete(f"/v1/sessions/{sid}").status_code == 204
        r = ca.post(f"/v1/sessions/{sid}/messages", json={"text": "anyone?"})
        assert r.status_code == 404, r.text
        assert r.json()["code"] == "session_not_found"


def test_a_session_deleted_and_created_again_here_starts_afresh(
        pair: tuple[Server, Server, Path]) -> None:
    a, _, _ = pair
    sid = f"h-{uuid.uuid4().hex[:8]}"
    with httpx.Client(base_url=a.base, timeout=30) as ca:
        assert ca.post("/v1/sessions", json={"id": sid}).status_code == 201
        _send(ca, sid, "one")
        _send(ca, sid, "two")
        assert ca.delete(f"/v1/sessions/{sid}").status_code == 204
        assert ca.post("/v1/sessions", json={"id": sid}).status_code == 201
        out = _send(ca, sid, "again")
        assert out["reply"] == "reply 1" and out["turn"] == 1
        assert _user_texts(ca, sid) == ["again"]


def _idle(n: int, seq: int) -> Idle:
    return Idle(served=None, agent=None, session=None,  # type: ignore[arg-type]
                mark=Mark(seq, "turn_finished", float(n)))


def test_kept_sessions_are_bounded_least_recently_used_first() -> None:
    kept = IdleSessions(2)
    assert kept.keep("a", _idle(1, 5)) == []
    assert kept.keep("b", _idle(2, 5)) == []
    assert kept.take("a") is not None  # used again: "a" is the most recent now
    assert kept.keep("a", _idle(3, 9)) == []
    dropped = kept.keep("c", _idle(4, 5))
    assert [d.mark.at for d in dropped] == [2.0]  # "b" was used least recently
    assert "a" in kept and "c" in kept and len(kept) == 2
    # two objects of one session: the one whose last event is later is kept
    later, earlier = _idle(5, 12), _idle(6, 10)
    assert kept.keep("a", later) == [_idle(3, 9)]
    assert kept.keep("a", earlier) == [earlier]
    assert kept.take("a") is later
    # size 0 keeps nothing: every message reads its session from the store
    none = IdleSessions(0)
    one = _idle(7, 3)
    assert none.keep("x", one) == [one] and len(none) == 0


ECHO = """\
phaseflow: 1
name: echo
initial: talk
phases:
  talk:
    goal: Repeat what you were told.
"""


class Echo:
    """A model that answers with every user message of the history it is sent."""

    model = "echo"

    async def stream(self, request: Any) -> AsyncIterator[Any]:
        from phaseflow.providers.protocol import StreamEnd, TextDelta, Usage
        from phaseflow.turn.messages import UserMessage

        said = [str(m.content) for m in request.history if isinstance(m, UserMessage)]
        yield TextDelta(" | ".join(said))
        yield Usage(1, 1)
        yield StreamEnd("end_turn")


def _worker(db: Path) -> Any:
    """One worker of a server (its own store connection, agents and kept sessions) on
    the shared SQLite file, as an ASGI app."""
    from phaseflow.api import load_workflow_text
    from phaseflow.serve.app import create_app
    from phaseflow.serve.config import ServeConfig
    from phaseflow.serve.logs import Log
    from phaseflow.serve.served import Served
    from phaseflow.session import Agent
    from phaseflow.session.agent_setup import workflow_hash
    from phaseflow.stores.sqlite import SQLiteStore

    store = SQLiteStore(str(db))
    workflow = load_workflow_text(ECHO)

    def make(busy: str) -> Agent:
        return Agent(workflow, Echo(), store=store, busy=busy)  # type: ignore[arg-type]

    served = {"echo": Served("echo", make("queue"), make, workflow_hash(workflow))}
    return create_app(ServeConfig(served=served, log=Log("text", open(os.devnull, "w")),
                                  allowed_hosts=("a", "b")))


def test_a_kept_session_meets_what_another_worker_did(tmp_path: Path) -> None:
    a, b = _worker(tmp_path / "s.db"), _worker(tmp_path / "s.db")

    async def run() -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=a),
                                     base_url="http://a") as ca, \
                httpx.AsyncClient(transport=httpx.ASGITransport(app=b),
                                  base_url="http://b") as cb:
            async def say(client: httpx.AsyncClient, sid: str, text: str) -> str:
                r = await client.post(f"/v1/sessions/{sid}/messages", json={"text": text})
                assert r.status_code == 200, r.text
                reply: str = r.json()["reply"]
                return reply

            # another worker's turn: seen by the next turn of the one that kept it
            assert (await ca.post("/v1/sessions", json={"id": "t"})).status_code == 201
            assert await say(ca, "t", "one") == "one"
            assert await say(ca, "t", "two") == "one | two"
            assert await say(cb, "t", "three") == "one | two | three"
            assert await say(ca, "t", "four") == "one | two | three | four"
            # deleted and created again by B, as long a log as A kept (the same version
            # and the same kinds of events): A answers from the new session
            assert (await ca.post("/v1/sessions", json={"id": "d"})).status_code == 201
            assert await say(ca, "d", "old first") == "old first"
            assert (await cb.delete("/v1/sessions/d")).status_code == 204
            assert (await cb.post("/v1/sessions", json={"id": "d"})).status_code == 201
            assert await say(cb, "d", "new first") == "new first"
            assert await say(ca, "d", "new second") == "new first | new second"
            # deleted by B: A's kept object is not the session any more
            assert (await cb.delete("/v1/sessions/d")).status_code == 204
            r = await ca.post("/v1/sessions/d/messages", json={"text": "anyone?"})
            assert r.status_code == 404 and r.json()["code"] == "session_not_found"

    asyncio.run(run())
