"""Shared test helper: run the real ``phaseflow`` command in a subprocess."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

RunCli = Callable[..., "subprocess.CompletedProcess[str]"]


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """A private PostgreSQL cluster on loopback, once per test session (see
    ``tests/stores/conftest.py`` for when it is skipped and when it must run)."""
    from tests.support.store_backends import start_postgres

    yield from start_postgres()


def _run(
    *args: str, cwd: Path | str | None = None, timeout: float = 60, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m phaseflow.cli.main ARGS`` as a user would run it; output as text."""
    return subprocess.run(
        [sys.executable, "-m", "phaseflow.cli.main", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        input=input,
        check=False,
    )


@pytest.fixture
def phaseflow_cli() -> RunCli:
    return _run
