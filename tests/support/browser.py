"""A real headless Chromium for the web view's tests, driven by selenium through
Debian's ``chromedriver``; what the page asked the network for (the DevTools
performance log) and what it wrote to its console; and the waits the browser tests
share (an element visible, a text shown)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

#: where Debian puts the driver; ``PHASEFLOW_CHROMEDRIVER`` names another
CHROMEDRIVER = "/usr/bin/chromedriver"


def chromedriver() -> str | None:
    """The driver to use: ``$PHASEFLOW_CHROMEDRIVER``, else ``chromedriver`` on ``PATH``,
    else Debian's; ``None`` when there is none."""
    named = os.environ.get("PHASEFLOW_CHROMEDRIVER")
    if named:
        return named if os.path.exists(named) else None
    return shutil.which("chromedriver") or (CHROMEDRIVER if os.path.exists(CHROMEDRIVER)
                                            else None)


def chromium_binary() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def missing() -> str | None:
    """Why no browser test can run here, or ``None``."""
    if chromium_binary() is None:
        return "Chromium is not installed (apt-get install chromium chromium-driver)"
    if chromedriver() is None:
        return "chromedriver is not installed (apt-get install chromium-driver)"
    return None


def start_chrome(width: int = 1280, height: int = 1000) -> Any:
    """A headless Chromium with its performance and console logs kept."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    binary = chromium_binary()
    assert binary is not None
    options.binary_location = binary
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--disable-extensions", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--mute-audio",
                 f"--window-size={width},{height}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    driver_path = chromedriver()
    assert driver_path is not None
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    driver.set_page_load_timeout(60)
    driver.set_script_timeout(60)
    return driver


def requested_urls(driver: Any) -> list[str]:
    """Every URL the pages asked for since the last call (CDP Network events)."""
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message.get("method") == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def console_problems(driver: Any) -> list[dict[str, Any]]:
    """The console's warnings and errors since the last call."""
    return [e for e in driver.get_log("browser") if e.get("level") in ("SEVERE", "WARNING")]


def artefacts_folder() -> Path:
    """Where screenshots go: ``$PHASEFLOW_ARTEFACTS`` or ``build/screenshots``."""
    root = Path(__file__).resolve().parents[2]
    folder = Path(os.environ.get("PHASEFLOW_ARTEFACTS") or root / "build" / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


# --- waiting for the page ------------------------------------------------------------

#: how long a page may take to show what a test waits for, in seconds
WAIT = 60


def until(driver: Any, condition: Any, message: str) -> Any:
    """Wait (polling every 0.1 s) for a selenium ``condition``; fail with ``message``.
    An element the live page re-rendered while the condition read it (stale) is read
    again at the next poll, not a failure."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, WAIT, poll_frequency=0.1,
                         ignored_exceptions=(StaleElementReferenceException,)
                         ).until(condition, message)


def attributes(driver: Any, selector: str, name: str) -> list[str | None]:
    """The attribute ``name`` of every element ``selector`` names, read in the page in one
    call: a live page may re-render between a lookup and a read by element."""
    found: list[str | None] = driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0]))"
        ".map(e => e.getAttribute(arguments[1]))", selector, name)
    return found


def texts(driver: Any, selector: str) -> list[str]:
    """The shown text of every element ``selector`` names, read in one call."""
    found: list[str] = driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0])).map(e => e.innerText)",
        selector)
    return found


def visible(driver: Any, selector: str, message: str) -> Any:
    """The element ``selector`` names, once it is visible."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec

    return until(driver, ec.visibility_of_element_located((By.CSS_SELECTOR, selector)),
                 message)


def text_in(driver: Any, selector: str, text: str) -> Any:
    """Wait until ``text`` is in the element ``selector`` names."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec

    return until(driver, ec.text_to_be_present_in_element((By.CSS_SELECTOR, selector), text),
                 f"{text!r} never appeared in {selector}")
