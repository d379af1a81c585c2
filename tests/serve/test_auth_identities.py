"""Who may see which conversation, against a real ``phaseflow serve --auth MODULE:ATTR``
with real HTTP requests: two identities (and an operator) on one server; every route of
a session tried by the identity that does not own it answers 404 as for a missing id,
and nothing of the session is in any answer (lists, events, AG-UI, the web view)."""

from __future__ import annotations

import json
import re
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.desk_project import PAY_TOOL, desk_workflow
from tests.support.phaseflow_cli import PHASEFLOW, ROOT, cli_env
from tests.support.serve_server import Server, start


def _doc_block(first_line: str) -> str:
    """The Python block of docs/serve.md that starts with ``first_line``."""
    text = (ROOT / "docs" / "serve.md").read_text(encoding="utf-8")
    [block] = [b for b in re.findall(r"```python\n(.*?)```", text, re.S)
               if b.startswith(first_line)]
    return block


#: the hook as docs/serve.md writes it: an API key in the header x-api-key
AUTH = _doc_block("# host_auth.py")

TOOLS = "from phaseflow.tools import tool\n\n\n" + PAY_TOOL + "\n\nTOOLS = [pay]\n"

SCRIPT = """\
- calls:
    - pay: {amount: 5}
- "Paid."
- "Another reply."
- "A reply to bob."
- "More."
- "More."
"""

SECRET = "my card ends in 4242"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("auth")
    (folder / "desk.yaml").write_text(desk_workflow("", "[pay]"), encoding="utf-8")
    (folder / "desk_tools.py").write_text(TOOLS, encoding="utf-8")
    (folder / "host_auth.py").write_text(AUTH, encoding="utf-8")
    (folder / "script.yaml").write_text(SCRIPT, encoding="utf-8")
    running = start([str(folder / "desk.yaml"), "--provider",
                     f"scripted:{folder / 'script.yaml'}", "--tools", "desk_tools:TOOLS",
                     "--store", str(folder / "sessions.db"), "--auth", "host_auth:identity"],
                    folder / "server.log", cwd=folder)
    yield running
    running.stop()


def _client(server: Server, key: str | None) -> httpx.Client:
    headers = {"x-api-key": key} if key else {}
    return httpx.Client(base_url=server.base, headers=headers, timeout=60)


def _not_found(answer: httpx.Response, sid: str) -> None:
    assert answer.status_code == 404, (answer.request.url, answer.text)
    assert answer.headers["content-type"].startswith("application/problem+json")
    assert answer.json()["code"] == "session_not_found"
    assert SECRET not in answer.text


def test_a_request_without_an_identity_is_refused(server: Server) -> None:
    with _client(server, None) as anonymous, _client(server, "key-nobody") as stranger:
        for client in (anonymous, stranger):
            answer = client.get("/v1/sessions")
            assert answer.status_code == 401
            assert answer.headers["content-type"].startswith("application/problem+json")
            assert answer.json()["code"] == "unauthorized"
            assert "www-authenticate" in answer.headers
        assert anonymous.get("/healthz").status_code == 200  # the probes stay open
    assert any("checked by the auth hook host_auth:identity" in line
               for line in server.banner)


def test_another_identity_reaches_nothing_of_a_session(server: Server) -> None:
    with _client(server, "key-of-ada") as ada, _client(server, "key-of-bob") as bob, \
            _client(server, "key-of-ops") as ops:
        made = ada.post("/v1/sessions", json={})
        assert made.status_code == 201, made.text
        sid = made.json()["id"]
        waiting = ada.post(f"/v1/sessions/{sid}/messages", json={"text": SECRET}).json()
        assert waiting["status"] == "awaiting_approval", waiting
        call = waiting["pending_approval"]["call_id"]
        missing = f"no-such-{uuid.uuid4().hex[:6]}"
        base = f"/v1/sessions/{sid}"
        # every route of ada's session, as bob: what a missing session answers
        for target in (sid, missing):
            url = f"/v1/sessions/{target}"
            _not_found(bob.get(url), target)
            _not_found(bob.get(f"{url}/history"), target)
            _not_found(bob.get(f"{url}/events", params={"follow": "false"}), target)
            _not_found(bob.get(f"{url}/events"), target)  # the stream is never opened
            _not_found(bob.post(f"{url}/messages", json={"text": "hi"}), target)
            _not_found(bob.post(f"{url}/messages", json={"text": "hi"},
                                headers={"Idempotency-Key": "k1"}), target)
            _not_found(bob.post(f"{url}/approvals/{call}", json={"decision": "approve"}),
                       target)
            _not_found(bob.post(f"{url}/cancel"), target)
            _not_found(bob.get(f"{url}/trust"), target)
            _not_found(bob.delete(f"{url}/trust/pay"), target)
            _not_found(bob.delete(url), target)
        # the AG-UI thread of ada's session
        run = bob.post("/v1/ag-ui/desk", json={
            "threadId": sid, "runId": "r1",
            "messages": [{"id": "1", "role": "user", "content": "hi"}]})
        _not_found(run, sid)
        # bob's list holds none of ada's sessions; the web view's page holds no data
        listed = bob.get("/v1/sessions", params={"limit": 100}).json()
        assert sid not in json.dumps(listed)
        page = bob.get(f"/ui/sessions/{sid}")
        assert page.status_code == 200 and SECRET not in page.text
        # nothing bob did reached the session: still waiting, one message
        assert ada.get(base).json()["status"] == "awaiting_approval"
        history = ada.get(f"{base}/history").json()["messages"]
        assert [m["content"] for m in history if m["role"] == "user"] == [SECRET]
        # ada: her own session, every route
        assert sid in [s["id"] for s in ada.get("/v1/sessions").json()["sessions"]]
        assert any(e["type"] == "approval_requested" for e in ada.get(
            f"{base}/events", params={"follow": "false"}).json())
        decided = ada.post(f"{base}/approvals/{call}", json={"decision": "approve"})
        assert decided.status_code == 200 and decided.json()["status"] == "completed"
        # the operator sees and acts on every session
        assert sid in [s["id"] for s in ops.get("/v1/sessions",
                                                params={"limit": 100}).json()["sessions"]]
        assert SECRET in ops.get(f"{base}/history").text
        late = ops.post(f"{base}/messages", json={"text": "ops here"})  # paid: finished
        assert late.status_code == 409 and late.json()["code"] == "session_finished"
        # and a session bob makes is his alone
        mine = bob.post("/v1/sessions", json={}).json()["id"]
        _not_found(ada.get(f"/v1/sessions/{mine}"), mine)
        assert [s["id"] for s in bob.get("/v1/sessions").json()["sessions"]] == [mine]
        # an id already taken by another: refused as existing, never handed over
        taken = bob.post("/v1/sessions", json={"id": sid})
        assert taken.status_code == 409 and SECRET not in taken.text
        _not_found(bob.get(base), sid)
        assert ops.delete(base).status_code == 204


def test_an_agui_thread_belongs_to_whoever_started_it(server: Server) -> None:
    thread = f"t-{uuid.uuid4().hex[:8]}"
    body = {"threadId": thread, "runId": "r1",
            "messages": [{"id": "1", "role": "user", "content": SECRET}]}
    with _client(server, "key-of-bob") as bob, _client(server, "key-of-ada") as ada:
        with bob.stream("POST", "/v1/ag-ui/desk", json=body) as run:
            assert run.status_code == 200
            assert any("RUN_FINISHED" in line or "RUN_ERROR" in line
                       for line in run.iter_lines())
        assert bob.get(f"/v1/sessions/{thread}").status_code == 200
        _not_found(ada.post("/v1/ag-ui/desk", json={**body, "runId": "r2"}), thread)
        _not_found(ada.get(f"/v1/sessions/{thread}/history"), thread)
        assert thread not in ada.get("/v1/sessions", params={"limit": 100}).text


def test_a_bad_auth_option_is_refused_at_start(tmp_path: Path) -> None:
    import subprocess

    (tmp_path / "desk.yaml").write_text(desk_workflow("", "[pay]"), encoding="utf-8")
    (tmp_path / "desk_tools.py").write_text(TOOLS, encoding="utf-8")
    (tmp_path / "script.yaml").write_text(SCRIPT, encoding="utf-8")
    (tmp_path / "host_auth.py").write_text("auth = 42\n\ndef none():\n    return None\n",
                                           encoding="utf-8")
    for spec, said in (("host_auth:auth", "must be a function"),
                       ("host_auth:none", "one argument")):
        done = subprocess.run([*PHASEFLOW, "serve", str(tmp_path / "desk.yaml"), "--tools",
                               "desk_tools:TOOLS", "--provider", "scripted:script.yaml",
                               "--auth", spec, "--port", "0"], cwd=tmp_path,
                              env=cli_env(), capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and said in done.stderr, done.stderr
        assert "Traceback" not in done.stderr


def test_mounted_in_a_host_application_as_the_docs_write_it(tmp_path: Path) -> None:
    """docs/serve.md's host application, run by uvicorn as it is: the host's own
    authentication middleware finds the user, phaseflow's hook turns it into an
    identity, and one user's session is another's 404."""
    import signal
    import subprocess
    import threading
    import time

    (tmp_path / "host_app.py").write_text(_doc_block("# host_app.py"), encoding="utf-8")
    for shared in ("workflows", "examples"):  # the paths the example names, relative
        (tmp_path / shared).symlink_to(ROOT / shared)
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "host_app:app", "--port", "0"], cwd=tmp_path,
        env=cli_env(), stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    found: list[str] = []

    def read() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            found.append(line)
    threading.Thread(target=read, daemon=True).start()
    deadline = time.monotonic() + 60
    base = None
    while base is None and time.monotonic() < deadline and process.poll() is None:
        hit = re.search(r"running on (http://\S+)", "".join(found))
        base = hit.group(1) if hit else None
        time.sleep(0.05)
    try:
        assert base is not None, "".join(found)
        keys = {name: {"x-api-key": f"key-of-{name}"} for name in ("ada", "bob", "ops")}
        with httpx.Client(base_url=base, timeout=60) as client:
            assert client.get("/me", headers=keys["ada"]).json() == {"user": "ada"}
            assert client.get("/v1/sessions").status_code == 401
            assert client.get("/healthz").status_code == 200
            sid = client.post("/v1/sessions", json={}, headers=keys["ada"]).json()["id"]
            said = client.post(f"/v1/sessions/{sid}/messages", headers=keys["ada"],
                               json={"text": "Hi, I'm ada@example.com"})
            assert said.status_code == 200 and said.json()["status"] == "completed"
            _not_found(client.get(f"/v1/sessions/{sid}/history", headers=keys["bob"]), sid)
            assert client.get("/v1/sessions", headers=keys["bob"]).json()["sessions"] == []
            assert client.get(f"/v1/sessions/{sid}", headers=keys["ops"]).status_code == 200
    finally:
        process.send_signal(signal.SIGTERM)
        # uvicorn stops gracefully, then raises the signal again: -SIGTERM
        assert process.wait(60) in (0, -signal.SIGTERM), "".join(found)
    log = "".join(found)
    assert "Application startup complete" in log  # phaseflow's lifespan ran in the host's
    assert "Application shutdown complete" in log and "Traceback" not in log
