"""Helpers for end-to-end tests of describe, graph and test through a real subprocess."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.phaseflow_cli import ROOT, run_phaseflow

WORKFLOWS = ROOT / "workflows"


def run_cli(
    *args: str, cwd: Path | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run ``phaseflow ARGS`` as a user would, and check it never prints a traceback."""
    proc = run_phaseflow(*args, cwd=cwd or ROOT, timeout=timeout)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc
