"""A turn that waits on its model longer than its lease lasts stays with its worker.

Two real ``phaseflow serve`` processes on one PostgreSQL store, each sweeping for
abandoned turns every 0.2 s, with a lease of 1 s. The model (the OpenAI SDK's, against a
real HTTP server on loopback) sends its first chunk and then nothing for 3.5 s: no commit
renews the lease meanwhile. The worker running the turn keeps its lease all the same, so
the other worker's sweep never takes the live turn over: the turn finishes on its own
worker, completed, after one model request (a turn taken over is recovered by the other
worker, which fences the first one's next commit: its client's answer then ended
without ``turn_finished``, as seen once in 1,001 turns on a loaded machine)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.fake_openai_server import FakeOpenAIServer, Stall, chunk, text_reply
from tests.support.phaseflow_cli import cli_env
from tests.support.serve_server import frames, start, stored_events

WORKFLOW = """\
phaseflow: 1
name: patient
initial: talk
phases:
  talk:
    goal: Answer.
"""


@pytest.fixture
def pg(postgres_dsn: str) -> Iterator[str]:
    """A schema of this test's own in the private cluster."""
    from tests.support.store_backends import PostgresBackend

    backend = PostgresBackend(postgres_dsn)
    yield backend.dsn


def test_a_turn_waiting_on_its_model_past_its_lease_is_not_taken_over(
    tmp_path: Path, pg: str, fake_openai: FakeOpenAIServer
) -> None:
    (tmp_path / "patient.yaml").write_text(WORKFLOW, encoding="utf-8")
    fake_openai.push(
        Stall(
            chunks=[chunk({"role": "assistant", "content": "Slowly"})],
            chunks_after=text_reply(", but surely.")[1:],
        )
    )
    args = [
        str(tmp_path / "patient.yaml"),
        "--provider",
        "openai",
        "--model",
        "m",
        "--base-url",
        fake_openai.base_url,
        "--store",
        pg,
        "--lease",
        "1",
        "--sweep",
        "0.2",
        "--poll",
        "30",
        "--grace",
        "1",
    ]
    env = cli_env(OPENAI_API_KEY="sk-test")
    a = start(args, tmp_path / "a.log", cwd=tmp_path, env=env)
    try:
        b = start(args, tmp_path / "b.log", cwd=tmp_path, env=env)
    except BaseException:
        a.stop()
        raise
    sid = f"s-{uuid.uuid4().hex[:8]}"
    try:
        with (
            httpx.Client(base_url=a.base, timeout=60) as ca,
            httpx.Client(base_url=b.base, timeout=60) as cb,
        ):
            assert ca.post("/v1/sessions", json={"id": sid}).status_code == 201
            with ca.stream(
                "POST",
                f"/v1/sessions/{sid}/messages",
                json={"text": "hi"},
                headers={"Accept": "text/event-stream"},
            ) as answer:
                assert fake_openai.stalled.wait(30)  # the turn waits on its model now
                time.sleep(3.5)  # three and a half leases; b sweeps every 0.2 s
                assert "finishing a turn its worker left" not in b.log()
                fake_openai.release()
                streamed = [f.data for f in frames(answer.iter_lines()) if isinstance(f.data, dict)]
            assert streamed[-1]["type"] == "turn_finished", streamed[-3:]
            assert streamed[-1]["status"] == "completed"
            assert streamed[-1]["reply"] == "Slowly, but surely."
            events = stored_events(cb, sid)
            assert [e["type"] for e in events].count("turn_started") == 1
            finished = [e for e in events if e["type"] == "turn_finished"]
            assert [(e["status"], e["reply"]) for e in finished] == [
                ("completed", "Slowly, but surely.")
            ]
            assert len(fake_openai.requests) == 1  # nobody asked the model again
            assert cb.get(f"/v1/sessions/{sid}").json()["status"] == "idle"
        assert "finishing a turn its worker left" not in b.log()
    finally:
        a.stop()
        b.stop()
