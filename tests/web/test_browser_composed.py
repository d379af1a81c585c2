"""The web view of a composed workflow in a real headless Chromium against a real
``phaseflow serve`` of the bundled desks (``workflows/desks/``): the billing desk's graph
holds the identity check it calls as a box inside it, the triage's graph its hand-off
targets; a session inside the call shows its path and the callee's phase marked current;
the workflow page describes a phase inside the callee. Screenshots go to
``$PHASEFLOW_ARTEFACTS`` (default ``build/screenshots/``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium.webdriver.common.by import By

from tests.support.browser import artefacts_folder, attributes, console_problems, text_in, visible
from tests.support.phaseflow_cli import ROOT
from tests.support.serve_server import Server, serving

DESKS = ROOT / "workflows" / "desks"


@pytest.fixture(scope="module")
def desks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder: Path = tmp_path_factory.mktemp("desks")
    script = folder / "script.yaml"
    script.write_text('- "Let me look you up."\n- "Thanks."\n', encoding="utf-8")
    with serving([str(DESKS / "triage.yaml"), str(DESKS / "billing-desk.yaml"),
                  "--provider", f"scripted:{script}", "--store", str(folder / "s.db")],
                 folder / "server.log") as server:
        yield server


def test_a_session_inside_a_call_shows_its_path(desks: Server, browser: Any) -> None:
    shots = artefacts_folder()
    browser.set_window_size(1280, 1000)
    with httpx.Client(base_url=desks.base, timeout=60) as client:
        created = client.post("/v1/sessions", json={"workflow": "billing-desk",
                                                    "state": {"email": "ada@example.com"}})
        assert created.status_code == 201, created.text
        sid = created.json()["id"]
        sent = client.post(f"/v1/sessions/{sid}/messages", json={"text": "Hi"},
                           headers={"Accept": "application/json"})
        assert sent.status_code == 200, sent.text
        session = client.get(f"/v1/sessions/{sid}").json()
    assert session["path"] == ["billing-desk", "verify", "identity-check", "find"]

    browser.get(desks.base + f"/ui/sessions/{sid}")
    text_in(browser, "#session-path", "billing-desk › verify › identity-check › find")
    # the callee's phase, inside the box of the call, is the current step; the calling
    # phase is marked as the location on the path
    inner = visible(browser, '#graph figure.call-cluster[data-caller="verify"] '
                    '[data-phase="find"][aria-current="step"]',
                    "the callee's current phase is not marked inside the call's box")
    assert inner.tag_name == "g"
    assert attributes(browser, '#graph [aria-current="step"]', "data-phase") == ["find"]
    assert attributes(browser, '#graph > svg [aria-current="location"]',
                      "data-phase") == ["verify"]
    assert browser.find_element(
        By.CSS_SELECTOR, '#graph figure.call-cluster.on-path[data-workflow="identity-check"]')
    browser.save_screenshot(str(shots / "session-composed.png"))
    assert console_problems(browser) == []


def test_the_workflow_page_draws_calls_and_hand_offs(desks: Server, browser: Any) -> None:
    shots = artefacts_folder()
    browser.set_window_size(1280, 1000)
    browser.get(desks.base + "/ui/workflows/triage")
    for target in ("billing-desk", "tech-desk"):
        visible(browser, f'#graph [data-handoff="{target}"]', f"no hand-off node to {target}")
    browser.get(desks.base + "/ui/workflows/billing-desk")
    text_in(browser, "#describe-navigation", "Current phase: verify")
    node = visible(browser, '#graph figure[data-caller="verify"] [data-phase="question"]',
                   "the called identity check's phases are not drawn")
    node.click()
    text_in(browser, "#describe-path", "verify › question")
    text_in(browser, "#describe-navigation", "Current phase: question")
    assert attributes(browser, '#graph [aria-current="step"]', "data-phase") == ["question"]
    browser.save_screenshot(str(shots / "workflow-composed.png"))
    assert console_problems(browser) == []
