"""Helpers for end-to-end tests of describe, graph and test through a real subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / "workflows"


def run_cli(
    *args: str, cwd: Path | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run ``phaseflow ARGS`` as a user would, and check it never prints a traceback."""
    proc = subprocess.run(
        [sys.executable, "-m", "phaseflow.cli.main", *args],
        capture_output=True,
        text=True,
        cwd=cwd or ROOT,
        timeout=timeout,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc
