"""The example chat page (``examples/agui-chat/``, an ES module on the official AG-UI
client, no bundler) in a real headless Chromium, served by ``phaseflow serve --app``
with the client's ``node_modules`` beside it: a conversation with a text reply, a tool
call that writes state, a failing tool, and an approval approved with a click. Every
module loads from the server's origin, the console stays clean, and what the page shows
is what the server stored."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium.webdriver.common.by import By

from tests.support.agui_client import need_client, node_modules
from tests.support.browser import (
    artefacts_folder,
    console_problems,
    requested_urls,
    text_in,
    texts,
    until,
    visible,
)
from tests.support.chat_project import MESSAGES, write_chat
from tests.support.phaseflow_cli import ROOT, cli_env
from tests.support.serve_server import Server, serving

EXAMPLE = ROOT / "examples" / "agui-chat"


@pytest.fixture(scope="module")
def chat_page(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The chat desk served with the example as its ``--app``, the installed client's
    ``node_modules`` linked in (as ``npm install`` in the example's folder would put
    it)."""
    need_client()
    folder = tmp_path_factory.mktemp("chat-page")
    app = folder / "app"
    shutil.copytree(EXAMPLE, app, ignore=shutil.ignore_patterns("node_modules"))
    (app / "node_modules").symlink_to(node_modules(), target_is_directory=True)
    with serving([*write_chat(folder), "--app", str(app)], folder / "server.log",
                 cwd=folder, env=cli_env(CHAT_HOLDS=str(folder / "holds"))) as server:
        yield server


def _say(browser: Any, text: str) -> None:
    field = browser.find_element(By.ID, "text")
    field.send_keys(text)
    browser.find_element(By.ID, "send").click()


def test_a_conversation_with_an_approval_in_the_chat_page(chat_page: Server,
                                                          browser: Any) -> None:
    base = chat_page.base
    requested_urls(browser)  # forget what earlier tests asked for
    browser.get(f"{base}/app/?workflow=chat-desk")
    until(browser, lambda d: d.execute_script("return document.body.dataset.ready"),
          "the page's module never ran (an import did not resolve?)")
    _say(browser, MESSAGES[0])
    text_in(browser, "#log", "Hello! What can I do for you?")
    _say(browser, MESSAGES[1])
    text_in(browser, "#log", "Noted, though the checker failed.")
    text_in(browser, "#state", '"note": "the kettle is broken"')
    assert "→ check failed: RuntimeError: the checker is out of order" in texts(
        browser, "#log li[data-role=tool]")
    _say(browser, MESSAGES[2])
    visible(browser, "#approval", "the approval was never asked for")
    text_in(browser, "#approval-text", "pay needs approval")
    browser.save_screenshot(str(artefacts_folder() / "agui-chat-approval.png"))
    browser.find_element(By.ID, "approve").click()
    text_in(browser, "#log", "Understood.")
    text_in(browser, "#state", '"paid": true')
    until(browser, lambda d: not d.find_element(By.ID, "approval").is_displayed(),
          "the approval stayed shown after the decision")
    assert browser.find_element(By.ID, "status").text == ""
    # what the page shows is what the server stored
    thread = browser.execute_script(
        "return document.getElementById('thread').textContent.split('thread ')[1]")
    with httpx.Client(base_url=base, timeout=30) as client:
        stored = client.get(f"/v1/sessions/{thread}").json()
        history = client.get(f"/v1/sessions/{thread}/history").json()["messages"]
    assert stored["status"] == "finished" and stored["state"] == {
        "note": "the kettle is broken", "paid": True}
    shown = texts(browser, "#log li")
    assert len(shown) == len(history)
    for text, message in zip(shown, history, strict=True):
        assert (message["content"] or "") in text
    # every module from the server's origin (node_modules included), a clean console
    urls = requested_urls(browser)
    assert any("/app/node_modules/@ag-ui/client/" in u for u in urls), urls
    assert [u for u in urls if not u.startswith(base + "/")] == []
    problems = console_problems(browser)
    assert problems == [], f"the browser console reported: {problems}"


def test_the_example_is_what_the_test_serves() -> None:
    """The page's import map names files the client's installed packages have."""
    need_client()
    import json
    import re

    html = (EXAMPLE / "index.html").read_text(encoding="utf-8")
    imports = json.loads(re.search(r'<script type="importmap">(.*?)</script>', html,
                                   re.S).group(1))["imports"]  # type: ignore[union-attr]
    for target in imports.values():
        path = Path(target.removeprefix("./"))
        base = node_modules().parent if path.parts[0] == "node_modules" else EXAMPLE
        assert (base / path).is_file(), target
