"""Every MCP test ends with no server left running: the processes this test process has
(and the test servers that recorded themselves) are compared before and after."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.mcp_servers import descendants, server_pids, wait_gone


@pytest.fixture
def pids(tmp_path: Path) -> Path:
    """The folder where the test servers record their process ids."""
    folder = tmp_path / "pids"
    folder.mkdir()
    return folder


@pytest.fixture(autouse=True)
def no_server_left(pids: Path) -> Iterator[None]:
    before = descendants()
    yield
    left = wait_gone(descendants() - before)
    assert not left, f"processes left running after the test: {sorted(left)}"
    servers = wait_gone(server_pids(pids))
    assert not servers, f"MCP servers left running after the test: {sorted(servers)}"
