"""The HTML report opened in a real headless Chromium: one self-contained page whose
charts are drawn inline, whose failure links open the transcript, and which asks the
network for nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from phaseflow.cli.main import main
from tests.support.browser import requested_urls, texts
from tests.support.eval_files import bundled, cooperative, write_eval


def test_the_page_draws_its_charts_and_requests_nothing(tmp_path: Path, browser: Any) -> None:
    failing = cooperative(name="<b>escaped</b> & failing", expect=["phase == 'handoff'"])
    path = write_eval(tmp_path, [*bundled()["scenarios"], failing])
    page = tmp_path / "report.html"
    code = main(["eval", str(path), "--store", "memory", "--trials", "3", "--html", str(page),
                 "--run-id", "h", "--quiet"])
    assert code == 1
    requested_urls(browser)  # forget what came before
    url = page.resolve().as_uri()
    browser.get(url)
    pass_rate = browser.find_elements("css selector", "svg.pass-rate rect.bar")
    assert len(pass_rate) == 5
    widths = [float(b.get_attribute("width")) for b in pass_rate]
    assert widths == [400.0, 400.0, 400.0, 400.0, 0.0]  # the failing one: 0 of 3
    assert len(browser.find_elements("css selector", "svg.pass-k polyline.line")) == 5
    funnel = browser.find_elements("css selector", "svg.funnel rect.bar")
    # of 15 conversations: greet 15, locate_order 12, manager_approval 3, refund 12, done 12
    assert [float(b.get_attribute("width")) for b in funnel] == [400.0, 320.0, 80.0, 320.0,
                                                                 320.0]
    assert "<b>escaped</b> & failing" in texts(browser, "table td")
    assert browser.find_elements("css selector", "b") == []  # the name was not markup
    link = browser.find_element("css selector", "a[href='#t-eval-h-b-escaped-b-failing-t1']")
    shown = browser.find_element("css selector", "section#t-eval-h-b-escaped-b-failing-t1")
    assert not shown.is_displayed()
    link.click()
    assert shown.is_displayed()
    assert "user: Hi, my kettle arrived broken. I'm ada@example.com" in shown.text
    assert requested_urls(browser) == [url]
