"""A real headless Chromium for the web view's tests, driven by selenium through
Debian's ``chromedriver``; what the page asked the network for (the DevTools
performance log) and what it wrote to its console."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

CHROMEDRIVER = "/usr/bin/chromedriver"


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
    driver = shutil.which("chromedriver") or (CHROMEDRIVER if os.path.exists(CHROMEDRIVER)
                                              else None)
    if driver is None:
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
    driver_path = shutil.which("chromedriver") or CHROMEDRIVER
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
