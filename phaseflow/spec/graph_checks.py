"""The graph checks (PF200-PF208): is every phase reachable, can every conversation end,
can every transition be taken?

Each check is a function of the compiled workflow and its :class:`SourceMap` (for the
positions) to a list of diagnostics; :func:`check_graph` runs them in order. They read
the model only, so a workflow is checked the same however it was written.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable

from phaseflow.spec.diagnostics import Diagnostic, clip, closest_hint
from phaseflow.spec.edges import always_ready
from phaseflow.spec.model import Workflow
from phaseflow.spec.sourcemap import SourceMap

__all__ = [
    "check_graph",
    "endings",
    "reachability",
    "transition_checks",
    "unknown_initial",
    "unknown_visits",
]


def _phase_list(names: list[str]) -> str:
    """The phases listed in a hint, when there are few; ``names`` sorted."""
    if not names or len(names) > 12:
        return ""
    return f" (phases: {', '.join(names)})"


def _reach(start: Iterable[str], step: Callable[[str], Iterable[str]]) -> set[str]:
    """Every name reachable from ``start`` by ``step`` (breadth first, no recursion)."""
    seen = set(start)
    queue = deque(seen)
    while queue:
        for nxt in step(queue.popleft()):
            if nxt not in seen:
                seen.add(nxt)
                queue.append(nxt)
    return seen


def unknown_initial(workflow: Workflow, source: SourceMap) -> list[Diagnostic]:
    """PF200: ``initial`` names no phase."""
    initial, node, phases = source.initial, source.initial_node, workflow.phases
    if initial is None or node is None or initial in phases:
        return []
    names = sorted(phases)
    return [
        source.diagnostic(
            node,
            "PF200",
            f"initial phase '{clip(initial)}' is not defined"
            f"{closest_hint(initial, names) or _phase_list(names)}",
        )
    ]


def transition_checks(workflow: Workflow, source: SourceMap) -> list[Diagnostic]:
    """PF201 (unknown target), PF207 (written twice) and PF206 (never taken: an earlier
    ``auto`` transition is always ready, by the edge rule read without a state)."""
    phases = workflow.phases
    names: list[str] | None = None  # sorted once, when the first hint needs them
    found: list[Diagnostic] = []
    for name, nodes in source.phases.items():
        seen: dict[tuple[str, str | None, str], int] = {}
        unconditional: int | None = None
        for index, (transition, item, to_node) in enumerate(nodes.transitions):
            if transition.to not in phases:
                names = sorted(phases) if names is None else names
                found.append(
                    source.diagnostic(
                        to_node or item,
                        "PF201",
                        f"phase '{name}': transition to unknown phase '{clip(transition.to)}'"
                        f"{closest_hint(transition.to, names) or _phase_list(names)}",
                    )
                )
            if index in nodes.unchecked_transitions:
                continue
            when_source = transition.when.source.strip() if transition.when else None
            signature = (transition.to, when_source, transition.trigger)
            if signature in seen:
                found.append(
                    source.diagnostic(
                        item,
                        "PF207",
                        f"phase '{name}': transition to '{transition.to}' is written twice "
                        f"(first as transition {seen[signature] + 1}); remove one",
                    )
                )
            else:
                seen[signature] = index
            if unconditional is not None and transition.trigger == "auto":
                found.append(
                    source.diagnostic(
                        item,
                        "PF206",
                        f"phase '{name}': this transition to '{transition.to}' can never be "
                        f"taken: transition {unconditional + 1} before it has no 'when' and is "
                        "always taken first; add a 'when' to it or move this one above it",
                    )
                )
            elif transition.trigger == "auto" and always_ready(
                transition.when, phases.get(transition.to)
            ):
                unconditional = index
    return found


def endings(workflow: Workflow, source: SourceMap) -> list[Diagnostic]:
    """PF204 (a terminal phase has transitions) and PF203 (a dead end)."""
    found: list[Diagnostic] = []
    for name, phase in workflow.phases.items():
        nodes = source.phases[name]
        if phase.terminal and phase.transitions:
            found.append(
                source.diagnostic(
                    nodes.transitions_key or nodes.key,
                    "PF204",
                    f"phase '{name}' is terminal but has transitions; remove them or drop "
                    "'terminal: true'",
                )
            )
        elif not phase.terminal and not phase.transitions and name not in source.broken_phases:
            found.append(
                source.diagnostic(
                    nodes.key,
                    "PF203",
                    f"phase '{name}' has no transitions and is not terminal: a conversation "
                    "that gets here is stuck; add a transition or 'terminal: true'",
                )
            )
    return found


def reachability(workflow: Workflow, source: SourceMap) -> list[Diagnostic]:
    """PF202 (unreachable phase) and PF205 (a trap, or no terminal phase at all).

    Only meaningful on a sound graph: with an unknown initial phase, an unknown target or
    a phase the schema rejected, every warning would be a consequence of that error, not
    news."""
    phases, initial = workflow.phases, source.initial
    # each phase's targets, read once (the checks below walk them three times)
    targets = {name: [t.to for t in phase.transitions] for name, phase in phases.items()}
    sound = (
        not source.broken_phases
        and initial in phases
        and all(to in phases for tos in targets.values() for to in tos)
    )
    if not sound or initial is None:
        return []
    found: list[Diagnostic] = []
    reached = _reach([initial], targets.__getitem__)
    for name in phases:
        if name not in reached:
            found.append(
                source.diagnostic(
                    source.phases[name].key,
                    "PF202",
                    f"phase '{name}' cannot be reached from the initial phase '{initial}'",
                )
            )
    terminals = [n for n, p in phases.items() if p.terminal]
    if not terminals:
        found.append(
            source.diagnostic(
                source.phases[initial].key,
                "PF205",
                "no phase is terminal, so no conversation can finish; mark the final "
                "phase(s) 'terminal: true'",
            )
        )
        return found
    incoming: dict[str, list[str]] = {n: [] for n in phases}
    for name, tos in targets.items():
        for to in tos:
            incoming[to].append(name)
    finishing = _reach(terminals, lambda p: incoming[p])
    for name, phase in phases.items():
        if name not in finishing and phase.transitions:
            found.append(
                source.diagnostic(
                    source.phases[name].key,
                    "PF205",
                    f"phase '{name}' is a trap: no terminal phase can be reached from it",
                )
            )
    return found


def unknown_visits(workflow: Workflow, source: SourceMap) -> list[Diagnostic]:
    """PF208: a guard counts visits of a phase that does not exist (always 0)."""
    phases = workflow.phases
    names: list[str] | None = None  # sorted once, when the first hint needs them
    found: list[Diagnostic] = []
    for name, nodes in source.phases.items():
        for guard, node in nodes.guards:
            for unknown in sorted(v for v in guard.visits if v not in phases):
                names = sorted(phases) if names is None else names
                found.append(
                    source.diagnostic(
                        node,
                        "PF208",
                        f"phase '{name}': guard '{clip(guard.source.strip())}' counts visits "
                        f"of '{clip(unknown)}', which is not a phase (its count is always 0)"
                        f"{closest_hint(unknown, names)}",
                    )
                )
    return found


#: The graph checks, in the order they run.
GRAPH_CHECKS: tuple[Callable[[Workflow, SourceMap], list[Diagnostic]], ...] = (
    unknown_initial,
    transition_checks,
    endings,
    reachability,
    unknown_visits,
)


def check_graph(workflow: Workflow, source: SourceMap) -> list[Diagnostic]:
    """Every graph check's diagnostics, in order."""
    return [d for check in GRAPH_CHECKS for d in check(workflow, source)]
