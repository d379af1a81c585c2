"""What the web view shows of a workflow: its graph as data (the page draws it as SVG)
and, per phase, what the model is told for a state (as ``phaseflow describe`` prints it).

Pure functions of a compiled workflow. The phase entry applied before rendering follows
``phaseflow describe``: ``clear_on_enter`` then the ``on_enter`` ``set``/``unset``
effects, host ``call`` effects named and never run, and the initial phase rendered as a
conversation starts there (not entered).
"""

from __future__ import annotations

from typing import Any

from phaseflow.graph import MAX_DRAWN_DEPTH, drawn_edges, edge_label
from phaseflow.machine import PhaseMachine
from phaseflow.machine.preview import apply_entry
from phaseflow.spec.model import Workflow


def graph_json(workflow: Workflow, depth: int = 0) -> dict[str, Any]:
    """The phase graph as nodes and edges: what ``?format=json`` answers. A phase that
    calls a workflow carries ``call`` (the name ``uses:`` gives it and its own graph,
    nested as deep as ``phaseflow graph`` draws); a hand-off is in ``handoffs``."""
    phases: list[dict[str, Any]] = []
    for p in workflow.phases.values():
        shown: dict[str, Any] = {"name": p.name, "goal": p.goal, "terminal": p.terminal,
                                 "initial": p.name == workflow.initial}
        callee = workflow.library.get(p.call.workflow) if p.call is not None else None
        if p.call is not None and callee is not None:
            shown["call"] = {"name": p.call.workflow, "workflow": callee.name,
                             "graph": graph_json(callee, depth + 1)
                             if depth + 1 < MAX_DRAWN_DEPTH else None}
        phases.append(shown)
    edges = [{"from": name, "to": t.to, "condition": edge_label(t), "trigger": t.trigger,
              "description": t.description or ""} for name, t in drawn_edges(workflow)]
    handoffs = [{"from": p.name, "to": t.handoff.workflow,
                 "workflow": _named(workflow, t.handoff.workflow), "trigger": t.trigger,
                 "description": t.description or ""}
                for p in workflow.phases.values() for t in p.transitions
                if t.handoff is not None]
    return {"workflow": workflow.name, "initial": workflow.initial, "phases": phases,
            "edges": edges, "handoffs": handoffs}


def _named(workflow: Workflow, used: str) -> str:
    """The name of the workflow ``uses:`` calls ``used`` (``used`` when not loaded)."""
    found = workflow.library.get(used)
    return found.name if found is not None else used


def called_workflow(workflow: Workflow, path: list[str]) -> tuple[Workflow, str] | str:
    """The workflow and phase ``path`` names: phases, each but the last calling the
    workflow the next is in (``verify/ask_email``); else what is wrong with it."""
    current = workflow
    for i, name in enumerate(path):
        if name not in current.phases:
            return f"no phase {name!r} in {current.name}"
        if i == len(path) - 1:
            return current, name
        call = current.phases[name].call
        callee = current.library.get(call.workflow) if call is not None else None
        if callee is None:
            return f"phase {name!r} of {current.name} calls no workflow"
        current = callee
    return current, current.initial


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
