"""Fixtures of the serve tests: a refund desk server shared by a module's tests (each
test uses session ids of its own), and a way to start others."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.serve_server import REFUND_DESK, Server, start


@pytest.fixture(scope="module")
def desk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The bundled refund desk on an SQLite store."""
    folder = tmp_path_factory.mktemp("serve")
    server = start([*REFUND_DESK, "--store", str(folder / "sessions.db"), "--grace", "5"],
                   folder / "server.log")
    yield server
    server.stop()


@pytest.fixture
def client(desk: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=desk.base, timeout=30) as c:
        yield c


@pytest.fixture
def fresh(tmp_path: Path) -> Path:
    return tmp_path
