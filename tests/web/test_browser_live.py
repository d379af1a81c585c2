"""The web view's live stream in a real headless Chromium: with bearer tokens (asked
once, kept for the tab, the event stream read with fetch() and the header), and across
a cut connection (resumed from the last seq: no event missed, none shown twice)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

from tests.support.browser import (
    console_problems,
    requested_urls,
    text_in,
    texts,
    until,
    visible,
)
from tests.support.phaseflow_cli import cli_env
from tests.support.serve_server import DEMO, Server, new_session, refund_desk
from tests.support.tcp_proxy import Relay

TOKEN = "web-view-browser-token-42"


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with refund_desk(tmp_path_factory.mktemp("web-live"),
                     env=cli_env(PHASEFLOW_TOKENS=TOKEN)) as server:
        yield server


def test_with_a_token_asked_once(guarded: Server, browser: Any) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=guarded.base, timeout=60, headers=auth) as client:
        sid = new_session(client, DEMO, workflow=None)["id"]
        browser.get(guarded.base + "/ui/")
        field = visible(browser, "#token-input", "the page did not ask for the token")
        field.send_keys(TOKEN)
        browser.find_element(By.CSS_SELECTOR, "#token-form button").click()
        link = visible(browser, f'tr[data-session="{sid}"] a', "the list did not load")
        assert not browser.find_element(By.ID, "token-form").is_displayed()
        link.click()  # same tab: the token is kept, not asked again
        visible(browser, '#graph [aria-current="step"]', "no current phase")
        text_in(browser, "#conversation", DEMO[2])
        assert not browser.find_element(By.ID, "token-form").is_displayed()
        visible(browser, "#approve", "no Approve button").send_keys(Keys.ENTER)  # keyboard
        text_in(browser, "#conversation", "Done: refund R-77")
        assert client.get(f"/v1/sessions/{sid}").json()["status"] == "finished"
    assert browser.execute_script("return sessionStorage.getItem('phaseflow.token')") == TOKEN
    foreign = [u for u in requested_urls(browser) if not u.startswith(guarded.base + "/")
               and not u.startswith("data:")]
    assert foreign == []
    # the first API call of the tab was refused (401) before the token was typed
    problems = [p for p in console_problems(browser) if "401" not in p["message"]]
    assert problems == [], problems
    assert TOKEN not in guarded.log()
    browser.execute_script("sessionStorage.clear()")


def test_a_cut_stream_resumes_without_loss_or_repeat(desk: Server, client: httpx.Client,
                                                     browser: Any) -> None:
    from urllib.parse import urlsplit

    address = urlsplit(desk.base)
    relay = Relay((address.hostname or "127.0.0.1", address.port or 80))
    try:
        sid = new_session(client, DEMO[:1], workflow=None)["id"]
        browser.get(relay.base + f"/ui/sessions/{sid}")
        text_in(browser, "#conversation", "what was the name of your first pet")
        text_in(browser, "#stream-state", "live")
        relay.cut()  # the stream is cut; reconnecting is refused while the turn runs
        text_in(browser, "#stream-state", "reconnecting")
        turn = client.post(f"/v1/sessions/{sid}/messages", json={"text": DEMO[1]},
                           headers={"Accept": "application/json"})
        assert turn.status_code == 200
        relay.listen()
        text_in(browser, "#conversation", "you're verified")
        text_in(browser, "#stream-state", "live")
        visible(browser, '#graph [data-phase="locate_order"][aria-current="step"]',
             "the phase change made while cut off is not shown")
    finally:
        relay.close()
    users = texts(browser, ".entry.user")
    assert len(users) == 2 and DEMO[1] in users[1], users
    replies = texts(browser, ".entry.assistant")
    assert len(replies) == 2, replies
    calls = texts(browser, ".entry.tool-call")
    assert len(calls) == 3, calls  # lookup_customer, verify_identity, orders.search
    stored = client.get(f"/v1/sessions/{sid}/events", params={"follow": "false"}).json()
    changes = [e for e in stored if e["type"] in ("phase_changed", "state_changed")]
    shown = browser.find_elements(By.CSS_SELECTOR, "#timeline .step.phase, #timeline .step.state")
    assert len(shown) == len(changes) >= 2
    # the cut stream and the refused reconnections are network errors the browser logs;
    # the page's script itself reported nothing
    problems = [p for p in console_problems(browser) if p.get("source") != "network"]
    assert problems == [], problems


def test_hostile_text_is_shown_as_text(desk: Server, client: httpx.Client,
                                       browser: Any) -> None:
    hostile = '<img src="/ui/static/x.png" onerror="window.__owned = 1"><b>bold</b>'
    sid = new_session(client, [hostile], workflow=None)["id"]
    browser.get(desk.base + f"/ui/sessions/{sid}")
    text_in(browser, "#conversation", hostile)
    assert browser.find_elements(By.CSS_SELECTOR, "#conversation img, #conversation b") == []
    assert browser.execute_script("return window.__owned === undefined")
    assert not any(u.endswith("/x.png") for u in requested_urls(browser))
    # a mistyped address: a clear message, no script error
    browser.get(desk.base + "/ui/sessions/no%E0such")
    text_in(browser, "#page-error", "No session")
    problems = [p for p in console_problems(browser) if p.get("source") != "network"]
    assert problems == [], problems


def test_reject_with_a_reason(desk: Server, client: httpx.Client, browser: Any) -> None:
    sid = new_session(client, DEMO, workflow=None)["id"]
    browser.get(desk.base + f"/ui/sessions/{sid}")
    visible(browser, "#reject", "no Reject button")
    browser.find_element(By.ID, "approval-note").send_keys("amount looks wrong")
    browser.find_element(By.ID, "reject").click()
    text_in(browser, "#conversation", "amount looks wrong")
    visible(browser, ".entry.tool-result .badge.rejected", "the call is not shown rejected")
    until(browser, lambda b: b.find_element(By.ID, "session-status")
           .get_attribute("data-status") != "awaiting_approval", "still awaiting approval")
    assert not browser.find_element(By.ID, "approval").is_displayed()
    stored = client.get(f"/v1/sessions/{sid}/events", params={"follow": "false"}).json()
    [decided] = [e for e in stored if e["type"] == "approval_resolved"]
    assert decided["decision"] == "reject" and decided["reason"] == "amount looks wrong"
    assert not [e for e in stored if e["type"] == "state_changed"
                and "refund_id" in e["keys"]], "the rejected refund ran"


def test_pages_left_behind_free_their_streams(desk: Server, client: httpx.Client,
                                              browser: Any) -> None:
    """A browser gives a server six connections. A page left behind must end its event
    stream at once (the back-forward cache would keep it open): found by measuring,
    when approving on the sixth session page opened in a row waited 57 s for a
    connection. Each stream left behind is over (the server logs a request when its
    response ends) soon after the next page is open."""
    sids = [new_session(client, [], workflow=None)["id"] for _ in range(8)]
    for visit, sid in enumerate(sids):
        browser.get(desk.base + f"/ui/sessions/{sid}")
        text_in(browser, "#stream-state", "live")
        if visit:
            line = f"path=/v1/sessions/{sids[visit - 1]}/events"
            WebDriverWait(browser, 10, poll_frequency=0.1).until(
                lambda _b, line=line: line in desk.log(),
                f"visit {visit + 1}: the stream of the page left behind is still open")
