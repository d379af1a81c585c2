"""A tree of workflow files: each read and compiled once, linked, checked as a whole.

A workflow names the workflows it calls or hands off to (``uses:``, paths relative to
it) and the shared files whose tools and state declarations it adds to its own
(``imports:``, :mod:`phaseflow.spec.shared`). :class:`TreeLoader` reads every file
reached from the files it is given, each once (by its real path: a symlink is the file it
points to), compiles it with the one-file check it is given (the loader's
``check_text``), runs the checks across files (:mod:`phaseflow.spec.composition_checks`)
and links each workflow to the ones it uses (``Workflow.library``). Nothing here
recurses: a chain of a thousand calls is a list walked in a loop. The work is linear in
the total number of phases.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any

from phaseflow.spec.diagnostics import Diagnostic
from phaseflow.spec.files import read_text
from phaseflow.spec.model import Workflow
from phaseflow.spec.results import CheckResult
from phaseflow.spec.shared import SharedFiles

__all__ = ["TreeLoader", "TreeResult", "check_tree", "load_tree"]


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

    def __init__(self, check: Callable[..., CheckResult],
                 registry: Mapping[str, Any] | None = None) -> None:
        self.check = check
        self.registry = registry
        #: real path -> result (in the order loaded)
        self.loaded: dict[str, CheckResult] = {}
        self.shared = SharedFiles()

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
            result = self.check(text, path, self.registry, imports=self.shared.imports)
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


def check_tree(paths: Iterable[str], check: Callable[..., CheckResult],
               registry: Mapping[str, Any] | None = None) -> TreeResult:
    """Every diagnostic of the files ``paths`` and of every file they use, each checked
    by ``check`` (the loader's ``check_text``; see :class:`TreeLoader`); never raises for
    anything in the files."""
    return TreeLoader(check, registry).load_all(paths)


def load_tree(path: str, check: Callable[..., CheckResult],
              registry: Mapping[str, Any] | None = None
              ) -> tuple[CheckResult, TreeResult]:
    """The root file's result, its workflow linked to every workflow it uses (``None``
    when any file of the tree has an error), and the tree's result."""
    loader = TreeLoader(check, registry)
    tree = loader.load_all([path])
    root = loader.load(path)
    errors = [d for d in tree.all_diagnostics if d.severity == "error"]
    if errors and root.workflow is not None:
        root = CheckResult(root.path, tuple(tree.all_diagnostics), None)
    elif tree.diagnostics:
        root = CheckResult(root.path, tuple(tree.all_diagnostics), root.workflow)
    return root, tree
