"""``phaseflow test``: run workflow test files; the last line is ``N passed, N failed``."""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="test files or folders (searched for YAML files with 'phaseflow-test: 1'); "
        "default: the current folder",
    )
    parser.add_argument(
        "--coverage",
        action="store_true",
        help="report the phases and transitions no scenario exercised",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="a test file with warnings (a mock no scenario calls, a state key the "
        "workflow does not declare) fails too",
    )
    from phaseflow.cli.agent_options import add_request_layout

    add_request_layout(parser)


def _is_test_file(path: str) -> bool:
    from phaseflow.cli.discovery import is_test_text
    from phaseflow.spec.diagnostics import Diagnostic
    from phaseflow.spec.loader import read_text

    text = read_text(path)
    return not isinstance(text, Diagnostic) and is_test_text(text)


def discover(paths: list[str]) -> list[str]:
    """Test files named in ``paths`` and found in its folders (same rules as validate)."""
    from phaseflow.cli import discovery

    return discovery.discover(paths, accept=_is_test_file)


def run(args: argparse.Namespace) -> int:
    from phaseflow.cli.common import discover_or_report, report_missing
    from phaseflow.testing import Coverage, run_test_file

    paths = args.paths or ["."]
    if report_missing(paths, "test"):
        return 2
    found = discover_or_report(paths, "test", "workflow test files ('phaseflow-test: 1')", discover)
    if found is None:
        return 2
    files = found
    out = sys.stdout
    passed = failed = 0
    coverage: dict[str, Coverage] = {}
    for path in files:
        result = run_test_file(path, context_position=args.context_position or "end",
                               offer_tools=args.offer_tools or "phase")
        out.write(f"{path}\n")
        for problem in result.warnings:
            out.write(f"  {problem.format(path)}\n")
        for scenario in result.scenarios:
            mark = "ok  " if scenario.passed else "FAIL"
            out.write(f"  {mark} {scenario.name}\n")
            if scenario.failure:
                out.write("".join(f"       {line}\n" for line in scenario.failure.splitlines()))
        if result.error:
            out.write("".join(f"  ERROR {line}\n" for line in result.error.splitlines()))
        passed += result.passed
        failed += result.failed
        if args.strict and result.warnings and not result.error:
            out.write(f"  FAIL {len(result.warnings)} warning(s) in the test file (--strict)\n")
            failed += 1
        if result.coverage is not None:
            for file_coverage in result.coverage.files():  # each workflow file reached
                key = file_coverage.workflow
                if key in coverage:
                    coverage[key].merge(file_coverage)
                else:
                    coverage[key] = file_coverage
    if args.coverage:
        for report in coverage.values():
            out.write("".join(f"{line}\n" for line in report.report()))
    out.write(f"{passed} passed, {failed} failed\n")
    return 1 if failed else 0
