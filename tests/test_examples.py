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
    # a tool of a later phase is refused with a result, and never runs
    assert "payments.issue_refund: refused -> Tool 'payments.issue_refund' is not available" in out
    assert "=> greet -> locate_order (guard)" in out
    assert "record: ok -> recorded: refund_reason" in out
    assert "approval asked for payments.issue_refund" in out
    assert "payments.issue_refund: ok" in out
    # only the catalogue's `writes` reach the state; the reason came through `record`
    state = "state: {'order_id': 'O-9', 'refund_reason': 'arrived broken', 'refund_id': 'R-77'}"
    assert state in out
    assert "status: finished" in out
    assert out.strip().endswith("final phase: done")
