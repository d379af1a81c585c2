"""The reference checks (PF301, PF303, PF400-PF409): does every name a phase uses name
something the workflow declares, can every required key be produced, does the model
collect only what no tool is meant to write, and does no tool take a built-in's name?

Each check is a function of the compiled workflow and its :class:`SourceMap` (for the
positions) to a list of diagnostics; :func:`check_references` runs them in order, and
:func:`check_registry` runs when the workflow is loaded with a registry of callables.
The state-key warnings run only when the file declares ``state`` (the spec: declaring it
switches them on), except PF406: a collected key needs a declared type, so it is an error
with or without ``state``. The tool checks run only when there is a ``tools`` catalogue,
except PF409: a phase's ``tools`` naming a built-in is a mistake with or without one.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from phaseflow.expr.describe import clip, did_you_mean
from phaseflow.spec.builtin_tools import BUILTIN_TOOLS, GO_TO_PHASE, OFFERED_WHEN
from phaseflow.spec.diagnostics import Diagnostic
from phaseflow.spec.model import CallEffect, Phase, Workflow
from phaseflow.spec.name_positions import guard_read_offset, template_read_offset
from phaseflow.spec.schema import type_name
from phaseflow.spec.sourcemap import SourceMap
from phaseflow.spec.yamlnodes import Node, Scalar, Sequence, resolve_plain
from phaseflow.template import Template

__all__ = [
    "REFERENCE_CHECKS",
    "TYPE_CHECKS",
    "builtin_phase_tools",
    "builtin_tool_names",
    "check_references",
    "check_registry",
    "collected_tool_writes",
    "mistyped_sets",
    "undeclared_collect",
    "undeclared_keys",
    "undeclared_reads",
    "unknown_tools",
    "unproducible_requires",
]


#: Whether a value fits a declared state key type: a ``default`` that does not is PF103,
#: a ``set`` effect that writes one is PF305. ``true``/``false`` are not numbers.
TYPE_CHECKS: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
    "any": lambda v: True,
}


def unknown_tools(workflow: Workflow, source: SourceMap) -> list[Diagnostic]:
    """PF400: a phase names a tool (or a pattern matching none) not in the catalogue."""
    tools = workflow.tools
    if tools is None:
        return []
    found: list[Diagnostic] = []
    # A workflow names the same tools again and again: a name found in the catalogue (and
    # no pattern) is remembered, so the next use of it costs one lookup.
    known: set[str] = set()
    for name, nodes in source.phases.items():
        for tool_name, node in nodes.tools:
            if tool_name in known:
                continue
            if "*" in tool_name or "?" in tool_name or "[" in tool_name:
                if not any(fnmatch.fnmatchcase(t, tool_name) for t in tools):
                    found.append(
                        source.diagnostic(
                            node,
                            "PF400",
                            f"phase '{name}': tool pattern '{clip(tool_name)}' matches no "
                            "tool in the catalogue",
                        )
                    )
            elif tool_name in tools:
                known.add(tool_name)
            elif tool_name not in BUILTIN_TOOLS:  # a built-in is PF409
                hint = did_you_mean(tool_name, tools) or (
                    " (the catalogue has: " + ", ".join(sorted(tools)) + ")"
                    if 0 < len(tools) <= 12
                    else ""
                )
                found.append(
                    source.diagnostic(
                        node, "PF400", f"phase '{name}': unknown tool '{clip(tool_name)}'{hint}"
                    )
                )
    return found


def builtin_tool_names(workflow: Workflow, source: SourceMap) -> list[Diagnostic]:
    """PF408: a catalogue tool has the name of a built-in tool. The session offers its
    own tool of that name, so the model would see two and the host's would never run;
    reported at the tool's name in the catalogue."""
    tools = workflow.tools
    if not tools:
        return []
    found: list[Diagnostic] = []
    for name in BUILTIN_TOOLS:
        tool = tools.get(name)
        if tool is None:
            continue
        line, column = (tool.position.line, tool.position.column) if tool.position else (1, 1)
        found.append(
            Diagnostic(
                source.path,
                line,
                column,
                "PF408",
                f"tool '{name}' has the name of a built-in tool: the session offers its own "
                f"'{name}' {OFFERED_WHEN[name]}, so the model would be offered two tools "
                f"named '{name}' and this one would never run; rename it (a name may have "
                f"a namespace, such as 'crm.{name}'), and the phases' 'tools' entries "
                "that name it",
            )
        )
    return found


def builtin_phase_tools(workflow: Workflow, source: SourceMap) -> list[Diagnostic]:
    """PF409: a phase's ``tools`` names a built-in tool that the catalogue does not
    define (one it defines is PF408). ``tools`` chooses among the host's tools; the
    session offers a built-in whatever it lists, so the entry does nothing, and when the
    phase gives no reason to offer the built-in (no ``model`` transition, no ``collect``)
    the author expected a tool the model will never see."""
    catalogue = workflow.tools
    found: list[Diagnostic] = []
    for name, nodes in source.phases.items():
        for tool_name, node in nodes.tools:
            if tool_name not in BUILTIN_TOOLS or (catalogue and tool_name in catalogue):
                continue
            phase = workflow.phases.get(name)
            found.append(
                source.diagnostic(
                    node,
                    "PF409",
                    f"phase '{name}': '{tool_name}' is a built-in tool, which 'tools' does "
                    f"not govern: the session offers it {OFFERED_WHEN[tool_name]}"
                    f"{_builtin_hint(tool_name, phase)}; remove it from 'tools'",
                )
            )
    return found


def _builtin_hint(tool_name: str, phase: Phase | None) -> str:
    """Why the model will never see ``tool_name`` in ``phase``, when it will not."""
    if phase is None:
        return ""
    if tool_name == GO_TO_PHASE and not any(t.trigger == "model" for t in phase.transitions):
        return " (this phase has none, so the model never sees it here)"
    if tool_name != GO_TO_PHASE and not phase.collect:
        return " (this phase collects nothing, so the model never sees it here)"
    return ""


def _producible(workflow: Workflow, source: SourceMap) -> set[str]:
    """The keys something can put into the state: a default, a tool's ``writes``, a
    preparation's or a ``call`` effect's ``produces``, a ``set`` effect, a phase's
    ``collect`` (the model)."""
    producible: set[str] = {k for k, s in workflow.state.items() if s.has_default}
    for tool in (workflow.tools or {}).values():
        producible.update(tool.writes)
    for nodes in source.phases.values():
        producible.update(k for k, _ in nodes.produces)
        producible.update(k for k, _ in nodes.call_produces)
        producible.update(nodes.sets)
        producible.update(k for k, _ in nodes.collect)
    return producible


def unproducible_requires(workflow: Workflow, source: SourceMap) -> list[Diagnostic]:
    """PF402: a required key nothing can produce (only with a tool catalogue: without
    one, phaseflow cannot know what tools write)."""
    if workflow.tools is None:
        return []
    if not any(nodes.requires for nodes in source.phases.values()):
        return []  # nothing required: the producible keys are not needed
    producible = _producible(workflow, source)
    declared = workflow.state
    # a 'call' effect that declares nothing may be what returns it (the usual surprise)
    undeclared_call = any(isinstance(e, CallEffect) and e.produces is None
                          for phase in workflow.phases.values()
                          for e in (*phase.on_enter, *phase.on_exit))
    found: list[Diagnostic] = []
    for name, nodes in source.phases.items():
        for key, node in nodes.requires:
            # an undeclared key is PF401 already: probably a typo, not news
            undeclared = source.state_declared and key not in declared
            if key not in producible and not undeclared:
                found.append(
                    source.diagnostic(
                        node,
                        "PF402",
                        f"phase '{name}' requires '{clip(key)}', but nothing can produce "
                        "it: no default, no tool writes it, no preparation or 'call' effect "
                        "produces it, no 'set' effect sets it, no phase collects it"
                        + (f"; if a 'call' effect returns it, declare it there: produces: "
                           f"[{clip(key)}]" if undeclared_call else ""),
                    )
                )
    return found


def undeclared_keys(workflow: Workflow, source: SourceMap) -> list[Diagnostic]:
    """PF401, PF403, PF404: a list of state keys names one that is not declared."""
    if not source.state_declared:
        return []
    declared = workflow.state
    found: list[Diagnostic] = []
    for name, nodes in source.phases.items():
        if not (nodes.requires or nodes.needs or nodes.produces or nodes.call_produces
                or nodes.clear or nodes.unset):
            continue  # (most phases)
        for label, code, items in (
            ("requires", "PF401", nodes.requires),
            ("needs", "PF401", nodes.needs),
            ("preparation produces", "PF403", nodes.produces),
            ("'call' effect produces", "PF403", nodes.call_produces),
            ("clear_on_enter", "PF404", nodes.clear),
            ("unset", "PF404", nodes.unset),
        ):
            for key, node in items:
                if key not in declared:
                    found.append(
                        source.diagnostic(
                            node,
                            code,
                            f"phase '{name}': {label} names undeclared state key "
                            f"'{clip(key)}'{did_you_mean(key, declared)}",
                        )
                    )
    return found


def undeclared_collect(workflow: Workflow, source: SourceMap) -> list[Diagnostic]:
    """PF406: ``collect`` names an undeclared state key. The model fills a collected key
    with whatever it heard, so the key needs a declared type for the session to check the
    value against; without ``state`` at all, every collected key is undeclared."""
    declared = workflow.state
    found: list[Diagnostic] = []
    for name, nodes in source.phases.items():
        for key, node in nodes.collect:
            if key not in declared:
                hint = did_you_mean(key, declared) or (
                    f"; declare it under 'state' with its type (state: {{{clip(key)}: "
                    "{type: string}})"
                )
                found.append(
                    source.diagnostic(
                        node,
                        "PF406",
                        f"phase '{name}': collect names undeclared state key '{clip(key)}' "
                        f"(a key the model fills needs a declared type){hint}",
                    )
                )
    return found


def collected_tool_writes(workflow: Workflow, source: SourceMap) -> list[Diagnostic]:
    """PF407: a phase collects a key that a catalogued tool ``writes``. A tool that writes
    a key is usually what establishes it (a verified customer id, a looked-up amount);
    letting the model fill it too would let it skip the verification."""
    tools = workflow.tools
    if not tools:
        return []
    writers: dict[str, list[str]] = {}
    for tool in tools.values():
        for key in tool.writes:
            writers.setdefault(key, []).append(tool.name)
    found: list[Diagnostic] = []
    for name, nodes in source.phases.items():
        for key, node in nodes.collect:
            if key not in writers:
                continue
            names = sorted(writers[key])
            which = (
                f"tool '{clip(names[0])}' writes"
                if len(names) == 1
                else "tools " + ", ".join(f"'{clip(n)}'" for n in names[:5]) + " write"
            )
            found.append(
                source.diagnostic(
                    node,
                    "PF407",
                    f"phase '{name}' collects '{clip(key)}', which {which}: the model could "
                    "write what the tool is meant to verify; remove it from 'collect' (or "
                    "from the tool's 'writes')",
                )
            )
    return found


def _template_reads(
    template: Template, node: Node, source: SourceMap, declared: Mapping[str, Any], what: str
) -> list[Diagnostic]:
    """PF303 for each undeclared key ``template`` reads, at the key where it is written."""
    return [
        source.diagnostic_in(
            node,
            template_read_offset(template.source, key),
            "PF303",
            f"{what} undeclared state key '{clip(key)}'{did_you_mean(key, declared)}",
        )
        for key in sorted(k for k in template.reads if k not in declared)
    ]


def undeclared_reads(workflow: Workflow, source: SourceMap) -> list[Diagnostic]:
    """PF301 (a guard) and PF303 (a template) read a state key that is not declared."""
    if not source.state_declared:
        return []
    declared = workflow.state
    found: list[Diagnostic] = []
    # A compiled guard is shared by every condition written the same way: one that reads
    # only declared keys is remembered (by identity: each is alive until the end).
    clean: set[int] = set()
    for name, nodes in source.phases.items():
        for guard, node in nodes.guards:
            if id(guard) in clean:
                continue
            undeclared = sorted(k for k in guard.reads if k not in declared)
            if not undeclared:
                clean.add(id(guard))
            for key in undeclared:
                found.append(
                    source.diagnostic_in(
                        node,
                        guard_read_offset(guard.source, key),
                        "PF301",
                        f"phase '{name}': guard '{clip(guard.source.strip())}' reads "
                        f"undeclared state key '{clip(key)}'{did_you_mean(key, declared)}",
                    )
                )
        for template, node in nodes.templates:
            found.extend(_template_reads(template, node, source, declared,
                                         f"phase '{name}': instructions read"))
    for template, node in source.navigation_templates:
        found.extend(_template_reads(template, node, source, declared,
                                     "navigation template reads"))
    return found


def _type_hint(kind: str, value: Any, node: object) -> str:
    """What the author probably meant, for the common mistakes."""
    if kind == "boolean" and isinstance(value, str) and value.lower() in _BOOLEAN_WORDS:
        return (
            f"; '{value}' is a string in YAML 1.2 (only true and false are booleans): "
            f"write {'true' if _BOOLEAN_WORDS[value.lower()] else 'false'}"
        )
    quoted = isinstance(node, Scalar) and node.style in ("'", '"')
    numeric = kind in ("number", "integer") and isinstance(value, str) and quoted
    if numeric and TYPE_CHECKS[kind](_number(value)):
        return "; it is quoted, so it is a string: write it without the quotes"
    return ""


_BOOLEAN_WORDS = {"yes": True, "no": False, "on": True, "off": False, "y": True, "n": False}


def _number(text: str) -> object:
    return resolve_plain(text.strip())


def mistyped_sets(workflow: Workflow, source: SourceMap) -> list[Diagnostic]:
    """PF305: a ``set`` effect (``on_enter``, ``on_exit``, a preparation) writes a value
    that does not fit the key's declared type, at the value. ``null`` fits every type: it
    makes the key absent, which a conversation always allows."""
    declared = workflow.state
    found: list[Diagnostic] = []
    for name, nodes in source.phases.items():
        for key, node in nodes.set_values:
            spec = declared.get(key)
            if spec is None or spec.type == "any":
                continue
            # only a collection's kind matters: never build (or print) a large value
            value: Any = (
                node.value if isinstance(node, Scalar)
                else [] if isinstance(node, Sequence) else {}
            )
            if value is None or TYPE_CHECKS[spec.type](value):
                continue
            shown = f" {clip(node.text, 40)!r}" if isinstance(node, Scalar) else ""
            found.append(
                source.diagnostic(
                    node,
                    "PF305",
                    f"phase '{name}': 'set' writes {type_name(value)}{shown} to state key "
                    f"'{clip(key)}', which is declared {spec.type}"
                    f"{_type_hint(spec.type, value, node)}",
                )
            )
    return found


#: The reference checks, in the order they run.
REFERENCE_CHECKS: tuple[Callable[[Workflow, SourceMap], list[Diagnostic]], ...] = (
    unknown_tools,
    builtin_tool_names,
    builtin_phase_tools,
    unproducible_requires,
    undeclared_keys,
    undeclared_collect,
    collected_tool_writes,
    undeclared_reads,
    mistyped_sets,
)


def check_references(workflow: Workflow, source: SourceMap) -> list[Diagnostic]:
    """Every reference check's diagnostics, in order."""
    return [d for check in REFERENCE_CHECKS for d in check(workflow, source)]


def check_registry(source: SourceMap, registry: Iterable[str]) -> list[Diagnostic]:
    """PF405: every ``call`` names a callable the host registered."""
    known = set(registry)
    return [
        source.diagnostic(
            node,
            "PF405",
            f"phase '{name}': call '{clip(call)}' names no callable in the host's "
            f"registry{did_you_mean(call, known)}",
        )
        for name, nodes in source.phases.items()
        for call, node in nodes.calls
        if call not in known
    ]
