"""Which files a command checks when it is given folders (see docs/validation.md).

Folder discovery is the command line's business: a host loads the file it names. So it
lives with the commands, and the spec layer never imports it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

from phaseflow.spec.diagnostics import Diagnostic
from phaseflow.spec.loader import read_text

__all__ = ["SKIPPED_FOLDERS", "discover", "is_workflow_file", "is_workflow_text"]

#: Folders never searched (besides hidden ones, whose names start with ".").
SKIPPED_FOLDERS = frozenset({"node_modules", "__pycache__", "venv", "site-packages"})

_WORKFLOW_KEY = re.compile(r"(?m)^(?:phaseflow|\"phaseflow\"|'phaseflow')[ \t]*:")


_TEST_KEY = re.compile(r"(?m)^[\"']?phaseflow-test[\"']?[ \t]*:")


def is_test_text(text: str) -> bool:
    """Cheap test for discovery: a top-level ``phaseflow-test`` key (a workflow test
    file), read without importing the test runner."""
    return _TEST_KEY.search(text) is not None


def is_workflow_text(text: str) -> bool:
    """Cheap test for folder discovery: does the top-level mapping have a ``phaseflow`` key?"""
    return _WORKFLOW_KEY.search(text) is not None


def is_workflow_file(path: str) -> bool:
    """The default ``accept`` of :func:`discover`: a workflow file, or one that cannot be
    read or decoded (it is then reported, PF001, rather than skipped: it might be one)."""
    text = read_text(path)
    return isinstance(text, Diagnostic) or is_workflow_text(text)


def discover(
    paths: list[str],
    filter_files: bool = False,
    accept: Callable[[str], bool] = is_workflow_file,
) -> list[str]:
    """Expand folders into the workflow files inside them.

    A folder is searched recursively for ``*.yaml``/``*.yml`` files that ``accept`` (by
    default: whose top-level mapping has a ``phaseflow`` key), skipping hidden folders and
    :data:`SKIPPED_FOLDERS`. A file named in ``paths`` is always kept, unless
    ``filter_files`` is true: then it is kept only when it passes the same test. Each file
    is listed once. ``phaseflow test`` uses it with its own ``accept`` for test files.
    """
    found: list[str] = []
    for path in paths:
        if not os.path.isdir(path):
            if not filter_files or accept(path):
                found.append(path)
            continue
        for folder, dirs, files in os.walk(path):
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIPPED_FOLDERS)
            for name in sorted(files):
                if not name.endswith((".yaml", ".yml")):
                    continue
                full = os.path.join(folder, name)
                if accept(full):
                    found.append(full)
    normalised = (str(Path(p)) if not p.startswith("./") else p for p in found)
    return list(dict.fromkeys(normalised))


#: the names of eval files (``phaseflow eval``; validate checks them with their reader)
EVAL_SUFFIXES = (".eval.yaml", ".eval.yml")


def eval_files(paths: list[str]) -> list[str]:
    """The eval files named in ``paths`` or found in its folders (``*.eval.yaml``),
    by the folder rules of :func:`discover`."""
    return discover(paths, filter_files=True,
                    accept=lambda path: path.endswith(EVAL_SUFFIXES))

