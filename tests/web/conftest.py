"""Fixtures of the web view's tests: one refund desk server (a real ``phaseflow serve``
process on loopback, SQLite store) and one headless Chromium shared by a module."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.browser import missing, start_chrome
from tests.support.serve_server import REFUND_DESK, Server, start


@pytest.fixture(scope="module")
def desk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("web")
    server = start([*REFUND_DESK, "--store", str(folder / "sessions.db"), "--grace", "5"],
                   folder / "server.log")
    yield server
    server.stop()


@pytest.fixture
def client(desk: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=desk.base, timeout=60) as c:
        yield c


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    reason = missing()
    if reason is not None:
        if os.environ.get("PHASEFLOW_REQUIRE_BROWSER"):
            pytest.fail(f"PHASEFLOW_REQUIRE_BROWSER is set, but {reason}")
        pytest.skip(reason)
    driver = start_chrome()
    yield driver
    driver.quit()
