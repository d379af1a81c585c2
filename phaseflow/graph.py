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


def to_mermaid(workflow: Workflow) -> str:
    """A Mermaid ``flowchart``; node ids are prefixed so no phase name hits a keyword."""
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
    lines.append("}")
    return "\n".join(lines) + "\n"
