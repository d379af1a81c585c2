"""``phaseflow`` is the one door of a host's program: each name a host needs is there,
is the object of its home module, and costs nothing until it is asked for."""

from __future__ import annotations

import importlib
import subprocess
import sys

import phaseflow

DOOR = {
    "Agent": "phaseflow.session.agent", "Session": "phaseflow.session.agent",
    "tool": "phaseflow.tools", "ToolContext": "phaseflow.tools",
    "ToolResult": "phaseflow.tools", "load_workflow": "phaseflow.api",
    "load_workflow_text": "phaseflow.api", "Workflow": "phaseflow.spec.model",
    "PhaseMachine": "phaseflow.machine", "ScriptedProvider": "phaseflow.providers.scripted",
    "OpenAIProvider": "phaseflow.providers.openai", "MemoryStore": "phaseflow.stores.memory",
    "SQLiteStore": "phaseflow.stores.sqlite", "PostgresStore": "phaseflow.stores.postgres",
}


def test_every_name_a_host_needs_is_at_the_door_and_is_its_home_s_object() -> None:
    for name, home in DOOR.items():
        assert name in phaseflow.__all__
        assert getattr(phaseflow, name) is getattr(importlib.import_module(home), name)


def test_the_door_imports_nothing_until_a_name_is_asked_for() -> None:
    code = ("import sys, phaseflow\n"
            "print(sorted(m for m in sys.modules if m.startswith('phaseflow')))\n"
            "from phaseflow import Agent, ScriptedProvider, SQLiteStore, tool\n"
            "print('openai' in sys.modules, 'psycopg' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60).stdout.splitlines()
    assert out == ["['phaseflow']", "False False"]


def test_each_name_at_the_door_is_defined_once_in_the_package() -> None:
    """No second function or class of a door's name elsewhere in the package (the
    spec layer's compilers are ``compile_file`` / ``compile_text``, not a second
    ``load_workflow``)."""
    import ast
    from pathlib import Path

    root = Path(phaseflow.__file__).parent
    found: dict[str, set[str]] = {name: set() for name in DOOR}  # (overloads: one file)
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and (
                    node.name in found) and node.col_offset == 0:
                found[node.name].add(str(path.relative_to(root)))
    assert {name: homes for name, homes in found.items() if len(homes) != 1} == {}


def test_a_workflow_asked_for_with_something_else_than_a_path_or_text_is_named() -> None:
    import pytest

    with pytest.raises(TypeError, match=r"a workflow is loaded from a path \(str or "
                                        r"os.PathLike\), not int"):
        phaseflow.load_workflow(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="a workflow text is YAML in a str, not bytes"):
        phaseflow.load_workflow_text(b"phaseflow: 1")  # type: ignore[arg-type]
