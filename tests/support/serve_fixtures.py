"""The fixtures the serve and web tests share, defined once and imported by their
``conftest.py``: the bundled refund desk served for a module (each test uses session ids of
its own), an HTTP client of it, and a headless Chromium for a module.

A browser test is skipped, with the reason, only when Chromium or its driver is missing
and ``PHASEFLOW_REQUIRE_BROWSER`` is unset; CI sets it, and there the test must run."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.browser import missing, start_chrome
from tests.support.serve_server import Server, refund_desk


@pytest.fixture(scope="module")
def desk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The bundled refund desk on an SQLite store, shared by a module's tests."""
    with refund_desk(tmp_path_factory.mktemp("desk"), "--grace", "5") as server:
        yield server


@pytest.fixture
def client(desk: Server) -> Iterator[httpx.Client]:
    """An HTTP client of :func:`desk`."""
    with httpx.Client(base_url=desk.base, timeout=60) as c:
        yield c


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """A headless Chromium with its performance and console logs kept."""
    reason = missing()
    if reason is not None:
        if os.environ.get("PHASEFLOW_REQUIRE_BROWSER"):
            pytest.fail(f"PHASEFLOW_REQUIRE_BROWSER is set, but {reason}")
        pytest.skip(reason)
    driver = start_chrome()
    try:
        yield driver
    finally:
        driver.quit()
