"""Every SSE line the server sends ends with ``\\n``, never ``\\r\\n`` (both are legal
SSE, but clients split frames on ``\\n\\n``: the official AG-UI client does): a turn's
stream, a session's events stream (its opening comment, stored events, heartbeats), the
AG-UI endpoint, read as raw bytes."""

from __future__ import annotations

import uuid

import httpx

from tests.support.serve_server import new_session


def _raw(client: httpx.Client, method: str, url: str, **kwargs: object) -> bytes:
    with client.stream(method, url, headers={"Accept": "text/event-stream"},
                       **kwargs) as response:  # type: ignore[arg-type]
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        return response.read()


def _following(client: httpx.Client, url: str, until: bytes) -> bytes:
    """A session's events stream (it never ends by itself) read until ``until``."""
    seen = b""
    with client.stream("GET", url, headers={"Accept": "text/event-stream"}) as response:
        assert response.status_code == 200
        for chunk in response.iter_raw():
            seen += chunk
            if until in seen:
                return seen
    raise AssertionError(f"the stream ended before {until!r}: {seen!r}")


def test_sse_lines_end_with_lf(client: httpx.Client) -> None:
    sid = new_session(client, [])["id"]
    turn = _raw(client, "POST", f"/v1/sessions/{sid}/messages",
                json={"text": "Hi, I'm ada@example.com"})
    events = _following(client, f"/v1/sessions/{sid}/events?after=0", b'"turn_finished"')
    agui = _raw(client, "POST", "/v1/ag-ui/refund-desk", json={
        "threadId": f"t-{uuid.uuid4().hex[:8]}", "runId": "r1",
        "messages": [{"id": "1", "role": "user", "content": "Hi, I'm ada@example.com"}]})
    for body in (turn, events, agui):
        assert b"data: {" in body and b"\n\n" in body
        assert b"\r" not in body, body[:200]
    assert events.startswith(b": phaseflow events\nretry: 1000\n\n")
