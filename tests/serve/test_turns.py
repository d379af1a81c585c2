"""A turn over HTTP against the real server: SSE, JSON and ``Prefer: respond-async``;
a client that disconnects never cancels the turn; ``Idempotency-Key``; a message while a
turn runs (queue, reject, steer, interrupt); approvals; cancellation; heartbeats."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.phaseflow_cli import cli_env
from tests.support.serve_server import DEMO, Server, frames, serving, wait_for_events, write_desk

#: how long the desk's slow tool waits: long enough to act while a turn runs
DELAY = 1.5


@pytest.fixture(scope="module")
def slow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Path]]:
    """The desk project with a slow tool, and the file its effect tool writes."""
    folder = tmp_path_factory.mktemp("desk")
    args = write_desk(folder)
    effects = folder / "effects.txt"
    with serving([*args, "--store", str(folder / "desk.db"), "--heartbeat", "0.2"],
                 folder / "server.log", cwd=folder,
                 env=cli_env(DESK_DELAY=str(DELAY), DESK_EFFECTS=str(effects))) as server:
        yield server, effects


def _new(client: httpx.Client) -> str:
    sid = f"s-{uuid.uuid4().hex[:10]}"
    assert client.post("/v1/sessions", json={"id": sid}).status_code == 201
    return sid


def _stored(client: httpx.Client, sid: str, after: int = 0) -> list[dict]:
    r = client.get(f"/v1/sessions/{sid}/events", params={"after": after, "follow": "false"})
    assert r.status_code == 200, r.text
    events: list[dict] = r.json()
    return events


def _finished(n: int):
    return lambda events: sum(e["type"] == "turn_finished" for e in events) >= n


def test_a_turn_as_sse_json_and_async(client: httpx.Client) -> None:
    sid = f"s-{uuid.uuid4().hex[:10]}"
    client.post("/v1/sessions", json={"id": sid})
    url = f"/v1/sessions/{sid}/messages"
    with client.stream("POST", url, json={"text": DEMO[0]},
                       headers={"Accept": "text/event-stream"}) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        got = list(frames(response.iter_lines()))
    events = [f for f in got if f.data is not None]
    assert events[0].data["type"] == "turn_started" and events[-1].data["type"] == (
        "turn_finished")
    persisted = [f for f in events if f.data["type"] != "text_delta"]
    deltas = [f for f in events if f.data["type"] == "text_delta"]
    assert deltas and all(f.id is None and f.data["seq"] == 0 for f in deltas)
    assert [int(f.id) for f in persisted] == [f.data["seq"] for f in persisted]
    assert [f.data for f in persisted] == _stored(client, sid)
    assert "".join(f.data["text"] for f in deltas) == events[-1].data["reply"]

    outcome = client.post(url, json={"text": DEMO[1]}).json()
    assert (outcome["turn"], outcome["status"], outcome["phase"]) == (2, "completed",
                                                                      "locate_order")
    assert outcome["reply"].startswith("Thank you, you're verified")

    accepted = client.post(url, json={"text": DEMO[2]}, headers={"Prefer": "respond-async"})
    assert accepted.status_code == 202
    assert accepted.headers["preference-applied"] == "respond-async"
    location = accepted.headers["location"]
    assert location == accepted.json()["events"]
    with client.stream("GET", location) as response:
        for frame in frames(response.iter_lines()):
            if isinstance(frame.data, dict) and frame.data["type"] == "turn_finished":
                assert frame.data["turn"] == 3 and frame.data["status"] == "completed"
                break
            if isinstance(frame.data, dict):
                assert frame.data["turn"] == 3  # after= the position before the turn


def test_an_approval_over_http_then_the_finished_session_refuses(
        client: httpx.Client) -> None:
    sid = f"s-{uuid.uuid4().hex[:10]}"
    client.post("/v1/sessions", json={"id": sid})
    url = f"/v1/sessions/{sid}/messages"
    for text in DEMO[:3]:
        assert client.post(url, json={"text": text}).json()["status"] == "completed"
    paused = client.post(url, json={"text": DEMO[3]}).json()
    assert paused["status"] == "awaiting_approval"
    pending = paused["pending_approval"]
    assert pending["name"] == "payments.issue_refund"
    assert client.get(f"/v1/sessions/{sid}").json()["pending_approval"] == pending
    wrong = client.post(f"/v1/sessions/{sid}/approvals/call_x", json={"decision": "approve"})
    assert wrong.status_code == 404 and wrong.json()["code"] == "call_not_found"
    with client.stream("POST", f"/v1/sessions/{sid}/approvals/{pending['call_id']}",
                       json={"decision": "approve"},
                       headers={"Accept": "text/event-stream"}) as response:
        types = [f.data["type"] for f in frames(response.iter_lines()) if f.data]
    assert types[0] == "approval_resolved" and types[-1] == "turn_finished"
    assert "tool_result" in types and client.get(f"/v1/sessions/{sid}").json()["phase"] == (
        "done")
    before = _stored(client, sid)
    refused = client.post(url, json={"text": "one more thing"})
    assert refused.status_code == 409 and refused.json()["code"] == "session_finished"
    assert _stored(client, sid) == before  # never stored


def test_a_client_that_leaves_does_not_cancel_the_turn(slow: tuple[Server, Path]) -> None:
    server, effects = slow
    with httpx.Client(base_url=server.base, timeout=30) as client:
        sid = _new(client)
        with client.stream("POST", f"/v1/sessions/{sid}/messages", json={"text": "go"},
                           headers={"Accept": "text/event-stream"}) as response:
            first = next(f for f in frames(response.iter_lines()) if f.data)
            assert first.data["type"] == "turn_started"
        # the connection is closed mid-turn (the slow tool runs): the turn goes on
        events = wait_for_events(client, sid, _finished(1))
        assert events[-1]["type"] == "turn_finished" and events[-1]["status"] == "completed"
        assert events[-1]["reply"] == "reply 1"
        assert effects.read_text().count(f"{sid} ") == 1


def test_an_idempotency_key_sends_once(slow: tuple[Server, Path]) -> None:
    server, effects = slow
    with httpx.Client(base_url=server.base, timeout=30) as client:
        sid = _new(client)
        url = f"/v1/sessions/{sid}/messages"
        key = {"Idempotency-Key": "k-1"}
        first = client.post(url, json={"text": "once"}, headers={**key,
                                                                  "Prefer": "respond-async"})
        assert first.status_code == 202
        again = client.post(url, json={"text": "once"}, headers=key)  # while it runs
        assert again.headers["idempotent-replayed"] == "true"
        later = client.post(url, json={"text": "once"}, headers=key)
        assert again.json() == later.json() and later.json()["reply"] == "reply 1"
        with client.stream("POST", url, json={"text": "once"},
                           headers={**key, "Accept": "text/event-stream"}) as response:
            replayed = [f.data["type"] for f in frames(response.iter_lines()) if f.data]
        assert replayed[0] == "turn_started" and replayed[-1] == "turn_finished"
        reused = client.post(url, json={"text": "other"}, headers=key)
        assert reused.status_code == 422 and reused.json()["code"] == "idempotency_key_reused"
        events = _stored(client, sid)
        assert sum(e["type"] == "turn_started" for e in events) == 1
        assert effects.read_text().count(f"{sid} ") == 1


def test_messages_while_a_turn_runs(slow: tuple[Server, Path]) -> None:
    server, _ = slow
    with httpx.Client(base_url=server.base, timeout=30) as client:
        sid = _new(client)
        url = f"/v1/sessions/{sid}/messages"
        client.post(url, json={"text": "first"}, headers={"Prefer": "respond-async"})
        rejected = client.post(url, json={"text": "rejected one", "busy": "reject"})
        assert rejected.status_code == 409 and rejected.json()["code"] == "session_busy"
        queued = client.post(url, json={"text": "second"})
        assert queued.status_code == 202
        assert queued.json()["status"] == "queued" and queued.json()["position"] == 1
        assert queued.headers["location"] == queued.json()["events"]
        events = wait_for_events(client, sid, _finished(2))
        started = [e["message"] for e in events if e["type"] == "turn_started"]
        assert started == ["first", "second"]
        assert "rejected one" not in json.dumps(events)  # nothing stored


def test_an_interrupt_cancels_the_running_turn_and_answers(slow: tuple[Server, Path]) -> None:
    server, _ = slow
    with httpx.Client(base_url=server.base, timeout=30) as client:
        sid = _new(client)
        url = f"/v1/sessions/{sid}/messages"
        client.post(url, json={"text": "first"}, headers={"Prefer": "respond-async"})
        wait_for_events(client, sid, lambda es: any(e["type"] == "tool_call" for e in es))
        interrupt = client.post(url, json={"text": "stop", "busy": "interrupt"})
        assert interrupt.status_code == 200, interrupt.text
        assert interrupt.json()["status"] == "completed"
        events = _stored(client, sid)
        finished = [e["status"] for e in events if e["type"] == "turn_finished"]
        started = [e["message"] for e in events if e["type"] == "turn_started"]
        assert finished == ["cancelled", "completed"] and started == ["first", "stop"]
        results = [e["status"] for e in events if e["type"] == "tool_result"]
        assert results[-1] == "cancelled"  # the call still running: cancelled


def test_steering_goes_into_the_running_turn_before_the_queued_messages(
    slow: tuple[Server, Path],
) -> None:
    """A steering message for a turn that another object (another request's task,
    another worker) holds: stored in the session's queue as steering, the turn takes it
    into its next model request (a ``message_steered`` event); were the turn to end first,
    it would start the next turn. Either way it never waits behind the messages queued
    before it."""
    server, _ = slow
    with httpx.Client(base_url=server.base, timeout=30) as client:
        sid = _new(client)
        url = f"/v1/sessions/{sid}/messages"
        client.post(url, json={"text": "first"}, headers={"Prefer": "respond-async"})
        assert client.post(url, json={"text": "second"}).json()["position"] == 1
        steer = client.post(url, json={"text": "mind the budget", "busy": "steer"})
        assert steer.status_code == 202 and steer.json()["status"] == "queued"
        assert steer.json()["position"] == 2
        events = wait_for_events(client, sid, _finished(2))
        started = [e["message"] for e in events if e["type"] == "turn_started"]
        assert started[0] == "first" and len(started) == 2
        steered = [e for e in events if e["type"] == "message_steered"]
        if steered:  # taken into the first turn's next request
            assert events.index(steered[0]) < events.index(
                next(e for e in events if e["type"] == "turn_started"
                     and e["message"] != "first"))
            assert "mind the budget" not in started[1] and "second" in started[1]
        else:  # the first turn ended first: the steer starts the next one
            assert started[1].index("mind the budget") < started[1].index("second")


def test_cancel_the_running_turn(slow: tuple[Server, Path]) -> None:
    server, _ = slow
    with httpx.Client(base_url=server.base, timeout=30) as client:
        sid = _new(client)
        nothing = client.post(f"/v1/sessions/{sid}/cancel")
        assert nothing.status_code == 409 and nothing.json()["code"] == "no_running_turn"
        client.post(f"/v1/sessions/{sid}/messages", json={"text": "go"},
                    headers={"Prefer": "respond-async"})
        wait_for_events(client, sid, lambda es: any(e["type"] == "tool_call" for e in es))
        assert client.post(f"/v1/sessions/{sid}/cancel").status_code == 202
        events = wait_for_events(client, sid, _finished(1))
        assert events[-1]["status"] == "cancelled"
        results = {e["name"]: e["status"] for e in events if e["type"] == "tool_result"}
        assert results["slow.wait"] in ("cancelled", "unknown")
        assert client.get(f"/v1/sessions/{sid}").json()["status"] == "idle"
        again = client.post(f"/v1/sessions/{sid}/messages", json={"text": "again"}).json()
        assert again["status"] == "completed"


def test_heartbeats_keep_an_idle_stream_open(slow: tuple[Server, Path]) -> None:
    server, _ = slow
    with httpx.Client(base_url=server.base, timeout=30) as client:
        sid = _new(client)
        comments: list[str] = []
        with client.stream("GET", f"/v1/sessions/{sid}/events") as response:
            for frame in frames(response.iter_lines()):
                comments += [c for c in frame.comments if c.startswith("ping")]
                if len(comments) >= 2:
                    break
        assert len(comments) >= 2


def test_a_turn_s_stream_has_heartbeats_while_a_tool_runs(slow: tuple[Server, Path]) -> None:
    server, _ = slow
    with httpx.Client(base_url=server.base, timeout=30) as client:
        sid = _new(client)
        with client.stream("POST", f"/v1/sessions/{sid}/messages", json={"text": "go"},
                           headers={"Accept": "text/event-stream"}) as response:
            assert response.status_code == 200
            assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
            assert response.headers["cache-control"] == "no-store"
            assert response.headers["x-accel-buffering"] == "no"
            got = list(frames(response.iter_lines()))  # until the server ends it
    pings = [c for f in got for c in f.comments if c.startswith("ping")]
    assert len(pings) >= 2  # the slow tool takes DELAY seconds, a heartbeat every 0.2
    events = [f for f in got if f.data is not None]
    assert events[-1].data["type"] == "turn_finished"  # and the stream ends with it
    assert events[-1].data["reply"] == "reply 1"
    ids = [int(f.id) for f in events if f.id is not None]
    assert ids == list(range(1, len(ids) + 1))
    assert ids == [f.data["seq"] for f in events if f.data["seq"]]
