"""What the ``phaseflow_cli`` fixture hands a test: ``python -m phaseflow.cli.main ARGS``
run as a user would run it, in a subprocess, its output as text; and the type a test
annotates the fixture with (kept here, not in ``conftest.py``, since test modules import
it and a test module never imports a conftest)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

RunCli = Callable[..., "subprocess.CompletedProcess[str]"]


def run_phaseflow(
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
