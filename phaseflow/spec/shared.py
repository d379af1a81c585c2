"""Shared files: a tool catalogue and state declarations several workflows import.

A shared file starts ``phaseflow-shared: 1`` and holds ``tools`` and ``state`` (and a
``description``). A workflow lists such files in ``imports:``; :class:`SharedFiles` reads
each once (by its real path) and merges what they declare for the compiler, which adds it
to the workflow's own: a name defined differently in two places is PF508 at both
definitions, a file that cannot be used PF509 where it is imported.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

from phaseflow.spec.diagnostics import Diagnostic
from phaseflow.spec.files import read_text
from phaseflow.spec.model import Position, StateKey, Tool
from phaseflow.spec.yamlnodes import Node

__all__ = ["SHARED_KEY", "Shared", "SharedFiles"]

#: The top-level key of a shared file (``phaseflow-shared: 1``).
SHARED_KEY = "phaseflow-shared"
_SHARED_KEYS = frozenset({SHARED_KEY, "description", "tools", "state"})
#: Placeholders that make a shared file's ``tools``/``state`` a workflow the schema checks.
_FILLER = {"phaseflow": 1, "name": "shared", "initial": "x",
           "phases": {"x": {"goal": "g", "terminal": True}}}


def _where(position: Position | None) -> str:
    return "" if position is None else f"{position.path}:{position.line}:{position.column}"


@dataclasses.dataclass
class Shared:
    """What a workflow's shared files declare, merged (implements the compiler's
    ``SharedParts``)."""

    state: dict[str, StateKey] = dataclasses.field(default_factory=dict)
    tools: dict[str, Tool] | None = None
    diagnostics: list[Diagnostic] = dataclasses.field(default_factory=list)

    def add(self, other: Shared) -> None:
        """Merge ``other`` in; a name defined differently is PF508 at both definitions."""
        self._merge(self.state, other.state, "state key")
        if other.tools is not None:
            if self.tools is None:
                self.tools = {}
            self._merge(self.tools, other.tools, "tool")

    def _merge(self, into: dict[str, Any], more: Mapping[str, Any], what: str) -> None:
        for name, value in more.items():
            known = into.get(name)
            if known is None:
                into[name] = value
            elif known != value:
                self.diagnostics.extend(_clash(what, name, known.position, value.position))

    def clashes(self, path: str, state: Mapping[str, StateKey],
                tools: Mapping[str, Tool] | None) -> list[Diagnostic]:
        found: list[Diagnostic] = []
        for name, key in self.state.items():
            mine = state.get(name)
            if mine is not None and mine != key:
                found.extend(_clash("state key", name, key.position, mine.position))
        for name, tool in (self.tools or {}).items():
            own = (tools or {}).get(name)
            if own is not None and own != tool:
                found.extend(_clash("tool", name, tool.position, own.position))
        return found


def _clash(what: str, name: str, first: Position | None, second: Position | None
           ) -> list[Diagnostic]:
    """PF508 at each of two different definitions of ``name``, each naming the other."""
    found = []
    for here, there in ((first, second), (second, first)):
        if here is not None:
            found.append(Diagnostic(
                here.path, here.line, here.column, "PF508",
                f"{what} '{name}' is defined differently at {_where(there)}: one name, "
                "one definition; make them equal or rename one"))
    return found


class SharedFiles:
    """Reads shared files, each once; :meth:`imports` is the compiler's resolver."""

    def __init__(self) -> None:
        #: real path -> the shared file's parts
        self.shared: dict[str, Shared] = {}

    def imports(self, path: str, names: list[tuple[str, Node]]) -> Shared:
        """The merged parts of the shared files ``names`` (as written in ``path``)."""
        merged = Shared()
        base = os.path.dirname(path)
        for name, node in names:
            full = os.path.join(base, name)
            parts = self._shared(full)
            if isinstance(parts, str):
                merged.diagnostics.append(Diagnostic(
                    path, node.line, node.column, "PF509",
                    f"imports '{name}': {parts}"))
                continue
            merged.diagnostics.extend(parts.diagnostics)
            merged.add(dataclasses.replace(parts, diagnostics=[]))
        return merged

    def _shared(self, path: str) -> Shared | str:
        real = os.path.realpath(path)
        known = self.shared.get(real)
        if known is not None:
            return known
        text = read_text(path)
        if isinstance(text, Diagnostic):
            return text.message
        parts = self._read_shared(path, text)
        if not isinstance(parts, str):
            self.shared[real] = parts
        return parts

    @staticmethod
    def _read_shared(path: str, text: str) -> Shared | str:
        from phaseflow.expr.describe import did_you_mean
        from phaseflow.spec.compiler import Compiler
        from phaseflow.spec.schema import entries, schema_diagnostics
        from phaseflow.spec.yamlnodes import Mapping as MappingNode
        from phaseflow.spec.yamlnodes import Scalar, YamlProblem, compose

        try:
            document = compose(text)
        except YamlProblem as problem:
            return f"not a shared file: YAML syntax error at line {problem.line}"
        except (RecursionError, MemoryError):
            return "the file is too complex to read"
        root = document.root
        if not isinstance(root, MappingNode):
            return f"not a shared file (a mapping starting '{SHARED_KEY}: 1')"
        top = {k.value: (k, v) for k, v in entries(root)}
        version = top.get(SHARED_KEY)
        if version is None or not (isinstance(version[1], Scalar) and version[1].value == 1):
            return f"not a shared file: it must start with '{SHARED_KEY}: 1'"
        found = Shared()
        for key, _ in top.values():
            if key.value not in _SHARED_KEYS:
                found.diagnostics.append(Diagnostic(
                    path, key.line, key.column, "PF102",
                    f"unknown key '{key.value}' in a shared file"
                    f"{did_you_mean(str(key.value), _SHARED_KEYS)} (it holds tools and state)"))
        data = document.data if isinstance(document.data, dict) else {}
        checked = {**_FILLER, **{k: data[k] for k in ("tools", "state") if k in data}}
        found.diagnostics.extend(schema_diagnostics(checked, root, path))
        compiler = Compiler(path, text, root)
        if "state" in top and isinstance(top["state"][1], MappingNode):
            for key, value in entries(top["state"][1]):
                compiler.state_key(key, value)
        if "tools" in top and isinstance(top["tools"][1], MappingNode):
            compiler.tools = {}
            for key, value in entries(top["tools"][1]):
                compiler.tool(key, value)
        found.diagnostics.extend(compiler.diags)
        found.state = compiler.state
        found.tools = compiler.tools
        return found
