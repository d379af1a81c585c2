"""The web view in a real headless Chromium against a real ``phaseflow serve``: an
operator lists the sessions (a new one appears without a reload), opens one waiting for
an approval (its phase marked on the graph), approves it with a click and sees the turn
finish live; the workflow page says what the model is told per phase. No request leaves
the server's origin and the console stays clean. Screenshots of the three pages go to
``$PHASEFLOW_ARTEFACTS`` (default ``build/screenshots/``)."""

from __future__ import annotations

from typing import Any

import httpx
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select

from tests.support.browser import (
    artefacts_folder,
    attributes,
    console_problems,
    requested_urls,
    text_in,
    texts,
    until,
    visible,
)
from tests.support.serve_server import DEMO, Server, new_session


def _same_origin(browser: Any, base: str) -> None:
    urls = requested_urls(browser)
    assert urls, "the performance log saw no request at all"
    foreign = [u for u in urls if not (u.startswith(base + "/") or u.startswith("data:"))]
    assert foreign == [], f"requests left the server's origin {base}: {foreign}"


def _clean_console(browser: Any) -> None:
    problems = console_problems(browser)
    assert problems == [], f"the browser console reported: {problems}"


def test_follow_and_approve_a_live_conversation(desk: Server, client: httpx.Client,
                                                browser: Any) -> None:
    shots = artefacts_folder()
    browser.set_window_size(1280, 1000)
    waiting = new_session(client, DEMO)
    assert waiting["status"] == "awaiting_approval", waiting
    sid = waiting["id"]
    phase = client.get(f"/v1/sessions/{sid}").json()["phase"]
    pending = waiting["pending_approval"]
    assert pending["name"] == "payments.issue_refund"

    # the list: the waiting session, then a second one started meanwhile appears by itself
    browser.get(desk.base + "/ui/")
    visible(browser, f'tr[data-session="{sid}"][data-status="awaiting_approval"]',
         "the waiting session is not in the list")
    browser.execute_script("window.__sameDocument = 'list';")
    second = new_session(client, DEMO[:1])
    visible(browser, f'tr[data-session="{second["id"]}"]', "the new session never appeared")
    assert browser.execute_script("return window.__sameDocument") == "list", "the page reloaded"
    rows = attributes(browser, "#sessions tbody tr", "data-session")
    assert rows[0] == second["id"], "not newest first"
    Select(browser.find_element(By.ID, "filter-status")).select_by_value("awaiting_approval")
    until(browser, lambda b: attributes(b, "#sessions tbody tr", "data-session") == [sid],
           "the status filter did not keep only the waiting session")
    browser.save_screenshot(str(shots / "sessions.png"))

    # the session: the conversation so far, the current phase marked, the pending call
    browser.get(desk.base + f"/ui/sessions/{sid}")
    current = visible(browser, f'#graph [data-phase="{phase}"][aria-current="step"]',
                   f"phase {phase} is not marked current on the graph")
    assert current.tag_name == "g"
    assert len(browser.find_elements(By.CSS_SELECTOR, '#graph [aria-current="step"]')) == 1
    visited = set(attributes(browser, "#graph .phase.visited", "data-phase"))
    assert {"greet", "locate_order", phase} <= visited, visited
    text_in(browser, "#conversation", DEMO[2])
    text_in(browser, "#conversation", "crm.lookup_customer")
    text_in(browser, "#timeline", "state written by")
    approval = visible(browser, "#approval", "no pending approval shown")
    assert "payments.issue_refund" in approval.text
    assert '"order_id": "O-9"' in browser.find_element(By.ID, "approval-arguments").text
    browser.save_screenshot(str(shots / "session.png"))

    browser.execute_script("window.__sameDocument = 'session';")
    browser.find_element(By.ID, "approve").click()
    text_in(browser, "#conversation", "Done: refund R-77")
    visible(browser, '#graph [data-phase="done"][aria-current="step"]',
         "the final phase is not marked current")
    until(browser, lambda b: b.find_element(By.ID, "session-status")
           .get_attribute("data-status") == "finished", "the status never became finished")
    text_in(browser, "#conversation", "payments.issue_refund")
    text_in(browser, "#timeline", "approval")
    assert browser.execute_script("return window.__sameDocument") == "session", "reloaded"
    assert not browser.find_element(By.ID, "approval").is_displayed()
    # each event once: one reply of the last turn, one user message per turn
    replies = texts(browser, ".entry.assistant")
    assert sum("Done: refund R-77" in r for r in replies) == 1, replies
    users = browser.find_elements(By.CSS_SELECTOR, ".entry.user")
    assert len(users) == len(DEMO)
    stored = client.get(f"/v1/sessions/{sid}").json()
    assert stored["status"] == "finished" and stored["pending_approval"] is None
    browser.save_screenshot(str(shots / "session-finished.png"))

    # readable at 400 px: nothing wider than the window
    browser.set_window_size(400, 900)
    until(browser, lambda b: b.execute_script(
        "return document.documentElement.scrollWidth <= window.innerWidth"),
        "the session page scrolls sideways at 400 px")
    browser.save_screenshot(str(shots / "session-400px.png"))
    browser.set_window_size(1280, 1000)

    _same_origin(browser, desk.base)
    _clean_console(browser)


def test_the_workflow_page_says_what_the_model_is_told(desk: Server, browser: Any) -> None:
    shots = artefacts_folder()
    browser.set_window_size(1280, 1000)
    browser.get(desk.base + "/ui/workflows/refund-desk")
    text_in(browser, "#describe-navigation", "Current phase: greet")
    node = visible(browser, '#graph [data-phase="refund"]', "no refund phase on the graph")
    node.send_keys(Keys.ENTER)  # keyboard: a phase node is focusable and answers Enter
    text_in(browser, "#describe-navigation", "Current phase: refund")
    state = browser.find_element(By.ID, "describe-state")
    state.clear()
    state.send_keys('{"amount": 120, "order_id": "O-9"}')
    browser.find_element(By.CSS_SELECTOR, "#describe-form button[type=submit]").click()
    text_in(browser, "#describe-instructions", "Refund 120 for order O-9")
    assert browser.find_element(
        By.CSS_SELECTOR, '#graph [data-phase="refund"][aria-current="step"]')
    browser.save_screenshot(str(shots / "workflow.png"))
    state.clear()
    state.send_keys("[1, 2")
    browser.find_element(By.CSS_SELECTOR, "#describe-form button[type=submit]").click()
    text_in(browser, "#page-error", "The state is not JSON")
    _same_origin(browser, desk.base)
    _clean_console(browser)
