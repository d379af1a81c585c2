"""``phaseflow validate``: check workflow files; exit 0 clean, 1 errors, 2 usage."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from phaseflow.spec.loader import CheckResult


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="workflow files or folders (searched for *.yaml/*.yml with a 'phaseflow' key; "
        "a folder with none is an error); '-' reads one workflow from standard input; "
        "default: the current folder",
    )
    parser.add_argument(
        "--format",
        choices=("text", "json", "github"),
        default="text",
        help="text (default), json (one object), github (workflow commands for annotations)",
    )
    parser.add_argument("--strict", action="store_true", help="treat warnings as failures (exit 1)")
    parser.add_argument(
        "--skip-non-workflows",
        action="store_true",
        help="apply the folder filter to named files too: a YAML file whose top-level "
        "mapping has no 'phaseflow' key is skipped (for pre-commit, which names every file)",
    )
    parser.add_argument(
        "--hooks",
        metavar="MODULE:ATTR",
        help="check 'call' names against the mapping MODULE.ATTR (the host's registry)",
    )
    parser.add_argument(
        "--mcp",
        metavar="FILE",
        help="also connect to the MCP servers of FILE ({\"mcpServers\": ...}) and check "
        "that every catalogue tool NAME.TOOL exists there and that declared parameters "
        "agree with the server's (PF410, PF411); without it validate stays offline",
    )
    parser.add_argument(
        "--models",
        metavar="ROLE,ROLE",
        help="the model roles the host maps (besides 'default'): a workflow or phase "
        "'model' naming another is an error (PF430)",
    )


def _roles(spec: str) -> list[str] | str:
    """The role names of ``--models fast,strong`` (the reason when one is not a name)."""
    import re

    roles = [r.strip() for r in spec.split(",") if r.strip()]
    bad = [r for r in roles if not re.fullmatch(r"[a-z][a-z0-9_-]*", r)]
    if bad or not roles:
        return (f"--models {spec}: expected model role names separated by commas (lowercase "
                "letters, digits, '_' and '-', starting with a letter)")
    return roles


def _registry(spec: str) -> Mapping[str, Any] | str:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        return f"--hooks takes MODULE:ATTR, got {spec!r}"
    sys.path.insert(0, os.getcwd())
    try:
        value = getattr(importlib.import_module(module_name), attr)
    except Exception as exc:
        return f"--hooks {spec}: cannot load it: {type(exc).__name__}: {exc}"
    if not isinstance(value, Mapping):
        return (
            f"--hooks {spec}: expected a mapping of names to callables, got {type(value).__name__}"
        )
    return value


def _mcp_diagnostics(path: str, results: list[CheckResult]) -> list[Any] | str:
    """PF410/PF411 of every workflow that loaded, against the servers of ``path`` (all
    connected once); the reason instead when the file is bad or a server does not
    start or answer (a usage error: exit 2)."""
    from phaseflow.errors import PhaseflowError

    try:
        from phaseflow.mcp.check import mcp_diagnostics
        from phaseflow.mcp.config import read_servers
        from phaseflow.mcp.hub import McpHub

        hub = McpHub(read_servers(path))
    except PhaseflowError as exc:
        return str(exc)
    try:
        return [d for r in results if r.workflow is not None
                for d in mcp_diagnostics(r.workflow, r.path, hub)]
    finally:
        hub.close()


def _escape(value: str, property_value: bool = False) -> str:
    value = value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    if property_value:
        value = value.replace(":", "%3A").replace(",", "%2C")
    return value


def _check_stdin(registry: Mapping[str, Any] | None) -> CheckResult:
    from phaseflow.cli.common import STDIN_NAME, read_stdin
    from phaseflow.spec.diagnostics import Diagnostic
    from phaseflow.spec.loader import CheckResult as Result
    from phaseflow.spec.loader import check_text

    text = read_stdin()
    if isinstance(text, Diagnostic):
        return Result(STDIN_NAME, (text,), None)
    return check_text(text, STDIN_NAME, registry)


def run(args: argparse.Namespace) -> int:
    from functools import partial

    from phaseflow.cli.common import STDIN, discover_or_report, report_missing
    from phaseflow.cli.discovery import discover
    from phaseflow.spec.loader import check_text
    from phaseflow.spec.tree import check_tree

    paths = args.paths or ["."]
    if report_missing(paths, "validate"):
        return 2
    if paths.count(STDIN) > 1:
        print("phaseflow validate: error: '-' (standard input) may be given once", file=sys.stderr)
        return 2
    registry = None
    if args.hooks:
        loaded = _registry(args.hooks)
        if isinstance(loaded, str):
            print(f"phaseflow validate: error: {loaded}", file=sys.stderr)
            return 2
        registry = loaded
    roles = None if args.models is None else _roles(args.models)
    if isinstance(roles, str):
        print(f"phaseflow validate: error: {roles}", file=sys.stderr)
        return 2
    on_disk = [p for p in paths if p != STDIN]
    search = partial(discover, filter_files=args.skip_non_workflows)
    files = discover_or_report(on_disk, "validate", "workflow files", search)
    if files is None:
        return 2
    from phaseflow.cli.discovery import eval_files

    evals = eval_files(on_disk)  # checked by their own reader, not as workflows
    files = [path for path in files if path not in evals]
    tree = check_tree(files, check_text, registry)  # each file, and every file it uses, read once
    results = list(tree.results)
    if STDIN in paths:
        results.append(_check_stdin(registry))
    found = list(dict.fromkeys([*(d for r in results for d in r.diagnostics),
                                *tree.diagnostics]))
    if evals:
        from phaseflow.evals.check import check_eval_file

        found.extend(d for path in evals for d in check_eval_file(path))
    if roles is not None:
        from phaseflow.spec.model_roles import role_diagnostics

        found.extend(d for r in results if r.workflow is not None
                     for d in role_diagnostics(r.workflow, r.path, roles))
    if args.mcp:
        online = _mcp_diagnostics(args.mcp, results)
        if isinstance(online, str):
            print(f"phaseflow validate: error: {online}", file=sys.stderr)
            return 2
        found.extend(online)
    diagnostics = sorted(found, key=lambda d: d.sort_key())
    errors = sum(1 for d in diagnostics if d.severity == "error")
    warnings = len(diagnostics) - errors
    out = sys.stdout
    if args.format == "json":
        json.dump(
            {
                "files": len(results) + len(evals),
                "errors": errors,
                "warnings": warnings,
                "diagnostics": [d.as_json() for d in diagnostics],
            },
            out,
            indent=2,
        )
        out.write("\n")
    elif args.format == "github":
        for d in diagnostics:
            out.write(
                f"::{d.severity} file={_escape(d.path, True)},line={d.line},col={d.column},"
                f"title={d.code}::{_escape(d.message)}\n"
            )
    else:
        for d in diagnostics:
            out.write(d.format() + "\n")
        # The spec's exact form, for scripts that parse it: always "files", "errors",
        # "warnings", whatever the count.
        out.write(f"{len(results) + len(evals)} files checked: {errors} errors, "
                  f"{warnings} warnings\n")
    if errors or (args.strict and warnings):
        return 1
    return 0
