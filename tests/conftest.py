"""Shared test helper: run the real ``phaseflow`` command in a subprocess."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

RunCli = Callable[..., "subprocess.CompletedProcess[str]"]


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
