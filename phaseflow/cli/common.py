"""Shared helpers for commands that load one workflow."""

from __future__ import annotations

import sys

from phaseflow.spec.model import Workflow


def load_or_report(path: str, command: str) -> Workflow | int:
    """The compiled workflow, or an exit code after printing why it could not be loaded
    (2 when the path does not exist, 1 when the file has errors)."""
    import os

    from phaseflow.spec.loader import check_file

    if not os.path.isfile(path):
        print(f"phaseflow {command}: error: no such file: {path}", file=sys.stderr)
        return 2
    result = check_file(path)
    if result.workflow is None:
        for diagnostic in result.diagnostics:
            print(diagnostic.format(), file=sys.stderr)
        print(
            f"phaseflow {command}: {path} has errors; fix them first (phaseflow validate {path})",
            file=sys.stderr,
        )
        return 1
    return result.workflow


def report_missing(paths: list[str], command: str) -> bool:
    """Print a usage error for each path that does not exist; True when any is missing
    (the command then exits 2)."""
    import os

    missing = [p for p in paths if not os.path.exists(p)]
    for path in missing:
        print(f"phaseflow {command}: error: no such file or folder: {path}", file=sys.stderr)
    return bool(missing)
