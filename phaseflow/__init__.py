"""phaseflow: declarative phase workflows for guided LLM agents.

Everything a host's program needs comes through this one door, loaded lazily (importing
``phaseflow`` imports none of it, and the ``openai`` SDK or psycopg only when their
adapter is asked for): ``load_workflow``, ``Workflow``, ``PhaseMachine``; ``Agent``,
``Session``, ``tool``, ``ToolContext``, ``ToolResult``; ``ScriptedProvider``,
``OpenAIProvider``; ``MemoryStore``, ``SQLiteStore``, ``PostgresStore``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from phaseflow.api import load_workflow as load_workflow
    from phaseflow.api import load_workflow_text as load_workflow_text
    from phaseflow.errors import ConfigError as ConfigError
    from phaseflow.errors import PhaseflowError as PhaseflowError
    from phaseflow.errors import WorkflowError as WorkflowError
    from phaseflow.machine import PhaseMachine as PhaseMachine
    from phaseflow.machine import State as State
    from phaseflow.providers.openai import OpenAIProvider as OpenAIProvider
    from phaseflow.providers.scripted import ScriptedProvider as ScriptedProvider
    from phaseflow.session.agent import Agent as Agent
    from phaseflow.session.agent import Session as Session
    from phaseflow.spec.model import Workflow as Workflow
    from phaseflow.stores.memory import MemoryStore as MemoryStore
    from phaseflow.stores.postgres import PostgresStore as PostgresStore
    from phaseflow.stores.sqlite import SQLiteStore as SQLiteStore
    from phaseflow.tools import Attachment as Attachment
    from phaseflow.tools import ToolContext as ToolContext
    from phaseflow.tools import ToolResult as ToolResult
    from phaseflow.tools import tool as tool

_LAZY = {
    "PhaseflowError": "phaseflow.errors",
    "ConfigError": "phaseflow.errors",
    "WorkflowError": "phaseflow.errors",
    "load_workflow": "phaseflow.api",
    "load_workflow_text": "phaseflow.api",
    "check_file": "phaseflow.spec.loader",
    "check_text": "phaseflow.spec.loader",
    "Workflow": "phaseflow.spec.model",
    "Phase": "phaseflow.spec.model",
    "Transition": "phaseflow.spec.model",
    "SetEffect": "phaseflow.spec.model",
    "UnsetEffect": "phaseflow.spec.model",
    "CallEffect": "phaseflow.spec.model",
    "Preparation": "phaseflow.spec.model",
    "PhaseMachine": "phaseflow.machine",
    "State": "phaseflow.machine",
    # the one door of a host's program: the agent and its parts, each from its home
    "Agent": "phaseflow.session.agent",
    "Session": "phaseflow.session.agent",
    "tool": "phaseflow.tools",
    "ToolContext": "phaseflow.tools",
    "ToolResult": "phaseflow.tools",
    "Attachment": "phaseflow.tools",
    "OpenAIProvider": "phaseflow.providers.openai",
    "ScriptedProvider": "phaseflow.providers.scripted",
    "MemoryStore": "phaseflow.stores.memory",
    "SQLiteStore": "phaseflow.stores.sqlite",
    "PostgresStore": "phaseflow.stores.postgres",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'phaseflow' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
