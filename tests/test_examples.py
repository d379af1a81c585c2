"""The programs in examples/ run as documented and do what they say."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_support_agent_example_runs_the_refund_desk_to_the_end() -> None:
    proc = subprocess.run([sys.executable, "examples/support_agent.py"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "payments.issue_refund: refused (not available in phase greet)" in out
    assert "=> greet -> locate_order" in out
    assert "approval asked for payments.issue_refund" in out
    assert "This is the final phase." in out
    assert "notify customer C-1042 via email" in out
    assert "event:" not in out  # no host callable failed
    assert out.strip().endswith("final phase: done")
