"""The graph checks (PF200-PF209): is every phase reachable, can every conversation end,
can every transition be taken, and when, if it waits for time?

Each check is a function of the compiled workflow and its :class:`SourceMap` (for the
positions) to a list of diagnostics; :func:`check_graph` runs them in order. They read
the model only, so a workflow is checked the same however it was written.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from phaseflow.expr.describe import clip, closest_hint
from phaseflow.expr.time_terms import SECONDS, time_moments
from phaseflow.spec.diagnostics import Diagnostic
from phaseflow.spec.edges import always_ready
from phaseflow.spec.model import Workflow
from phaseflow.spec.sourcemap import SourceMap
from phaseflow.spec.yamlnodes import Mapping as MappingNode
from phaseflow.spec.yamlnodes import Node

__all__ = [
    "check_graph",
    "endings",
    "reachability",
    "transition_checks",
    "unknown_initial",
    "unknown_visits",
    "untimed_guards",
]


def _phase_list(names: list[str]) -> str:
    """The phases listed in a hint, when there are few; ``names`` sorted."""
    if not names or len(names) > 12:
        return ""
    return f" (phases: {', '.join(names)})"


def _reach(start: Iterable[str], step: Mapping[str, Iterable[str]]) -> set[str]:
    """Every name reachable from ``start`` through ``step`` (each name's successors; a
    name it lacks has none), with a list of names to visit, not recursion. The order of
    the visit does not matter (the result is a set): a stack, without a call per name, is
    the cheapest."""
    seen = set(start)
    todo = list(seen)
    pop, push, add, successors = todo.pop, todo.append, seen.add, step.get
    while todo:
        for nxt in successors(pop(), ()):
            if nxt not in seen:
                add(nxt)
                push(nxt)
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
    names: list[str] = []  # sorted once, when the first hint needs them
    found: list[Diagnostic] = []

    def unknown_target(name: str, target: str, node: Node) -> None:
        """PF201 at ``node``: phase ``name``'s transition to ``target``, no phase."""
        if not names:
            names.extend(sorted(phases))
        found.append(source.diagnostic(
            node, "PF201",
            f"phase '{name}': transition to unknown phase '{clip(target)}'"
            f"{closest_hint(target, names) or _phase_list(names)}"))

    for name, nodes in source.phases.items():
        written = nodes.transitions
        if len(written) == 1:
            # one transition (the commonest phase): nothing before it to repeat or to
            # shadow it, so only its target is checked
            transition, item, to_node = written[0]
            if transition.to not in phases and transition.handoff is None:
                unknown_target(name, transition.to, to_node or item)
            continue
        seen: dict[tuple[str, str | None, str], int] = {}
        unconditional: int | None = None
        for index, (transition, item, to_node) in enumerate(written):
            if transition.handoff is not None:  # checked across files (spec/tree.py)
                continue
            if transition.to not in phases:
                unknown_target(name, transition.to, to_node or item)
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
        if phase.terminal and phase.transitions:
            nodes = source.phases[name]
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
                    source.phases[name].key,
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
    if source.broken_phases or initial is None or initial not in phases:
        return []
    # One pass over the transitions: whether every target is a phase (looked up once per
    # target), each phase's sources, and the terminal phases; the walks below read those.
    incoming: dict[str, list[str]] = {}
    terminals: list[str] = []
    for name, phase in phases.items():
        if phase.terminal:
            terminals.append(name)
        for transition in phase.transitions:
            if transition.handoff is not None:  # the conversation ends here, elsewhere
                if not terminals or terminals[-1] != name:
                    terminals.append(name)
                continue
            to = transition.to
            sources = incoming.get(to)
            if sources is None:
                if to not in phases:
                    return []
                incoming[to] = [name]
            else:
                sources.append(name)
    found: list[Diagnostic] = []
    # forward from the initial phase, through each phase's own transitions (a stack of
    # names, no recursion; the order does not matter)
    reached = {initial}
    todo = [initial]
    pop, push, add = todo.pop, todo.append, reached.add
    while todo:
        for transition in phases[pop()].transitions:
            to = transition.to
            if to not in reached and transition.handoff is None:
                add(to)
                push(to)
    if len(reached) < len(phases):  # (every name reached is a phase)
        for name in phases:
            if name not in reached:
                found.append(
                    source.diagnostic(
                        source.phases[name].key,
                        "PF202",
                        f"phase '{name}' cannot be reached from the initial phase '{initial}'",
                    )
                )
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
    finishing = _reach(terminals, incoming)
    if len(finishing) < len(phases):
        for name, phase in phases.items():
            if phase.transitions and name not in finishing:
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
            if not guard.visits:
                continue
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


def untimed_guards(workflow: Workflow, source: SourceMap) -> list[Diagnostic]:
    """PF209: an ``auto`` transition's guard reads ``seconds_in_phase`` in a way whose
    moment cannot be derived (phaseflow.expr.time_terms): no timer fires it, so it is
    looked at only when something else happens (a message, a tool's result)."""
    found: list[Diagnostic] = []
    for name, nodes in source.phases.items():
        for index, (transition, item, _to) in enumerate(nodes.transitions):
            when = transition.when
            if when is None or transition.trigger != "auto" or SECONDS not in when.source:
                continue
            problem = time_moments(when.source).problem
            if not problem:
                continue
            at: Node = item
            if isinstance(item, MappingNode):
                at = item.get("when") or item
            found.append(source.diagnostic(
                at, "PF209",
                f"phase '{name}': transition {index + 1}: {problem}, so no timer "
                f"fires it (it is looked at only when something else happens: a message, "
                f"a tool's result); compare {SECONDS} alone with a number "
                f"({SECONDS} >= 600) or write 'after: 10m' on the transition"))
    return found


#: The graph checks, in the order they run.
GRAPH_CHECKS: tuple[Callable[[Workflow, SourceMap], list[Diagnostic]], ...] = (
    unknown_initial,
    transition_checks,
    endings,
    reachability,
    unknown_visits,
    untimed_guards,
)


def check_graph(workflow: Workflow, source: SourceMap) -> list[Diagnostic]:
    """Every graph check's diagnostics, in order."""
    return [d for check in GRAPH_CHECKS for d in check(workflow, source)]
