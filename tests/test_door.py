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
