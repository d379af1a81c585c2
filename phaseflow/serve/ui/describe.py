"""What the web view shows of a workflow: its graph as data (the page draws it as SVG)
and, per phase, what the model is told for a state (as ``phaseflow describe`` prints it).

Pure functions of a compiled workflow. The phase entry applied before rendering follows
``phaseflow describe``: ``clear_on_enter`` then the ``on_enter`` ``set``/``unset``
effects, host ``call`` effects named and never run, and the initial phase rendered as a
conversation starts there (not entered).
"""

from __future__ import annotations

from typing import Any

from phaseflow.graph import drawn_edges, edge_label
from phaseflow.machine import PhaseMachine
from phaseflow.machine.preview import apply_entry
from phaseflow.spec.model import Workflow


def graph_json(workflow: Workflow) -> dict[str, Any]:
    """The phase graph as nodes and edges: what ``?format=json`` answers."""
    phases = [{"name": p.name, "goal": p.goal, "terminal": p.terminal,
               "initial": p.name == workflow.initial} for p in workflow.phases.values()]
    edges = [{"from": name, "to": t.to, "condition": edge_label(t), "trigger": t.trigger,
              "description": t.description or ""} for name, t in drawn_edges(workflow)]
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
    return apply_entry(shown, state)


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
