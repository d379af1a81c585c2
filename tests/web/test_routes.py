"""The web view's routes over HTTP (a real ``phaseflow serve``): the pages and static
files are served without a token and under a strict Content-Security-Policy, the API
behind them still wants one; the graph's JSON form and the describe route answer what
``phaseflow describe`` prints, and bad input gets a problem, never a traceback."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.phaseflow_cli import cli_env, run_phaseflow
from tests.support.serve_server import REFUND_DESK, ROOT, Server, serving

STATIC = ROOT / "phaseflow" / "serve" / "ui" / "static"
TOKEN = "web-view-token-0123456789"


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("web-token")
    with serving([*REFUND_DESK, "--store", "memory"], folder / "server.log",
                 env=cli_env(PHASEFLOW_TOKENS=TOKEN)) as server:
        yield server


def test_pages_open_without_a_token_and_the_api_keeps_it(guarded: Server) -> None:
    with httpx.Client(base_url=guarded.base, timeout=30) as c:
        for path in ("/ui/", "/ui/sessions/abc", "/ui/workflows/refund-desk"):
            page = c.get(path)
            assert page.status_code == 200, path
            assert page.headers["content-type"].startswith("text/html")
            csp = page.headers["content-security-policy"]
            assert "default-src 'none'" in csp and "script-src 'self'" in csp
            assert "connect-src 'self'" in csp
            assert "<script>" not in page.text and " style=" not in page.text
        script = c.get("/ui/static/session.js")
        assert script.status_code == 200
        assert script.headers["content-type"].startswith("text/javascript")
        assert c.get("/ui", follow_redirects=True).url.path == "/ui/"
        for path in ("/v1/sessions", "/v1/workflows/refund-desk/graph?format=json",
                     "/v1/workflows/refund-desk/describe"):
            denied = c.get(path)
            assert denied.status_code == 401, path
            assert denied.headers["content-type"] == "application/problem+json"
        allowed = c.get("/v1/workflows/refund-desk/describe",
                        headers={"Authorization": f"Bearer {TOKEN}"})
        assert allowed.status_code == 200
        missing = c.get("/ui/static/nothing.js")
        assert missing.status_code == 404
        assert c.get("/ui/static/%2e%2e/__init__.py").status_code == 404
    banner = "".join(guarded.banner)
    assert f"web view at {guarded.base}/ui/" in banner
    assert TOKEN not in guarded.log()


def test_the_graph_as_json(guarded: Server) -> None:
    with httpx.Client(base_url=guarded.base, timeout=30,
                      headers={"Authorization": f"Bearer {TOKEN}"}) as c:
        answer = c.get("/v1/workflows/refund-desk/graph", params={"format": "json"}).json()
    graph = answer["graph"]
    assert answer["format"] == "json" and graph["initial"] == "greet"
    names = [p["name"] for p in graph["phases"]]
    assert names[0] == "greet" and "refund" in names and "done" in names
    assert {p["name"] for p in graph["phases"] if p["terminal"]} >= {"done", "handoff"}
    edges = {(e["from"], e["to"]) for e in graph["edges"]}
    assert ("refund", "done") in edges and ("greet", "locate_order") in edges
    assert all(e["from"] in names and e["to"] in names for e in graph["edges"])


def _cli_describe(phase: str, state: dict[str, object]) -> str:
    done = run_phaseflow("describe", str(ROOT / "workflows" / "refund-desk.yaml"),
                         "--phase", phase, "--state", json.dumps(state), env=cli_env(),
                         cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize(("phase", "state"), [
    ("greet", {}),
    ("refund", {"amount": 120, "order_id": "O-9"}),
    ("locate_order", {"customer_id": "C-1", "customer": {"name": "Ada", "verified": True}}),
])
def test_describe_answers_as_the_command_prints(guarded: Server, phase: str,
                                                state: dict[str, object]) -> None:
    with httpx.Client(base_url=guarded.base, timeout=30,
                      headers={"Authorization": f"Bearer {TOKEN}"}) as c:
        answer = c.get("/v1/workflows/refund-desk/describe",
                       params={"phase": phase, "state": json.dumps(state)})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    printed = _cli_describe(phase, state)
    expected = (f"[Instructions]\n{body['instructions']}\n\n" if body["instructions"] else "")
    assert printed == expected + body["navigation"] + "\n"
    assert body["phase"] == phase


@pytest.mark.parametrize(("params", "status", "code", "words"), [
    ({"phase": "refnud"}, 404, "phase_not_found", "did you mean 'refund'"),
    ({"state": "[1, 2"}, 400, "invalid_parameter", "JSON object"),
    ({"state": "[1, 2]"}, 400, "invalid_parameter", "JSON object"),
    ({"state": '{"amount": NaN}'}, 400, "invalid_parameter", "JSON object"),
    ({"state": "[" * 5000 + "]" * 5000}, 400, "invalid_parameter", "JSON object"),
])
def test_describe_refuses_bad_input_clearly(guarded: Server, params: dict[str, str],
                                            status: int, code: str, words: str) -> None:
    with httpx.Client(base_url=guarded.base, timeout=30,
                      headers={"Authorization": f"Bearer {TOKEN}"}) as c:
        answer = c.get("/v1/workflows/refund-desk/describe", params=params)
        unknown = c.get("/v1/workflows/nope/describe")
    assert answer.status_code == status, answer.text
    assert answer.json()["code"] == code and words in answer.json()["detail"]
    assert unknown.status_code == 404 and unknown.json()["code"] == "workflow_not_found"
    assert "Traceback" not in guarded.log()


def test_the_pages_fetch_nothing_from_elsewhere() -> None:
    """Every URL in the shipped files is the server's own (the SVG namespace is a name,
    never fetched); no inline handler, no eval, no innerHTML."""
    files = sorted(p for p in STATIC.iterdir() if p.is_file())
    assert {p.name for p in files} >= {"index.html", "session.html", "workflow.html",
                                       "common.js", "graph.js", "ui.css"}
    for path in files:
        text = path.read_text(encoding="utf-8")
        urls = set(re.findall(r"(?:https?:)?//[A-Za-z0-9.-]+\.[a-z]{2,}[^\s\"'`)]*", text))
        assert urls <= {"http://www.w3.org/2000/svg"}, (path.name, urls)
        assert not re.search(r"\bon[a-z]+=", text), path.name
        assert ".innerHTML" not in text and "eval(" not in text, path.name


def test_package_data_ships_the_static_files() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert '"serve/ui/static/*"' in pyproject
    assert Path(STATIC / "favicon.svg").exists()


@pytest.mark.parametrize("path", ["/ui/../v1/sessions", "/ui/%2e%2e/v1/sessions",
                                  "/ui/static/../../../serve/app.py",
                                  "/ui/static/%2e%2e/__init__.py"])
def test_the_open_pages_open_nothing_else(guarded: Server, path: str) -> None:
    """The token-free ``/ui/`` prefix reaches neither the API nor a file outside the
    static folder, however the path is written (sent as is: no client normalizes it)."""
    import http.client
    from urllib.parse import urlsplit

    address = urlsplit(guarded.base)
    connection = http.client.HTTPConnection(address.hostname or "", address.port, timeout=30)
    try:
        connection.request("GET", path)
        answer = connection.getresponse()
        body = answer.read()
    finally:
        connection.close()
    assert answer.status == 404, (path, answer.status)
    assert b"sessions" not in body and b"import" not in body
