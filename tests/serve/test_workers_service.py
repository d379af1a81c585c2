"""Two real ``phaseflow serve`` processes on one store behave as one service: a request
retried with the same ``Idempotency-Key`` on the other worker (or sent to both at once)
is stored once, in 100 of 100 trials; a cancel sent to the worker that does not run the
turn stops it there, a sync tool's thread included (PostgreSQL: a notification; SQLite:
a stored request its holder reads); ``GET /v1/sessions`` pages through both workers'
sessions without a row lost or repeated."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.phaseflow_cli import cli_env
from tests.support.serve_server import Server, start, stored_events, wait_for_events

WORKFLOW = """\
phaseflow: 1
name: blocker
initial: talk
tools:
  block:
    description: Block BLOCK_SECONDS seconds (a sync tool, run in a thread)
phases:
  talk:
    goal: Talk.
    tools: [block]
"""

TOOLS = '''\
import os
import time

from phaseflow.tools import tool


@tool(timeout=60)  # a sync tool with a timeout runs in a thread of its own
def block() -> str:
    """Block."""
    time.sleep(float(os.environ.get("BLOCK_SECONDS", "0")))
    return "blocked"


TOOLS = [block]
'''


@pytest.fixture
def pg(postgres_dsn: str) -> Iterator[str]:
    """A schema of this test's own in the private cluster."""
    from tests.support.store_backends import PostgresBackend

    backend = PostgresBackend(postgres_dsn)
    yield backend.dsn


def _two(tmp_path: Path, store: str, script: str, *, block: float = 0.0
         ) -> tuple[Server, Server]:
    (tmp_path / "blocker.yaml").write_text(WORKFLOW, encoding="utf-8")
    (tmp_path / "blocker_tools.py").write_text(TOOLS, encoding="utf-8")
    (tmp_path / "script.yaml").write_text(script, encoding="utf-8")
    args = [str(tmp_path / "blocker.yaml"), "--provider",
            f"scripted:{tmp_path / 'script.yaml'}", "--tools", "blocker_tools:TOOLS",
            "--store", store, "--poll", "0.2", "--grace", "1"]
    env = cli_env(BLOCK_SECONDS=str(block))
    a = start(args, tmp_path / "a.log", cwd=tmp_path, env=env)
    try:
        b = start(args, tmp_path / "b.log", cwd=tmp_path, env=env)
    except BaseException:
        a.stop()
        raise
    return a, b


def _replies(count: int) -> str:
    return "".join(f'- "reply {n}"\n' for n in range(1, count + 1))


def test_a_retry_on_the_other_worker_is_stored_once_100_of_100(
        tmp_path: Path, pg: str) -> None:
    a, b = _two(tmp_path, pg, _replies(400))
    sessions = [f"s-{uuid.uuid4().hex[:8]}" for _ in range(10)]
    trials = [(sessions[n % 10], f"<message {n:03d}>", f"key-{n}") for n in range(100)]
    try:
        async def body() -> list[tuple[int, int]]:
            async with httpx.AsyncClient(base_url=a.base, timeout=60) as ca, \
                    httpx.AsyncClient(base_url=b.base, timeout=60) as cb:
                for sid in sessions:
                    assert (await ca.post("/v1/sessions", json={"id": sid})).status_code == 201

                async def trial(sid: str, text: str, key: str) -> tuple[int, int]:
                    headers = {"Idempotency-Key": key, "Prefer": "respond-async"}
                    # the same request to both workers at once: one stores it
                    first, second = await asyncio.gather(*(
                        c.post(f"/v1/sessions/{sid}/messages", json={"text": text},
                               headers=headers) for c in (ca, cb)))
                    replayed = [r.headers.get("idempotent-replayed") for r in (first, second)]
                    assert replayed.count("true") == 1, (first.text, second.text)
                    # then a retry on the other worker, later: answered, not stored again
                    again = await cb.post(f"/v1/sessions/{sid}/messages",
                                          json={"text": text}, headers=headers)
                    assert again.headers.get("idempotent-replayed") == "true", again.text
                    return first.status_code, second.status_code

                gate = asyncio.Semaphore(5)  # five sessions' trials at a time

                async def gated(sid: str, text: str, key: str) -> tuple[int, int]:
                    async with gate:
                        return await trial(sid, text, key)

                answers = await asyncio.gather(*(gated(*t) for t in trials))
                # the key of another request: refused, whichever worker is asked
                reused = await ca.post(f"/v1/sessions/{trials[0][0]}/messages",
                                       json={"text": "other"},
                                       headers={"Idempotency-Key": trials[0][2]})
                assert reused.status_code == 422, reused.text
                return answers

        answers = asyncio.run(body())
        assert all(code in (200, 202) for pair in answers for code in pair)
        with httpx.Client(base_url=b.base, timeout=60) as client:
            stored_once = 0
            for sid in sessions:
                texts = [t for s, t, _ in trials if s == sid]

                def settled(events: list[dict], texts: list[str] = texts,
                            sid: str = sid) -> bool:
                    started = "".join(e["message"] for e in events
                                      if e["type"] == "turn_started")
                    return all(t in started for t in texts) and client.get(
                        f"/v1/sessions/{sid}").json()["status"] == "idle"

                events = wait_for_events(client, sid, settled, timeout=90, poll=0.2)
                started = "".join(e["message"] for e in events if e["type"] == "turn_started")
                history = "".join(str(m.get("content")) for m in client.get(
                    f"/v1/sessions/{sid}/history").json()["messages"] if m["role"] == "user")
                for text in texts:
                    assert started.count(text) == 1 and history.count(text) == 1, text
                    stored_once += 1
            assert stored_once == 100
    finally:
        a.stop()
        b.stop()


def _cancel_elsewhere(tmp_path: Path, store: str) -> None:
    """A cancel sent to the worker that does not run the turn reaches the one that does
    at once (the turn is ``cancelling``), and the turn ends ``cancelled`` when its sync
    tool's thread has ended, as the turn's own cancel does (a cancel waits for its tools:
    nothing of the turn lands after the next one starts)."""
    script = '- calls:\n    - block: {}\n- "after the block"\n' + _replies(20)
    a, b = _two(tmp_path, store, script, block=4.0)
    sid = f"s-{uuid.uuid4().hex[:8]}"
    try:
        with httpx.Client(base_url=a.base, timeout=60) as ca, \
                httpx.Client(base_url=b.base, timeout=60) as cb:
            assert ca.post("/v1/sessions", json={"id": sid}).status_code == 201
            ca.post(f"/v1/sessions/{sid}/messages", json={"text": "go"},
                    headers={"Prefer": "respond-async"})
            wait_for_events(cb, sid, lambda es: any(e["type"] == "tool_call" for e in es),
                            timeout=30, poll=0.05)
            asked = time.monotonic()
            answer = cb.post(f"/v1/sessions/{sid}/cancel")  # b does not run the turn
            assert answer.status_code == 202, answer.text
            assert answer.json() == {"session_id": sid, "status": "cancelling"}
            wait_for_events(cb, sid, lambda es: any(
                e["type"] in ("turn_cancelling", "turn_finished") for e in es),
                timeout=15, poll=0.05)
            assert time.monotonic() - asked < 3.5  # reached the holder, not the tool's end
            events = wait_for_events(
                cb, sid, lambda es: any(e["type"] == "turn_finished" for e in es),
                timeout=30, poll=0.05)
            finished = [e for e in events if e["type"] == "turn_finished"]
            assert finished[0]["status"] == "cancelled"
            assert any(e["type"] == "tool_result" for e in events)
            # the session takes the next message, on either worker
            after = cb.post(f"/v1/sessions/{sid}/messages", json={"text": "next"})
            assert after.json()["status"] == "completed", after.text
            assert stored_events(ca, sid) == stored_events(cb, sid)
            # nothing runs: a cancel now is refused as before, on both
            for client in (ca, cb):
                nothing = client.post(f"/v1/sessions/{sid}/cancel")
                assert nothing.status_code == 409
                assert nothing.json()["code"] == "no_running_turn"
    finally:
        a.stop()
        b.stop()


def test_a_cancel_sent_to_the_other_worker_stops_the_turn_postgres(
        tmp_path: Path, pg: str) -> None:
    _cancel_elsewhere(tmp_path, pg)


def test_a_cancel_sent_to_the_other_worker_stops_the_turn_sqlite(tmp_path: Path) -> None:
    _cancel_elsewhere(tmp_path, str(tmp_path / "sessions.db"))


def test_sessions_page_across_workers(tmp_path: Path, pg: str) -> None:
    a, b = _two(tmp_path, pg, _replies(10))
    try:
        with httpx.Client(base_url=a.base, timeout=60) as ca, \
                httpx.Client(base_url=b.base, timeout=60) as cb:
            made = {ca.post("/v1/sessions", json={}).json()["id"] for _ in range(7)}
            made |= {cb.post("/v1/sessions", json={}).json()["id"] for _ in range(6)}
            seen: list[str] = []
            cursor = None
            for client in (ca, cb, ca, cb, ca):  # the cursor of one worker, to the other
                page = client.get("/v1/sessions", params={
                    "limit": 3, **({"cursor": cursor} if cursor else {})}).json()
                seen += [s["id"] for s in page["sessions"]]
                cursor = page["next_cursor"]
                if cursor is None:
                    break
            assert cursor is None and len(seen) == len(set(seen)) == 13
            assert set(seen) == made
            updated = [s["updated_at"] for s in ca.get(
                "/v1/sessions", params={"limit": 100}).json()["sessions"]]
            assert updated == sorted(updated, reverse=True)
            # a request refused before it stored anything lets its key go: its retry runs
            key = {"Idempotency-Key": "early"}
            late = f"late-{uuid.uuid4().hex[:6]}"
            refused = ca.post(f"/v1/sessions/{late}/messages", json={"text": "hi"},
                              headers=key)
            assert refused.status_code == 404
            assert cb.post("/v1/sessions", json={"id": late}).status_code == 201
            ran = cb.post(f"/v1/sessions/{late}/messages", json={"text": "hi"}, headers=key)
            assert ran.status_code == 200 and "idempotent-replayed" not in ran.headers
            assert ran.json()["status"] == "completed"
    finally:
        a.stop()
        b.stop()
