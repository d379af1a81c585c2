"""What an operator sees of the web view's drawing and wording, in a real headless
Chromium at 1400x900: a workflow of twelve phases fits the window with readable boxes and
text, guarded edges carry their description (or guard), the current phase is in view
without scrolling; the approval line names the tool once; a finished session does not
say it is live; each turn shows its own start time. Screenshots go to
``$PHASEFLOW_ARTEFACTS`` (default ``build/screenshots/``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.browser import artefacts_folder, console_problems, text_in, texts, until, visible
from tests.support.serve_server import DEMO, Server, new_session, serving

PHASES = [f"step_{n:02d}" for n in range(1, 13)]


def _twelve() -> str:
    lines = ["phaseflow: 1", "name: twelve", f"initial: {PHASES[0]}", "state:",
             "  go: {type: boolean}", "phases:"]
    for n, name in enumerate(PHASES):
        lines += [f"  {name}:", f"    goal: Step {n + 1}."]
        if n + 1 < len(PHASES):
            lines += ["    transitions:", f"      - to: {PHASES[n + 1]}",
                      "        when: state.go",
                      f"        description: go on to step {n + 2}"]
        else:
            lines.append("    terminal: true")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def twelve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("twelve")
    (folder / "twelve.yaml").write_text(_twelve(), encoding="utf-8")
    (folder / "script.yaml").write_text("- Going.\n" * 12, encoding="utf-8")
    with serving([str(folder / "twelve.yaml"), "--provider",
                  f"scripted:{folder / 'script.yaml'}", "--store", "memory"],
                 folder / "server.log") as server:
        yield server


def _boxes(browser: Any) -> list[dict[str, Any]]:
    """Each phase's box on the page: its name, place and size, and its text's size."""
    found: list[dict[str, Any]] = browser.execute_script("""
        return Array.from(document.querySelectorAll('#graph [data-phase]')).map(g => {
          const r = g.querySelector('rect.box').getBoundingClientRect();
          const t = g.querySelector('text');
          // the text's size as shown: its font size times the drawing's scale (a box
          // is 26 units high)
          return {name: g.dataset.phase, top: r.top, bottom: r.bottom, left: r.left,
                  right: r.right, width: r.width, height: r.height,
                  font: parseFloat(getComputedStyle(t).fontSize) * r.height / 26};
        });""")
    return found


def _labels(browser: Any) -> list[str]:
    """The text each edge label shows (its first text node: the tooltip is a child)."""
    found: list[str] = browser.execute_script(
        "return Array.from(document.querySelectorAll('#graph .edge-label'))"
        ".map(t => t.firstChild.nodeValue)")
    return found


def _fits(browser: Any, boxes: list[dict[str, Any]]) -> None:
    width, height = browser.execute_script("return [window.innerWidth, window.innerHeight]")
    for box in boxes:
        assert box["top"] >= 0 and box["bottom"] <= height, box
        assert box["left"] >= 0 and box["right"] <= width, box
        assert 90 <= box["width"] <= 180 and 20 <= box["height"] <= 40, box
        assert 10 <= box["font"] <= 16, box
    assert browser.execute_script("return window.scrollY") == 0


def test_twelve_phases_fit_a_1400x900_window_with_labelled_edges(twelve: Server,
                                                                 browser: Any) -> None:
    browser.set_window_size(1400, 900)
    browser.get(twelve.base + "/ui/workflows/twelve")
    text_in(browser, "#describe-navigation", "Current phase: step_01")
    boxes = _boxes(browser)
    assert [b["name"] for b in boxes] == PHASES
    browser.save_screenshot(str(artefacts_folder() / "workflow-twelve.png"))
    _fits(browser, boxes)
    labels = _labels(browser)
    assert labels == [f"go on to step {n}" for n in range(2, 13)]
    browser.save_screenshot(str(artefacts_folder() / "workflow-twelve.png"))


def test_the_current_phase_is_in_view_on_a_long_session(twelve: Server,
                                                        browser: Any) -> None:
    with httpx.Client(base_url=twelve.base, timeout=60) as client:
        created = client.post("/v1/sessions", json={"state": {"go": True}})
        assert created.status_code == 201, created.text
        sid = created.json()["id"]
        phase = PHASES[0]
        while phase != PHASES[-2]:  # one phase further at each turn's boundary
            answer = client.post(f"/v1/sessions/{sid}/messages", json={"text": "go"},
                                 headers={"Accept": "application/json"})
            assert answer.status_code == 200, answer.text
            phase = client.get(f"/v1/sessions/{sid}").json()["phase"]
    browser.set_window_size(1400, 900)
    browser.get(twelve.base + f"/ui/sessions/{sid}")
    visible(browser, f'#graph [data-phase="{phase}"][aria-current="step"]',
            f"{phase} is not marked current")
    current = next(b for b in _boxes(browser) if b["name"] == phase)
    frame = browser.execute_script(
        "const r = document.getElementById('graph').getBoundingClientRect();"
        "return {top: r.top, bottom: Math.min(r.bottom, window.innerHeight)}")
    # in the part of the graph's box the window shows (the box scrolled to it)
    assert frame["top"] <= current["top"] and current["bottom"] <= frame["bottom"], (
        current, frame)
    assert browser.execute_script("return window.scrollY") == 0
    browser.save_screenshot(str(artefacts_folder() / "session-twelve.png"))


def test_the_refund_desk_graph_is_drawn_at_its_own_size(desk: Server, client: httpx.Client,
                                                        browser: Any) -> None:
    browser.set_window_size(1400, 900)
    browser.get(desk.base + "/ui/workflows/refund-desk")
    text_in(browser, "#describe-navigation", "Current phase: greet")
    _fits(browser, _boxes(browser))
    browser.save_screenshot(str(artefacts_folder() / "workflow-refund-desk.png"))
    # each guarded edge says its description (else its guard), cut to 26 characters; an
    # edge without a guard (the model's bare choice of handoff) says nothing
    edges = client.get("/v1/workflows/refund-desk/graph",
                       params={"format": "json"}).json()["graph"]["edges"]
    guarded = [e for e in edges if e["condition"] not in ("always", "model")]
    assert 0 < len(guarded) < len(edges)
    said = [e["description"] or e["condition"] for e in guarded]
    assert _labels(browser) == [t if len(t) <= 26 else t[:25] + "…" for t in said]
    assert "The refund was issued" in _labels(browser)


def test_approval_wording_liveness_and_turn_times(desk: Server, client: httpx.Client,
                                                  browser: Any) -> None:
    browser.set_window_size(1400, 900)
    waiting = new_session(client, DEMO)
    sid = waiting["id"]
    browser.get(desk.base + f"/ui/sessions/{sid}")
    box = visible(browser, "#approval", "no pending approval shown")
    line = box.text.splitlines()[1]
    assert line == "payments.issue_refund needs approval", line
    asked = texts(browser, ".entry.approval-asked .who")
    assert asked == ["payments.issue_refund needs approval"], asked
    text_in(browser, "#stream-state", "live")
    current = visible(browser, '#graph [aria-current="step"]', "no current phase")
    bottom = browser.execute_script("return arguments[0].getBoundingClientRect().bottom"
                                    " <= window.innerHeight", current)
    assert bottom, "the current phase is below the window"
    browser.save_screenshot(str(artefacts_folder() / "session-approval-1400.png"))

    browser.find_element("id", "approve").click()
    until(browser, lambda b: b.find_element("id", "session-status")
          .get_attribute("data-status") == "finished", "the status never became finished")
    text_in(browser, "#stream-state", "no: the session has finished")
    browser.refresh()  # opened again once finished: still not "live"
    text_in(browser, "#stream-state", "no: the session has finished")
    text_in(browser, "#conversation", "Done: refund R-77")
    started = texts(browser, "#timeline .step.started")
    assert len(started) == len(DEMO), started
    assert len(set(started)) == len(started), f"turns show the same start time: {started}"
    ended = texts(browser, "#timeline .step.finished")
    assert all(" after " in text for text in ended), ended
    browser.save_screenshot(str(artefacts_folder() / "session-finished-1400.png"))
    problems = [p for p in console_problems(browser) if p.get("source") != "network"]
    assert problems == [], problems

