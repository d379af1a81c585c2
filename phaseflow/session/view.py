"""Where the conversation is, as the model is shown it: the offered tools and the
system text, built from the machine before every request.

One rule for "what may the model use now": the workflow's catalogue filtered by the
current phase's ``tools`` (globs expanded by the machine), restricted to tools the host
implemented, plus the built-ins ``go_to_phase`` (when the phase has ``model``
transitions whose ``when`` holds now) and ``record`` (when the phase ``collect``s keys).
The session core refuses any call of a tool not in this list, so what is offered and
what may run can never differ.
"""

from __future__ import annotations

from collections.abc import Mapping
from fnmatch import fnmatchcase
from typing import Any

from phaseflow.machine.machine import PhaseMachine
from phaseflow.machine.navigation import FINAL_PHASE_NOTE
from phaseflow.providers.protocol import ToolSpec
from phaseflow.session.core import GO_TO_PHASE, RECORD
from phaseflow.session.values import OfferedTool, PhaseView
from phaseflow.spec.model import CallEffect, Phase, StateKey, Workflow, tree_catalogue
from phaseflow.tools.arguments import ArgumentValidator, compile_validator
from phaseflow.tools.function import FunctionTool

#: the JSON Schema of a value of each declared state type (``record``'s parameters)
_TYPE_SCHEMAS: dict[str, dict[str, Any]] = {
    "string": {"type": "string"},
    "number": {"type": "number"},
    "integer": {"type": "integer"},
    "boolean": {"type": "boolean"},
    "array": {"type": "array"},
    "object": {"type": "object"},
    "any": {},
}


def tree_tool_names(workflow: Workflow, tools: Mapping[str, FunctionTool]
                    ) -> tuple[str, ...]:
    """:func:`tool_names` of the whole tree of workflows ``workflow`` uses: its
    catalogue's, then each callee's new ones; the host's when none has a catalogue."""
    catalogue = tree_catalogue(workflow)
    return tuple(catalogue) if catalogue is not None else tuple(tools)


def tool_names(workflow: Workflow, tools: Mapping[str, FunctionTool]) -> tuple[str, ...]:
    """Every tool the session could ever offer, in a stable order: the catalogue's when
    the workflow has one, else the host's."""
    if workflow.tools is not None:
        return tuple(workflow.tools)
    return tuple(tools)


class ViewCache:
    """What a phase offers that does not depend on the state (the host tools it allows,
    their compiled argument checks, its ``record`` tool), worked out once per phase for
    an agent: a view is built before every request, and only ``go_to_phase`` (whose
    targets are the model moves whose ``when`` holds now) depends on the state."""

    __slots__ = ("phases", "workflow")

    def __init__(self) -> None:
        self.phases: dict[str, tuple[tuple[OfferedTool, ...], dict[str, str],
                                     OfferedTool | None, bool]] = {}
        #: every tool of the workflow, as offered with ``offer_tools="workflow"``
        self.workflow: tuple[ToolSpec, ...] | None = None

    def clear(self) -> None:
        """Forget what was worked out (the host's tools changed)."""
        self.phases.clear()
        self.workflow = None


def _host_tool(name: str, fn: FunctionTool, workflow: Workflow) -> OfferedTool:
    """A host tool as offered: the catalogue's schema when it declares ``parameters``
    (which the workflow's authors reviewed), else the function's."""
    entry = workflow.tools.get(name) if workflow.tools is not None else None
    parameters: Mapping[str, Any] = fn.parameters
    description = fn.description
    approval = False
    writes: tuple[str, ...] = ()
    read_only = False
    check: ArgumentValidator = fn.validate
    if entry is not None:
        declared = entry.parameters_json()
        if declared is not None:
            parameters = declared
            check = compile_validator(declared)
        description = description or (entry.description or "")
        approval = entry.approval == "always"
        writes = entry.writes
        read_only = entry.read_only
    types = {k: workflow.state[k].type for k in writes if k in workflow.state}
    return OfferedTool(name, description or name, parameters, approval, writes, read_only,
                       check, types)


def _static(machine: PhaseMachine, workflow: Workflow, tools: Mapping[str, FunctionTool]
            ) -> tuple[tuple[OfferedTool, ...], dict[str, str], OfferedTool | None, bool]:
    """The current phase's host tools (the catalogue's when it declares ``parameters``,
    which the workflow's authors reviewed, else the function's schema) and ``collect``."""
    phase = machine.current_phase
    offered: list[OfferedTool] = []
    for name in tool_names(workflow, tools):
        fn = tools.get(name)
        if fn is None or not machine.tool_allowed(name):
            continue
        offered.append(_host_tool(name, fn, workflow))
    collect: dict[str, str] = {}
    if phase is not None and phase.collect:
        for key in phase.collect:
            state_key = workflow.state.get(key)
            collect[key] = state_key.type if state_key is not None else "any"
    record = _record_tool(collect, workflow.state) if collect else None
    return tuple(offered), collect, record, phase is not None and _quiet(phase, workflow)


def _quiet(phase: Phase, workflow: Workflow) -> bool:
    """No boundary from ``phase`` can call the host: no ``call`` effect when leaving it,
    nor when entering a phase one of its transitions leads to, nor in the preparations
    of such a phase (the machine takes at most one transition per boundary)."""
    if any(isinstance(e, CallEffect) for e in phase.on_exit):
        return False
    for t in phase.transitions:
        target = workflow.phases.get(t.to)
        if target is None:
            return False
        if any(isinstance(e, CallEffect) for e in target.on_enter) or any(
                isinstance(p.effect, CallEffect) for p in target.prepare):
            return False
    return True


def phase_view(machine: PhaseMachine, state: Mapping[str, Any], workflow: Workflow,
               tools: Mapping[str, FunctionTool], cache: ViewCache | None = None
               ) -> PhaseView:
    phase = machine.current_phase
    terminal = phase is None or phase.terminal
    if terminal:
        return PhaseView(machine.current, True, (), {})
    cache = cache if cache is not None else ViewCache()
    key = machine.current
    inner = machine.workflow
    if inner is not None and inner is not workflow:  # inside a call, or handed off
        workflow, key = inner, f"{inner.name}\x00{key}"  # its catalogue, its phases
    known = cache.phases.get(key)
    if known is None:
        known = cache.phases[key] = _static(machine, workflow, tools)
    offered, collect, record, quiet = known
    move = _go_to_phase(machine, state)
    extra: list[OfferedTool] = [] if move is None else [move]
    if record is not None:
        extra.append(record)
    return PhaseView(machine.current, False, offered + tuple(extra) if extra else offered,
                     collect, quiet)


def _go_to_phase(machine: PhaseMachine, state: Mapping[str, Any]) -> OfferedTool | None:
    targets: list[str] = []
    for target, status in machine.model_moves(state):
        if status.stopped_by != "when" and target not in targets:
            targets.append(target)
    if not targets:
        return None
    return _move_tool(targets)


def _move_tool(targets: list[str]) -> OfferedTool:
    return OfferedTool(
        GO_TO_PHASE,
        "Move the conversation to another phase. Call it when this phase's goal is met and "
        "the conversation should continue in one of the listed phases; the result says "
        "whether the move will happen.",
        {
            "type": "object",
            "properties": {
                "phase": {"type": "string", "enum": targets,
                          "description": "the phase to move to"},
                "reason": {"type": "string", "description": "why, in a few words"},
            },
            "required": ["phase"],
            "additionalProperties": False,
        },
    )


def _record_tool(collect: Mapping[str, str], state: Mapping[str, StateKey]) -> OfferedTool:
    properties: dict[str, Any] = {}
    for key, declared in collect.items():
        schema = dict(_TYPE_SCHEMAS.get(declared, {}))
        entry = state.get(key)
        if entry is not None and entry.description:
            schema["description"] = entry.description
        properties[key] = schema
    return OfferedTool(
        RECORD,
        "Record what the user told you, as the values of these keys. Record only what "
        "the user actually said.",
        {"type": "object", "properties": properties, "additionalProperties": False},
    )


def tool_specs(view: PhaseView) -> tuple[ToolSpec, ...]:
    return tuple(ToolSpec(t.name, t.description, t.parameters) for t in view.tools)


def _allows(phase: Phase, name: str) -> bool:
    """Does a non-terminal ``phase`` let the model use tool ``name`` (its list, or a
    pattern in it)?"""
    if phase.terminal:
        return False
    if phase.tools is None:
        return True
    return name in phase.tools or any(fnmatchcase(name, p) for p in phase.tools)


def workflow_specs(workflow: Workflow, tools: Mapping[str, FunctionTool],
                   cache: ViewCache | None = None) -> tuple[ToolSpec, ...]:
    """Every tool any phase of the workflow may offer, in one stable order (what
    ``offer_tools="workflow"`` offers in every request, so a phase change leaves the
    tool definitions, and what follows them, as they were): the host's tools in
    :func:`tool_names` order that some phase allows, then ``go_to_phase`` with every
    ``model`` target of the workflow, then ``record`` with every collected key. A
    workflow that calls or hands off to others (``uses:``) offers theirs too, after its
    own (each tool once, as the first workflow that has it declares it), so a call
    keeps the prefix as a phase change does. The current phase's view still decides
    what may run (a narrower ``go_to_phase`` and ``record`` check the arguments)."""
    if cache is not None and cache.workflow is not None:
        return cache.workflow
    tree = (workflow, *workflow.used())  # callees' too
    phases = [p for w in tree for p in w.phases.values()]
    offered: list[OfferedTool] = []
    for name in tree_tool_names(workflow, tools):
        fn = tools.get(name)
        if fn is not None and any(_allows(p, name) for p in phases):
            owner = next((w for w in tree if w.tools is not None and name in w.tools),
                         workflow)
            offered.append(_host_tool(name, fn, owner))
    targets: list[str] = []
    collect: dict[str, str] = {}
    declared: dict[str, StateKey] = {}
    for w in tree:
        for phase in w.phases.values():
            for t in phase.transitions:
                if t.trigger == "model" and t.to not in targets:
                    targets.append(t.to)
            for key in phase.collect or ():
                state_key = w.state.get(key)
                collect.setdefault(key, state_key.type if state_key is not None else "any")
                if state_key is not None:
                    declared.setdefault(key, state_key)
    if targets:
        offered.append(_move_tool(targets))
    if collect:
        offered.append(_record_tool(collect, declared))
    specs = tuple(ToolSpec(t.name, t.description, t.parameters) for t in offered)
    if cache is not None:
        cache.workflow = specs
    return specs


#: said in plan mode, after the navigation block
PLAN_MODE_NOTE = (
    "Plan mode: only read-only tools run now. Call the other tools you would use, in the "
    "order you would use them: each call is listed in a plan for the user to review, not "
    "run. Then say what the plan does.")


def context_text(machine: PhaseMachine, state: Mapping[str, Any], *, final: bool,
                 plan: bool = False, allowed: tuple[str, ...] | None = None) -> str:
    """What changes with the phase and the state, as one block: the phase's rendered
    instructions, the navigation block (and, in a terminal phase, that it is the final
    one; in plan mode, what plan mode means; when every tool of the workflow is offered,
    the ``allowed`` ones this phase may call). It goes at the end of a request
    (:attr:`ProviderRequest.context`), so the prefix before it stays the same."""
    parts: list[str] = []
    instructions = machine.render_instructions(state)
    if instructions and instructions.strip():
        parts.append(instructions.strip())
    navigation = machine.describe_navigation(state)
    if navigation.strip():
        parts.append(navigation.strip())
    if final and FINAL_PHASE_NOTE not in navigation:
        parts.append(FINAL_PHASE_NOTE)  # said once: a terminal phase's block says it
    if plan and not final:
        parts.append(PLAN_MODE_NOTE)
    if allowed is not None:
        parts.append(allowed_note(() if final else allowed))
    return "\n\n".join(parts)


def allowed_note(allowed: tuple[str, ...]) -> str:
    """Which of the offered tools this phase lets the model call (said when every tool
    of the workflow is offered: a call of another one is refused)."""
    if not allowed:
        return "Tools: none may be called in this phase."
    return ("Tools: only these may be called in this phase (any other is refused): "
            + ", ".join(allowed) + ".")


def system_text(system: str, machine: PhaseMachine, state: Mapping[str, Any], *,
                final: bool, plan: bool = False) -> str:
    """One system message: the host's text, then :func:`context_text` (the layout of
    ``context_position="system"``)."""
    return joined(system, context_text(machine, state, final=final, plan=plan))


def joined(system: str, context: str) -> str:
    """The host's text and the changing block as one system text."""
    host = system.strip()
    if not host:
        return context
    return f"{host}\n\n{context}" if context else host
