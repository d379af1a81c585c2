"""Shared helpers for commands that load one workflow."""

from __future__ import annotations

import sys
from collections.abc import Callable

from phaseflow.spec.diagnostics import Diagnostic
from phaseflow.spec.loader import CheckResult
from phaseflow.spec.model import Workflow

#: the PATH that means "read standard input"
STDIN = "-"
#: the name diagnostics give standard input
STDIN_NAME = "<stdin>"


def load_or_report(path: str, command: str) -> Workflow | int:
    """The compiled workflow, or an exit code after printing why it could not be loaded
    (2 when the path does not exist or names a test file, 1 when the file has errors).
    ``-`` reads the workflow from standard input."""
    import os

    from phaseflow.spec.loader import check_text, read_text

    shown = path
    if path == STDIN:
        text = read_stdin()
        result = (
            check_text(text, STDIN_NAME)
            if isinstance(text, str)
            else CheckResult(STDIN_NAME, (text,), None)
        )
        path = STDIN_NAME
    elif not os.path.isfile(path):
        print(f"phaseflow {command}: error: no such file: {path}", file=sys.stderr)
        return 2
    else:
        text = read_text(path)  # once: the test-file check and the workflow check share it
        tested = None if isinstance(text, Diagnostic) else tested_workflow(path, text)
        if tested is not None:
            what = f"it tests {tested}" if tested else "it names no workflow ('workflow:')"
            print(
                f"phaseflow {command}: error: {path} is a workflow test file "
                f"(phaseflow-test: 1), not a workflow; {what}",
                file=sys.stderr,
            )
            if tested:
                print(f"  the workflow:      phaseflow {command} {tested}", file=sys.stderr)
            print(f"  run its scenarios: phaseflow test {path}", file=sys.stderr)
            return 2
        result = (CheckResult(path, (text,), None) if isinstance(text, Diagnostic)
                  else check_text(text, path))
        if result.workflow is not None and result.workflow.uses:
            from phaseflow.spec.tree import load_tree

            result, _ = load_tree(path, check_text)  # and every workflow it uses
    if result.workflow is None:
        for diagnostic in result.diagnostics:
            print(diagnostic.format(), file=sys.stderr)
        print(
            f"phaseflow {command}: {path} has errors; fix them first (phaseflow validate {shown})",
            file=sys.stderr,
        )
        return 1
    return result.workflow


def tested_workflow(path: str, text: str) -> str | None:
    """When ``text`` (the file ``path``) is a workflow test file: the workflow it tests
    (its ``workflow:``, resolved against the test file's folder; ``""`` when it names
    none); else ``None``."""
    import os

    from phaseflow.cli.discovery import is_test_text
    from phaseflow.spec.yamlnodes import Mapping, Scalar, YamlProblem, compose

    if not is_test_text(text):
        return None
    try:
        root = compose(text).root
    except YamlProblem:
        root = None
    named = root.get("workflow") if isinstance(root, Mapping) else None
    if isinstance(named, Scalar) and isinstance(named.value, str) and named.value:
        return os.path.normpath(os.path.join(os.path.dirname(path), named.value))
    return ""


def report_missing(paths: list[str], command: str) -> bool:
    """Print a usage error for each path that does not exist; True when any is missing
    (the command then exits 2)."""
    import os

    missing = [p for p in paths if p != STDIN and not os.path.exists(p)]
    for path in missing:
        print(f"phaseflow {command}: error: no such file or folder: {path}", file=sys.stderr)
    return bool(missing)


def discover_or_report(
    paths: list[str], command: str, what: str, discover: Callable[[list[str]], list[str]]
) -> list[str] | None:
    """The files ``discover`` finds in ``paths`` (each listed once), or ``None`` after
    printing a usage error for each folder in which it finds none (the command then
    exits 2): a CI job pointed at the wrong folder must fail, not pass having checked
    nothing. A named file is never "empty"."""
    import os

    found: list[str] = []
    empty: list[str] = []
    for path in paths:
        files = discover([path])
        if not files and os.path.isdir(path):
            empty.append(path)
        found.extend(files)
    for path in empty:
        print(f"phaseflow {command}: error: no {what} in {path}", file=sys.stderr)
    return None if empty else list(dict.fromkeys(found))


def read_stdin() -> str | Diagnostic:
    """Standard input as text (UTF-8, at most the loader's file limit), or a PF001
    diagnostic naming ``<stdin>``: the same rules as a file on disk."""
    from phaseflow.spec.loader import MAX_FILE_BYTES, decode_text

    data = sys.stdin.buffer.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        return Diagnostic(
            STDIN_NAME, 1, 1, "PF001", f"input is larger than the limit of {MAX_FILE_BYTES:,} bytes"
        )
    return decode_text(data, STDIN_NAME, "input")
