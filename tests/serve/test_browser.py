"""A real browser's ``EventSource`` (headless Chromium, driven by selenium) follows a
session's events across a server restart: it reconnects by itself with
``Last-Event-ID`` and ends up with every stored event exactly once, in order.

Skipped, with the reason, only when Chromium or its driver is missing and
``PHASEFLOW_REQUIRE_BROWSER`` is unset (CI sets it: there the test must run)."""

from __future__ import annotations

import os
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from tests.support.serve_server import env_for, start, write_desk

CHROMEDRIVER = os.environ.get("PHASEFLOW_CHROMEDRIVER", "/usr/bin/chromedriver")
BROWSERS = ("chromium", "chromium-browser", "google-chrome")


@pytest.fixture
def browser() -> Iterator[object]:
    binary = next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)
    if binary is None or not os.path.exists(CHROMEDRIVER):
        reason = f"no Chromium ({', '.join(BROWSERS)}) or no driver at {CHROMEDRIVER}"
        if os.environ.get("PHASEFLOW_REQUIRE_BROWSER"):
            pytest.fail(f"PHASEFLOW_REQUIRE_BROWSER is set but {reason}")
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                 "--disable-gpu"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


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
    env = env_for(DESK_DELAY="0")
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
