"""A tree of workflow files: each read and compiled once, linked, checked as a whole.

A workflow names the workflows it calls or hands off to (``uses:``, paths relative to
it) and the shared files whose tools and state declarations it adds to its own
(``imports:``). :class:`TreeLoader` reads every file reached from the files it is given,
each once (by its real path: a symlink is the file it points to), compiles it, runs the
checks across files (:mod:`phaseflow.spec.composition_checks`) and links each workflow
to the ones it uses (``Workflow.library``). Nothing here recurses: a chain of a thousand
calls is a list walked in a loop. The work is linear in the total number of phases.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

from phaseflow.spec.diagnostics import Diagnostic
from phaseflow.spec.loader import CheckResult, check_text, read_text
from phaseflow.spec.model import Position, StateKey, Tool, Workflow
from phaseflow.spec.yamlnodes import Node

__all__ = ["SHARED_KEY", "Shared", "TreeLoader", "TreeResult", "check_tree", "load_tree"]

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


@dataclasses.dataclass(frozen=True, slots=True)
class TreeResult:
    """What loading a tree found: every file's result (by the path it was reached by
    first), and the diagnostics of the checks across files."""

    results: tuple[CheckResult, ...]
    diagnostics: tuple[Diagnostic, ...]

    @property
    def all_diagnostics(self) -> list[Diagnostic]:
        """Every diagnostic, each once, in order."""
        found = {d: None for r in self.results for d in r.diagnostics}
        found.update((d, None) for d in self.diagnostics)
        return sorted(found, key=Diagnostic.sort_key)


class TreeLoader:
    """Loads files, each once, and what they use and import (see the module docstring).
    One loader is one run of ``validate``: files reached from several roots are shared."""

    def __init__(self, registry: Mapping[str, Any] | None = None) -> None:
        self.registry = registry
        #: real path -> result (in the order loaded)
        self.loaded: dict[str, CheckResult] = {}
        #: real path -> the shared file's parts
        self.shared: dict[str, Shared] = {}

    # -- shared files -----------------------------------------------------------------------

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

    # -- workflow files --------------------------------------------------------------------

    def load(self, path: str) -> CheckResult:
        """The result of the workflow file at ``path``, read and compiled once."""
        real = os.path.realpath(path)
        known = self.loaded.get(real)
        if known is not None:
            return known
        text = read_text(path)
        if isinstance(text, Diagnostic):
            result = CheckResult(path, (text,), None)
        else:
            result = check_text(text, path, self.registry, imports=self.imports)
        self.loaded[real] = result
        return result

    def load_all(self, paths: Iterable[str]) -> TreeResult:
        """Load ``paths`` and every file they use, run the checks across files, and link
        each workflow to those it uses. A loop over a list of files: no recursion."""
        from phaseflow.spec.composition_checks import Linked, check_composition

        todo = list(paths)
        seen_roots: set[str] = set()
        links: dict[str, Linked] = {}
        while todo:
            path = todo.pop()
            real = os.path.realpath(path)
            if real in seen_roots:
                continue
            seen_roots.add(real)
            result = self.load(path)
            workflow = result.workflow
            if workflow is None:
                continue
            base = os.path.dirname(path)
            used: dict[str, tuple[str, str]] = {}
            for name, written in workflow.uses.items():
                full = os.path.join(base, written)
                used[name] = (full, os.path.realpath(full))
                if os.path.exists(full):
                    todo.append(full)
            links[real] = Linked(result.path, workflow, used)
        found = check_composition(links, self.loaded)
        self._link(links)
        return TreeResult(tuple(self.loaded.values()), tuple(found))

    def _link(self, links: Mapping[str, Any]) -> None:
        """Give each workflow its ``library``: the workflows it uses, by name (only when
        every file of the tree compiled)."""
        for linked in links.values():
            library: dict[str, Workflow] = {}
            for name, (_, real) in linked.used.items():
                result = self.loaded.get(real)
                if result is not None and result.workflow is not None:
                    library[name] = result.workflow
            if library:
                object.__setattr__(linked.workflow, "library", MappingProxyType(library))


def check_tree(paths: Iterable[str], registry: Mapping[str, Any] | None = None
               ) -> TreeResult:
    """Every diagnostic of the files ``paths`` and of every file they use (see
    :class:`TreeLoader`); never raises for anything in the files."""
    return TreeLoader(registry).load_all(paths)


def load_tree(path: str, registry: Mapping[str, Any] | None = None
              ) -> tuple[CheckResult, TreeResult]:
    """The root file's result, its workflow linked to every workflow it uses (``None``
    when any file of the tree has an error), and the tree's result."""
    loader = TreeLoader(registry)
    tree = loader.load_all([path])
    root = loader.load(path)
    errors = [d for d in tree.all_diagnostics if d.severity == "error"]
    if errors and root.workflow is not None:
        root = CheckResult(root.path, tuple(tree.all_diagnostics), None)
    elif tree.diagnostics:
        root = CheckResult(root.path, tuple(tree.all_diagnostics), root.workflow)
    return root, tree
