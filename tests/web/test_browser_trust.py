"""The web view offers the three approvals (once, for the turn, for the session) besides
rejecting, lists what the session trusts and takes it back with a click: a real headless
Chromium against a real ``phaseflow serve``."""

from __future__ import annotations

from typing import Any

import httpx
from selenium.webdriver.common.by import By

from tests.support.browser import artefacts_folder, console_problems, text_in, until, visible
from tests.support.serve_server import DEMO, Server, new_session


def test_approve_for_the_session_then_revoke_it_in_the_page(desk: Server, client: httpx.Client,
                                                            browser: Any) -> None:
    browser.set_window_size(1280, 1000)
    waiting = new_session(client, DEMO)
    assert waiting["status"] == "awaiting_approval", waiting
    sid = waiting["id"]
    browser.get(desk.base + f"/ui/sessions/{sid}")
    visible(browser, "#approval", "no pending approval shown")
    labels = [browser.find_element(By.ID, i).text
              for i in ("approve", "approve-turn", "approve-session", "reject")]
    assert labels == ["Approve once", "Approve for the turn", "Approve for the session",
                      "Reject"]
    visible(browser, "#trust-none", "an empty trust is not said")
    browser.find_element(By.ID, "approve-session").click()
    until(browser, lambda b: b.find_element(By.ID, "session-status")
          .get_attribute("data-status") == "finished", "the approved turn never finished")
    text_in(browser, "#conversation", "Done: refund R-77")
    entry = visible(browser, '#trust-list li[data-tool="payments.issue_refund"]',
                    "the session's trust is not listed after approving for the session")
    assert entry.get_attribute("data-scope") == "session"
    assert "the same arguments, for the session" in entry.text
    assert not browser.find_element(By.ID, "trust-none").is_displayed()
    listed = client.get(f"/v1/sessions/{sid}/trust").json()["trust"]
    assert [(t["tool"], t["covers"]) for t in listed] == [("payments.issue_refund",
                                                           "same_arguments")]
    browser.save_screenshot(str(artefacts_folder() / "session-trust.png"))
    entry.find_element(By.CSS_SELECTOR, "button.revoke").click()
    until(browser, lambda b: not b.find_elements(By.CSS_SELECTOR, "#trust-list li"),
          "the revoked trust is still listed")
    visible(browser, "#trust-none", "an empty trust is not said after revoking")
    assert client.get(f"/v1/sessions/{sid}/trust").json()["trust"] == []
    text_in(browser, "#timeline", "trust")
    assert console_problems(browser) == []
