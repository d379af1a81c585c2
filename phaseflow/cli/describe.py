"""``phaseflow describe``: what the model sees in a phase, for a given state."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("workflow", metavar="WORKFLOW", help="the workflow file")
    parser.add_argument("--phase", metavar="NAME", help="the phase (default: the initial phase)")
    parser.add_argument(
        "--state",
        metavar="FILE_OR_JSON",
        help="the state: a JSON/YAML file, or inline JSON/YAML such as '{\"amount\": 120}'; "
        "added to the declared defaults",
    )


def _state(value: str) -> dict[str, Any] | str:
    """The state from a file or inline text, or an error message."""
    from phaseflow.spec.diagnostics import Diagnostic
    from phaseflow.spec.loader import read_text
    from phaseflow.spec.yamlnodes import YamlProblem, compose, to_python

    text: str | Diagnostic = value
    where = "--state"
    if os.path.isfile(value):
        text = read_text(value)
        where = value
        if isinstance(text, Diagnostic):
            return f"{where}: {text.message}"
    assert isinstance(text, str)
    try:
        document = compose(text)
    except YamlProblem as problem:
        return f"{where}:{problem.line}:{problem.column}: {problem.message}"
    data = to_python(document.root) if document.root is not None else {}
    if not isinstance(data, dict):
        return f"{where}: the state must be a mapping of keys to values, e.g. '{{\"amount\": 120}}'"
    return data


def run(args: argparse.Namespace) -> int:
    from phaseflow.cli.common import load_or_report
    from phaseflow.machine import PhaseMachine
    from phaseflow.spec.diagnostics import did_you_mean

    workflow = load_or_report(args.workflow, "describe")
    if isinstance(workflow, int):
        return workflow
    phase = args.phase or workflow.initial
    if phase not in workflow.phases:
        hint = did_you_mean(phase, workflow.phases) or f" (phases: {', '.join(workflow.phases)})"
        print(f"phaseflow describe: error: no phase '{phase}'{hint}", file=sys.stderr)
        return 2
    state = workflow.defaults()
    if args.state is not None:
        extra = _state(args.state)
        if isinstance(extra, str):
            print(f"phaseflow describe: error: {extra}", file=sys.stderr)
            return 2
        state.update(extra)
    machine = PhaseMachine(phase, workflow=workflow, clock=lambda: 0.0)
    instructions = machine.render_instructions(state)
    out = sys.stdout
    out.write(f"[Instructions]\n{instructions.rstrip()}\n\n" if instructions else "")
    out.write(machine.describe_navigation(state).rstrip("\n") + "\n")
    return 0
