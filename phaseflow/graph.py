"""Draw a workflow's phase graph as Mermaid or Graphviz DOT text.

Pure functions of a compiled :class:`~phaseflow.spec.model.Workflow`. Terminal phases are
drawn with a double border, every edge carries its condition (``always`` when it has
none), and ``model`` transitions are dashed and prefixed ``model:``, so a reader sees at a
glance what the engine takes by itself and what waits for the model to ask.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from phaseflow.spec.model import Transition, Workflow

__all__ = ["drawn_edges", "edge_label", "to_dot", "to_mermaid"]

_SPACE = re.compile(r"\s+")


def edge_label(transition: Transition) -> str:
    """An edge's label in every drawing (Mermaid, DOT, the web view's graph): its
    condition on one line, ``always`` when it has none, ``model:`` before a model one."""
    text = _SPACE.sub(" ", transition.when.source.strip()) if transition.when else "always"
    if transition.trigger == "model":
        text = f"model: {text}" if transition.when else "model"
    return text


def drawn_edges(workflow: Workflow) -> Iterator[tuple[str, Transition]]:
    """``(phase, transition)`` for every transition a drawing shows, in the file's order:
    one to an unknown phase (which validation reports) has no node to point at."""
    for name, phase in workflow.phases.items():
        for transition in phase.transitions:
            if transition.to in workflow.phases:
                yield name, transition


def _mermaid_text(text: str) -> str:
    """Text safe inside a quoted Mermaid label (entity codes for the risky characters)."""
    out = []
    for char in text:
        if char == '"':
            out.append("#quot;")
        elif char in "<>&#|`[]{}()":
            out.append(f"#{ord(char)};")
        else:
            out.append(char)
    return "".join(out)


#: How deep a drawing follows calls into the workflows called (deeper ones are named, not
#: drawn: a drawing stays readable and its size bounded).
MAX_DRAWN_DEPTH = 8


def _called(workflow: Workflow, prefix: str, depth: int
            ) -> Iterator[tuple[str, str, Workflow, str, int]]:
    """``(calling node id, callee name, callee, callee's node prefix, depth)`` for every
    call drawn, outermost first, without recursion."""
    todo = [(workflow, prefix, depth)]
    while todo:
        current, pre, level = todo.pop(0)
        if level >= MAX_DRAWN_DEPTH:
            continue
        for name, phase in current.phases.items():
            call = phase.call
            callee = current.library.get(call.workflow) if call is not None else None
            if call is None or callee is None:
                continue
            inner = f"{pre}{name}__"
            yield f"{pre}{name}", call.workflow, callee, inner, level + 1
            todo.append((callee, inner, level + 1))


def _mermaid_calls(workflow: Workflow) -> list[str]:
    """Each called workflow as a subgraph inside the drawing, entered from the calling
    phase and returning to it from each terminal phase; each hand-off as a node."""
    lines: list[str] = []
    for caller, name, callee, pre, _ in _called(workflow, "p_", 0):
        lines.append(f'  subgraph {pre}sub["{_mermaid_text(f"{name}: {callee.name}")}"]')
        for pname, phase in callee.phases.items():
            label = _mermaid_text(pname)
            shape = f'(["{label} (final)"])' if phase.terminal else f'["{label}"]'
            lines.append(f"    {pre}{pname}{shape}")
        for pname, phase in callee.phases.items():
            for t in phase.transitions:
                if t.to in callee.phases:
                    arrow = "-.->" if t.trigger == "model" else "-->"
                    lines.append(f'    {pre}{pname} {arrow}|"{_mermaid_text(edge_label(t))}"| '
                                 f"{pre}{t.to}")
        lines.append("  end")
        if callee.initial in callee.phases:
            lines.append(f'  {caller} ==>|"call"| {pre}{callee.initial}')
        for pname, phase in callee.phases.items():
            if phase.terminal:
                lines.append(f'  {pre}{pname} ==>|"returns {_mermaid_text(pname)}"| {caller}')
    for name, phase in workflow.phases.items():
        for t in phase.transitions:
            if t.handoff is not None:
                node = f"h_{t.handoff.workflow}"
                lines.append(f'  {node}[/"{_mermaid_text(f"hand-off: {t.handoff.workflow}")}"/]')
                arrow = "-.->" if t.trigger == "model" else "-->"
                lines.append(f'  p_{name} {arrow}|"{_mermaid_text(edge_label(t))}"| {node}')
    return lines


def to_mermaid(workflow: Workflow) -> str:
    """A Mermaid ``flowchart``; node ids are prefixed so no phase name hits a keyword.
    A workflow called is drawn as a subgraph, a hand-off as a node of its own."""
    lines = ["flowchart TD", "  start__((start))"]
    for name, phase in workflow.phases.items():
        label = _mermaid_text(name)
        if phase.terminal:
            lines.append(f'  p_{name}(["{label} (final)"])')
        else:
            lines.append(f'  p_{name}["{label}"]')
    if workflow.initial in workflow.phases:
        lines.append(f"  start__ --> p_{workflow.initial}")
    for name, transition in drawn_edges(workflow):
        label = _mermaid_text(edge_label(transition))
        arrow = "-.->" if transition.trigger == "model" else "-->"
        lines.append(f'  p_{name} {arrow}|"{label}"| p_{transition.to}')
    if workflow.uses:
        lines.extend(_mermaid_calls(workflow))
    finals = [f"p_{n}" for n, p in workflow.phases.items() if p.terminal]
    if finals:
        lines.append("  classDef final stroke-width:3px")
        lines.append(f"  class {','.join(finals)} final")
    return "\n".join(lines) + "\n"


def _dot_text(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def to_dot(workflow: Workflow) -> str:
    """A Graphviz ``digraph``: terminal phases double-bordered, model edges dashed."""
    lines = [
        f'digraph "{_dot_text(workflow.name)}" {{',
        "  rankdir=TB;",
        '  node [shape=box, style="rounded", fontname="Helvetica"];',
        '  edge [fontname="Helvetica", fontsize=10];',
        '  "__start__" [shape=point, width=0.15, label=""];',
    ]
    for name, phase in workflow.phases.items():
        attrs = f'label="{_dot_text(name)}"'
        if phase.terminal:
            attrs += ", peripheries=2"
        lines.append(f'  "{name}" [{attrs}];')
    if workflow.initial in workflow.phases:
        lines.append(f'  "__start__" -> "{workflow.initial}";')
    for name, transition in drawn_edges(workflow):
        style = ", style=dashed" if transition.trigger == "model" else ""
        label = _dot_text(edge_label(transition))
        lines.append(f'  "{name}" -> "{transition.to}" [label="{label}"{style}];')
    if workflow.uses:
        lines.extend(_dot_calls(workflow))
    lines.append("}")
    return "\n".join(lines) + "\n"


def _dot_calls(workflow: Workflow) -> list[str]:
    """Each called workflow as a cluster, entered from the calling phase and returning to
    it; each hand-off as a node of its own."""
    lines: list[str] = []
    for caller, name, callee, pre, _ in _called(workflow, "", 0):
        lines.append(f'  subgraph "cluster_{pre}" {{')
        lines.append(f'    label="{_dot_text(f"{name}: {callee.name}")}"; style=dashed;')
        for pname, phase in callee.phases.items():
            attrs = f'label="{_dot_text(pname)}"' + (", peripheries=2" if phase.terminal else "")
            lines.append(f'    "{pre}{pname}" [{attrs}];')
        for pname, phase in callee.phases.items():
            for t in phase.transitions:
                if t.to in callee.phases:
                    style = ", style=dashed" if t.trigger == "model" else ""
                    lines.append(f'    "{pre}{pname}" -> "{pre}{t.to}" '
                                 f'[label="{_dot_text(edge_label(t))}"{style}];')
        lines.append("  }")
        if callee.initial in callee.phases:
            lines.append(f'  "{caller}" -> "{pre}{callee.initial}" [label="call", style=bold];')
        for pname, phase in callee.phases.items():
            if phase.terminal:
                lines.append(f'  "{pre}{pname}" -> "{caller}" '
                             f'[label="returns {_dot_text(pname)}", style=bold];')
    for name, phase in workflow.phases.items():
        for t in phase.transitions:
            if t.handoff is not None:
                node = f"handoff: {t.handoff.workflow}"
                lines.append(f'  "{_dot_text(node)}" [shape=parallelogram];')
                style = ", style=dashed" if t.trigger == "model" else ""
                lines.append(f'  "{name}" -> "{_dot_text(node)}" '
                             f'[label="{_dot_text(edge_label(t))}"{style}];')
    return lines
