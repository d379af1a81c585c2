"""What an :class:`~phaseflow.session.agent.Agent` refuses when it is made.

Bad configuration is refused when it is given, as a :class:`ConfigError` naming the
setting (``phaseflow run`` turns it into exit 2 before any model is called), never at
the model's first call or after a tool ran. One rule, one function; ``check_agent``
runs them in order.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from phaseflow.errors import ConfigError
from phaseflow.spec.builtin_tools import BUILTIN_TOOLS
from phaseflow.spec.model import CallEffect, Workflow, tree_catalogue, tree_phases
from phaseflow.tools.function import FunctionTool


def positive_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name} must be a positive integer, not {value!r}")


def non_negative_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{name} must be an integer >= 0, not {value!r}")


def positive_seconds(name: str, value: object) -> None:
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or not math.isfinite(value) or value <= 0):
        raise ConfigError(f"{name} must be a positive number of seconds, not {value!r}")


def a_callable(name: str, value: object, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not callable(value):
        raise ConfigError(f"{name} must be a callable, not {type(value).__name__}")


def hooks_callable(hooks: Mapping[str, Any] | None) -> None:
    """Every hook a host gives is a callable (a typo'd value fails now, not when the
    effect runs)."""
    if hooks is None:
        return
    if not isinstance(hooks, Mapping):
        raise ConfigError(f"hooks must be a mapping from name to callable, not "
                          f"{type(hooks).__name__}")
    for name, value in hooks.items():
        if not isinstance(name, str) or not callable(value):
            raise ConfigError(f"hook {name!r} is not a callable "
                              f"(it is {type(value).__name__})")


def no_built_in_names(tools: Iterable[str]) -> None:
    """A host tool named like a built-in would be offered twice and never run."""
    taken = [n for n in tools if n in BUILTIN_TOOLS]
    if taken:
        raise ConfigError(f"tool {taken[0]!r} has the name of a built-in tool "
                          f"({', '.join(BUILTIN_TOOLS)}); give it another name")


def called_hooks(workflow: Workflow) -> list[str]:
    """Every ``call`` the tree's effects and preparations name, in file order (a
    callee's too: they run in the same session)."""
    names: list[str] = []
    for phase in tree_phases(workflow):
        for effect in (*phase.on_enter, *phase.on_exit, *(p.effect for p in phase.prepare)):
            if isinstance(effect, CallEffect) and effect.name not in names:
                names.append(effect.name)
    return names


class MissingHooks(ConfigError):
    """Call effects without a callable (``missing`` names them): a command says which of
    its options gives them."""

    def __init__(self, missing: list[str], hint: str = "on the command line: --hooks"
                 ) -> None:
        self.missing = tuple(missing)
        super().__init__(
            f"no callable for the workflow's call effect(s) {', '.join(map(repr, missing))}: "
            f"give them in hooks={{...}} ({hint})")


def hooks_present(workflow: Workflow, hooks: Mapping[str, Any] | None) -> None:
    """Every ``call`` effect has its callable (in the workflow's registry or the host's
    ``hooks``): a missing one would fail every time the effect runs (a preparation
    failing every turn)."""
    given = hooks or {}
    missing = [c for c in called_hooks(workflow) if c not in workflow.registry
               and c not in given]
    if missing:
        raise MissingHooks(missing)


def signatures_fit(workflow: Workflow, tools: Mapping[str, FunctionTool]) -> None:
    """A tool whose catalogue entry (anywhere in the tree) declares ``parameters`` takes
    what they declare."""
    catalogue = tree_catalogue(workflow) or {}
    for name, fn in tools.items():
        entry = catalogue.get(name)
        declared = entry.parameters_json() if entry is not None else None
        if not declared:
            continue
        problem = fn.signature_problem(declared)
        if problem is not None:
            raise ConfigError(f"tool {name!r} does not fit the parameters its catalogue entry "
                              f"declares: {problem}")


def check_agent(*, workflow: Workflow, tools: Mapping[str, FunctionTool],
                hooks: Mapping[str, Any] | None, values: Mapping[str, Any],
                callables: Mapping[str, Callable[..., Any] | None]) -> None:
    """All of the above, in the order a host would fix them. ``workflow`` is the one
    loaded, before the host's ``hooks`` are added to its registry."""
    hooks_callable(hooks)
    for name in ("max_steps", "output_lines", "output_chars"):
        positive_int(name, values[name])
    non_negative_int("max_retries", values["max_retries"])
    if "max_continuations" in values:
        non_negative_int("max_continuations", values["max_continuations"])
    for name in ("capture_bytes", "session_capture_bytes"):
        if name in values:
            positive_int(name, values[name])
    for name in ("max_output_tokens", "max_history_tokens"):
        if values.get(name) is not None:
            positive_int(name, values[name])
    positive_seconds("lease", values["lease"])
    worker = values["worker"]
    if worker is not None and (not isinstance(worker, str) or not worker):
        raise ConfigError(f"worker must be a non-empty string, not {worker!r}")
    if not isinstance(values["parallel_tools"], bool):
        raise ConfigError(f"parallel_tools must be True or False, not "
                          f"{values['parallel_tools']!r}")
    if not isinstance(values["system"], str):
        raise ConfigError(f"system must be a string, not {type(values['system']).__name__}")
    for name, value in callables.items():
        a_callable(name, value, optional=name == "approve")
    no_built_in_names(tools)
    signatures_fit(workflow, tools)
    hooks_present(workflow, hooks)
