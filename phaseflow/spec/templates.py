"""Jinja2 templates for instructions and the navigation block.

Templates are compiled once, at load, in Jinja2's immutable sandbox: a template can read
the session but never change it, and cannot reach Python internals.

Absent state is normal in a conversation, so, like a guard, a template reads an absent key
(or a part of an absent value) as null and prints null as nothing. Typos are caught at
load instead: a template that uses a name it is not given (``stat.x``, ``phse``) is a
compile error with a "did you mean". A run-time failure while rendering is returned as
text the host can see, never raised into a turn.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import jinja2
from jinja2 import meta, nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

from phaseflow.errors import PhaseflowError
from phaseflow.spec.diagnostics import did_you_mean


class TemplateCompileError(PhaseflowError):
    """A template's syntax is wrong; ``line`` is 1-based within the template source."""

    def __init__(self, message: str, line: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.line = line


class _StateView(dict[str, Any]):
    """The state as a template sees it: an absent key is null, not an error."""

    def __missing__(self, key: str) -> None:
        return None


def _finalize(value: Any) -> Any:
    return "" if value is None else value


@lru_cache(maxsize=1)
def environment() -> ImmutableSandboxedEnvironment:
    """The one sandbox every phaseflow template is compiled in."""
    env = ImmutableSandboxedEnvironment(
        undefined=jinja2.ChainableUndefined,
        autoescape=False,
        keep_trailing_newline=False,
        finalize=_finalize,
    )
    return env


@dataclass(frozen=True, slots=True)
class Template:
    """A compiled template and the top-level state keys it reads (for PF303)."""

    source: str
    reads: frozenset[str]
    _template: jinja2.Template = field(repr=False, compare=False)

    def render(self, context: Mapping[str, Any]) -> str:
        """Render against ``context``; a run-time failure becomes a bracketed message."""
        values = dict(context)
        state = values.get("state")
        if isinstance(state, Mapping):
            values["state"] = _StateView(state)
        try:
            return self._template.render(values)
        except jinja2.TemplateError as exc:
            return f"[template error: {exc}]"
        except Exception as exc:  # sandbox violations, type errors in filters, ...
            return f"[template error: {type(exc).__name__}: {exc}]"


#: The names an ``instructions`` template is given.
INSTRUCTION_NAMES = frozenset({"state", "phase", "workflow", "turn"})
#: The names a ``navigation.template`` is given (phase-machine.md, "The navigation block").
NAVIGATION_NAMES = INSTRUCTION_NAMES | {
    "goal",
    "previous",
    "still_needed",
    "missing_requires",
    "tools",
    "next",
    "terminal",
}


def compile_template(source: str, names: frozenset[str] = INSTRUCTION_NAMES) -> Template:
    """Parse and compile ``source`` once.

    Raises :class:`TemplateCompileError` on bad syntax or on a name outside ``names``.
    """
    env = environment()
    try:
        ast = env.parse(source)
        compiled = env.from_string(ast)
    except jinja2.TemplateSyntaxError as exc:
        raise TemplateCompileError(exc.message or str(exc), exc.lineno or 1) from None
    except (RecursionError, MemoryError):
        raise TemplateCompileError("template is nested too deeply") from None
    for name in sorted(meta.find_undeclared_variables(ast) - names):
        line = next(
            (n.lineno for n in ast.find_all(nodes.Name) if n.name == name and n.ctx == "load"), 1
        )
        hint = did_you_mean(name, names)
        allowed = ", ".join(sorted(names))
        raise TemplateCompileError(
            f"template uses unknown name '{name}'{hint or f' (it can use: {allowed})'}", line
        )
    return Template(source=source, reads=frozenset(_state_reads(ast)), _template=compiled)


def _state_reads(tree: nodes.Template) -> set[str]:
    """Top-level keys read as ``state.key`` or ``state['key']`` anywhere in the template."""
    keys: set[str] = set()
    for node in tree.find_all((nodes.Getattr, nodes.Getitem)):
        target = getattr(node, "node", None)
        if not (isinstance(target, nodes.Name) and target.name == "state"):
            continue
        if isinstance(node, nodes.Getattr):
            keys.add(node.attr)
        elif isinstance(node, nodes.Getitem):
            arg = node.arg
            if isinstance(arg, nodes.Const) and isinstance(arg.value, str):
                keys.add(arg.value)
    return keys
