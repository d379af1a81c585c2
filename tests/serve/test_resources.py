"""The resources of ``phaseflow serve`` that are not a turn, and every bad input
answered with its 4xx problem (never an HTML page or a traceback), against the real
server."""

from __future__ import annotations

import time
import uuid

import httpx

from tests.support.serve_server import DEMO, Server

PROBLEM = "application/problem+json"


def _problem(response: httpx.Response, status: int, code: str) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM
    body = response.json()
    assert body["status"] == status and body["code"] == code
    assert body["type"].endswith("/" + code) and body["title"] and body["detail"]
    assert "Traceback" not in response.text
    return body


def _new(client: httpx.Client, **body: object) -> str:
    sid = f"s-{uuid.uuid4().hex[:10]}"
    r = client.post("/v1/sessions", json={"id": sid, **body})
    assert r.status_code == 201, r.text
    return sid


def test_health_and_workflows(client: httpx.Client) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json() == {"status": "ready"}
    [desk] = client.get("/v1/workflows").json()["workflows"]
    assert desk["name"] == "refund-desk" and len(desk["hash"]) == 64
    assert [p["name"] for p in desk["phases"]][:2] == ["greet", "locate_order"]
    assert {"name": "payments.issue_refund", "implemented": True} in desk["tools"]
    mermaid = client.get("/v1/workflows/refund-desk/graph").json()
    assert mermaid["format"] == "mermaid" and "greet" in mermaid["graph"]
    dot = client.get("/v1/workflows/refund-desk/graph", params={"format": "dot"}).json()
    assert dot["graph"].lstrip().startswith("digraph")
    _problem(client.get("/v1/workflows/nope/graph"), 404, "workflow_not_found")
    _problem(client.get("/v1/workflows/refund-desk/graph", params={"format": "png"}), 400,
             "invalid_parameter")


def test_create_read_list_history_delete(client: httpx.Client) -> None:
    sid = _new(client, state={"approval_threshold": 100})
    session = client.get(f"/v1/sessions/{sid}").json()
    assert session["id"] == sid and session["workflow"] == "refund-desk"
    assert (session["status"], session["phase"], session["turn"]) == ("idle", "greet", 0)
    assert session["state"]["approval_threshold"] == 100
    assert session["pending_approval"] is None and session["version"] == 1
    _problem(client.post("/v1/sessions", json={"id": sid}), 409, "session_exists")
    generated = client.post("/v1/sessions", json={}).json()["id"]
    assert len(generated) == 32

    reply = client.post(f"/v1/sessions/{sid}/messages", json={"text": DEMO[0]}).json()
    assert reply["status"] == "completed" and "Ada" in reply["reply"]
    history = client.get(f"/v1/sessions/{sid}/history").json()["messages"]
    assert [m["role"] for m in history] == ["user", "assistant", "tool", "assistant"]
    assert history[1]["tool_calls"][0]["name"] == "crm.lookup_customer"
    assert history[-1]["content"] == reply["reply"]

    listed = client.get("/v1/sessions", params={"limit": 1}).json()
    assert listed["sessions"][0]["id"] == sid  # newest first: the one just talked to
    seen, cursor = [], None
    while True:
        page = client.get("/v1/sessions", params={"limit": 1, **(
            {"cursor": cursor} if cursor else {})}).json()
        seen += [s["id"] for s in page["sessions"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert len(seen) == len(set(seen)) and {sid, generated} <= set(seen)
    idle = client.get("/v1/sessions", params={"status": "idle", "limit": 100}).json()
    assert all(s["status"] == "idle" for s in idle["sessions"])
    assert client.get("/v1/sessions", params={"workflow": "other"}).json()["sessions"] == []

    assert client.delete(f"/v1/sessions/{sid}").status_code == 204
    _problem(client.get(f"/v1/sessions/{sid}"), 404, "session_not_found")
    _problem(client.delete(f"/v1/sessions/{sid}"), 404, "session_not_found")


def test_bad_input_is_a_clear_problem(client: httpx.Client, desk: Server) -> None:
    sid = _new(client)
    url = f"/v1/sessions/{sid}/messages"
    # not an object, not JSON, not UTF-8, too deep, wrong types, unknown fields
    for body, code in ((b"[1]", "invalid_json"), (b"{", "invalid_json"),
                       (b"\xff\xfe", "invalid_json"), (b"{\"text\": NaN}", "invalid_json"),
                       (b"[" * 40 + b"]" * 40, "invalid_json"),
                       (b'{"text": {"a": ' * 40 + b"1" + b"}" * 41, "invalid_json"),
                       (b"", "invalid_json")):
        _problem(client.post(url, content=body,
                             headers={"content-type": "application/json"}), 400, code)
    assert _problem(client.post(url, json={"text": 3}), 400, "invalid_field")["field"] == "text"
    assert _problem(client.post(url, json={}), 400, "missing_field")["field"] == "text"
    assert _problem(client.post(url, json={"text": "hi", "busy": "later"}), 400,
                    "invalid_field")["field"] == "busy"
    assert _problem(client.post(url, json={"text": "hi", "txet": 1}), 400,
                    "unknown_field")["field"] == "txet"
    _problem(client.post(url, content=b"text=hi", headers={"content-type": "text/plain"}),
             415, "unsupported_media_type")
    assert _problem(client.post("/v1/sessions", json={"state": []}), 400,
                    "invalid_field")["field"] == "state"
    bad_state = client.post("/v1/sessions", json={"state": {"approval_threshold": "x"}})
    assert "approval_threshold" in _problem(bad_state, 400, "invalid_field")["detail"]
    _problem(client.post("/v1/sessions", json={"workflow": "nope"}), 404,
             "workflow_not_found")
    _problem(client.post("/v1/sessions", json={"id": ""}), 400, "invalid_session_id")
    _problem(client.post("/v1/sessions", json={"id": "a\x00b"}), 400, "invalid_session_id")
    _problem(client.post("/v1/sessions", json={"id": "x" * 2000}), 400,
             "invalid_session_id")
    _problem(client.get("/v1/sessions/" + "x" * 2000), 400, "invalid_session_id")
    # the body limit: declared, and streamed without a length
    huge = b'{"text": "' + b"a" * (1 << 20) + b'"}'
    _problem(client.post(url, content=huge, headers={"content-type": "application/json"}),
             413, "body_too_large")

    def chunks():  # no Content-Length: counted as it comes
        for _ in range(20):
            yield b"a" * (1 << 16)

    _problem(client.post(url, content=chunks(), headers={"content-type": "application/json"}),
             413, "body_too_large")
    # unknown things
    _problem(client.get("/v1/sessions/nobody"), 404, "session_not_found")
    _problem(client.post("/v1/sessions/nobody/messages", json={"text": "hi"}), 404,
             "session_not_found")
    _problem(client.post(f"/v1/sessions/{sid}/approvals/call_1", json={"decision": "approve"}),
             409, "no_pending_approval")
    _problem(client.get("/v1/nothing"), 404, "not_found")
    _problem(client.put("/v1/sessions"), 405, "method_not_allowed")
    _problem(client.get("/v1/sessions", params={"limit": "0"}), 400, "invalid_parameter")
    _problem(client.get("/v1/sessions", params={"limit": "ten"}), 400, "invalid_parameter")
    _problem(client.get("/v1/sessions", params={"cursor": "!!"}), 400, "invalid_parameter")
    _problem(client.get(f"/v1/sessions/{sid}/events", headers={"Last-Event-ID": "x"}), 400,
             "invalid_header")
    _problem(client.post(url, json={"text": "hi"}, headers={"Idempotency-Key": "é".encode()}), 400,
             "invalid_header")
    assert "Traceback" not in desk.log()


def test_openapi_document_equals_the_routes(client: httpx.Client) -> None:
    from openapi_spec_validator import validate
    from starlette.routing import Route

    from phaseflow.serve.app import routes

    document = client.get("/openapi.json").json()
    assert document["openapi"].startswith("3.1")
    validate(document)
    documented = {(path, method.upper()) for path, item in document["paths"].items()
                  for method in item}
    served = {(route.path, method) for route in routes() if isinstance(route, Route)
              for method in (route.methods or ()) if method != "HEAD"}
    assert documented == served


def test_one_log_line_per_request_and_turn(client: httpx.Client, desk: Server) -> None:
    sid = _new(client)
    client.post(f"/v1/sessions/{sid}/messages", json={"text": DEMO[0]})
    # a request's line is written when its response is over: a moment after the client
    # has read it
    deadline = time.monotonic() + 10
    while True:
        lines = [line for line in desk.log().splitlines() if f"session={sid}" in line]
        if sum(" request " in line for line in lines) >= 2 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert any(" request " in line and "path=/v1/sessions/" + sid + "/messages" in line
               and "status=200" in line for line in lines)
    assert any(" turn " in line and "turn=1" in line and "status=completed" in line
               for line in lines)
