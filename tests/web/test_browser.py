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
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import Select, WebDriverWait

from tests.support.browser import artefacts_folder, console_problems, requested_urls
from tests.support.serve_server import DEMO, Server

WAIT = 60


def _until(browser: Any, condition: Any, message: str) -> Any:
    return WebDriverWait(browser, WAIT, poll_frequency=0.1).until(condition, message)


def _css(browser: Any, selector: str, message: str) -> Any:
    return _until(browser, ec.visibility_of_element_located((By.CSS_SELECTOR, selector)),
                  message)


def _text_in(browser: Any, selector: str, text: str) -> Any:
    return _until(browser, ec.text_to_be_present_in_element((By.CSS_SELECTOR, selector), text),
                  f"{text!r} never appeared in {selector}")


def _new_session(client: httpx.Client, messages: list[str]) -> dict[str, Any]:
    created = client.post("/v1/sessions", json={"workflow": "refund-desk"})
    assert created.status_code == 201, created.text
    sid = created.json()["id"]
    outcome: dict[str, Any] = {}
    for text in messages:
        answer = client.post(f"/v1/sessions/{sid}/messages", json={"text": text},
                             headers={"Accept": "application/json"})
        assert answer.status_code == 200, answer.text
        outcome = answer.json()
    return {"id": sid, **outcome}


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
    waiting = _new_session(client, DEMO)
    assert waiting["status"] == "awaiting_approval", waiting
    sid = waiting["id"]
    phase = client.get(f"/v1/sessions/{sid}").json()["phase"]
    pending = waiting["pending_approval"]
    assert pending["name"] == "payments.issue_refund"

    # the list: the waiting session, then a second one started meanwhile appears by itself
    browser.get(desk.base + "/ui/")
    _css(browser, f'tr[data-session="{sid}"][data-status="awaiting_approval"]',
         "the waiting session is not in the list")
    browser.execute_script("window.__sameDocument = 'list';")
    second = _new_session(client, DEMO[:1])
    _css(browser, f'tr[data-session="{second["id"]}"]', "the new session never appeared")
    assert browser.execute_script("return window.__sameDocument") == "list", "the page reloaded"
    rows = browser.find_elements(By.CSS_SELECTOR, "#sessions tbody tr")
    assert rows[0].get_attribute("data-session") == second["id"], "not newest first"
    Select(browser.find_element(By.ID, "filter-status")).select_by_value("awaiting_approval")
    _until(browser, lambda b: [r.get_attribute("data-session") for r in
                               b.find_elements(By.CSS_SELECTOR, "#sessions tbody tr")] == [sid],
           "the status filter did not keep only the waiting session")
    browser.save_screenshot(str(shots / "sessions.png"))

    # the session: the conversation so far, the current phase marked, the pending call
    browser.get(desk.base + f"/ui/sessions/{sid}")
    current = _css(browser, f'#graph [data-phase="{phase}"][aria-current="step"]',
                   f"phase {phase} is not marked current on the graph")
    assert current.tag_name == "g"
    assert len(browser.find_elements(By.CSS_SELECTOR, '#graph [aria-current="step"]')) == 1
    visited = {g.get_attribute("data-phase")
               for g in browser.find_elements(By.CSS_SELECTOR, "#graph .phase.visited")}
    assert {"greet", "locate_order", phase} <= visited, visited
    _text_in(browser, "#conversation", DEMO[2])
    _text_in(browser, "#conversation", "crm.lookup_customer")
    _text_in(browser, "#timeline", "state written by")
    approval = _css(browser, "#approval", "no pending approval shown")
    assert "payments.issue_refund" in approval.text
    assert '"order_id": "O-9"' in browser.find_element(By.ID, "approval-arguments").text
    browser.save_screenshot(str(shots / "session.png"))

    browser.execute_script("window.__sameDocument = 'session';")
    browser.find_element(By.ID, "approve").click()
    _text_in(browser, "#conversation", "Done: refund R-77")
    _css(browser, '#graph [data-phase="done"][aria-current="step"]',
         "the final phase is not marked current")
    _until(browser, lambda b: b.find_element(By.ID, "session-status")
           .get_attribute("data-status") == "finished", "the status never became finished")
    _text_in(browser, "#conversation", "payments.issue_refund")
    _text_in(browser, "#timeline", "approval")
    assert browser.execute_script("return window.__sameDocument") == "session", "reloaded"
    assert not browser.find_element(By.ID, "approval").is_displayed()
    # each event once: one reply of the last turn, one user message per turn
    replies = [e.text for e in browser.find_elements(By.CSS_SELECTOR, ".entry.assistant")]
    assert sum("Done: refund R-77" in r for r in replies) == 1, replies
    users = browser.find_elements(By.CSS_SELECTOR, ".entry.user")
    assert len(users) == len(DEMO)
    stored = client.get(f"/v1/sessions/{sid}").json()
    assert stored["status"] == "finished" and stored["pending_approval"] is None
    browser.save_screenshot(str(shots / "session-finished.png"))

    # readable at 400 px: nothing wider than the window
    browser.set_window_size(400, 900)
    _until(browser, lambda b: b.execute_script(
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
    _text_in(browser, "#describe-navigation", "Current phase: greet")
    node = _css(browser, '#graph [data-phase="refund"]', "no refund phase on the graph")
    node.send_keys(Keys.ENTER)  # keyboard: a phase node is focusable and answers Enter
    _text_in(browser, "#describe-navigation", "Current phase: refund")
    state = browser.find_element(By.ID, "describe-state")
    state.clear()
    state.send_keys('{"amount": 120, "order_id": "O-9"}')
    browser.find_element(By.CSS_SELECTOR, "#describe-form button[type=submit]").click()
    _text_in(browser, "#describe-instructions", "Refund 120 for order O-9")
    assert browser.find_element(
        By.CSS_SELECTOR, '#graph [data-phase="refund"][aria-current="step"]')
    browser.save_screenshot(str(shots / "workflow.png"))
    state.clear()
    state.send_keys("[1, 2")
    browser.find_element(By.CSS_SELECTOR, "#describe-form button[type=submit]").click()
    _text_in(browser, "#page-error", "The state is not JSON")
    _same_origin(browser, desk.base)
    _clean_console(browser)
