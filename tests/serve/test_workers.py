"""Many workers on one PostgreSQL store: two servers, clients sending to one session
through both at once (one chain, no message lost or doubled, no tool run twice); a
server killed with SIGKILL mid-turn, whose turn the other finishes by its sweep; and
``--workers 2`` behind one socket."""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.phaseflow_cli import cli_env
from tests.support.serve_server import (
    Server,
    frames,
    start,
    stored_events,
    wait_for_events,
    write_desk,
)


@pytest.fixture
def pg(postgres_dsn: str) -> Iterator[str]:
    """A schema of this test's own in the private cluster."""
    from tests.support.store_backends import PostgresBackend

    backend = PostgresBackend(postgres_dsn)
    yield backend.dsn


def _two(tmp_path: Path, dsn: str, delay: float, poll: str = "0.2"
         ) -> tuple[Server, Server, Path]:
    args = write_desk(tmp_path)
    effects = tmp_path / "effects.txt"
    env = cli_env(DESK_DELAY=str(delay), DESK_EFFECTS=str(effects))
    common = [*args, "--store", dsn, "--poll", poll, "--sweep", "0.5", "--grace", "5"]
    a = start(common, tmp_path / "a.log", cwd=tmp_path, env=env)
    b = start(common, tmp_path / "b.log", cwd=tmp_path, env=env)
    return a, b, effects


def _one_chain(events: list[dict]) -> None:
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    calls = [e["call_id"] for e in events if e["type"] == "tool_call"]
    assert len(calls) == len(set(calls))


def test_two_servers_one_session_at_once(tmp_path: Path, pg: str) -> None:
    a, b, effects = _two(tmp_path, pg, delay=0.3)
    sid = f"s-{uuid.uuid4().hex[:8]}"
    texts = [f"message {n}" for n in range(8)]
    try:
        with httpx.Client(base_url=a.base, timeout=60) as ca, \
                httpx.Client(base_url=b.base, timeout=60) as cb:
            assert ca.post("/v1/sessions", json={"id": sid}).status_code == 201
            answers: list[int] = []

            def send(client: httpx.Client, text: str) -> None:
                r = client.post(f"/v1/sessions/{sid}/messages", json={"text": text})
                answers.append(r.status_code)

            threads = [threading.Thread(target=send, args=(ca if n % 2 else cb, text))
                       for n, text in enumerate(texts)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
            assert sorted(set(answers)) <= [200, 202] and len(answers) == len(texts)

            def all_answered(events: list[dict]) -> bool:
                started = "\n".join(e["message"] for e in events
                                    if e["type"] == "turn_started")
                session = cb.get(f"/v1/sessions/{sid}").json()
                return all(t in started for t in texts) and session["status"] == "idle"

            events = wait_for_events(cb, sid, all_answered, timeout=90, poll=0.2)
            assert stored_events(ca, sid) == events  # the same log through either server
        _one_chain(events)
        started = [e["message"] for e in events if e["type"] == "turn_started"]
        for text in texts:  # each message in exactly one turn, once
            assert sum(m.count(text) for m in started) == 1, (text, started)
        finished = [e for e in events if e["type"] == "turn_finished"]
        assert len(finished) == len(started)
        assert all(e["status"] == "completed" for e in finished)
        effect_lines = effects.read_text().splitlines()
        assert len(effect_lines) == len(set(effect_lines)) == len(started)  # no tool twice
    finally:
        a.stop()
        b.stop()


def test_a_killed_server_s_turn_is_finished_by_the_other(tmp_path: Path, pg: str) -> None:
    a, b, effects = _two(tmp_path, pg, delay=3.0)
    sid = f"s-{uuid.uuid4().hex[:8]}"
    try:
        with httpx.Client(base_url=a.base, timeout=60) as ca, \
                httpx.Client(base_url=b.base, timeout=60) as cb:
            ca.post("/v1/sessions", json={"id": sid})
            ca.post(f"/v1/sessions/{sid}/messages", json={"text": "go"},
                    headers={"Prefer": "respond-async"})
            wait_for_events(cb, sid, lambda es: sum(e["type"] == "tool_call" for e in es) == 2,
                            timeout=90, poll=0.2)
            a.process.send_signal(signal.SIGKILL)
            a.process.wait(30)
            # nobody writes to the session: b's sweep finds the dead worker's turn
            events = wait_for_events(
                cb, sid, lambda es: any(e["type"] == "turn_finished" for e in es),
                timeout=90, poll=0.2)
            _one_chain(events)
            assert [e["type"] for e in events].count("turn_started") == 1
            assert events[-1]["type"] == "turn_finished" and events[-1]["reply"] == "reply 1"
            results = [e for e in events if e["type"] == "tool_result"]
            assert sorted(r["name"] for r in results) == ["effect", "slow.wait"]
            assert effects.read_text().count(sid) == 1  # the effect ran once
            after = cb.post(f"/v1/sessions/{sid}/messages", json={"text": "after"}).json()
            assert after["status"] == "completed" and after["turn"] == 2
        assert "recover" in b.log()
    finally:
        a.stop()
        b.stop()


def test_a_stream_follows_a_turn_run_by_the_other_server(tmp_path: Path, pg: str) -> None:
    """LISTEN/NOTIFY: with polling every 60 s, a stream on b still gets a's turn at
    once (within 25 s, checked at every frame: heartbeats come every 15 s)."""
    a, b, _ = _two(tmp_path, pg, delay=0.1, poll="60")
    sid = f"s-{uuid.uuid4().hex[:8]}"
    try:
        with httpx.Client(base_url=a.base, timeout=60) as ca, \
                httpx.Client(base_url=b.base, timeout=httpx.Timeout(60, read=30)) as cb:
            ca.post("/v1/sessions", json={"id": sid})
            with cb.stream("GET", f"/v1/sessions/{sid}/events") as response:
                lines = response.iter_lines()
                next(lines)  # the stream is open (its first frame): then the turn runs
                ca.post(f"/v1/sessions/{sid}/messages", json={"text": "go"})
                seen = []
                deadline = time.monotonic() + 25
                for frame in frames(lines):
                    assert time.monotonic() < deadline, "no notification reached b"
                    if isinstance(frame.data, dict):
                        seen.append(frame.data)
                        if frame.data["type"] == "turn_finished":
                            break
            assert seen == stored_events(ca, sid)
    finally:
        a.stop()
        b.stop()


def _children(pid: int) -> list[int]:
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return [int(p) for p in text.split()]


def _connections(dsn: str, name: str) -> int:
    """The PostgreSQL server's connections whose application is ``name``."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity"
                           " WHERE application_name = %s", (name,)).fetchone()
    return int(row[0]) if row else 0


def test_workers_share_one_socket(tmp_path: Path, pg: str) -> None:
    """Two workers behind one socket, each with a pool of 2 connections (``--store-pool
    2``): 8 conversations at once are answered, and the server never sees more than each
    worker's 2 pooled connections and the two it listens and notifies on."""
    from psycopg.conninfo import make_conninfo

    args = write_desk(tmp_path)
    dsn = make_conninfo(pg, application_name="pool-of-two")
    server = start([*args, "--store", dsn, "--workers", "2", "--store-pool", "2"],
                   tmp_path / "log", cwd=tmp_path, env=cli_env(DESK_DELAY="0.2"))
    try:
        deadline = time.monotonic() + 30
        while len(_children(server.process.pid)) < 2:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        with httpx.Client(base_url=server.base, timeout=60) as client:
            deadline = time.monotonic() + 30
            while client.get("/readyz").status_code != 200:
                assert time.monotonic() < deadline
                time.sleep(0.1)
            sid = f"s-{uuid.uuid4().hex[:8]}"
            client.post("/v1/sessions", json={"id": sid})
            for n in range(4):
                with httpx.Client(base_url=server.base, timeout=60) as fresh:  # new conns
                    out = fresh.post(f"/v1/sessions/{sid}/messages",
                                     json={"text": f"m{n}"}).json()
                    assert out["status"] == "completed" and out["reply"] == f"reply {n + 1}"
            most = [0]

            def converse(k: int) -> None:
                with httpx.Client(base_url=server.base, timeout=120) as own:
                    own.post("/v1/sessions", json={"id": f"{sid}-{k}"})
                    for n in range(2):
                        out = own.post(f"/v1/sessions/{sid}-{k}/messages",
                                       json={"text": f"m{n}"}).json()
                        assert out["status"] == "completed", out
                        most[0] = max(most[0], _connections(pg, "pool-of-two"))

            threads = [threading.Thread(target=converse, args=(k,)) for k in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
            assert 0 < most[0] <= 2 * (2 + 2), most
        workers = _children(server.process.pid)
        assert len(workers) == 2
    finally:
        assert server.stop() == 0
    for pid in workers:
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(
            f"/proc/{pid}/status").read_text()
