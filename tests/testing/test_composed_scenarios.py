"""Scenario files of workflows that compose: they cross calls and hand-offs, expect on
the path, and `test --coverage` reports every workflow file reached, each on its own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

DESKS = Path(__file__).resolve().parents[2] / "workflows" / "desks"


def _test(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "phaseflow.cli.main", "test", *args],
                          capture_output=True, text=True, timeout=120)


def test_coverage_is_reported_per_file_reached() -> None:
    proc = _test("--coverage", str(DESKS))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()

    def line(name: str) -> str:
        return next(x for x in lines if x.startswith(f"coverage {DESKS / name}:"))

    full = "(100% of phases and transitions)"
    assert line("billing-desk.yaml").endswith(f"phases 4/4, transitions 3/3 {full}")
    assert line("identity-check.yaml").endswith(f"phases 4/4, transitions 4/4 {full}")
    assert line("triage.yaml").endswith(f"phases 1/1, transitions 3/3 {full}")  # hand-offs
    assert line("tech-desk.yaml").endswith(f"phases 4/4, transitions 3/3 {full}")


def test_a_wrong_path_fails_the_scenario_and_says_where_it_is(tmp_path: Path) -> None:
    for source in DESKS.glob("*.yaml"):
        (tmp_path / source.name).write_text(source.read_text())
    copy = tmp_path / "billing-desk.test.yaml"
    copy.write_text(copy.read_text().replace("path: [billing-desk, invoices]",
                                             "path: [billing-desk, verify]"))
    proc = _test(str(copy))
    assert proc.returncode == 1
    assert ("path: expected billing-desk › verify, found billing-desk › invoices"
            in proc.stdout)
