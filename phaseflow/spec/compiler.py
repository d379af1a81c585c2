"""From a composed YAML tree to a compiled :class:`~phaseflow.spec.model.Workflow`.

One pass over the nodes builds the model (guards and templates compiled once, every value
with its position) and collects diagnostics; the graph and reference checks then run on
what was built. The pass is defensive: a part the schema already rejected is skipped, so
one mistake never hides the others and nothing here can raise on odd input.
"""

from __future__ import annotations

import fnmatch
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from phaseflow.expr import Guard, GuardCompileError, compile_guard
from phaseflow.spec.diagnostics import Diagnostic, clip, did_you_mean
from phaseflow.spec.edges import always_ready
from phaseflow.spec.model import (
    CallEffect,
    Effect,
    Navigation,
    Phase,
    Position,
    Preparation,
    SetEffect,
    StateKey,
    Tool,
    Transition,
    UnsetEffect,
    Workflow,
)
from phaseflow.spec.schema import entries
from phaseflow.spec.templates import (
    INSTRUCTION_NAMES,
    NAVIGATION_NAMES,
    Template,
    TemplateCompileError,
    compile_template,
)
from phaseflow.spec.yamlnodes import Mapping, Node, Scalar, Sequence, to_python

#: The keys the compiler reads at each level. A test proves these equal the JSON Schema's.
TOP_KEYS = frozenset(
    {"phaseflow", "name", "description", "initial", "state", "tools", "phases", "navigation"}
)
STATE_KEY_KEYS = frozenset({"type", "description", "default"})
TOOL_KEYS = frozenset({"description", "writes", "approval"})
PHASE_KEYS = frozenset(
    {
        "goal",
        "instructions",
        "needs",
        "requires",
        "guard",
        "prepare",
        "on_enter",
        "on_exit",
        "tools",
        "clear_on_enter",
        "terminal",
        "transitions",
    }
)
TRANSITION_KEYS = frozenset({"to", "when", "description", "trigger"})
EFFECT_KEYS = frozenset({"set", "unset", "call", "with"})
PREPARATION_KEYS = EFFECT_KEYS | {"name", "produces"}
NAVIGATION_KEYS = frozenset({"history", "template"})

_TYPE_CHECK: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
    "any": lambda v: True,
}


@dataclass
class _Refs:
    """Nodes kept beside a built phase, so checks can point at exactly what they are about."""

    key: Scalar
    transitions: list[tuple[Transition, Mapping, Node | None]] = field(default_factory=list)
    transitions_key: Scalar | None = None
    tools: list[tuple[str, Node]] = field(default_factory=list)
    requires: list[tuple[str, Node]] = field(default_factory=list)
    needs: list[tuple[str, Node]] = field(default_factory=list)
    clear: list[tuple[str, Node]] = field(default_factory=list)
    unset: list[tuple[str, Node]] = field(default_factory=list)
    sets: list[str] = field(default_factory=list)
    produces: list[tuple[str, Node]] = field(default_factory=list)
    calls: list[tuple[str, Node]] = field(default_factory=list)
    guards: list[tuple[Guard, Node]] = field(default_factory=list)
    templates: list[tuple[Template, Node]] = field(default_factory=list)
    broken_guards: set[int] = field(default_factory=set)


class Compiler:
    """Builds one workflow from one composed file, collecting diagnostics."""

    def __init__(
        self, path: str, text: str, root: Mapping, broken_phases: Iterable[str] = ()
    ) -> None:
        self.path = path
        #: phases the schema found errors inside: their transitions and ``terminal`` may be
        #: wrong, so graph warnings that depend on them would only add noise.
        self.broken_phases = set(broken_phases)
        self.lines = text.splitlines()
        self.root = root
        self.diags: list[Diagnostic] = []
        self.state: dict[str, StateKey] = {}
        self.state_declared = False
        self.tools: dict[str, Tool] | None = None
        self.phases: dict[str, Phase] = {}
        self.refs: dict[str, _Refs] = {}
        self.nav_template_refs: list[tuple[Template, Node]] = []

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
        """File position of (line, column) inside the expression held by ``node``."""
        if node.style in ("|", ">"):
            index = node.line + line - 1  # 0-based index of the content line
            if 0 <= index < len(self.lines):
                content = self.lines[index]
                indent = len(content) - len(content.lstrip(" "))
                return node.line + line, indent + column + 1
            return node.line + line, column + 1
        quote = 1 if node.style in ("'", '"') else 0
        if line == 1:
            return node.line, node.column + quote + column
        return node.line + line - 1, column + 1

    def guard(self, node: Node, refs: _Refs | None, what: str) -> Guard | None:
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
            self.diags.append(
                Diagnostic(self.path, line, column, "PF300", f"{what}: {exc.message}")
            )
            return None
        if refs is not None:
            refs.guards.append((compiled, node))
        return compiled

    def template(self, node: Node | None, names: frozenset[str], what: str) -> Template | None:
        source = self.text(node)
        if source is None or node is None:
            return None
        assert isinstance(node, Scalar)
        try:
            return compile_template(source, names)
        except TemplateCompileError as exc:
            line, column = node.line, node.column
            if node.style in ("|", ">"):
                line = node.line + exc.line
                content = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
                column = len(content) - len(content.lstrip(" ")) + 1
            self.diags.append(
                Diagnostic(self.path, line, column, "PF302", f"{what}: {exc.message}")
            )
            return None

    # -- the pass --------------------------------------------------------------
    def run(self, registry: Iterable[str] | None = None) -> Workflow | None:
        """Build the workflow; ``None`` when any error was found (all are in ``diags``)."""
        top = {k.value: (k, v) for k, v in entries(self.root)}
        if "state" in top and isinstance(top["state"][1], Mapping):
            self.state_declared = True
            for key, value in entries(top["state"][1]):
                self.state_key(key, value)
        if "tools" in top and isinstance(top["tools"][1], Mapping):
            self.tools = {}
            for key, value in entries(top["tools"][1]):
                self.tool(key, value)
        if "phases" in top and isinstance(top["phases"][1], Mapping):
            for key, value in entries(top["phases"][1]):
                if isinstance(key.value, str) and isinstance(value, Mapping):
                    self.phase(key, value)
        navigation = Navigation()
        if "navigation" in top and isinstance(top["navigation"][1], Mapping):
            navigation = self.navigation(top["navigation"][1])
        initial_node = top.get("initial", (None, None))[1]
        initial = self.text(initial_node)
        self.check_graph(initial, initial_node)
        self.check_references()
        if registry is not None:
            self.check_registry(registry)
        if any(d.severity == "error" for d in self.diags):
            return None
        name = self.text(top.get("name", (None, None))[1]) or ""
        description = self.text(top.get("description", (None, None))[1])
        return Workflow(
            name=name,
            initial=initial or "",
            phases=self.phases,
            description=description,
            state=self.state,
            tools=self.tools,
            navigation=navigation,
            path=self.path,
        )

    def state_key(self, key: Scalar, value: Node) -> None:
        if not isinstance(value, Mapping | Scalar) or (
            isinstance(value, Scalar) and value.value is not None
        ):
            return
        fields = {k.value: v for k, v in entries(value)} if isinstance(value, Mapping) else {}
        kind = self.text(fields.get("type")) or "any"
        if kind not in _TYPE_CHECK:
            kind = "any"
        has_default = "default" in fields
        default = to_python(fields["default"]) if has_default else None
        if has_default and not _TYPE_CHECK[kind](default):
            from phaseflow.spec.schema import type_name

            self.report(
                fields["default"],
                "PF103",
                f"state key '{key.value}': default must be of type {kind}, "
                f"not {type_name(default)}",
            )
        self.state[key.value] = StateKey(
            key.value,
            kind,  # type: ignore[arg-type]  # one of _TYPE_CHECK's keys
            self.text(fields.get("description")),
            has_default,
            default,
            self.position(key),
        )

    def tool(self, key: Scalar, value: Node) -> None:
        assert self.tools is not None
        fields = {k.value: v for k, v in entries(value)} if isinstance(value, Mapping) else {}
        approval = self.text(fields.get("approval"))
        self.tools[key.value] = Tool(
            key.value,
            self.text(fields.get("description")),
            tuple(n for n, _ in self.names(fields.get("writes"))),
            "always" if approval == "always" else "never",
            self.position(key),
        )

    def effect(self, node: Node, refs: _Refs) -> Effect | None:
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
            refs.sets.extend(k for k in values if isinstance(k, str))
            return SetEffect(values, position)
        if kind == "unset":
            keys = self.names(fields["unset"])
            refs.unset.extend(keys)
            return UnsetEffect(tuple(k for k, _ in keys), position)
        name = self.text(fields["call"])
        if name is None:
            return None
        refs.calls.append((name, fields["call"]))
        args = to_python(fields["with"]) if "with" in fields else {}
        return CallEffect(name, args if isinstance(args, dict) else {}, position)

    def effects(self, node: Node | None, refs: _Refs) -> tuple[Effect, ...]:
        if not isinstance(node, Sequence):
            return ()
        built = (self.effect(item, refs) for item in node.items)
        return tuple(e for e in built if e is not None)

    def phase(self, key: Scalar, node: Mapping) -> None:
        name: str = key.value
        refs = _Refs(key)
        fields = {k.value: (k, v) for k, v in entries(node)}

        def get(field_name: str) -> Node | None:
            return fields[field_name][1] if field_name in fields else None

        guard_node = get("guard")
        guard = self.guard(guard_node, refs, f"phase '{name}' guard") if guard_node else None
        instructions = self.template(
            get("instructions"), INSTRUCTION_NAMES, f"phase '{name}' instructions"
        )
        if instructions is not None:
            refs.templates.append((instructions, get("instructions")))  # type: ignore[arg-type]
        refs.requires = self.names(get("requires"))
        refs.needs = self.names(get("needs"))
        refs.clear = self.names(get("clear_on_enter"))
        tools_node = get("tools")
        refs.tools = self.names(tools_node)
        preparations: list[Preparation] = []
        prepare_node = get("prepare")
        if isinstance(prepare_node, Sequence):
            for item in prepare_node.items:
                if not isinstance(item, Mapping):
                    continue
                prep_fields = {k.value: v for k, v in entries(item)}
                prep_name = self.text(prep_fields.get("name"))
                effect = self.effect(item, refs)
                produces = self.names(prep_fields.get("produces"))
                refs.produces.extend(produces)
                if prep_name and effect is not None:
                    preparations.append(
                        Preparation(
                            prep_name, effect, tuple(p for p, _ in produces), self.position(item)
                        )
                    )
        on_enter = self.effects(get("on_enter"), refs)
        on_exit = self.effects(get("on_exit"), refs)
        transitions: list[Transition] = []
        if "transitions" in fields:
            refs.transitions_key = fields["transitions"][0]
        transitions_node = get("transitions")
        if isinstance(transitions_node, Sequence):
            for index, item in enumerate(transitions_node.items, start=1):
                if not isinstance(item, Mapping):
                    continue
                t_fields = {k.value: v for k, v in entries(item)}
                target = self.text(t_fields.get("to"))
                if target is None:
                    continue
                when_node = t_fields.get("when")
                when = None
                if when_node is not None:
                    when = self.guard(when_node, refs, f"phase '{name}', transition {index} 'when'")
                    if when is None:
                        refs.broken_guards.add(len(transitions))
                trigger = self.text(t_fields.get("trigger")) or "auto"
                if trigger not in ("auto", "model"):  # PF103 already; skip PF206/PF207
                    refs.broken_guards.add(len(transitions))
                transition = Transition(
                    target,
                    when,
                    self.text(t_fields.get("description")),
                    "model" if trigger == "model" else "auto",
                    self.position(t_fields["to"]),
                )
                refs.transitions.append((transition, item, t_fields.get("to")))
                transitions.append(transition)
        terminal_node = get("terminal")
        terminal = isinstance(terminal_node, Scalar) and terminal_node.value is True
        tools = None
        if isinstance(tools_node, Sequence):
            tools = tuple(n for n, _ in refs.tools)
        self.phases[name] = Phase(
            name=name,
            goal=self.text(get("goal")) or "",
            instructions=instructions,
            needs=tuple(n for n, _ in refs.needs),
            requires=tuple(n for n, _ in refs.requires),
            guard=guard,
            prepare=preparations,
            on_enter=on_enter,
            on_exit=on_exit,
            tools=tools,
            clear_on_enter=tuple(n for n, _ in refs.clear),
            terminal=terminal,
            transitions=transitions,
            position=self.position(key),
        )
        self.refs[name] = refs

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
            self.nav_template_refs.append((template, fields["template"]))
        return Navigation(history, template)

    # -- graph checks ----------------------------------------------------------
    def check_graph(self, initial: str | None, initial_node: Node | None) -> None:
        phases = self.phases
        if initial is not None and initial_node is not None and initial not in phases:
            self.report(
                initial_node,
                "PF200",
                f"initial phase '{clip(initial)}' is not defined"
                f"{did_you_mean(initial, phases) or self._phase_list()}",
            )
        for name, phase in phases.items():
            refs = self.refs[name]
            seen: dict[tuple[str, str | None, str], int] = {}
            unconditional: int | None = None
            for index, (transition, item, to_node) in enumerate(refs.transitions):
                to_at = to_node or item
                if transition.to not in phases:
                    self.report(
                        to_at,
                        "PF201",
                        f"phase '{name}': transition to unknown phase '{clip(transition.to)}'"
                        f"{did_you_mean(transition.to, phases) or self._phase_list()}",
                    )
                when_source = transition.when.source.strip() if transition.when else None
                if index in refs.broken_guards:
                    continue
                signature = (transition.to, when_source, transition.trigger)
                if signature in seen:
                    self.report(
                        item,
                        "PF207",
                        f"phase '{name}': transition to '{transition.to}' is written twice "
                        f"(first as transition {seen[signature] + 1}); remove one",
                    )
                else:
                    seen[signature] = index
                if unconditional is not None and transition.trigger == "auto":
                    self.report(
                        item,
                        "PF206",
                        f"phase '{name}': this transition to '{transition.to}' can never be taken: "
                        f"transition {unconditional + 1} before it has no 'when' and is always "
                        "taken "
                        "first; add a 'when' to it or move this one above it",
                    )
                elif transition.trigger == "auto" and always_ready(
                    transition.when, phases.get(transition.to)
                ):
                    unconditional = index
            if phase.terminal and phase.transitions:
                at = refs.transitions_key or refs.key
                self.report(
                    at,
                    "PF204",
                    f"phase '{name}' is terminal but has transitions; remove them or drop "
                    "'terminal: true'",
                )
            elif not phase.terminal and not phase.transitions and name not in self.broken_phases:
                self.report(
                    refs.key,
                    "PF203",
                    f"phase '{name}' has no transitions and is not terminal: a conversation "
                    "that gets here is stuck; add a transition or 'terminal: true'",
                )
        # Reachability (PF202, PF205) is only meaningful on a sound graph: with an unknown
        # initial phase, an unknown target or a phase the schema rejected, every warning
        # would be a consequence of that error, not news.
        sound = (
            not self.broken_phases
            and initial in phases
            and all(t.to in phases for p in phases.values() for t in p.transitions)
        )
        if not sound:
            return
        if initial in phases:
            reached = self._reach([initial], lambda p: (t.to for t in phases[p].transitions))
            for name in phases:
                if name not in reached:
                    self.report(
                        self.refs[name].key,
                        "PF202",
                        f"phase '{name}' cannot be reached from the initial phase '{initial}'",
                    )
        terminals = [n for n, p in phases.items() if p.terminal]
        if terminals:
            incoming: dict[str, list[str]] = {n: [] for n in phases}
            for name, phase in phases.items():
                for t in phase.transitions:
                    if t.to in incoming:
                        incoming[t.to].append(name)
            finishing = self._reach(terminals, lambda p: incoming[p])
            for name, phase in phases.items():
                if name not in finishing and phase.transitions:
                    self.report(
                        self.refs[name].key,
                        "PF205",
                        f"phase '{name}' is a trap: no terminal phase can be reached from it",
                    )
        elif phases and initial is not None:
            self.report(
                self.refs[initial].key,
                "PF205",
                "no phase is terminal, so no conversation can finish; mark the final "
                "phase(s) 'terminal: true'",
            )

    def _phase_list(self) -> str:
        names = sorted(self.phases)
        if not names or len(names) > 12:
            return ""
        return f" (phases: {', '.join(names)})"

    @staticmethod
    def _reach(start: Iterable[str], step: Callable[[str], Iterable[str]]) -> set[str]:
        seen = set(start)
        queue = deque(seen)
        while queue:
            for nxt in step(queue.popleft()):
                if nxt not in seen:
                    try:
                        seen.add(nxt)
                        queue.append(nxt)
                    except TypeError:  # pragma: no cover - names are strings
                        continue
        return seen

    # -- reference checks ------------------------------------------------------
    def check_references(self) -> None:
        declared = self.state
        tools = self.tools
        producible: set[str] = {k for k, s in declared.items() if s.has_default}
        if tools is not None:
            for tool in tools.values():
                producible.update(tool.writes)
        for refs in self.refs.values():
            producible.update(k for k, _ in refs.produces)
            producible.update(refs.sets)
        for name, refs in self.refs.items():
            if tools is not None:
                for tool_name, node in refs.tools:
                    if any(c in tool_name for c in "*?["):
                        if not any(fnmatch.fnmatchcase(t, tool_name) for t in tools):
                            self.report(
                                node,
                                "PF400",
                                f"phase '{name}': tool pattern '{clip(tool_name)}' matches no "
                                "tool in the catalogue",
                            )
                    elif tool_name not in tools:
                        hint = did_you_mean(tool_name, tools) or (
                            " (the catalogue has: " + ", ".join(sorted(tools)) + ")"
                            if 0 < len(tools) <= 12
                            else ""
                        )
                        self.report(
                            node, "PF400", f"phase '{name}': unknown tool '{clip(tool_name)}'{hint}"
                        )
            for guard, node in refs.guards:
                for unknown in sorted(v for v in guard.visits if v not in self.phases):
                    self.report(
                        node,
                        "PF208",
                        f"phase '{name}': guard '{clip(guard.source.strip())}' counts visits "
                        f"of '{clip(unknown)}', which is not a phase (its count is always 0)"
                        f"{did_you_mean(unknown, self.phases)}",
                    )
            if tools is not None:
                for key, node in refs.requires:
                    # an undeclared key is PF401 already: probably a typo, not news
                    undeclared = self.state_declared and key not in declared
                    if key not in producible and not undeclared:
                        self.report(
                            node,
                            "PF402",
                            f"phase '{name}' requires '{clip(key)}', but nothing can produce "
                            "it: no default, no tool writes it, no preparation produces it, "
                            "no 'set' effect sets it",
                        )
            if not self.state_declared:
                continue
            for label, code, items in (
                ("requires", "PF401", refs.requires),
                ("needs", "PF401", refs.needs),
                ("preparation produces", "PF403", refs.produces),
                ("clear_on_enter", "PF404", refs.clear),
                ("unset", "PF404", refs.unset),
            ):
                for key, node in items:
                    if key not in declared:
                        self.report(
                            node,
                            code,
                            f"phase '{name}': {label} names undeclared state key "
                            f"'{clip(key)}'{did_you_mean(key, declared)}",
                        )
            for guard, node in refs.guards:
                for key in sorted(k for k in guard.reads if k not in declared):
                    line, column = node.line, node.column
                    self.diags.append(
                        Diagnostic(
                            self.path,
                            line,
                            column,
                            "PF301",
                            f"phase '{name}': guard '{clip(guard.source.strip())}' reads "
                            f"undeclared state key '{clip(key)}'{did_you_mean(key, declared)}",
                        )
                    )
            for template, node in refs.templates:
                for key in sorted(k for k in template.reads if k not in declared):
                    self.report(
                        node,
                        "PF303",
                        f"phase '{name}': instructions read undeclared state key "
                        f"'{clip(key)}'{did_you_mean(key, declared)}",
                    )
        if self.state_declared:
            for template, node in self.nav_template_refs:
                for key in sorted(k for k in template.reads if k not in declared):
                    self.report(
                        node,
                        "PF303",
                        f"navigation template reads undeclared state key '{clip(key)}'"
                        f"{did_you_mean(key, declared)}",
                    )

    def check_registry(self, registry: Iterable[str]) -> None:
        """PF405: every ``call`` names a callable the host registered."""
        known = set(registry)
        for name, refs in self.refs.items():
            for call, node in refs.calls:
                if call not in known:
                    self.report(
                        node,
                        "PF405",
                        f"phase '{name}': call '{clip(call)}' names no callable in the host's "
                        f"registry{did_you_mean(call, known)}",
                    )
