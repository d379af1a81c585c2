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
from jinja2 import nodes
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


@dataclass(frozen=True, slots=True, eq=False)
class Template:
    """A checked template and the top-level state keys it reads (for PF303).

    Parsing and every static check happen in :func:`compile_template`; turning the parsed
    template into Python code (the costly part) happens once, in :meth:`compile`, which
    :func:`~phaseflow.spec.loader.load_workflow` calls for every template at load and
    :meth:`render` calls if nobody did. ``phaseflow validate`` never renders, so it never
    pays for code generation.
    """

    source: str
    reads: frozenset[str]
    _ast: nodes.Template = field(repr=False, compare=False)
    _compiled: list[jinja2.Template] = field(default_factory=list, repr=False, compare=False)

    def compile(self) -> jinja2.Template:
        """The compiled Jinja2 template (generated on first call, then reused)."""
        if not self._compiled:
            self._compiled.append(environment().from_string(self._ast))
        return self._compiled[0]

    def render(self, context: Mapping[str, Any]) -> str:
        """Render against ``context``; a run-time failure becomes a bracketed message."""
        values = dict(context)
        state = values.get("state")
        if isinstance(state, Mapping):
            values["state"] = _StateView(state)
        try:
            return self.compile().render(values)
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
    "collect",
    "missing_requires",
    "tools",
    "next",
    "terminal",
}


def compile_template(source: str, names: frozenset[str] = INSTRUCTION_NAMES) -> Template:
    """Parse and check ``source`` once (code generation is deferred: see :class:`Template`).

    Raises :class:`TemplateCompileError` on bad syntax, on a name outside ``names``, on an
    unknown filter or test, and on ``include``/``extend``/``import`` (a workflow's
    templates stand alone: there is nothing to include).
    """
    env = environment()
    try:
        ast = env.parse(source)
    except jinja2.TemplateSyntaxError as exc:
        raise TemplateCompileError(exc.message or str(exc), exc.lineno or 1) from None
    except (RecursionError, MemoryError):
        raise TemplateCompileError("template is nested too deeply") from None
    _check(ast, names, env)
    return Template(source=source, reads=frozenset(_state_reads(ast)), _ast=ast)


_NO_LOADER = (nodes.Include, nodes.Extends, nodes.Import, nodes.FromImport)


def _check(tree: nodes.Template, names: frozenset[str], env: jinja2.Environment) -> None:
    """The static checks, in one walk: unknown names, filters and tests; includes.

    Names bound inside the template (``for`` targets, ``set``, macro arguments) count as
    known wherever they appear, which is looser than Jinja's scoping but never wrong about
    a typo in a name the template was given.
    """
    bound: set[str] = set(env.globals) | {"loop", "caller", "varargs", "kwargs"}
    loads: list[nodes.Name] = []
    for node in tree.find_all(nodes.Node):
        if isinstance(node, nodes.Name):
            if node.ctx == "load":
                loads.append(node)
            else:
                bound.add(node.name)
        elif isinstance(node, nodes.Macro | nodes.CallBlock):
            bound.update(arg.name for arg in node.args)
            if isinstance(node, nodes.Macro):
                bound.add(node.name)
        elif isinstance(node, nodes.Filter | nodes.Test):
            known = env.filters if isinstance(node, nodes.Filter) else env.tests
            if node.name not in known:
                kind = "filter" if isinstance(node, nodes.Filter) else "test"
                raise TemplateCompileError(
                    f"unknown {kind} '{node.name}'{did_you_mean(node.name, known)}", node.lineno
                )
        elif isinstance(node, _NO_LOADER):
            raise TemplateCompileError(
                "templates in a workflow stand alone: include, extends and import are not "
                "available",
                node.lineno,
            )
    for name in sorted({n.name for n in loads} - bound - names):
        line = next(n.lineno for n in loads if n.name == name)
        hint = did_you_mean(name, names)
        allowed = ", ".join(sorted(names))
        raise TemplateCompileError(
            f"template uses unknown name '{name}'{hint or f' (it can use: {allowed})'}", line
        )


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
