"""``phaseflow describe``: what the model sees in a phase, for a given state.

The model sees a phase after it was entered: its ``clear_on_enter`` keys removed and its
``on_enter`` ``set``/``unset`` effects applied. So ``describe`` applies them to the state
it renders with; an ``on_enter`` ``call`` is host code, so it is named on standard error,
never run. The initial phase is the exception, as in a session: a conversation starts
there without entering it, so its entry effects are not applied (a note says so).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from phaseflow.cli.common import STDIN, STDIN_NAME


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "workflow", metavar="WORKFLOW", help="the workflow file ('-': read it from standard input)"
    )
    parser.add_argument("--phase", metavar="NAME",
                        help="the phase (default: the initial phase); inside a workflow it "
                        "calls, a path: CALLING_PHASE/PHASE (e.g. verify/question), nested "
                        "as deep as the calls go")
    parser.add_argument(
        "--state",
        metavar="FILE_OR_JSON",
        help="the state the phase is entered with: a JSON/YAML file, '-' (read it from "
        "standard input), or inline JSON/YAML such as '{\"amount\": 120}'; added to the "
        "declared defaults",
    )
    parser.add_argument(
        "--no-on-enter",
        action="store_true",
        help="render with the state as given: do not apply the phase's clear_on_enter and "
        "on_enter set/unset effects",
    )


def _looks_like_path(value: str) -> bool:
    """Is ``value`` (which names no file) meant as a file name rather than inline text?
    Inline state is a mapping, so it has a ``:`` or starts with ``{``."""
    text = value.strip()
    if text.endswith((".json", ".yaml", ".yml")):
        return True
    return bool(text) and not text.startswith(("{", "[")) and ":" not in text


def _state(value: str) -> dict[str, Any] | str:
    """The state from a file, standard input or inline text, or an error message."""
    from phaseflow.cli.common import read_stdin
    from phaseflow.spec.diagnostics import Diagnostic
    from phaseflow.spec.loader import read_text
    from phaseflow.spec.yamlnodes import YamlProblem, compose, to_python

    text: str | Diagnostic = value
    where = "--state"
    if value == STDIN:
        text = read_stdin()
        where = f"--state {STDIN_NAME}"
    elif os.path.isfile(value):
        text = read_text(value)
        where = value
    elif os.path.exists(value):
        return f"--state {value}: not a file"
    elif _looks_like_path(value):
        return (
            f"--state {value}: no such file (give a JSON/YAML file, '-' for standard input, "
            "or inline JSON such as '{\"amount\": 120}')"
        )
    if isinstance(text, Diagnostic):
        return f"{where}: {text.message}"
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
    from phaseflow.expr.describe import did_you_mean_or_list
    from phaseflow.machine import PhaseMachine

    if args.workflow == STDIN and args.state == STDIN:
        print(
            "phaseflow describe: error: the workflow and --state cannot both be read from "
            "standard input ('-')",
            file=sys.stderr,
        )
        return 2
    workflow = load_or_report(args.workflow, "describe")
    if isinstance(workflow, int):
        return workflow
    if args.phase and "/" in args.phase:
        return _describe_path(workflow, args.phase, args.state)
    phase = args.phase or workflow.initial
    if phase not in workflow.phases:
        hint = did_you_mean_or_list(phase, workflow.phases, "phases")
        print(f"phaseflow describe: error: no phase '{phase}'{hint}", file=sys.stderr)
        return 2
    state = workflow.defaults()
    if args.state is not None:
        extra = _state(args.state)
        if isinstance(extra, str):
            print(f"phaseflow describe: error: {extra}", file=sys.stderr)
            return 2
        state.update(extra)
    shown = workflow.phases[phase]
    if phase == workflow.initial:
        if shown.on_enter or shown.clear_on_enter:
            print(
                "phaseflow describe: as a conversation starts: the initial phase is not "
                "entered, so its on_enter and clear_on_enter do not run (they do when a "
                "transition enters it again)",
                file=sys.stderr,
            )
    elif not args.no_on_enter:
        from phaseflow.machine.preview import apply_entry

        for note in apply_entry(shown, state):
            print(f"phaseflow describe: {note}", file=sys.stderr)
    machine = PhaseMachine(phase, workflow=workflow, clock=lambda: 0.0)
    instructions = machine.render_instructions(state)
    out = sys.stdout
    out.write(f"[Instructions]\n{instructions.rstrip()}\n\n" if instructions else "")
    out.write(machine.describe_navigation(state).rstrip("\n") + "\n")
    return 0


def _describe_path(workflow: Any, path: str, state_arg: str | None) -> int:
    """``describe --phase CALLING/PHASE``: what the model sees inside a call (the path, what
    the caller waits for and what returns), with ``--state`` as the callee's state."""
    from phaseflow.expr.describe import did_you_mean_or_list
    from phaseflow.machine import PhaseMachine, State
    from phaseflow.machine.calls import enter

    names = [n for n in path.split("/") if n]
    machine = PhaseMachine(workflow.initial, workflow=workflow, clock=lambda: 0.0)
    state = State(workflow.defaults())
    current = workflow
    for depth, name in enumerate(names):
        if name not in current.phases:
            hint = did_you_mean_or_list(name, current.phases, "phases")
            print(f"phaseflow describe: error: {current.name} has no phase '{name}'{hint}",
                  file=sys.stderr)
            return 2
        machine._current, machine._cur = name, None
        machine._visits = {name: 1}
        if depth == len(names) - 1:
            break
        call = current.phases[name].call
        if call is None or call.workflow not in current.library:
            print(f"phaseflow describe: error: phase '{name}' of {current.name} calls no "
                  "workflow", file=sys.stderr)
            return 2
        enter(machine, call, state, state, 0)
        current = current.library[call.workflow]
    if state_arg is not None:
        extra = _state(state_arg)
        if isinstance(extra, str):
            print(f"phaseflow describe: error: {extra}", file=sys.stderr)
            return 2
        for key, value in extra.items():
            state.set(key, value)
    instructions = machine.render_instructions(state)
    out = sys.stdout
    out.write(f"[Instructions]\n{instructions.rstrip()}\n\n" if instructions else "")
    out.write(machine.describe_navigation(state).rstrip("\n") + "\n")
    return 0
