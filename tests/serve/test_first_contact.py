"""What a new author met first, against a real server: a new session's state with a key
the workflow does not declare is refused (422); a request uvicorn's own parser refuses
(a header holding a stray CR, a request line that is not HTTP) is answered with
problem+json, never uvicorn's plain text; ``serve`` without ``--hooks`` names its own
option."""

from __future__ import annotations

import json
import socket
import uuid

import httpx

from tests.support.phaseflow_cli import cli_env, run_phaseflow
from tests.support.serve_server import REFUND_DESK, Server


def test_undeclared_state_keys_are_refused(client: httpx.Client) -> None:
    sid = f"undeclared-{uuid.uuid4().hex[:6]}"
    refused = client.post("/v1/sessions", json={"workflow": "refund-desk", "id": sid,
                                                "state": {"foo": 1}})
    assert refused.status_code == 422, refused.text
    assert refused.headers["content-type"] == "application/problem+json"
    body = refused.json()
    assert (body["code"], body["field"], body["key"]) == ("undeclared_state_key", "state",
                                                          "foo")
    assert "approval_threshold" in body["detail"]  # what the workflow does declare
    assert client.get(f"/v1/sessions/{sid}").status_code == 404  # nothing stored
    run = client.post("/v1/ag-ui/refund-desk", json={
        "threadId": sid, "runId": "r1", "state": {"foo": 1},
        "messages": [{"id": "1", "role": "user", "content": "hi"}]})
    assert run.status_code == 422 and run.json()["key"] == "foo", run.text
    assert client.get(f"/v1/sessions/{sid}").status_code == 404
    # a declared key is kept, as before
    kept = client.post("/v1/sessions", json={"state": {"approval_threshold": 50}})
    assert kept.status_code == 201 and kept.json()["state"]["approval_threshold"] == 50


def _raw(server: Server, request: bytes) -> tuple[str, dict[str, str], bytes]:
    host, port = server.base.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    status, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    return status, headers, body


def test_what_uvicorn_refuses_is_problem_json(desk: Server) -> None:
    for request in (
            b"GET /v1/sessions/x/events HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Last-Event-ID: 1\r2\r\n\r\n",
            b"GET /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: b\x00c\r\n\r\n",
            b"THIS IS NOT HTTP\r\n\r\n"):
        status, headers, body = _raw(desk, request)
        assert status.startswith("HTTP/1.1 400"), (request, status, body)
        assert headers["content-type"] == "application/problem+json"
        problem = json.loads(body)
        assert problem["code"] == "invalid_http_request" and problem["status"] == 400
        assert int(headers["content-length"]) == len(body)
    # the server goes on answering
    with httpx.Client(base_url=desk.base) as client:
        assert client.get("/healthz").status_code == 200


def test_serve_without_hooks_names_its_option() -> None:
    args = [a for a in REFUND_DESK if a not in ("--hooks", "examples.demo.refund_desk:HOOKS")]
    done = run_phaseflow("serve", *args, "--store", "memory", env=cli_env())
    assert done.returncode == 2, done.stderr
    assert "phaseflow serve: --hooks" in done.stderr and "phaseflow run" not in done.stderr
