"""``phaseflow graph``: print the phase graph as Mermaid (default) or DOT."""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("workflow", metavar="WORKFLOW", help="the workflow file")
    parser.add_argument(
        "--format",
        choices=("mermaid", "dot"),
        default="mermaid",
        help="mermaid (default; paste into Markdown) or dot (Graphviz)",
    )


def run(args: argparse.Namespace) -> int:
    from phaseflow.cli.common import load_or_report
    from phaseflow.graph import to_dot, to_mermaid

    workflow = load_or_report(args.workflow, "graph")
    if isinstance(workflow, int):
        return workflow
    sys.stdout.write(to_dot(workflow) if args.format == "dot" else to_mermaid(workflow))
    return 0
