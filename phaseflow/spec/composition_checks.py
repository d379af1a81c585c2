"""The checks across files (PF500-PF507): each a function of the linked tree.

:mod:`phaseflow.spec.tree` loads the files and hands over, for every workflow that
compiled, what it uses (:class:`Linked`); each check below reports in the file where the
mistake is written, at its position. PF508 (a name defined differently in a shared file)
and PF509 (a shared file that cannot be read) are reported while a file is compiled,
where its imports are read. Nothing here recurses: the cycle search keeps its own stack.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from phaseflow.expr.describe import did_you_mean
from phaseflow.spec.diagnostics import Diagnostic
from phaseflow.spec.model import Input, Position, StateKey, Workflow
from phaseflow.spec.results import CheckResult

__all__ = ["COMPOSITION_CHECKS", "Linked", "check_composition"]


@dataclass(frozen=True, slots=True)
class Linked:
    """A workflow of the tree: the path it was reached by, and, for each name of its
    ``uses``, the path it resolves to and that path's real path."""

    path: str
    workflow: Workflow
    used: Mapping[str, tuple[str, str]]


Tree = Mapping[str, Linked]
Results = Mapping[str, CheckResult]


def _at(position: Position | None, code: str, message: str, path: str) -> Diagnostic:
    if position is None:
        return Diagnostic(path, 1, 1, code, message)
    return Diagnostic(position.path, position.line, position.column, code, message)


def _callee(linked: Linked, name: str, tree: Tree) -> Linked | None:
    entry = linked.used.get(name)
    return None if entry is None else tree.get(entry[1])


def missing_files(tree: Tree, results: Results) -> list[Diagnostic]:
    """PF500 (a used file is missing or unreadable) and PF501 (it has errors)."""
    found: list[Diagnostic] = []
    for linked in tree.values():
        workflow = linked.workflow
        for name, (full, real) in linked.used.items():
            at = workflow.use_positions.get(name)
            result = results.get(real)
            if result is None:
                found.append(_at(at, "PF500", f"uses '{name}': no workflow file at "
                                 f"'{full}' (the path is relative to this file)", linked.path))
            elif result.workflow is None:
                errors = [d for d in result.diagnostics if d.severity == "error"]
                first = errors[0] if errors else None
                why = (f"{first.path}:{first.line}:{first.column}: {first.code} "
                       f"{first.message}" if first else "it cannot be read")
                found.append(_at(at, "PF501", f"uses '{name}': '{full}' has "
                                 f"{len(errors)} error(s) and cannot be used; the first: {why}",
                                 linked.path))
    return found


def unknown_names(tree: Tree, results: Results) -> list[Diagnostic]:
    """PF503: a ``call`` or ``handoff`` names a workflow that ``uses`` does not."""
    found: list[Diagnostic] = []
    for linked in tree.values():
        workflow = linked.workflow
        known = sorted(workflow.uses)
        for phase in workflow.phases.values():
            if phase.call is not None and phase.call.workflow not in workflow.uses:
                found.append(_at(phase.call.position, "PF503",
                                 f"phase '{phase.name}': call '{phase.call.workflow}' names no "
                                 f"workflow of 'uses'{did_you_mean(phase.call.workflow, known)}",
                                 linked.path))
            for t in phase.transitions:
                if t.handoff is not None and t.handoff.workflow not in workflow.uses:
                    found.append(_at(t.handoff.position, "PF503",
                                     f"phase '{phase.name}': handoff '{t.handoff.workflow}' "
                                     "names no workflow of 'uses'"
                                     f"{did_you_mean(t.handoff.workflow, known)}", linked.path))
    return found


def call_cycles(tree: Tree, results: Results) -> list[Diagnostic]:
    """PF502: a workflow calls itself, directly or through others (a symlink to itself
    included: files are known by their real paths). Reported at the ``call`` that closes
    the cycle. A depth-first search with its own stack, so a chain of any length is
    walked without recursion."""
    found: list[Diagnostic] = []
    # real path -> [(phase, call position, callee real path)]
    calls: dict[str, list[tuple[str, Position | None, str]]] = {}
    for real, linked in tree.items():
        edges = []
        for phase in linked.workflow.phases.values():
            call = phase.call
            if call is not None and call.workflow in linked.used:
                edges.append((phase.name, call.position, linked.used[call.workflow][1]))
        calls[real] = edges
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    for start in calls:
        if start in state:
            continue
        stack: list[tuple[str, int]] = [(start, 0)]
        state[start] = 1
        while stack:
            node, i = stack[-1]
            edges = calls.get(node, [])
            if i >= len(edges):
                state[node] = 2
                stack.pop()
                continue
            stack[-1] = (node, i + 1)
            from_phase, position, callee = edges[i]
            mark = state.get(callee)
            if mark == 1:
                names = [tree[n].workflow.name for n, _ in stack]
                cut = [n for n, _ in stack].index(callee)
                loop = " -> ".join([*names[cut:], tree[callee].workflow.name])
                found.append(_at(position, "PF502",
                                 f"phase '{from_phase}': this call closes a cycle of calls "
                                 f"({loop}): a workflow may not call itself, directly or "
                                 "through others",
                                 tree[node].path))
            elif mark is None and callee in calls:
                state[callee] = 1
                stack.append((callee, 0))
    return found


_COMPATIBLE = {("integer", "number")}


def _type_of(key: StateKey | None) -> str | None:
    return None if key is None or key.type == "any" else key.type


def _fits(source: str | None, target: str | None) -> bool:
    return (source is None or target is None or source == target
            or (source, target) in _COMPATIBLE)


def _literal_type(value: object) -> str:
    from phaseflow.spec.schema import type_name

    return type_name(value)


def _inputs(inputs: Mapping[str, Input], positions: Mapping[str, Position],
            caller: Workflow, callee: Workflow, what: str, path: str) -> list[Diagnostic]:
    """PF504/PF505 of one ``with``: each key a declared key of the callee, each value
    of a type that can match it."""
    from phaseflow.spec.reference_checks import TYPE_CHECKS

    found: list[Diagnostic] = []
    for key, given in inputs.items():
        at = positions.get(key)
        target = callee.state.get(key)
        if callee.state and target is None:
            found.append(_at(at, "PF504", f"{what}: 'with' sets '{key}', which "
                             f"'{callee.name}' does not declare"
                             f"{did_you_mean(key, sorted(callee.state))}", path))
            continue
        if given.key is not None:
            source = caller.state.get(given.key)
            if caller.state and source is None:
                found.append(_at(at, "PF504", f"{what}: 'with' reads 'state.{given.key}', "
                                 "which this workflow does not declare"
                                 f"{did_you_mean(given.key, sorted(caller.state))}", path))
            elif not _fits(_type_of(source), _type_of(target)):
                found.append(_at(at, "PF505", f"{what}: 'with' copies '{given.key}' "
                                 f"({_type_of(source)}) into '{key}', which "
                                 f"'{callee.name}' declares {_type_of(target)}", path))
        elif target is not None and target.type != "any" and not (
                TYPE_CHECKS[target.type](given.value)):
            found.append(_at(at, "PF505", f"{what}: 'with' gives '{key}' a "
                             f"{_literal_type(given.value)}, which '{callee.name}' declares "
                             f"{target.type}", path))
    return found


def crossings(tree: Tree, results: Results) -> list[Diagnostic]:
    """PF504 (an input or output names an undeclared key) and PF505 (of a type that
    cannot match), for every call and hand-off whose workflow compiled."""
    found: list[Diagnostic] = []
    for linked in tree.values():
        caller = linked.workflow
        for phase in caller.phases.values():
            call = phase.call
            target = _callee(linked, call.workflow, tree) if call is not None else None
            if call is not None and target is not None:
                callee = target.workflow
                what = f"phase '{phase.name}', call '{call.workflow}'"
                found.extend(_inputs(call.inputs, call.input_positions, caller, callee,
                                     what, linked.path))
                for mine, theirs in call.returns.items():
                    at = call.return_positions.get(mine)
                    source = callee.state.get(theirs)
                    dest = caller.state.get(mine)
                    if callee.state and source is None:
                        found.append(_at(at, "PF504", f"{what}: 'returns' reads '{theirs}', "
                                         f"which '{callee.name}' does not declare"
                                         f"{did_you_mean(theirs, sorted(callee.state))}",
                                         linked.path))
                    elif caller.state and dest is None:
                        found.append(_at(at, "PF504", f"{what}: 'returns' writes '{mine}', "
                                         "which this workflow does not declare"
                                         f"{did_you_mean(mine, sorted(caller.state))}",
                                         linked.path))
                    elif not _fits(_type_of(source), _type_of(dest)):
                        found.append(_at(at, "PF505", f"{what}: 'returns' copies "
                                         f"'{theirs}' ({_type_of(source)}) into '{mine}', "
                                         f"declared {_type_of(dest)}", linked.path))
            for t in phase.transitions:
                handoff = t.handoff
                other = _callee(linked, handoff.workflow, tree) if handoff else None
                if handoff is not None and other is not None:
                    found.extend(_inputs(handoff.inputs, handoff.input_positions, caller,
                                         other.workflow,
                                         f"phase '{phase.name}', handoff '{handoff.workflow}'",
                                         linked.path))
    return found


def _returned_names(source: str) -> list[str]:
    """The strings a guard compares ``returned`` with (``returned == 'x'``,
    ``returned in ['x', 'y']``)."""
    if "returned" not in source:
        return []
    try:
        tree = ast.parse(source.strip(), mode="eval")
    except SyntaxError:
        return []
    names: list[str] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare) or len(node.comparators) != 1:
            continue
        left, right = node.left, node.comparators[0]
        if isinstance(right, ast.Name) and right.id == "returned":
            left, right = right, left
        if not (isinstance(left, ast.Name) and left.id == "returned"):
            continue
        values = right.elts if isinstance(right, ast.List | ast.Tuple) else [right]
        names.extend(v.value for v in values
                     if isinstance(v, ast.Constant) and isinstance(v.value, str))
    return names


def outcomes(tree: Tree, results: Results) -> list[Diagnostic]:
    """PF506 (a called workflow has no terminal phase: the call could never return) and
    PF507 (a guard of the calling phase branches on a terminal phase the callee lacks)."""
    found: list[Diagnostic] = []
    for linked in tree.values():
        for phase in linked.workflow.phases.values():
            call = phase.call
            target = _callee(linked, call.workflow, tree) if call is not None else None
            if call is None or target is None:
                continue
            callee = target.workflow
            terminals = sorted(n for n, p in callee.phases.items() if p.terminal)
            if not terminals:
                found.append(_at(call.position, "PF506",
                                 f"phase '{phase.name}': '{callee.name}' has no terminal "
                                 "phase, so this call could never return", linked.path))
                continue
            for t in phase.transitions:
                if t.when is None:
                    continue
                for name in _returned_names(t.when.source):
                    if name not in terminals:
                        found.append(_at(t.position, "PF507",
                                         f"phase '{phase.name}': this transition waits for "
                                         f"returned == '{name}', but '{callee.name}' has no "
                                         f"terminal phase '{name}'"
                                         f"{did_you_mean(name, terminals)} (its terminal "
                                         f"phases: {', '.join(terminals)})", linked.path))
    return found


#: The checks across files, in the order they run.
COMPOSITION_CHECKS: tuple[Callable[[Tree, Results], list[Diagnostic]], ...] = (
    missing_files,
    unknown_names,
    call_cycles,
    crossings,
    outcomes,
)


def check_composition(tree: Tree, results: Results) -> list[Diagnostic]:
    """Every check across files, in order."""
    return [d for check in COMPOSITION_CHECKS for d in check(tree, results)]
