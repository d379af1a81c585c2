"""The assembled public entry points: the one place that wires the layers together.

``phaseflow.spec`` compiles workflows and knows nothing of the machine that runs them; the
machine depends on the compiled model. A host wants both at once — ``load_workflow(...)
.machine()`` — so the loading functions it calls live here, above both layers, and hand
the compiled workflow its :class:`~phaseflow.spec.model.MachineFactory`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from phaseflow.machine import PhaseMachine
from phaseflow.spec import loader
from phaseflow.spec.model import Workflow

__all__ = ["load_workflow", "load_workflow_text"]


def load_workflow(
    path: str | os.PathLike[str],
    registry: Mapping[str, Callable[..., Any]] | None = None,
) -> Workflow:
    """Load, check and compile the workflow file at ``path``; ``workflow.machine()`` makes
    a machine for one conversation. Raises :class:`~phaseflow.errors.WorkflowError` with
    every diagnostic when the file has an error (a missing file is PF001). YAML text goes
    to :func:`load_workflow_text`."""
    return loader.compile_file(path, registry, machine_factory=PhaseMachine.from_workflow)


def load_workflow_text(
    text: str,
    registry: Mapping[str, Callable[..., Any]] | None = None,
    *,
    path: str = "<string>",
) -> Workflow:
    """:func:`load_workflow` for YAML text; ``path`` names the text in diagnostics."""
    return loader.compile_text(
        text, registry, path=path, machine_factory=PhaseMachine.from_workflow
    )
