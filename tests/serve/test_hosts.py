"""DNS rebinding, against a real server: a request whose ``Host`` is not a name the
server answers to is refused (421 ``host_not_allowed``), and so is a state-changing
request whose ``Origin`` is foreign (403 ``origin_not_allowed``), both as problem+json
and before anything is read or stored; the server's own origin, loopback names and
``--allowed-host`` names are answered."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx

from tests.support.phaseflow_cli import cli_env, run_phaseflow
from tests.support.serve_server import REFUND_DESK, Server, serving


def _port(server: Server) -> str:
    return server.base.rsplit(":", 1)[1]


def _problem(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert body["code"] == code and body["type"].endswith("/" + code)


def test_a_rebound_name_is_refused(client: httpx.Client, desk: Server) -> None:
    port = _port(desk)
    sid = f"rebound-{uuid.uuid4().hex[:6]}"
    evil = {"Host": f"evil.example:{port}", "Origin": f"http://evil.example:{port}"}
    _problem(client.post("/v1/sessions", json={"id": sid}, headers=evil), 421,
             "host_not_allowed")
    for path in ("/v1/sessions", "/healthz", "/ui/", f"/v1/sessions/{sid}"):
        _problem(client.get(path, headers={"Host": f"evil.example:{port}"}), 421,
                 "host_not_allowed")
    assert client.get(f"/v1/sessions/{sid}").status_code == 404  # nothing was created
    # the names of this machine are answered
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"app.localhost:{port}"):
        assert client.get("/healthz", headers={"Host": host}).status_code == 200, host


def test_a_foreign_origin_changes_nothing(client: httpx.Client, desk: Server) -> None:
    port = _port(desk)
    sid = f"origin-{uuid.uuid4().hex[:6]}"
    for origin in (f"http://evil.example:{port}", "null", "https://example.com"):
        _problem(client.post("/v1/sessions", json={"id": sid},
                             headers={"Origin": origin}), 403, "origin_not_allowed")
        _problem(client.post("/v1/ag-ui/refund-desk", headers={"Origin": origin}, json={
            "threadId": sid, "runId": "r", "messages": [
                {"id": "1", "role": "user", "content": "hi"}]}), 403, "origin_not_allowed")
    assert client.get(f"/v1/sessions/{sid}").status_code == 404
    # reading is no change (and without CORS a foreign page cannot read the answer)
    assert client.get("/v1/sessions", headers={"Origin": "http://evil.example"}
                      ).status_code == 200
    # the server's own origin (the web view's), a loopback front end, no Origin at all
    for n, headers in enumerate(({"Origin": desk.base}, {"Origin": "http://localhost:5173"},
                                 {})):
        created = client.post("/v1/sessions", json={"id": f"{sid}-{n}"}, headers=headers)
        assert created.status_code == 201, created.text
    _problem(client.delete(f"/v1/sessions/{sid}-0",
                           headers={"Origin": "http://evil.example"}), 403,
             "origin_not_allowed")
    assert client.delete(f"/v1/sessions/{sid}-0", headers={"Origin": desk.base}
                         ).status_code == 204


def test_allowed_host_adds_names(tmp_path: Path) -> None:
    with serving([*REFUND_DESK, "--store", "memory", "--allowed-host", "chat.example.com",
                  "--allowed-host", "10.1.2.3"], tmp_path / "server.log") as server, \
            httpx.Client(base_url=server.base, timeout=30) as client:
        port = _port(server)
        for host in (f"chat.example.com:{port}", "CHAT.example.com.", f"10.1.2.3:{port}"):
            assert client.get("/healthz", headers={"Host": host}).status_code == 200, host
        created = client.post("/v1/sessions", json={}, headers={
            "Host": "chat.example.com", "Origin": "https://chat.example.com"})
        assert created.status_code == 201, created.text
        _problem(client.get("/healthz", headers={"Host": "evil.example"}), 421,
                 "host_not_allowed")
    bad = run_phaseflow("serve", *REFUND_DESK, "--store", "memory", "--allowed-host",
                        "http://chat.example.com/", env=cli_env())
    assert bad.returncode == 2 and "--allowed-host" in bad.stderr, bad.stderr
