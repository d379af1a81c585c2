"""phaseflow: declarative phase workflows for guided LLM agents.

Import what you need; heavy modules load lazily so the CLI starts fast.
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
    from phaseflow.session.agent import Agent as Agent
    from phaseflow.spec.model import Workflow as Workflow
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
    "Agent": "phaseflow.session.agent",
    "tool": "phaseflow.tools",
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
