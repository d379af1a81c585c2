"""The resumption promise: an events stream cut at random points and resumed with
``Last-Event-ID``, hundreds of times, while turns run and after the server restarts:
the events received, joined, equal the stored ones exactly (none twice, none lost, in
order)."""

from __future__ import annotations

import random
import threading
import uuid
from pathlib import Path

import httpx

from tests.support.phaseflow_cli import cli_env
from tests.support.serve_server import frames, start, stored_events, write_desk

TURNS = 15


def _read_some(client: httpx.Client, sid: str, position: int, take: int,
               deltas: list[dict]) -> list[tuple[int, dict]]:
    """Up to ``take`` persisted events after ``position``, then the connection is cut."""
    got: list[tuple[int, dict]] = []
    headers = {"Last-Event-ID": str(position)} if position else {}
    # a moment without an event: nothing more for now (the stream itself stays open;
    # cutting early is only one more cut)
    timeout = httpx.Timeout(30, read=0.3)
    try:
        with client.stream("GET", f"/v1/sessions/{sid}/events", headers=headers,
                           timeout=timeout) as response:
            assert response.status_code == 200
            for frame in frames(response.iter_lines()):
                if not isinstance(frame.data, dict):
                    continue
                if frame.id is None:
                    deltas.append(frame.data)  # live only: never moves the position
                    continue
                got.append((int(frame.id), frame.data))
                if len(got) >= take:
                    break
    except httpx.ReadTimeout:
        pass
    return got


def _resume_until(client: httpx.Client, sid: str, rng: random.Random, done: threading.Event,
                  total: list[int], *, most: int) -> tuple[list[dict], int]:
    joined: list[dict] = []
    deltas: list[dict] = []
    cuts = 0
    while True:
        position = joined[-1]["seq"] if joined else 0
        if done.is_set() and position >= total[0]:
            break
        got = _read_some(client, sid, position, rng.randint(1, most), deltas)
        cuts += 1
        for seq, data in got:
            assert seq == data["seq"] == position + 1, (seq, position)
            position = seq
            joined.append(data)
    assert all(d["seq"] == 0 and d["type"] == "text_delta" for d in deltas)
    return joined, cuts


def test_a_stream_cut_at_random_points_resumes_exactly(tmp_path: Path) -> None:
    args = write_desk(tmp_path, turns=TURNS + 5)
    db = tmp_path / "desk.db"
    log = tmp_path / "log"
    server = start([*args, "--store", str(db), "--poll", "0.2"], log, cwd=tmp_path,
                   env=cli_env(DESK_DELAY="0.01"))
    rng = random.Random(20261202)
    sid = f"s-{uuid.uuid4().hex[:8]}"
    total = [0]
    done = threading.Event()
    try:
        with httpx.Client(base_url=server.base, timeout=30) as client:
            client.post("/v1/sessions", json={"id": sid})

            def talk() -> None:
                with httpx.Client(base_url=server.base, timeout=30) as talker:
                    for n in range(TURNS):
                        r = talker.post(f"/v1/sessions/{sid}/messages",
                                        json={"text": f"message {n}"})
                        assert r.json()["status"] == "completed"
                    total[0] = len(stored_events(talker, sid))
                done.set()

            talker = threading.Thread(target=talk)
            talker.start()
            # cut while the turns run (live events from this process's turns)
            live, live_cuts = _resume_until(client, sid, rng, done, total, most=6)
            talker.join(60)
            stored = stored_events(client, sid)
            assert live == stored
            # and again over what is stored, cut finer: hundreds of cuts in all
            cuts = live_cuts
            for _ in range(3):
                again, n = _resume_until(client, sid, rng, done, total, most=2)
                assert again == stored
                cuts += n
            assert cuts >= 200, cuts
    finally:
        assert server.stop() == 0
    # across a restart: a new server on the same store resumes where the client was
    server = start([*args, "--store", str(db)], log.with_name("log2"), cwd=tmp_path)
    try:
        with httpx.Client(base_url=server.base, timeout=30) as client:
            middle = stored[len(stored) // 2]["seq"]
            rest = _read_some(client, sid, middle, len(stored), [])
            assert [d for _, d in rest] == stored[middle:]
    finally:
        server.stop()
    assert len({e["seq"] for e in stored}) == len(stored) == stored[-1]["seq"]


