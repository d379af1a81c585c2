"""Layers import downward only, and no module imports itself back through others.

Read from the source with ``ast``, so an import inside a function counts as much as one at
the top: what a module may need at run time is what it imports anywhere. Imports under
``if TYPE_CHECKING:`` never run: they may name a higher layer for an annotation (the
compiled model's ``Workflow.machine() -> PhaseMachine``), but inside one layer they count
for cycles too, since a layer's modules must read top-down.

The tests obey one rule of their own: a module under ``tests/`` imports nothing of
``tests`` but ``tests.support``, so no test module depends on another's helpers and a test
file can move or split without breaking its neighbours.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "phaseflow"

#: Each layer and the layers it may import (itself always included). The functional core
#: first (errors, expr, template, spec, machine, turn), then what is built on it.
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "expr": {"errors"},
    "template": {"errors", "expr"},
    "spec": {"errors", "expr", "template"},
    "machine": {"errors", "expr", "template", "spec"},
    "turn": {"errors"},
    "graph": {"errors", "spec"},
    "interop": {"errors", "expr", "spec", "machine"},
    "testing": {"errors", "expr", "spec", "machine", "turn", "stores", "providers", "tools",
                "session"},
    "evals": {"errors", "expr", "spec", "machine", "turn", "stores", "providers", "tools",
              "session", "testing"},
    "stores": {"errors", "turn"},
    "providers": {"errors", "turn"},
    "tools": {"errors", "expr", "spec", "machine", "providers"},
    "observe": {"errors", "turn", "stores", "providers"},
    "session": {"errors", "expr", "spec", "machine", "turn", "stores", "providers", "tools",
                "observe", "mcp"},
    "mcp": {"errors", "expr", "spec", "tools"},
    "api": {"errors", "spec", "machine"},
    "serve": {"errors", "expr", "spec", "machine", "turn", "stores", "providers", "tools",
              "session", "graph", "observe"},
    "cli": {"*"},
    "__init__": set(),  # re-exports lazily, by module name, through importlib
}


def _lazy_exports() -> dict[str, str]:
    """``phaseflow/__init__``'s lazy re-exports: name -> the module that defines it."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
                and any(isinstance(t, ast.Name) and t.id == "_LAZY" for t in node.targets)):
            return {ast.literal_eval(k): ast.literal_eval(v)
                    for k, v in zip(node.value.keys, node.value.values, strict=True)
                    if k is not None}
    return {}


_LAZY = _lazy_exports()


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_target(node: ast.ImportFrom, package: str) -> str:
    """The module a ``from ... import`` names, its relative form resolved from
    ``package`` (the package the importing module sits in)."""
    if not node.level:
        return node.module or ""
    base = package.split(".")
    base = base[: len(base) - node.level + 1]
    return ".".join([*base, node.module] if node.module else base)


def _imports(path: Path, module: str, *, type_only: bool = False) -> set[str]:
    """The phaseflow modules ``path`` imports at run time (``type_only``: under
    ``if TYPE_CHECKING:`` only)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    runtime: set[str] = set()

    def visit(node: ast.AST, typing_block: bool = False) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, True)
            for child in node.orelse:
                visit(child, typing_block)
            return
        into = found if typing_block else runtime
        if isinstance(node, ast.Import):
            into.update(a.name for a in node.names if a.name.startswith("phaseflow"))
        elif isinstance(node, ast.ImportFrom):
            target = _import_target(node, package)
            if target == "phaseflow":
                # ``from phaseflow import X`` loads X's module (the package re-exports
                # lazily): count that module, so no layer reaches up through the package
                into.update(_LAZY.get(a.name, "phaseflow") for a in node.names)
            elif target.startswith("phaseflow"):
                into.add(target)
                # ``from phaseflow.x import y`` may import the submodule phaseflow.x.y
                into.update(f"{target}.{a.name}" for a in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child, typing_block)

    visit(tree)
    return (found - runtime) if type_only else runtime


def _graph(*, with_type_only_in_layer: bool = False) -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges = _imports(path, name)
        if with_type_only_in_layer:
            edges |= {m for m in _imports(path, name, type_only=True)
                      if _layer(m) == _layer(name)}
        graph[name] = {m for m in edges if m in modules and m != name}
    return graph


def test_every_module_has_a_known_layer() -> None:
    unknown = sorted({_layer(m) for m in _graph()} - set(ALLOWED))
    assert not unknown, f"modules in no layer (add them to ALLOWED): {unknown}"


def test_layers_import_downward_only() -> None:
    wrong = []
    for module, imported in sorted(_graph().items()):
        layer = _layer(module)
        allowed = ALLOWED[layer] | {layer}
        if "*" in allowed:
            continue
        for target in sorted(imported):
            if _layer(target) not in allowed and target != "phaseflow":  # __version__
                wrong.append(f"{module} imports {target}")
    assert not wrong, "upward imports:\n" + "\n".join(wrong)


def test_no_import_cycles() -> None:
    graph = _graph(with_type_only_in_layer=True)
    cycles: list[str] = []
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def walk(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            # a package's __init__ re-exporting its own submodules is not a cycle
            if node.startswith(nxt + "."):
                continue
            if state.get(nxt) == 1:
                cycles.append(" -> ".join([*path[path.index(nxt):], nxt]))
            elif nxt not in state:
                walk(nxt)
        path.pop()
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            walk(module)
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_the_checker_sees_function_level_imports(tmp_path: Path) -> None:
    """The checker itself: an import inside a function is found, a TYPE_CHECKING one not."""
    source = tmp_path / "mod.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from phaseflow.machine import PhaseMachine\n"
        "def f():\n    from phaseflow.turn import Rejected\n",
        encoding="utf-8",
    )
    found = _imports(source, "phaseflow.spec.mod")
    assert "phaseflow.turn" in found
    assert "phaseflow.machine" not in found
    assert _imports(source, "phaseflow.spec.mod", type_only=True) == {
        "phaseflow.machine", "phaseflow.machine.PhaseMachine"}
    through_package = tmp_path / "pkg.py"
    through_package.write_text("from phaseflow import PhaseMachine\n", encoding="utf-8")
    assert _imports(through_package, "phaseflow.spec.pkg") == {"phaseflow.machine"}


TESTS = Path(__file__).resolve().parent


def _test_package(path: Path) -> str:
    """The package a module under ``tests/`` sits in (what its relative imports start from)."""
    parts = path.relative_to(TESTS.parent).with_suffix("").parts
    return ".".join(parts[:-1])


def _outside_support(source: str, package: str) -> list[str]:
    """What a module of ``package`` imports of ``tests`` (or of a bare ``conftest``) that is
    not ``tests.support`` or inside it: anywhere in the module (at the top, in a function),
    absolutely or relatively. ``from tests import y`` names the module ``tests.y`` (so
    ``from tests import support`` is allowed and ``from tests import conftest`` is not);
    ``from tests.x import y`` is ``tests.x``'s, whatever ``y`` is."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = _import_target(node, package)
            found.add(target)
            if target == "tests":
                found.update(f"tests.{a.name}" for a in node.names)
    ours = {m for m in found if m.split(".")[0] in ("tests", "conftest")}
    return sorted(m for m in ours - {"tests", "tests.support"}
                  if not m.startswith("tests.support."))


def test_tests_import_only_tests_support() -> None:
    wrong = [f"{p.relative_to(TESTS.parent)} imports {m}"
             for p in sorted(TESTS.rglob("*.py"))
             for m in _outside_support(p.read_text(encoding="utf-8"), _test_package(p))]
    assert not wrong, ("a test module imports another (move what they share into "
                       "tests/support):\n" + "\n".join(wrong))


def test_the_test_import_checker_sees_every_form() -> None:
    """The checker itself: every form a test module could import another by is found, at
    the top or in a function, and tests.support's are not."""
    source = (
        "import tests.support.forks\n"
        "from tests import support\n"
        "from tests.support import session_fakes\n"
        "from tests.support.phaseflow_cli import RunCli\n"
        "from tests.providers import fake_openai_server\n"
        "import tests.session.test_core as core\n"
        "from ._support import render_in\n"
        "from .. import conftest\n"
        "from conftest import RunCli\n"
        "def later():\n    from tests.conftest import postgres_dsn\n"
    )
    assert _test_package(TESTS / "template" / "test_example.py") == "tests.template"
    assert _outside_support(source, "tests.template") == [
        "conftest", "tests.conftest", "tests.providers", "tests.session.test_core",
        "tests.template._support",
    ]
    assert _outside_support("from .. import conftest\n", "tests.template") == [
        "tests.conftest"]
    assert _outside_support("from tests.conftest import RunCli\n", "tests") == [
        "tests.conftest"]
