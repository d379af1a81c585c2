"""The official AG-UI client (``@ag-ui/client``'s ``HttpAgent``, from npm, run by Node)
holding whole conversations with a real ``phaseflow serve``: text turns, a tool call
that writes state (its snapshot and deltas), a tool that fails, an approval interrupt
resumed with approve and with reject, a run refused because the session is busy, a turn
whose model fails (``RUN_ERROR``). No
run throws, the client writes no warning, every event it applied is valid by the
protocol's Python models too, and the client's own ``messages`` and ``state`` are what
the server stored."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from ag_ui.core import Event
from pydantic import TypeAdapter

from tests.support.agui_client import need_client
from tests.support.chat_project import MESSAGES, write_chat
from tests.support.edge_project import CONTINUED, write_edges
from tests.support.phaseflow_cli import cli_env
from tests.support.serve_server import Server, serving

EVENTS: TypeAdapter[Event] = TypeAdapter(Event)
SCRIPT = Path(__file__).with_name("agui_client.mjs")
EDGE_SCRIPT = Path(__file__).with_name("agui_edges.mjs")


@pytest.fixture(scope="module")
def chat(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Path]]:
    folder = tmp_path_factory.mktemp("chat")
    holds = folder / "holds"
    # heartbeats every 50 ms: the client reads them in its runs' streams too
    with serving([*write_chat(folder), "--heartbeat", "0.05"], folder / "server.log",
                 cwd=folder,
                 env=cli_env(CHAT_HOLDS=str(holds))) as server:
        yield server, holds


def _project(messages: list[dict[str, Any]], *, client: bool) -> list[tuple[Any, ...]]:
    """A history as (role, text, calls) / (tool, call id, content) rows: the client's
    messages and the server's history in one shape."""
    rows: list[tuple[Any, ...]] = []
    for m in messages:
        if m["role"] == "tool":
            rows.append(("tool", m["toolCallId" if client else "tool_call_id"], m["content"]))
        elif m["role"] == "assistant":
            calls = [(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
                     for c in m.get("toolCalls", [])] if client else [
                (c["id"], c["name"], c["arguments"]) for c in m["tool_calls"]]
            rows.append(("assistant", m.get("content") or "", calls))
        else:
            rows.append((m["role"], m["content"], []))
    return rows


def _runs(events: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    runs: list[list[dict[str, Any]]] = []
    for event in events:
        if event["type"] == "RUN_STARTED":
            runs.append([])
        runs[-1].append(event)
    return runs


def test_the_official_client_holds_whole_conversations(chat: tuple[Server, Path]) -> None:
    server, holds = chat
    node, package = need_client()
    done = subprocess.run(
        [node, str(SCRIPT), server.base, "chat-desk", str(holds), str(package)],
        capture_output=True, text=True, timeout=120,
        env={**cli_env(), "CHAT_MESSAGES": json.dumps(MESSAGES)})
    assert done.returncode == 0, done.stderr + server.log()
    report = json.loads(done.stdout)
    assert report["console"] == []  # the client warned of nothing, logged no failure
    for name in ("a", "b", "busy"):
        entry = report[name]
        for event in entry["events"]:
            EVENTS.validate_python(event)  # the protocol's own models agree
        for run in entry["runs"]:
            assert run["error"] is None, run["error"]
        runs = _runs(entry["events"])
        assert len(runs) == len(entry["runs"])
        for events in runs:  # every step started is finished before the run ends
            steps = [e["stepName"] for e in events if e["type"] == "STEP_STARTED"]
            assert steps == [e["stepName"] for e in events if e["type"] == "STEP_FINISHED"]
            assert events[-1]["type"] in ("RUN_FINISHED", "RUN_ERROR")
    a, b, busy = report["a"], report["b"], report["busy"]
    with httpx.Client(base_url=server.base, timeout=30) as client:
        for entry in (a, b):
            sid = entry["threadId"]
            stored = client.get(f"/v1/sessions/{sid}").json()
            history = client.get(f"/v1/sessions/{sid}/history").json()["messages"]
            assert _project(entry["messages"], client=True) == _project(history, client=False)
            assert entry["state"] == stored["state"]
        assert client.get(f"/v1/sessions/{a['threadId']}").json()["status"] == "finished"
    # thread a: text, text and a call (a state delta), a failing tool, an interrupt,
    # approved: paid, the run's steps reaching the final phase
    assert [r["pending"] for r in a["runs"]] == [[], [], ["call_6_1"], []]
    assert [r["result"]["reply"] if r["result"] else None for r in a["runs"]] == [
        "Hello! What can I do for you?", "Noted, though the checker failed.", None,
        "Understood."]
    kinds = [e["type"] for e in a["events"]]
    assert "STATE_DELTA" in kinds and a["state"] == {"note": "the kettle is broken",
                                                     "paid": True}
    interrupt = _runs(a["events"])[2][-1]
    assert interrupt["outcome"]["type"] == "interrupt"
    assert interrupt["outcome"]["interrupts"][0]["toolCallId"] == "call_6_1"
    assert [e["stepName"] for e in _runs(a["events"])[3] if e["type"] == "STEP_STARTED"
            ] == ["work", "finished"]
    failed = [m for m in a["messages"] if m.get("toolCallId") == "call_3_1"]
    assert failed[0]["content"] == "check failed: RuntimeError: the checker is out of order"
    # thread b: the run sent while its turn held was refused as a run of its own
    # (RUN_ERROR, session_busy) and stored nothing; rejected, the talk went on
    [refused] = busy["runs"]
    assert [e["code"] for e in refused["runErrors"]] == ["session_busy"]
    assert [e["type"] for e in busy["events"]] == ["RUN_STARTED", "RUN_ERROR"]
    assert "Are you still there?" not in json.dumps(b["messages"])
    assert [r["pending"] for r in b["runs"]] == [[], [], ["call_6_1"], [], [], []]
    assert b["state"] == {"note": "the kettle is broken"}
    rejected = [m for m in b["messages"] if m.get("toolCallId") == "call_6_1"]
    assert rejected[0]["content"] == "The user rejected this call: not today"
    assert b["runs"][-2]["result"]["reply"] == "Anything else?"
    # a turn whose model fails: RUN_ERROR (its step closed first), not a thrown error
    assert [e["code"] for e in b["runs"][-1]["runErrors"]] == ["provider_error"]
    assert [e["type"] for e in _runs(b["events"])[-1]][-2:] == ["STEP_FINISHED",
                                                                "RUN_ERROR"]


def _raw(client: httpx.Client, method: str, url: str, *, until: bytes | None = None,
         json: Any = None) -> bytes:
    """A stream's raw bytes: to its end, or (a session's events stream, which never
    ends by itself) until ``until`` came twice."""
    seen = b""
    with client.stream(method, url, json=json, headers={"Accept": "text/event-stream"}
                       ) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        for chunk in response.iter_raw():
            seen += chunk
            if until is not None and seen.count(until) >= 2:
                break
    return seen


def test_sse_lines_end_with_lf(chat: tuple[Server, Path]) -> None:
    """Every SSE line ends with ``\\n``, never ``\\r\\n`` (both are legal SSE, but clients
    split frames on ``\\n\\n``: the official AG-UI client does), read as raw bytes: a
    turn's stream, a session's events stream (its opening comment, stored events,
    heartbeats), the AG-UI endpoint."""
    server, _ = chat
    with httpx.Client(base_url=server.base, timeout=30) as client:
        sid = client.post("/v1/sessions", json={}).json()["id"]
        turn = _raw(client, "POST", f"/v1/sessions/{sid}/messages", json={"text": "Hi"})
        events = _raw(client, "GET", f"/v1/sessions/{sid}/events?after=0", until=b": ping")
        agui = _raw(client, "POST", "/v1/ag-ui/chat-desk", json={
            "threadId": f"lf-{sid}", "runId": "r1",
            "messages": [{"id": "1", "role": "user", "content": "Hi"}]})
    for body in (turn, events, agui):
        assert b"data: {" in body and b"\n\n" in body
        assert b"\r" not in body, body[:200]
    assert events.startswith(b": phaseflow events\nretry: 1000\n\n")
    assert b'"turn_finished"' in events and b"\n\n: ping - " in events


@pytest.fixture(scope="module")
def edges(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Path]]:
    folder = tmp_path_factory.mktemp("edges")
    holds = folder / "holds"
    with serving(write_edges(folder), folder / "server.log", cwd=folder,
                 env=cli_env(EDGE_HOLDS=str(holds))) as server:
        yield server, holds


def test_the_official_client_sees_a_cancel_wait_and_a_continued_reply(
        edges: tuple[Server, Path]) -> None:
    """A cancel that waits for a sync tool's thread is ``phaseflow.turn_cancelling`` and
    a ``cancelling`` step while the thread runs; a reply cut at the output limit is
    ``phaseflow.reply_continued`` and one assistant message with the stitched text."""
    server, holds = edges
    node, package = need_client()
    done = subprocess.run([node, str(EDGE_SCRIPT), server.base, "edge-desk", str(holds),
                           str(package)], capture_output=True, text=True, timeout=120,
                          env=cli_env())
    assert done.returncode == 0, done.stderr + server.log()
    report = json.loads(done.stdout)
    assert report["console"] == []
    for event in report["events"]:
        EVENTS.validate_python(event)
    cancelled, continued = _runs(report["events"])
    assert [r["error"] for r in report["runs"]] == [None, None]
    assert report["cancel"] == {"status": 202, "body": {
        "session_id": report["threadId"], "status": "cancelling"}}
    # run 1: cancelling while the thread still ran (its hold file was there), in a step
    # of its own inside the phase's; then cancelled, every step closed
    assert report["heldWhenCancelling"] is True
    kinds = [(e["type"], e.get("name") or e.get("stepName")) for e in cancelled]
    at = kinds.index(("CUSTOM", "phaseflow.turn_cancelling"))
    assert kinds[at + 1] == ("STEP_STARTED", "cancelling")
    assert kinds[-3:] == [("STEP_FINISHED", "cancelling"), ("STEP_FINISHED", "work"),
                          ("RUN_FINISHED", None)]
    assert cancelled[at]["value"] == {"tools": ["slow"]}
    assert cancelled[-1]["outcome"] == {"type": "cancelled"}
    assert report["runs"][0]["finished"] == "cancelled"
    # run 2: one assistant message, the parts stitched; the custom event names it
    [custom] = [e for e in continued if e["type"] == "CUSTOM"]
    assert custom["name"] == "phaseflow.reply_continued"
    [start] = [e for e in continued if e["type"] == "TEXT_MESSAGE_START"]
    assert custom["value"] == {"messageId": start["messageId"], "continuation": 1,
                               "of": custom["value"]["of"], "calls": 0}
    assert custom["value"]["of"] >= 1
    assert report["runs"][1]["result"]["reply"] == CONTINUED
    assistant = [m for m in report["messages"] if m["role"] == "assistant"]
    assert assistant[-1]["content"] == CONTINUED
    assert assistant[-1]["id"] == start["messageId"]
    with httpx.Client(base_url=server.base, timeout=30) as client:
        history = client.get(f"/v1/sessions/{report['threadId']}/history").json()
    assert _project(report["messages"], client=True) == _project(history["messages"],
                                                                 client=False)
