"""A real browser's ``EventSource`` (headless Chromium, driven by selenium) follows a
session's events across a server restart: it reconnects by itself with
``Last-Event-ID`` and ends up with every stored event exactly once, in order.

Skipped, with the reason, only when Chromium or its driver is missing and
``PHASEFLOW_REQUIRE_BROWSER`` is unset (CI sets it: there the test must run); the browser
is the ``browser`` fixture of :mod:`tests.support.serve_fixtures`."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from tests.support.phaseflow_cli import cli_env
from tests.support.serve_server import start, write_desk

FOLLOW = """
window.got = []; window.errors = 0;
const source = new EventSource(arguments[0]);
source.onmessage = (m) => window.got.push({id: m.lastEventId, data: JSON.parse(m.data)});
source.onerror = () => { window.errors += 1; };
window.source = source;
"""


def _got(driver, at_least: int, timeout: float = 60) -> list[dict]:
    deadline = time.monotonic() + timeout
    while True:
        got = [g for g in driver.execute_script("return window.got;") if g["data"]["seq"]]
        if len(got) >= at_least or time.monotonic() > deadline:
            return got
        time.sleep(0.1)


def test_an_event_source_resumes_across_a_restart(tmp_path: Path, browser) -> None:
    driver = browser
    args = write_desk(tmp_path)
    db = tmp_path / "desk.db"
    env = cli_env(DESK_DELAY="0")
    server = start([*args, "--store", str(db)], tmp_path / "a.log", cwd=tmp_path, env=env)
    port = urlsplit(server.base).port
    assert port is not None
    sid = f"s-{uuid.uuid4().hex[:8]}"
    try:
        with httpx.Client(base_url=server.base, timeout=30) as client:
            client.post("/v1/sessions", json={"id": sid})
            driver.get(f"{server.base}/healthz")  # the page's origin is the server's
            driver.execute_script(FOLLOW, f"/v1/sessions/{sid}/events")
            client.post(f"/v1/sessions/{sid}/messages", json={"text": "one"})
            first = _got(driver, 6)
    finally:
        assert server.stop() == 0  # closes the stream: the browser starts reconnecting
    assert first and first[-1]["data"]["type"] == "turn_finished"
    server = start([*args, "--store", str(db)], tmp_path / "b.log", cwd=tmp_path, env=env,
                   port=port)
    try:
        with httpx.Client(base_url=server.base, timeout=30) as client:
            client.post(f"/v1/sessions/{sid}/messages", json={"text": "two"})
            stored = client.get(f"/v1/sessions/{sid}/events",
                                params={"follow": "false"}).json()
            got = _got(driver, len(stored))
            assert driver.execute_script("return window.errors;") >= 1  # it reconnected
            assert [g["data"] for g in got] == stored  # none twice, none lost, in order
            assert [int(g["id"]) for g in got] == [e["seq"] for e in stored]
            assert "Last-Event-ID" not in server.log()  # (headers are never logged)
    finally:
        driver.execute_script("window.source.close();")
        server.stop()
