"""From a composed YAML tree to a compiled :class:`~phaseflow.spec.model.Workflow`.

One pass over the nodes builds the model (guards and templates compiled once, every value
with its position) and reports what it sees while building (PF300, PF302, a state key's
default of the wrong type). It records the nodes of what it built in a
:class:`~phaseflow.spec.sourcemap.SourceMap`; the graph checks
(:mod:`phaseflow.spec.graph_checks`) and the reference checks
(:mod:`phaseflow.spec.reference_checks`) then run on the model and that map. The pass is
defensive: a part the schema already rejected is skipped, so one mistake never hides the
others and nothing here can raise on odd input.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable
from collections.abc import Mapping as Mapping_
from typing import Any, Protocol

from phaseflow.expr import Guard, GuardCompileError, compile_guard
from phaseflow.expr.describe import did_you_mean
from phaseflow.expr.jsonvalue import check_json, check_json_object
from phaseflow.spec.diagnostics import Diagnostic
from phaseflow.spec.durations import parse_duration, timed_guard
from phaseflow.spec.graph_checks import check_graph
from phaseflow.spec.model import (
    Call,
    CallEffect,
    Effect,
    Handoff,
    Navigation,
    Phase,
    Position,
    Preparation,
    ReplyShape,
    SetEffect,
    StateKey,
    Tool,
    Transition,
    UnsetEffect,
    Workflow,
    _compiled_phase,
    _compiled_position,
    _compiled_transition,
    parse_input,
)
from phaseflow.spec.name_positions import template_error_offset
from phaseflow.spec.reference_checks import TYPE_CHECKS, check_references, check_registry
from phaseflow.spec.scalar_positions import SourceText, offset_in
from phaseflow.spec.schema import NodeLocator, entries, type_name
from phaseflow.spec.sourcemap import PhaseNodes, SourceMap
from phaseflow.spec.yamlnodes import Mapping, Node, Scalar, Sequence, to_python
from phaseflow.template import (
    INSTRUCTION_NAMES,
    NAVIGATION_NAMES,
    Template,
    TemplateCompileError,
    TemplateOrigin,
    compile_template,
)


class SharedParts(Protocol):
    """What the shared files a workflow imports declare (see :mod:`phaseflow.spec.tree`)."""

    state: dict[str, StateKey]
    tools: dict[str, Tool] | None
    diagnostics: list[Diagnostic]

    def clashes(self, path: str, state: Mapping_[str, StateKey],
                tools: Mapping_[str, Tool] | None) -> list[Diagnostic]:
        """PF508 for each name this file defines differently from a shared file."""
        ...


#: Reads the shared files named in ``imports:`` (each name with its node) of the file at
#: ``path``.
ImportResolver = Callable[[str, list[tuple[str, Node]]], SharedParts]

#: The keys the compiler reads at each level. A test proves these equal the JSON Schema's.
TOP_KEYS = frozenset(
    {"phaseflow", "name", "description", "initial", "state", "tools", "phases", "navigation",
     "uses", "imports", "model"}
)
STATE_KEY_KEYS = frozenset({"type", "description", "default"})
TOOL_KEYS = frozenset(
    {"description", "writes", "approval", "parameters", "timeout", "idempotent", "read_only"}
)
PHASE_KEYS = frozenset(
    {
        "goal",
        "instructions",
        "needs",
        "collect",
        "requires",
        "guard",
        "prepare",
        "on_enter",
        "on_exit",
        "tools",
        "clear_on_enter",
        "terminal",
        "transitions",
        "call",
        "with",
        "returns",
        "history",
        "model",
        "reply",
    }
)
REPLY_KEYS = frozenset({"schema", "record"})
TRANSITION_KEYS = frozenset({"to", "when", "description", "trigger", "handoff", "with", "after"})
EFFECT_KEYS = frozenset({"set", "unset", "call", "with", "produces", "transcript"})
PREPARATION_KEYS = EFFECT_KEYS | {"name"}
NAVIGATION_KEYS = frozenset({"history", "template"})


class Compiler:
    """Builds one workflow from one composed file, collecting diagnostics."""

    def __init__(
        self,
        path: str,
        text: str,
        root: Mapping,
        broken_phases: Iterable[str] = (),
        imports: ImportResolver | None = None,
    ) -> None:
        self.path = path
        #: reads the shared files of ``imports:`` (spec/tree.py); ``None``: not read
        self.imports = imports
        #: phases the schema found errors inside: their transitions and ``terminal`` may be
        #: wrong, so graph warnings that depend on them would only add noise.
        self.broken_phases = set(broken_phases)
        #: the file's text, to place diagnostics inside guards and templates
        self.source_text = SourceText(text)
        self.root = root
        self.diags: list[Diagnostic] = []
        self.state: dict[str, StateKey] = {}
        self.state_declared = False
        self.tools: dict[str, Tool] | None = None
        self.phases: dict[str, Phase] = {}
        self.nodes: dict[str, PhaseNodes] = {}
        self.nav_template_nodes: list[tuple[Template, Node]] = []

    # -- helpers ---------------------------------------------------------------
    def report(self, node: Node, code: str, message: str) -> None:
        self.diags.append(Diagnostic(self.path, node.line, node.column, code, message))

    def position(self, node: Node) -> Position:
        return Position(self.path, node.line, node.column)

    @staticmethod
    def text(node: Node | None) -> str | None:
        if isinstance(node, Scalar) and isinstance(node.value, str):
            return node.value
        return None

    @staticmethod
    def names(node: Node | None) -> list[tuple[str, Node]]:
        if not isinstance(node, Sequence):
            return []
        return [
            (n.value, n) for n in node.items if isinstance(n, Scalar) and isinstance(n.value, str)
        ]

    def expr_position(self, node: Scalar, line: int, column: int) -> tuple[int, int]:
        """File position of (line, column) inside the expression held by ``node``: the
        1-based line and 0-based column the guard compiler gives, mapped through the
        scalar's source text (quotes, escapes, folding and indentation accounted for)."""
        return self.source_text.value_position(node, offset_in(node.text, line, column))

    def guard(
        self, node: Node, nodes: PhaseNodes | None, phase: str, transition: int | None = None
    ) -> Guard | None:
        """The guard of ``phase`` (its entry guard, or the ``when`` of its transition
        number ``transition``) compiled, or ``None`` after a PF300 (whose label is made
        only then: most guards compile)."""
        if isinstance(node, Scalar) and isinstance(node.value, bool):
            source = "true" if node.value else "false"
        elif isinstance(node, Scalar) and isinstance(node.value, str):
            source = node.value
        else:
            return None
        try:
            compiled = compile_guard(source)
        except GuardCompileError as exc:
            line, column = self.expr_position(node, exc.line, exc.column)
            what = (
                f"phase '{phase}' guard"
                if transition is None
                else f"phase '{phase}', transition {transition} 'when'"
            )
            self.diags.append(
                Diagnostic(self.path, line, column, "PF300", f"{what}: {exc.message}")
            )
            return None
        if nodes is not None:
            if nodes.guards:
                nodes.guards.append((compiled, node))
            else:
                nodes.guards = [(compiled, node)]
        return compiled

    def template(self, node: Node | None, names: frozenset[str], what: str) -> Template | None:
        source = self.text(node)
        if source is None or node is None:
            return None
        assert isinstance(node, Scalar)
        try:
            template = compile_template(source, names)
        except TemplateCompileError as exc:
            # at the name the error is about, or at its line's first character
            offset = template_error_offset(source, exc)
            line, column = self.source_text.value_position(node, offset)
            self.diags.append(
                Diagnostic(self.path, line, column, exc.code, f"{what}: {exc.message}")
            )
            return None
        return dataclasses.replace(template, origin=self.template_origin(node))

    def template_origin(self, node: Scalar) -> TemplateOrigin:
        """Where a template's text starts in the file, for render errors at run time: a
        block scalar's first content line and its indentation, else the scalar's first
        character (after a quote)."""
        if node.style in ("|", ">"):
            text = self.source_text.text
            start = self.source_text.index_of(node.line + 1, 1)
            end = text.find("\n", start)
            content = text[start : end if end != -1 else len(text)]
            column = len(content) - len(content.lstrip(" ")) + 1
            return TemplateOrigin(self.path, node.line + 1, column, column)
        quoted = 1 if node.style in ("'", '"') else 0
        return TemplateOrigin(self.path, node.line, node.column + quoted)

    # -- the pass --------------------------------------------------------------
    def run(self, registry: Iterable[str] | None = None) -> Workflow | None:
        """Build the workflow; ``None`` when any error was found (all are in ``diags``)."""
        top = {k.value: (k, v) for k, v in entries(self.root)}
        imported: SharedParts | None = None
        if self.imports is not None and "imports" in top:
            imported = self.imports(self.path, self.names(top["imports"][1]))
            self.diags.extend(imported.diagnostics)
            if imported.state:
                self.state_declared = True
                self.state.update(imported.state)
            if imported.tools is not None:
                self.tools = dict(imported.tools)
        if "state" in top and isinstance(top["state"][1], Mapping):
            self.state_declared = True
            for key, value in entries(top["state"][1]):
                self.state_key(key, value)
        if "tools" in top and isinstance(top["tools"][1], Mapping):
            if self.tools is None:
                self.tools = {}
            for key, value in entries(top["tools"][1]):
                self.tool(key, value)
        if imported is not None:
            self.diags.extend(imported.clashes(self.path, self.state, self.tools))
        if "phases" in top and isinstance(top["phases"][1], Mapping):
            for key, value in entries(top["phases"][1]):
                if isinstance(key.value, str) and isinstance(value, Mapping):
                    self.phase(key, value)
        navigation = Navigation()
        if "navigation" in top and isinstance(top["navigation"][1], Mapping):
            navigation = self.navigation(top["navigation"][1])
        initial_node = top.get("initial", (None, None))[1]
        initial = self.text(initial_node)
        uses: dict[str, str] = {}
        use_positions: dict[str, Position] = {}
        if "uses" in top and isinstance(top["uses"][1], Mapping):
            for key, value in entries(top["uses"][1]):
                written = self.text(value)
                if isinstance(key.value, str) and written:
                    uses[key.value] = written
                    use_positions[key.value] = self.position(value)
        imports = tuple((n, self.position(node))
                        for n, node in self.names(top.get("imports", (None, None))[1]))
        model_node = top.get("model", (None, None))[1]
        workflow = Workflow(
            name=self.text(top.get("name", (None, None))[1]) or "",
            initial=initial or "",
            phases=self.phases,
            description=self.text(top.get("description", (None, None))[1]),
            state=self.state,
            tools=self.tools,
            navigation=navigation,
            path=self.path,
            uses=uses,
            use_positions=use_positions,
            imports=imports,
            model=self.text(model_node),
            model_position=None if model_node is None else self.position(model_node),
        )
        source = SourceMap(
            self.path,
            self.nodes,
            initial,
            initial_node,
            self.state_declared,
            tuple(self.nav_template_nodes),
            frozenset(self.broken_phases),
            self.source_text,
        )
        self.diags.extend(check_graph(workflow, source))
        self.diags.extend(check_references(workflow, source))
        if registry is not None:
            self.diags.extend(check_registry(source, registry))
        if any(d.severity == "error" for d in self.diags):
            return None
        return workflow

    def state_key(self, key: Scalar, value: Node) -> None:
        if not isinstance(value, Mapping | Scalar) or (
            isinstance(value, Scalar) and value.value is not None
        ):
            return
        fields = {k.value: v for k, v in entries(value)} if isinstance(value, Mapping) else {}
        kind = self.text(fields.get("type")) or "any"
        if kind not in TYPE_CHECKS:
            kind = "any"
        has_default = "default" in fields
        default = to_python(fields["default"]) if has_default else None
        if has_default and not TYPE_CHECKS[kind](default):
            self.report(
                fields["default"],
                "PF103",
                f"state key '{key.value}': default must be of type {kind}, "
                f"not {type_name(default)}",
            )
        elif has_default:
            problem = check_json(default).problem
            if problem is not None:  # .nan and .inf: a session starts with JSON state
                self.report(fields["default"], "PF103",
                            f"state key '{key.value}': default: {problem}")
        self.state[key.value] = StateKey(
            key.value,
            kind,  # type: ignore[arg-type]  # one of TYPE_CHECKS' keys
            self.text(fields.get("description")),
            has_default,
            default,
            self.position(key),
        )

    def tool(self, key: Scalar, value: Node) -> None:
        assert self.tools is not None
        fields = {k.value: (k, v) for k, v in entries(value)} if isinstance(value, Mapping) else {}

        def get(field_name: str) -> Node | None:
            return fields[field_name][1] if field_name in fields else None

        approval = self.text(get("approval"))
        idempotent = get("idempotent")
        read_only = get("read_only")
        self.tools[key.value] = Tool(
            key.value,
            self.text(get("description")),
            tuple(n for n, _ in self.names(get("writes"))),
            "always" if approval == "always" else "never",
            self.position(key),
            self.parameters(key.value, *fields["parameters"]) if "parameters" in fields else None,
            self.timeout(key.value, get("timeout")),
            isinstance(idempotent, Scalar) and idempotent.value is True,
            isinstance(read_only, Scalar) and read_only.value is True,
        )

    def parameters(self, tool: str, key: Scalar, node: Node, label: str | None = None
                   ) -> dict[str, Any] | None:
        """A tool's ``parameters`` when it is a valid object schema using only JSON
        Schema's keywords; PF103 (invalid) or PF104 (unknown keyword) at the node a
        problem is about otherwise. The workflow schema already reported a non-mapping or
        a ``type`` other than ``object``; the meta-schema check (which imports jsonschema)
        runs only on what passed that."""
        schema = to_python(node)
        if not isinstance(schema, dict) or schema.get("type") != "object":
            return None
        from phaseflow.spec.tool_parameters import parameter_problems, unknown_keywords

        owner = label or f"tool '{tool}'"
        unknown = unknown_keywords(node, self.source_text)
        for keyword_node, _, message in unknown:
            self.report(keyword_node, "PF104", f"{owner}: {message}")
        problems = parameter_problems(schema)
        for path, message in problems:
            at, _ = NodeLocator(node).find(list(path))
            where = ".".join(str(p) for p in path)
            self.report(
                at if path else key,
                "PF103",
                f"{owner}: {'parameters' if label is None else 'schema'}"
                f"{f' at {where!r}' if where else ''} is not a valid "
                f"JSON Schema: {message}",
            )
        return None if problems or unknown else schema

    def timeout(self, tool: str, node: Node | None) -> float | None:
        """A positive, finite number of seconds, or ``None``. The schema reports a
        non-number and a number <= 0; infinity and NaN are numbers it lets through."""
        if not isinstance(node, Scalar):
            return None
        value = node.value
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            return None
        if not math.isfinite(value):
            self.report(
                node,
                "PF103",
                f"tool '{tool}': 'timeout' must be a finite number of seconds, not {value!r}; "
                "leave it out for no timeout",
            )
            return None
        return value

    def effect(self, node: Node, nodes: PhaseNodes, *, prepared: bool = False) -> Effect | None:
        """One effect; ``prepared``: a preparation's, whose ``produces`` is the
        preparation's own (read by the caller)."""
        if not isinstance(node, Mapping):
            return None
        fields = {k.value: v for k, v in entries(node)}
        chosen = [k for k in ("set", "unset", "call") if k in fields]
        if len(chosen) != 1:
            return None
        kind = chosen[0]
        position = self.position(node)
        if kind == "set":
            values = to_python(fields["set"])
            if not isinstance(values, dict):
                return None
            problem = check_json_object(values).problem
            if problem is not None:  # .nan and .inf: the state is JSON
                self.report(fields["set"], "PF103", f"'set': {problem}")
                return None
            # (a phase's lists start as shared empty tuples: see PhaseNodes)
            if not isinstance(nodes.sets, list):
                nodes.sets = []
            nodes.sets.extend(k for k in values if isinstance(k, str))
            set_node = fields["set"]
            if isinstance(set_node, Mapping):
                if not isinstance(nodes.set_values, list):
                    nodes.set_values = []
                nodes.set_values.extend((k.value, v) for k, v in entries(set_node))
            return SetEffect(values, position)
        if kind == "unset":
            keys = self.names(fields["unset"])
            if not isinstance(nodes.unset, list):
                nodes.unset = []
            nodes.unset.extend(keys)
            return UnsetEffect(tuple(k for k, _ in keys), position)
        name = self.text(fields["call"])
        if name is None:
            return None
        if not isinstance(nodes.calls, list):
            nodes.calls = []
        nodes.calls.append((name, fields["call"]))
        args = to_python(fields["with"]) if "with" in fields else {}
        produces: tuple[str, ...] | None = None
        if "produces" in fields and not prepared:
            named = self.names(fields["produces"])
            if not isinstance(nodes.call_produces, list):
                nodes.call_produces = []
            nodes.call_produces.extend(named)
            produces = tuple(k for k, _ in named)
        window = to_python(fields["transcript"]) if "transcript" in fields else None
        transcript = window if type(window) is int and window >= 0 else None
        return CallEffect(name, args if isinstance(args, dict) else {}, position, produces,
                          transcript)

    def effects(self, node: Node | None, nodes: PhaseNodes) -> tuple[Effect, ...]:
        if not isinstance(node, Sequence):
            return ()
        built = (self.effect(item, nodes) for item in node.items)
        return tuple(e for e in built if e is not None)

    def phase(self, key: Scalar, node: Mapping) -> None:
        name: str = key.value
        nodes = PhaseNodes(key)
        # One pass over the pairs into locals (a later duplicate key wins, as in a dict):
        # no per-phase dict or closure, and absent keys cost nothing.
        guard_node: Node | None = None
        instructions_node: Node | None = None
        requires_node: Node | None = None
        needs_node: Node | None = None
        collect_node: Node | None = None
        clear_node: Node | None = None
        tools_node: Node | None = None
        prepare_node: Node | None = None
        on_enter_node: Node | None = None
        on_exit_node: Node | None = None
        transitions_key: Scalar | None = None
        transitions_node: Node | None = None
        terminal_node: Node | None = None
        goal_node: Node | None = None
        call_fields: dict[str, Node] | None = None
        model_node: Node | None = None
        reply_node: Node | None = None
        for k, v in entries(node):
            field_name = k.value
            if field_name == "goal":
                goal_node = v
            elif field_name in ("call", "with", "returns", "history"):
                if call_fields is None:
                    call_fields = {}
                call_fields[field_name] = v
            elif field_name == "model":
                model_node = v
            elif field_name == "reply":
                reply_node = v
            elif field_name == "transitions":
                transitions_key, transitions_node = k, v
            elif field_name == "tools":
                tools_node = v
            elif field_name == "guard":
                guard_node = v
            elif field_name == "instructions":
                instructions_node = v
            elif field_name == "requires":
                requires_node = v
            elif field_name == "needs":
                needs_node = v
            elif field_name == "collect":
                collect_node = v
            elif field_name == "clear_on_enter":
                clear_node = v
            elif field_name == "prepare":
                prepare_node = v
            elif field_name == "on_enter":
                on_enter_node = v
            elif field_name == "on_exit":
                on_exit_node = v
            elif field_name == "terminal":
                terminal_node = v

        guard = self.guard(guard_node, nodes, name) if guard_node else None
        instructions = None
        if instructions_node is not None:
            instructions = self.template(
                instructions_node, INSTRUCTION_NAMES, f"phase '{name}' instructions"
            )
            if instructions is not None:
                nodes.templates = [(instructions, instructions_node)]
        # Each list is usually absent: a phase's lists stay the shared empty tuples then.
        requires: tuple[str, ...] = ()
        needs: tuple[str, ...] = ()
        collect: tuple[str, ...] = ()
        clear_on_enter: tuple[str, ...] = ()
        tools: tuple[str, ...] | None = None
        if requires_node is not None:
            nodes.requires = self.names(requires_node)
            requires = tuple(n for n, _ in nodes.requires)
        if needs_node is not None:
            nodes.needs = self.names(needs_node)
            needs = tuple(n for n, _ in nodes.needs)
        if collect_node is not None:
            nodes.collect = self.names(collect_node)
            collect = tuple(n for n, _ in nodes.collect)
        if clear_node is not None:
            nodes.clear = self.names(clear_node)
            clear_on_enter = tuple(n for n, _ in nodes.clear)
        if tools_node is not None:
            nodes.tools = self.names(tools_node)
            if isinstance(tools_node, Sequence):
                tools = tuple(n for n, _ in nodes.tools)
        preparations: list[Preparation] = []
        if isinstance(prepare_node, Sequence):
            for item in prepare_node.items:
                if not isinstance(item, Mapping):
                    continue
                prep_fields = {k.value: v for k, v in entries(item)}
                prep_name = self.text(prep_fields.get("name"))
                effect = self.effect(item, nodes, prepared=True)
                produces = self.names(prep_fields.get("produces"))
                if produces:
                    if not isinstance(nodes.produces, list):
                        nodes.produces = []
                    nodes.produces.extend(produces)
                if prep_name and effect is not None:
                    preparations.append(
                        Preparation(
                            prep_name, effect, tuple(p for p, _ in produces), self.position(item)
                        )
                    )
        on_enter = self.effects(on_enter_node, nodes) if on_enter_node is not None else ()
        on_exit = self.effects(on_exit_node, nodes) if on_exit_node is not None else ()
        transitions: list[Transition] = []
        if transitions_key is not None:
            nodes.transitions_key = transitions_key
        if isinstance(transitions_node, Sequence):
            built: list[tuple[Transition, Mapping, Node | None]] = []
            path = self.path
            for index, item in enumerate(transitions_node.items, start=1):
                if not isinstance(item, Mapping):
                    continue
                # one pass over the pairs, as for the phase (a transition has four keys)
                to_node: Node | None = None
                when_node: Node | None = None
                description_node: Node | None = None
                trigger_node: Node | None = None
                handoff: Handoff | None = None
                after_node: Node | None = None
                for k, v in entries(item):
                    field_name = k.value
                    if field_name == "handoff":
                        handoff = self.handoff(item)
                    elif field_name == "to":
                        to_node = v
                    elif field_name == "when":
                        when_node = v
                    elif field_name == "description":
                        description_node = v
                    elif field_name == "trigger":
                        trigger_node = v
                    elif field_name == "after":
                        after_node = v
                if handoff is not None:
                    if to_node is not None:  # both: the schema reported it
                        continue
                    target, at = "", handoff.position
                elif not isinstance(to_node, Scalar) or not isinstance(to_node.value, str):
                    continue
                else:
                    target = to_node.value
                    at = _compiled_position(path, to_node.line, to_node.column)
                when = None
                if when_node is not None:
                    when = self.guard(when_node, nodes, name, index)
                    if when is None:
                        self.unchecked(nodes, len(transitions))
                trigger = "auto" if trigger_node is None else self.text(trigger_node) or "auto"
                if trigger != "auto" and trigger != "model":  # PF103 already; skip PF206/7
                    self.unchecked(nodes, len(transitions))
                after = None if after_node is None else self.after(after_node, name, index)
                if after is not None:
                    when = timed_guard(when, after)
                elif after_node is not None:  # PF103 or PF105 already; skip PF206/7
                    self.unchecked(nodes, len(transitions))
                transition = _compiled_transition(
                    target,
                    when,
                    None if description_node is None else self.text(description_node),
                    "model" if trigger == "model" else "auto",
                    at or self.position(item),
                    after,
                )
                if handoff is not None:
                    object.__setattr__(transition, "handoff", handoff)
                built.append((transition, item, to_node))
                transitions.append(transition)
            if built:
                nodes.transitions = built
        terminal = type(terminal_node) is Scalar and terminal_node.value is True
        goal = (
            goal_node.value
            if type(goal_node) is Scalar and isinstance(goal_node.value, str)
            else ""
        )
        self.phases[name] = _compiled_phase(
            name,
            goal,
            instructions,
            needs,
            requires,
            guard,
            tuple(preparations) if preparations else (),
            on_enter,
            on_exit,
            tools,
            clear_on_enter,
            terminal,
            tuple(transitions),
            _compiled_position(self.path, key.line, key.column),
            collect,
            self.call(call_fields) if call_fields is not None else None,
            model=self.text(model_node),
            model_position=None if model_node is None else self.position(model_node),
            reply=None if reply_node is None else self.reply(name, reply_node),
        )
        self.nodes[name] = nodes

    def inputs(self, node: Node | None) -> tuple[dict[str, Any], dict[str, Position]]:
        """A ``with`` mapping: each key's value as written, and where each key is."""
        values: dict[str, Any] = {}
        positions: dict[str, Position] = {}
        if isinstance(node, Mapping):
            for key, value in entries(node):
                if isinstance(key.value, str):
                    values[key.value] = to_python(value)
                    positions[key.value] = self.position(key)
        return values, positions

    def call(self, fields: dict[str, Node]) -> Call | None:
        """A phase's ``call`` (with its ``with``, ``returns``, ``history``), or ``None``
        when the schema already refused it."""
        name = self.text(fields.get("call"))
        if not name:
            return None
        values, positions = self.inputs(fields.get("with"))
        returns: dict[str, str] = {}
        return_positions: dict[str, Position] = {}
        returns_node = fields.get("returns")
        if isinstance(returns_node, Mapping):
            for key, value in entries(returns_node):
                written = self.text(value)
                if isinstance(key.value, str) and written:
                    returns[key.value] = written
                    return_positions[key.value] = self.position(key)
        history = self.text(fields.get("history")) or "full"
        if history not in ("full", "since_call", "summary"):
            return None  # the schema reported it
        return Call(name, {k: parse_input(v) for k, v in values.items()}, returns,
                    history,  # type: ignore[arg-type]  # checked just above
                    self.position(fields["call"]), positions, return_positions)

    def handoff(self, item: Mapping) -> Handoff | None:
        fields = {k.value: v for k, v in entries(item)}
        name = self.text(fields.get("handoff"))
        if not name:
            return None
        values, positions = self.inputs(fields.get("with"))
        return Handoff(name, {k: parse_input(v) for k, v in values.items()},
                       self.position(fields["handoff"]), positions)

    def after(self, node: Node, phase: str, transition: int) -> float | None:
        """A transition's ``after`` in seconds, or ``None`` after a PF105 at ``node``."""
        if not isinstance(node, Scalar):
            return None  # a mapping or a list: PF103 from the schema
        seconds = parse_duration(node.value)
        if isinstance(seconds, str):
            self.diags.append(
                Diagnostic(
                    self.path, node.line, node.column, "PF105",
                    f"phase '{phase}', transition {transition}: {seconds}",
                )
            )
            return None
        return seconds


    def reply(self, phase: str, node: Node) -> ReplyShape | None:
        """A phase's ``reply`` (its schema checked as a tool's ``parameters`` are), or
        ``None`` after a diagnostic. PF431 for a ``record`` entry naming a state key that
        is not declared (when state is declared) or a property the schema does not have."""
        if not isinstance(node, Mapping):
            return None
        fields = {k.value: (k, v) for k, v in entries(node)}
        if "schema" not in fields:
            return None
        key, schema_node = fields["schema"]
        schema = self.parameters(phase, key, schema_node, f"phase '{phase}': reply")
        if schema is None:
            return None
        properties = schema.get("properties")
        known = set(properties) if isinstance(properties, dict) else set()
        record: dict[str, str] = {}
        record_node = fields.get("record", (None, None))[1]
        ok = True
        if isinstance(record_node, Mapping):
            for state_key, prop in entries(record_node):
                name = prop.value if isinstance(prop, Scalar) else None
                if not isinstance(state_key.value, str) or not isinstance(name, str):
                    ok = False  # (the workflow schema reported it)
                    continue
                if self.state_declared and state_key.value not in self.state:
                    hint = did_you_mean(state_key.value, self.state)
                    self.report(state_key, "PF431",
                                f"phase '{phase}': reply records '{state_key.value}', which is "
                                f"not a declared state key{hint}")
                    ok = False
                elif name not in known:
                    self.report(prop, "PF431",
                                f"phase '{phase}': reply records property '{name}', which the "
                                f"reply's schema does not have (its properties: "
                                f"{', '.join(sorted(known)) or 'none'})")
                    ok = False
                else:
                    record[state_key.value] = name
        if not ok:
            return None
        return ReplyShape(schema, record, self.position(node))

    @staticmethod
    def unchecked(nodes: PhaseNodes, index: int) -> None:
        """Leave transition ``index`` out of PF206/PF207: it is an error already."""
        if not isinstance(nodes.unchecked_transitions, set):
            nodes.unchecked_transitions = set()
        nodes.unchecked_transitions.add(index)

    def navigation(self, node: Mapping) -> Navigation:
        fields = {k.value: v for k, v in entries(node)}
        history_node = fields.get("history")
        history = 3
        if (
            isinstance(history_node, Scalar)
            and isinstance(history_node.value, int)
            and not isinstance(history_node.value, bool)
        ):
            history = max(0, min(100, history_node.value))
        template = self.template(fields.get("template"), NAVIGATION_NAMES, "navigation template")
        if template is not None:
            self.nav_template_nodes.append((template, fields["template"]))
        return Navigation(history, template)
