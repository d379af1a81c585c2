"""Two real ``phaseflow serve`` processes on one store: a message sent with
``busy=steer`` to the worker that does not run the turn is delivered into the running
turn's next model request, on the worker that runs it (PostgreSQL: the notification the
servers share; SQLite: a read of the store's queue between two requests), once. The
model is the OpenAI SDK's against a real HTTP server on loopback, which records every
request: a steer sent while the turn is in a slow model request, and another sent while
it is in a slow tool, each show up in the holder's next request, and in no other."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.fake_openai_server import FakeOpenAIServer, Stall, reply
from tests.support.phaseflow_cli import cli_env
from tests.support.serve_server import Server, start, stored_events, wait_for_events

WORKFLOW = """\
phaseflow: 1
name: painter
initial: talk
tools:
  block:
    description: Block BLOCK_SECONDS seconds
phases:
  talk:
    goal: Paint.
    tools: [block]
"""

TOOLS = '''\
import asyncio
import os

from phaseflow.tools import tool


@tool
async def block() -> str:
    """Block."""
    await asyncio.sleep(float(os.environ.get("BLOCK_SECONDS", "0")))
    return "blocked"


TOOLS = [block]
'''


@pytest.fixture
def pg(postgres_dsn: str) -> Iterator[str]:
    """A schema of this test's own in the private cluster."""
    from tests.support.store_backends import PostgresBackend

    backend = PostgresBackend(postgres_dsn)
    yield backend.dsn


def _two(tmp_path: Path, store: str, model: FakeOpenAIServer) -> tuple[Server, Server]:
    (tmp_path / "painter.yaml").write_text(WORKFLOW, encoding="utf-8")
    (tmp_path / "painter_tools.py").write_text(TOOLS, encoding="utf-8")
    # a --poll far longer than the test: nothing here is found by polling
    args = [str(tmp_path / "painter.yaml"), "--provider", "openai", "--model", "m",
            "--base-url", model.base_url, "--tools", "painter_tools:TOOLS",
            "--store", store, "--poll", "30", "--grace", "1"]
    env = cli_env(BLOCK_SECONDS="1", OPENAI_API_KEY="sk-test")
    a = start(args, tmp_path / "a.log", cwd=tmp_path, env=env)
    try:
        b = start(args, tmp_path / "b.log", cwd=tmp_path, env=env)
    except BaseException:
        a.stop()
        raise
    return a, b


def _users(request: Any) -> list[str]:
    """The user messages' text of a recorded chat completions request."""
    out = []
    for m in request.body["messages"]:
        if m["role"] == "user":
            content = m["content"]
            out.append(content if isinstance(content, str)
                       else "".join(p.get("text", "") for p in content))
    return out


def _steer_elsewhere(tmp_path: Path, store: str, model: FakeOpenAIServer) -> None:
    model.push(Stall(chunks_after=reply({"calls": [{"block": {}}]})),  # a slow request
               reply({"calls": [{"block": {}}]}),  # then a slow tool
               reply("Painted blue, and signed."))
    a, b = _two(tmp_path, store, model)
    sid = f"s-{uuid.uuid4().hex[:8]}"
    try:
        with httpx.Client(base_url=a.base, timeout=60) as ca, \
                httpx.Client(base_url=b.base, timeout=60) as cb:
            assert ca.post("/v1/sessions", json={"id": sid}).status_code == 201
            ca.post(f"/v1/sessions/{sid}/messages", json={"text": "paint it"},
                    headers={"Prefer": "respond-async"})
            assert model.stalled.wait(30)  # a's turn is in its first model request
            first = cb.post(f"/v1/sessions/{sid}/messages",
                            json={"text": "in blue", "busy": "steer"})
            assert first.status_code == 202 and first.json()["status"] == "queued", first.text
            time.sleep(0.3)  # (PostgreSQL: the notification reaches a meanwhile)
            model.release()
            # the second call of the tool: a's turn is in a slow tool now
            wait_for_events(cb, sid, lambda es: sum(e["type"] == "tool_call"
                                                    for e in es) == 2, timeout=30, poll=0.05)
            second = cb.post(f"/v1/sessions/{sid}/messages",
                             json={"text": "and sign it", "busy": "steer"})
            assert second.status_code == 202 and second.json()["status"] == "queued"
            events = wait_for_events(
                cb, sid, lambda es: any(e["type"] == "turn_finished" for e in es),
                timeout=30, poll=0.05)
            # each steering message went with the holder's next request, and only there
            assert len(model.requests) == 3, [_users(r) for r in model.requests]
            assert [_users(r) for r in model.requests] == [
                ["paint it"], ["paint it", "in blue"], ["paint it", "in blue", "and sign it"]]
            assert [e["message"] for e in events if e["type"] == "message_steered"] == [
                "in blue", "and sign it"]
            finished = [e for e in events if e["type"] == "turn_finished"]
            assert [(e["turn"], e["status"], e["reply"]) for e in finished] == [
                (1, "completed", "Painted blue, and signed.")]
            assert [e["message"] for e in events if e["type"] == "turn_started"] == [
                "paint it"]  # no turn of their own: delivered once, into the running one
            time.sleep(0.3)  # nothing left in the queue starts another turn
            assert stored_events(cb, sid) == stored_events(ca, sid) == events
            assert len(model.requests) == 3
            history = cb.get(f"/v1/sessions/{sid}/history").json()["messages"]
            users = [m["content"] for m in history if m["role"] == "user"]
            assert [str(u) for u in users].count("in blue") == 1
            assert ca.get(f"/v1/sessions/{sid}").json()["status"] == "idle"
    finally:
        a.stop()
        b.stop()


def test_a_steer_sent_to_the_other_worker_joins_the_running_turn_postgres(
        tmp_path: Path, pg: str, fake_openai: FakeOpenAIServer) -> None:
    _steer_elsewhere(tmp_path, pg, fake_openai)


def test_a_steer_sent_to_the_other_worker_joins_the_running_turn_sqlite(
        tmp_path: Path, fake_openai: FakeOpenAIServer) -> None:
    _steer_elsewhere(tmp_path, str(tmp_path / "sessions.db"), fake_openai)
