"""What the web view shows of a workflow: its graph as data (the page draws it as SVG)
and, per phase, what the model is told for a state (as ``phaseflow describe`` prints it).

Pure functions of a compiled workflow. The phase entry applied before rendering follows
``phaseflow describe``: ``clear_on_enter`` then the ``on_enter`` ``set``/``unset``
effects, host ``call`` effects named and never run, and the initial phase rendered as a
conversation starts there (not entered).
"""

from __future__ import annotations

import copy
import re
from typing import Any

from phaseflow.machine import PhaseMachine
from phaseflow.spec.model import CallEffect, SetEffect, Transition, UnsetEffect, Workflow

_SPACE = re.compile(r"\s+")


def _condition(transition: Transition) -> str:
    """An edge's label as the Mermaid and DOT drawings write it."""
    text = _SPACE.sub(" ", transition.when.source.strip()) if transition.when else "always"
    if transition.trigger == "model":
        text = f"model: {text}" if transition.when else "model"
    return text


def graph_json(workflow: Workflow) -> dict[str, Any]:
    """The phase graph as nodes and edges: what ``?format=json`` answers."""
    phases = [{"name": p.name, "goal": p.goal, "terminal": p.terminal,
               "initial": p.name == workflow.initial} for p in workflow.phases.values()]
    edges = [{"from": name, "to": t.to, "condition": _condition(t), "trigger": t.trigger,
              "description": t.description or ""}
             for name, phase in workflow.phases.items() for t in phase.transitions
             if t.to in workflow.phases]
    return {"initial": workflow.initial, "phases": phases, "edges": edges}


def _enter(workflow: Workflow, phase: str, state: dict[str, Any]) -> list[str]:
    """Apply ``phase``'s entry to ``state`` as the machine would, without host code;
    the notes say what was applied and which calls were not run."""
    shown = workflow.phases[phase]
    if phase == workflow.initial:
        if shown.on_enter or shown.clear_on_enter:
            return ["as a conversation starts: the initial phase is not entered, so its "
                    "on_enter and clear_on_enter do not run"]
        return []
    notes: list[str] = []
    for key in shown.clear_on_enter:
        state.pop(key, None)
    if shown.clear_on_enter:
        notes.append(f"clear_on_enter applied: {', '.join(shown.clear_on_enter)}")
    applied: list[str] = []
    calls: list[str] = []
    for effect in shown.on_enter:
        if isinstance(effect, SetEffect):
            state.update(copy.deepcopy(dict(effect.values)))
            applied.append("set " + ", ".join(effect.values))
        elif isinstance(effect, UnsetEffect):
            for key in effect.keys:
                state.pop(key, None)
            applied.append("unset " + ", ".join(effect.keys))
        elif isinstance(effect, CallEffect):
            calls.append(effect.name)
    if applied:
        notes.append(f"on_enter applied: {'; '.join(applied)}")
    if calls:
        notes.append(f"on_enter calls (not run): {', '.join(calls)}")
    return notes


def describe_json(workflow: Workflow, phase: str, extra: dict[str, Any]) -> dict[str, Any]:
    """What the model sees in ``phase`` with the declared defaults plus ``extra``: the
    rendered instructions and the navigation block (``phase`` must exist)."""
    state = workflow.defaults()
    state.update(extra)
    notes = _enter(workflow, phase, state)
    machine = PhaseMachine(phase, workflow=workflow, clock=lambda: 0.0)
    return {"workflow": workflow.name, "phase": phase,
            "instructions": (machine.render_instructions(state) or "").rstrip(),
            "navigation": machine.describe_navigation(state).rstrip("\n"),
            "notes": notes, "state": state}
