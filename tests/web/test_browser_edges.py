"""The web view shows a turn's edges: a cancelled turn that waits for its sync tool's
thread is ``cancelling`` (the session's status, and a line naming the tool) until the
thread ends, then ``cancelled``; a reply cut at the model's output limit and continued
is one assistant message marked ``continued``. A real headless Chromium against a real
``phaseflow serve`` running the edge desk (a real thread holds the turn)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium.webdriver.common.by import By

from tests.support.browser import artefacts_folder, console_problems, text_in, until, visible
from tests.support.edge_project import CONTINUED, write_edges
from tests.support.phaseflow_cli import cli_env
from tests.support.serve_server import Server, serving


@pytest.fixture(scope="module")
def edges(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Path]]:
    folder = tmp_path_factory.mktemp("edges")
    holds = folder / "holds"
    holds.mkdir()
    with serving(write_edges(folder), folder / "server.log", cwd=folder,
                 env=cli_env(EDGE_HOLDS=str(holds))) as server:
        yield server, holds


def _status(browser: Any) -> str | None:
    return browser.find_element(By.ID, "session-status").get_attribute("data-status")


def _send(client: httpx.Client, sid: str, text: str) -> None:
    answer = client.post(f"/v1/sessions/{sid}/messages", json={"text": text},
                         headers={"Prefer": "respond-async"})
    assert answer.status_code == 202, answer.text


def test_a_cancelling_turn_and_a_continued_reply_in_the_page(
        edges: tuple[Server, Path], browser: Any) -> None:
    server, holds = edges
    browser.set_window_size(1280, 1000)
    with httpx.Client(base_url=server.base, timeout=30) as client:
        sid = client.post("/v1/sessions", json={}).json()["id"]
        hold = holds / sid
        hold.write_text("held")
        browser.get(server.base + f"/ui/sessions/{sid}")
        visible(browser, "#session-status", "the session's status is not shown")
        _send(client, sid, "Do the slow thing")
        deadline = time.monotonic() + 30
        while not (holds / f"{sid}.started").exists():
            assert time.monotonic() < deadline, server.log()
            time.sleep(0.02)
        answer = client.post(f"/v1/sessions/{sid}/cancel")
        assert answer.json()["status"] == "cancelling", answer.text
        # the thread still runs: the page says the turn is stopping, and what for
        until(browser, lambda b: _status(b) == "cancelling",
              "the page never showed the session cancelling")
        text_in(browser, "#conversation li.entry.cancelling", "waiting for slow")
        line = browser.find_element(By.CSS_SELECTOR, "#conversation li.entry.cancelling")
        assert line.find_element(By.CSS_SELECTOR, ".badge.cancelling").text == "cancelling"
        text_in(browser, "#timeline", "waiting for slow")
        assert client.get(f"/v1/sessions/{sid}").json()["status"] == "cancelling"
        browser.save_screenshot(str(artefacts_folder() / "session-cancelling.png"))
        hold.unlink()  # the thread ends: the turn is cancelled
        until(browser, lambda b: _status(b) == "idle",
              "the page never showed the session idle after the cancel")
        text_in(browser, "#conversation", "turn 1 ended: cancelled")
        # a reply cut at the output limit, continued: one message, marked
        _send(client, sid, "Tell me a story")
        text_in(browser, "#conversation li.entry.assistant.continued", CONTINUED)
        reply = browser.find_element(By.CSS_SELECTOR, "#conversation li.entry.assistant")
        badge = reply.find_element(By.CSS_SELECTOR, ".badge.continued")
        assert badge.text == "continued"
        assert len(browser.find_elements(By.CSS_SELECTOR, "#conversation li.entry.assistant")
                   ) == 1
        text_in(browser, "#timeline", "reply cut at the output limit: continuation 1 of")
        browser.save_screenshot(str(artefacts_folder() / "session-continued.png"))
        # a reload reads the same from the stored events
        browser.refresh()
        text_in(browser, "#conversation li.entry.assistant.continued", CONTINUED)
        text_in(browser, "#conversation li.entry.cancelling", "waiting for slow")
    assert console_problems(browser) == []
