"""Jinja2 templates for instructions and the navigation block.

Templates are compiled once, at load, in a bounded immutable sandbox
(:mod:`phaseflow.template.sandbox`): a template can read the session but never change
it, cannot reach Python internals, and cannot spend more than the limits of
:mod:`phaseflow.template.limits` however it is written.

Absent state is normal in a conversation, so, like a guard, a template reads an absent key
(or a part of an absent value) as null and prints null as nothing. Typos are caught at
load instead: a template that uses a name it is not given (``stat.x``, ``phse``) is a
compile error with a "did you mean" (PF302), and a construct the sandbox is certain to
refuse (``''.__class__``, ``'a' * 10**8``) is one too (PF304).

A run-time failure while rendering is a value, never an exception raised into a turn:
:meth:`Template.render_checked` returns the fallback text (:data:`FALLBACK_TEXT`) and a
one-line error for the host's trace; the model never sees internals.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import islice
from types import TracebackType
from typing import Any, Literal, NamedTuple

import jinja2
from jinja2 import nodes

from phaseflow.errors import PhaseflowError
from phaseflow.expr.describe import clip, describe_exception, did_you_mean, type_name
from phaseflow.template.limits import (
    MAX_NESTING,
    MAX_OUTPUT,
    MAX_SOURCE,
    StateView,
    TemplateLimitError,
)
from phaseflow.template.sandbox import (
    BoundedSandbox,
    TooManyTokensError,
    bounded_environment,
)
from phaseflow.template.static import refused, too_deep

#: What a template renders to when rendering fails: nothing. The model then gets no
#: instructions text rather than a half-rendered one or an error with internals in it; the
#: failure itself goes to the host (``RenderOutcome.error``).
FALLBACK_TEXT = ""

TemplateCode = Literal["PF302", "PF304"]


class TemplateCompileError(PhaseflowError):
    """A template cannot be used; ``line`` is 1-based within the template source.

    ``code`` is the diagnostic to report: ``"PF302"`` for a syntax error, an unknown name,
    filter or test, or an include; ``"PF304"`` for a construct the sandbox refuses (an
    attribute starting with ``_``) or a limit its constants already break.
    """

    def __init__(self, message: str, line: int = 1, code: TemplateCode = "PF302") -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.code: TemplateCode = code


@dataclass(frozen=True, slots=True)
class RenderOutcome:
    """What rendering a template gave: the ``text`` to use, and the ``error`` if it failed.

    On failure ``text`` is :data:`FALLBACK_TEXT` and ``error`` a one-line message for the
    host's trace (``"line 3: unsupported operand type(s) for +: 'NoneType' and 'int'"``),
    with no traceback and no addresses; ``line`` is the template line it failed at, when
    known.
    """

    text: str
    error: str | None = None
    line: int | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def environment() -> BoundedSandbox:
    """The one sandbox every phaseflow template is compiled in."""
    return bounded_environment()


_ADDRESS = re.compile(r"0x[0-9a-fA-F]{4,}")
#: A default Python repr (``<function f at 0x7f...>``): never let one reach the model.
_REPR = re.compile(r"<[^<>\n]* at 0x[0-9a-fA-F]+>")
_MESSAGE_LIMIT = 200
_BATCH = 32


def _one_line(message: str) -> str:
    return clip(" ".join(_ADDRESS.sub("0x...", message).split()), _MESSAGE_LIMIT)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "calls or values nested too deeply"
    if isinstance(exc, MemoryError):
        return "out of memory"
    if isinstance(exc, jinja2.TemplateError | TemplateLimitError):
        # our own messages and Jinja's: the message alone, and it never fails to print
        return describe_exception(exc).partition(": ")[2] or type_name(exc)
    return describe_exception(exc)


def _failed_line(compiled: jinja2.Template, tb: TracebackType | None) -> int | None:
    """The template line of the innermost generated-code frame in ``tb``."""
    line = None
    code_name = compiled.root_render_func.__code__.co_filename
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == code_name:
            line = compiled.get_corresponding_lineno(tb.tb_lineno)
        tb = tb.tb_next
    return line


class TemplateOrigin(NamedTuple):
    """Where a template's first character was written: ``path``, 1-based ``line`` and
    ``column``; ``block_column`` is the column a block scalar's lines start at."""

    path: str
    line: int
    column: int
    block_column: int | None = None


@dataclass(frozen=True, slots=True, eq=False)
class Template:
    """A checked template and the top-level state keys it reads (for PF303).

    Parsing and every static check happen in :func:`compile_template`; turning the parsed
    template into Python code (the costly part) happens once, in :meth:`compile`, which
    :func:`~phaseflow.spec.loader.compile_file` calls for every template at load and
    :meth:`render` calls if nobody did. ``phaseflow validate`` never renders, so it never
    pays for code generation.
    """

    source: str
    reads: frozenset[str]
    _ast: nodes.Template = field(repr=False, compare=False)
    _compiled: list[jinja2.Template] = field(default_factory=list, repr=False, compare=False)
    #: where the template was written, when it came from a file (set by the compiler)
    origin: TemplateOrigin | None = field(default=None, compare=False)

    def line_position(self, line: int | None) -> tuple[str, int, int] | None:
        """``(path, line, column)`` in the file of the template's ``line`` (1-based), for a
        render error: exact for a literal block (``|``) and a one-line scalar, the line's
        start otherwise. ``None`` when the template came from no file."""
        origin = self.origin
        if origin is None:
            return None
        if line is None or line < 1:
            return (origin.path, origin.line, origin.column)
        if line == 1:
            return (origin.path, origin.line, origin.column)
        return (origin.path, origin.line + line - 1, origin.block_column or 1)

    def compile(self) -> jinja2.Template:
        """The compiled Jinja2 template (generated on first call, then reused).

        :func:`compile_template` refuses what code generation would fail on, so this does
        not fail for a template it accepted; should it fail all the same, the failure is a
        :class:`TemplateCompileError` (PF302), never Jinja's or Python's own exception.
        """
        if not self._compiled:
            try:
                compiled = environment().from_string(self._ast)
            except Exception as exc:  # any failure here is a bad template
                raise TemplateCompileError(
                    f"the template cannot be turned into code: {_one_line(_describe(exc))}",
                    getattr(exc, "lineno", None) or 1) from None
            self._compiled.append(compiled)
        return self._compiled[0]

    def render(self, context: Mapping[str, Any]) -> str:
        """Render against ``context``; on failure, :data:`FALLBACK_TEXT`."""
        return self.render_checked(context).text

    def render_checked(self, context: Mapping[str, Any]) -> RenderOutcome:
        """Render against ``context`` within the limits; failures are returned, not raised.

        The output is at most :data:`~phaseflow.template.limits.MAX_OUTPUT` characters;
        a longer one, any limit reached, or any run-time error (arithmetic on null, a
        refused attribute, printing a function) gives ``RenderOutcome(FALLBACK_TEXT,
        error, line)``.
        """
        values = dict(context)
        state = values.get("state")
        if isinstance(state, Mapping):
            values["state"] = StateView(state)
        compiled = self.compile()
        parts: list[str] = []
        try:
            chunks = compiled.root_render_func(compiled.new_context(values))
            total = 0
            # In batches: the size is checked every few pieces without a Python step per
            # piece (each piece is at most one value, so a batch is bounded too).
            while batch := list(islice(chunks, _BATCH)):
                total += sum(map(len, batch))
                if total > MAX_OUTPUT:
                    raise TemplateLimitError(
                        f"the output is longer than {MAX_OUTPUT:,} characters")
                parts += batch
        except Exception as exc:  # every failure of a render is an outcome, by design
            line = _failed_line(compiled, exc.__traceback__)
            message = _one_line(_describe(exc))
            where = f"line {line}: " if line is not None else ""
            return RenderOutcome(FALLBACK_TEXT, f"{where}{message}", line)
        text = "".join(parts)
        if " at 0x" in text and _REPR.search(text):
            return RenderOutcome(FALLBACK_TEXT, "the template printed a Python object", None)
        return RenderOutcome(text)


#: The names an ``instructions`` template is given.
INSTRUCTION_NAMES = frozenset({"state", "phase", "workflow", "turn"})
#: The names a ``navigation.template`` is given (docs/workflows.md, the navigation block).
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

    Raises :class:`TemplateCompileError` with code PF302 on bad syntax, on a name outside
    ``names``, on an unknown filter or test, and on ``include``/``extend``/``import`` (a
    workflow's templates stand alone: there is nothing to include); with code PF304 on a
    construct the sandbox is certain to refuse (see :mod:`phaseflow.template.static`).
    """
    if len(source) > MAX_SOURCE:
        raise TemplateCompileError(
            f"the template is {len(source):,} characters long, more than {MAX_SOURCE:,}",
            1, "PF304")
    env = environment()
    try:
        ast = env.parse(source)
    except jinja2.TemplateSyntaxError as exc:
        raise TemplateCompileError(exc.message or str(exc), exc.lineno or 1) from None
    except (RecursionError, MemoryError):
        raise TemplateCompileError(
            f"the template is nested more than {MAX_NESTING} levels deep", 1, "PF304") from None
    except TooManyTokensError as exc:
        raise TemplateCompileError(str(exc), 1, "PF304") from None
    except ValueError:
        # Jinja's lexer reads number literals with int(), which refuses more than 4,300
        # digits; no number that long could be used anyway (see MAX_INT_BITS).
        raise TemplateCompileError(
            "a number in the template is too long (more than 4,300 digits)", 1, "PF304"
        ) from None
    except Exception as exc:  # whatever Jinja raises: a bad template
        raise TemplateCompileError(f"the template cannot be parsed: {_one_line(_describe(exc))}",
                                   1) from None
    problem = too_deep(ast)
    if problem is not None:
        raise TemplateCompileError(problem[0], problem[1], "PF304")
    _check(ast, names, env)
    _check_code_generation(ast)
    problem = refused(ast)
    if problem is not None:
        raise TemplateCompileError(problem[0], problem[1], "PF304")
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


def _check_code_generation(tree: nodes.Template) -> None:
    """What Jinja's code generator (or Python, compiling its output) would refuse, found
    without generating code: ``validate`` accepts only templates that load.

    A name ``loop`` assigned inside a ``for`` loop (its target included); two arguments of
    one macro or call block with the same name; a keyword given twice in one call, filter
    or test; two blocks with the same name; an argument named ``caller`` without a default
    in a macro that uses ``caller``.
    """
    blocks: set[str] = set()
    for node in tree.find_all(nodes.Node):
        if isinstance(node, nodes.For):
            for name in node.find_all(nodes.Name):
                if name.name == "loop" and name.ctx == "store":
                    raise TemplateCompileError(
                        "'loop' is the loop's own variable: nothing inside a for loop can "
                        "assign it (choose another name)", name.lineno)
        elif isinstance(node, nodes.Macro | nodes.CallBlock):
            _check_arguments(node)
        elif isinstance(node, nodes.Call | nodes.Filter | nodes.Test):
            seen: set[Any] = set()
            for keyword in node.kwargs:
                if keyword.key in seen:
                    raise TemplateCompileError(
                        f"the argument '{keyword.key}' is given twice", keyword.lineno)
                seen.add(keyword.key)
        elif isinstance(node, nodes.Block):
            if node.name in blocks:
                raise TemplateCompileError(f"block '{node.name}' is defined twice", node.lineno)
            blocks.add(node.name)


def _check_arguments(node: nodes.Macro | nodes.CallBlock) -> None:
    names = [arg.name for arg in node.args]
    for index, name in enumerate(names):
        if name in names[:index]:
            raise TemplateCompileError(f"the argument '{name}' is declared twice", node.lineno)
    if "caller" in names and names.index("caller") < len(names) - len(node.defaults):
        uses_caller = any(n.name == "caller" and n.ctx == "load"
                          for part in node.body for n in part.find_all(nodes.Name))
        if uses_caller:
            raise TemplateCompileError(
                "an argument named 'caller' needs a default (or leave it out: 'caller' is "
                "given to every macro called from a call block)", node.lineno)


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
