"""A timer's turn as a person sees it: a real ``phaseflow serve`` (SQLite, firing due
timers) runs it with no user message, the HTTP API marks its input as the session's note
(``note: "timer"`` on the history entry and on ``turn_started``), and the web view, in a
real headless Chromium, labels it "Timer · turn 2" (a user's turn stays "User")."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx

from tests.support.browser import console_problems, texts, until
from tests.support.phaseflow_cli import cli_env
from tests.support.serve_server import start, stored_events

WORKFLOW = """\
phaseflow: 1
name: waiter
initial: wait
phases:
  wait:
    goal: Wait for the customer's answer.
    transitions:
      - to: follow_up
        when: seconds_in_phase >= 1
  follow_up:
    goal: Follow up with the customer.
    terminal: true
"""


def test_the_web_view_labels_a_timer_turn(tmp_path: Path, browser: Any) -> None:
    (tmp_path / "waiter.yaml").write_text(WORKFLOW, encoding="utf-8")
    (tmp_path / "script.yaml").write_text('- "Hello."\n- "Any news?"\n', encoding="utf-8")
    args = [str(tmp_path / "waiter.yaml"), "--provider", f"scripted:{tmp_path / 'script.yaml'}",
            "--store", str(tmp_path / "s.db"), "--timers", "0.2", "--grace", "1"]
    server = start(args, tmp_path / "serve.log", cwd=tmp_path, env=cli_env())
    try:
        with httpx.Client(base_url=server.base, timeout=60) as client:
            assert client.post("/v1/sessions", json={"id": "t1"}).status_code == 201
            sent = client.post("/v1/sessions/t1/messages", json={"text": "hi"},
                               headers={"Accept": "application/json"})
            assert sent.status_code == 200, sent.text
            deadline = time.monotonic() + 30
            while client.get("/v1/sessions/t1").json()["status"] != "finished":
                assert time.monotonic() < deadline, server.log()
                time.sleep(0.2)
            started = [e for e in stored_events(client, "t1") if e["type"] == "turn_started"]
            assert [e.get("note") for e in started] == [None, "timer"]
            history = client.get("/v1/sessions/t1/history").json()["messages"]
            users = [(m["content"], m.get("note")) for m in history if m["role"] == "user"]
            assert users[0] == ("hi", None) and users[1][1] == "timer"
            assert users[1][0].startswith("[timer]")
        browser.get(server.base + "/ui/sessions/t1")
        until(browser, lambda b: len(texts(b, "#conversation .entry.user .who")) == 2,
              "the two turns' inputs are not shown")
        assert texts(browser, "#conversation .entry.user .who") == [
            "User · turn 1", "Timer · turn 2"]
        assert texts(browser, "#conversation .entry.user.timer .who") == ["Timer · turn 2"]
        assert console_problems(browser) == []
    finally:
        server.stop()
