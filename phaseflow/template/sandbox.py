"""The sandbox phaseflow templates run in: Jinja2's immutable sandbox, bounded.

Jinja's own sandbox keeps a template away from Python internals but not from the host's
CPU and memory, so this module adds three things (limits in
:mod:`phaseflow.template.limits`):

- **no constant folding**: Jinja evaluates constant expressions while it generates code,
  so ``{{ 10**100000000 }}`` hung the loader. The optimizer is off and the code generator
  folds nothing but literal text, so every expression runs at render time, through the
  checks below.
- **a budget per render**: every loop iteration (for the nodes of its body), call (a
  macro also for its body), operator that can grow a value (``*``, ``**``, ``+``, ``%``,
  ``~``), comparison and ``in`` (for what they walk, at every level of nested data),
  slice, hashed key, filter and concatenation is checked and charged against one
  :class:`~phaseflow.template.limits.Budget`, kept on the render's context, so the
  budget bounds a render's time as well as its memory.
- **only what an author needs**: the globals are a counting ``range`` and nothing else
  (no ``lipsum``, ``cycler``, ``joiner``, ``namespace``, ``dict``); filters that print
  Python reprs or are not deterministic are gone; and printing anything that is not data
  is an error, so no repr with an address ever reaches the model.
"""

from __future__ import annotations

import operator
import string
import types
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import lru_cache, partial
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.exceptions import FilterArgumentError, SecurityError
from jinja2.filters import make_attrgetter
from jinja2.lexer import Token, TokenStream
from jinja2.runtime import Context, LoopContext, Macro
from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedFormatter

from phaseflow.template.limits import (
    CALL_WORK,
    ITEM_WORK,
    MAX_ITERATIONS,
    MAX_ROUND_DIGITS,
    MAX_TOKENS,
    MAX_VALUE,
    MAX_WORK,
    NODE_WORK,
    OPERATION_WORK,
    Budget,
    StateView,
    TemplateLimitError,
    charge,
    check_binop,
    check_format_spec,
    compare_work,
    contains_work,
    deep_work,
    estimate_text,
    percent_args,
    plain_data,
    remaining,
    require_size,
    require_width,
    size_of,
    text_of,
    work_of,
)

#: Filters a workflow author does not need: ``pprint`` prints Python reprs, ``random`` makes
#: a render non-deterministic, the URL/HTML helpers have no place in instructions.
REMOVED_FILTERS = frozenset({"pprint", "random", "urlize", "urlencode", "xmlattr"})


class RenderContext(Context):
    """A Jinja context that carries the render's budget (shared with derived contexts)."""

    budget: Budget

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.budget = Budget()

    def derived(self, locals: dict[str, Any] | None = None) -> Context:
        context = super().derived(locals)
        if isinstance(context, RenderContext):
            context.budget = self.budget
        return context


def budget_of(context: Any) -> Budget:
    """The budget of the render ``context`` belongs to (a fresh one outside a render)."""
    try:
        budget: Budget = context.budget
    except AttributeError:
        return Budget()
    return budget


class CountedIterator:
    """A loop's iterable, charging one iteration and the loop body's weight per item.

    ``weight`` is how many template nodes the body holds (see :func:`body_weight`): a loop
    of ten thousand iterations over a body of a thousand ``if`` tags runs ten million
    steps, which the iteration limit alone would let through.
    """

    __slots__ = ("_budget", "_items", "_work", "weight")

    def __init__(self, budget: Budget, iterable: Iterable[Any], weight: int) -> None:
        self._budget = budget
        self._items = iter(iterable)
        self.weight = weight
        self._work = NODE_WORK * weight

    def __iter__(self) -> CountedIterator:
        return self

    def __next__(self) -> Any:
        item = next(self._items)
        budget = self._budget
        budget.iterate()
        budget.work += self._work
        if budget.work > MAX_WORK:
            budget.spend(0)
        return item


#: Nodes that cost several steps each time they run (creating a macro; each printed
#: piece of an ``{{ }}`` goes through the checks of what prints).
_HEAVY_NODES: dict[type[nodes.Node], int] = {nodes.Macro: 8, nodes.CallBlock: 8, nodes.Getattr: 2}


def body_weight(body: Iterable[nodes.Node]) -> int:
    """How many steps one run of ``body`` is charged for: one per template node, more for
    the nodes of :data:`_HEAVY_NODES` and for each piece an output prints."""
    weight = 0
    for top in body:
        for node in (top, *top.find_all(nodes.Node)):
            weight += _HEAVY_NODES.get(type(node), 1)
            if isinstance(node, nodes.Output):
                weight += 2 * len(node.nodes)
    return weight


class WeightedMacro(Macro):
    """A macro (or a call block's ``caller``) that knows the weight of its body."""

    weight = 0


class BoundedCodeGenerator(CodeGenerator):
    """Jinja's code generator without constant folding, with counted loops and a checked
    ``~``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: The ``for`` iterables being generated, by identity, and the weight of their
        #: loop's body: their code is wrapped so that it counts the items (the parsed
        #: template itself is never changed, so two threads may compile it at once).
        self._counted: dict[int, int] = {}

    def _output_child_to_const(self, node: nodes.Expr, frame: Frame, finalize: Any) -> str:
        if isinstance(node, nodes.TemplateData):
            return super()._output_child_to_const(node, frame, finalize)
        raise nodes.Impossible()

    def visit_For(self, node: nodes.For, frame: Frame) -> None:
        weight = body_weight([*node.body, *([node.test] if node.test is not None else [])])
        self._counted[id(node.iter)] = weight
        try:
            super().visit_For(node, frame)
        finally:
            self._counted.pop(id(node.iter), None)

    def visit(self, node: nodes.Node, *args: Any, **kwargs: Any) -> Any:
        weight = self._counted.get(id(node))
        if weight is None:
            return super().visit(node, *args, **kwargs)
        self.write("environment.counted_iter(context, ")
        super().visit(node, *args, **kwargs)
        self.write(f", {weight})")
        return None

    def macro_def(self, macro_ref: Any, frame: Frame) -> None:
        """A macro or ``caller`` as a :class:`WeightedMacro`: each call is charged for the
        nodes of its body."""
        self.write(f"environment.weighted({body_weight(macro_ref.node.body)}, ")
        super().macro_def(macro_ref, frame)
        self.write(")")

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        self.write("environment.concat_checked(context, (")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")

    def visit_Compare(self, node: nodes.Compare, frame: Frame) -> None:
        """Every comparison through :meth:`BoundedSandbox.compare_checked` (charged by
        the size of what it compares); a chain ``a < b < c`` stays lazy, as in Python."""
        single = len(node.ops) == 1
        self.write("environment.compare_one(context, " if single
                   else "environment.compare_checked(context, ")
        self.visit(node.expr, frame)
        for index, operand in enumerate(node.ops):
            self.write(f", {operand.op!r}, ")
            if index:
                self.write("lambda: ")
            self.visit(operand.expr, frame)
        self.write(")")

    def visit_Getitem(self, node: nodes.Getitem, frame: Frame) -> None:
        """A slice through :meth:`BoundedSandbox.slice_checked` (Jinja slices directly),
        a computed key through :meth:`BoundedSandbox.getitem_checked` (hashing a tuple
        walks it); a constant key as Jinja does it."""
        if isinstance(node.arg, nodes.Slice):
            self.write("environment.slice_checked(context, ")
            self.visit(node.node, frame)
            for part in (node.arg.start, node.arg.stop, node.arg.step):
                self.write(", ")
                if part is None:
                    self.write("None")
                else:
                    self.visit(part, frame)
            self.write(")")
        elif isinstance(node.arg, nodes.Const):
            super().visit_Getitem(node, frame)
        else:
            self.write("environment.getitem_checked(context, ")
            self.visit(node.node, frame)
            self.write(", ")
            self.visit(node.arg, frame)
            self.write(")")

    def visit_Dict(self, node: nodes.Dict, frame: Frame) -> None:
        """A dict literal whose keys are computed hashes them through
        :meth:`BoundedSandbox.key_checked`."""
        self.write("{")
        for index, item in enumerate(node.items):
            if index:
                self.write(", ")
            if isinstance(item.key, nodes.Const):
                self.visit(item.key, frame)
            else:
                self.write("environment.key_checked(context, ")
                self.visit(item.key, frame)
                self.write(")")
            self.write(": ")
            self.visit(item.value, frame)
        self.write("}")


class _BoundedFormatter(SandboxedFormatter):
    """``str.format`` in the sandbox, refusing huge widths and huge results."""

    def __init__(self, env: jinja2.Environment, budget: Budget) -> None:
        super().__init__(env)
        self._budget = budget
        self._total = 0

    def convert_field(self, value: Any, conversion: str | None) -> Any:
        """``!r``, ``!s`` and ``!a`` of data only: a conversion is a repr or a ``str()``, so
        a function or another object would print with its address."""
        if conversion is None:
            return value
        return super().convert_field(plain_data(value, "a formatted value", self._budget),
                                     conversion)

    def format_field(self, value: Any, format_spec: str) -> Any:
        check_format_spec(format_spec)
        if not isinstance(value, str | int | float | type(None)):
            value = text_of(value, self._budget, "None")
        result = super().format_field(value, format_spec)
        self._total += len(result)
        require_size(self._total, "a formatted string")
        return result


def _checked_concat(parts: Iterable[str]) -> str:
    """Jinja's ``concat`` (for macro bodies, ``set`` and ``filter`` blocks), bounded."""
    collected: list[str] = []
    total = 0
    for part in parts:
        total += len(part)
        if total > MAX_VALUE:
            raise TemplateLimitError(f"a block of output is longer than {MAX_VALUE:,} characters")
        collected.append(part)
    return "".join(collected)


#: Methods of text and numbers whose first argument is the width or length of the result.
WIDTH_METHODS = frozenset({"center", "ljust", "rjust", "zfill", "expandtabs", "to_bytes"})


def argument(args: Sequence[Any], kwargs: Mapping[str, Any], index: int, name: str,
             default: Any = None) -> Any:
    """The argument at position ``index`` or named ``name`` (for a call's values, or for
    its parsed argument nodes alike)."""
    if len(args) > index:
        return args[index]
    return kwargs.get(name, default)


def _check_method(obj: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any],
                  budget: Budget) -> tuple[Any, ...]:
    """Refuse, before the call, a method whose result would be too big, and charge
    what the method scans, compares or hashes."""
    kind = type(obj)
    if kind is types.MethodType and isinstance(obj.__self__, LoopContext):
        if obj.__name__ == "changed":  # compares with the previous values
            budget.spend(deep_work(args, remaining(budget)))
        return args
    if kind is not types.BuiltinMethodType:
        return args
    owner = obj.__self__
    name = obj.__name__
    owner_kind = type(owner)
    if owner_kind is str:
        budget.spend(len(owner))
        return _check_text_method(owner, name, args, kwargs)
    if owner_kind is list or owner_kind is tuple:
        if args and name in ("index", "count"):  # compares the argument with every item
            budget.spend(contains_work(args[0], owner, remaining(budget)) or 0)
        return args
    if isinstance(owner, Mapping):  # get, fromkeys...: hashing the arguments
        budget.spend(deep_work(args, remaining(budget)))
        return args
    if isinstance(owner, int) and name in WIDTH_METHODS:
        require_width(argument(args, kwargs, 0, "length", 1), f"a {name} length")
        return args
    if not isinstance(owner, str | bytes):
        return args
    budget.spend(len(owner))
    return _check_text_method(owner, name, args, kwargs)


def _check_text_method(owner: str | bytes, name: str, args: tuple[Any, ...],
                       kwargs: Mapping[str, Any]) -> tuple[Any, ...]:
    if name in WIDTH_METHODS and args:
        require_width(args[0], f"a {name} width")
    if name == "translate" and args:
        _check_translate(owner, args[0])
    elif name == "expandtabs":
        size = args[0] if args else kwargs.get("tabsize", 8)
        tabs = owner.count("\t") if isinstance(owner, str) else owner.count(b"\t")
        if isinstance(size, int):
            require_size(len(owner) + tabs * max(size, 0), "an expandtabs")
    elif name == "replace" and len(args) >= 2:
        _check_replace(owner, args[0], args[1], args[2] if len(args) > 2 else None)
    elif name == "join" and args:
        require_size(size_of(args[0]), "a join")
        items = list(args[0])
        require_size(sum(estimate_text(i) for i in items[: MAX_VALUE + 1])
                     + len(owner) * max(len(items) - 1, 0), "a join")
        return (items, *args[1:])
    return args


def _check_translate(text: str | bytes, table: Any) -> None:
    """Each character may become the longest text in the table."""
    entries = table.values() if isinstance(table, Mapping) else table
    if not isinstance(entries, list | tuple | type({}.values())):
        return
    longest = max((len(e) for e in entries if isinstance(e, str | bytes)), default=1)
    require_size(len(text) * max(longest, 1), "a translate")


def _check_replace(text: Any, old: Any, new: Any, count: Any) -> None:
    if not (isinstance(text, str | bytes) and isinstance(old, str | bytes)
            and isinstance(new, str | bytes)):
        return
    hits = text.count(old) if old else len(text) + 1  # type: ignore[arg-type]
    if isinstance(count, int) and count >= 0:
        hits = min(hits, count)
    require_size(len(text) + hits * max(len(new) - len(old), 0), "a replace")


class TooManyTokensError(Exception):
    """A template has more than :data:`MAX_TOKENS` tokens (reported as PF304)."""


def _limited(tokens: Iterable[Token]) -> Iterator[Token]:
    for count, token in enumerate(tokens, 1):
        if count > MAX_TOKENS:
            raise TooManyTokensError(f"the template has more than {MAX_TOKENS:,} tokens")
        yield token


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """The immutable sandbox, bounded (see the module docstring)."""

    code_generator_class = BoundedCodeGenerator
    context_class = RenderContext
    intercepted_binops = frozenset({"*", "**", "+", "%"})
    #: Which comparison each operator of the generated code makes.
    comparisons: Mapping[str, Callable[[Any, Any], Any]] = {
        "eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "lteq": operator.le,
        "gt": operator.gt, "gteq": operator.ge,
    }

    def __init__(self, **options: Any) -> None:
        super().__init__(optimized=False, **options)
        self.concat = _checked_concat  # type: ignore[method-assign]

    def _tokenize(self, source: str, name: str | None, filename: str | None = None,
                  state: str | None = None) -> TokenStream:
        """Jinja's token stream, cut off past :data:`MAX_TOKENS` (the parser reads it
        lazily, so a template too long to parse quickly is refused before it is parsed)."""
        stream = super()._tokenize(source, name, filename, state)
        return TokenStream(_limited(stream), name, filename)

    def getattr(self, obj: Any, attribute: str) -> Any:
        """``obj.attribute``; for the state's mappings and ``loop``, the common case,
        without the sandbox's general (and slow) path, to the same result."""
        kind = type(obj)
        if (kind is dict or kind is StateView) and attribute not in _DICT_ATTRIBUTES:
            try:
                return obj[attribute]
            except KeyError:
                return self.undefined(obj=obj, name=attribute)
        if kind is LoopContext and attribute in _LOOP_ATTRIBUTES:
            return getattr(obj, attribute)
        return super().getattr(obj, attribute)

    def unsafe_undefined(self, obj: Any, attribute: str) -> jinja2.Undefined:
        """A refused attribute is an error at once (Jinja's default, an undefined value
        that fails only when used, prints as nothing under ``ChainableUndefined``)."""
        raise SecurityError(
            f"access to attribute {attribute!r} of a {type(obj).__name__!r} value is refused"
        )

    # -- hooks called by the generated code ----------------------------------------------
    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        budget = budget_of(context)
        budget.spend(OPERATION_WORK)
        if operator == "%" and isinstance(left, str):
            right = percent_args(left, right, budget)
        else:
            check_binop(operator, left, right)
        return charge(budget, self.binop_table[operator](left, right))

    def compare_one(self, context: Context, left: Any, op: str, right: Any) -> Any:
        """``left op right`` (the common case of :meth:`compare_checked`)."""
        if type(left) in _CHEAP and type(right) in _CHEAP and op in self.comparisons:
            return self.comparisons[op](left, right)
        return self.compare(budget_of(context), op, left, right)

    def compare_checked(self, context: Context, left: Any, *chain: Any) -> Any:
        """``left op1 right1 [op2 right2 ...]``, each comparison charged; the operands after
        the first come as functions, so that a chain stops where Python's would."""
        budget = budget_of(context)
        result: Any = True
        for index in range(0, len(chain), 2):
            op, right = chain[index], chain[index + 1]
            if index:
                right = right()
            result = self.compare(budget, op, left, right)
            if not result:
                return result
            left = right
        return result

    def compare(self, budget: Budget, op: str, left: Any, right: Any) -> Any:
        """One comparison (``op`` as Jinja names it: ``eq``, ``in``, ``notin``...), charged
        by what it walks: text compares character by character, containers item by item
        at every level, ``in`` scans its container."""
        if op in ("in", "notin"):
            found = self.contains(budget, left, right)
            return found if op == "in" else not found
        if type(left) not in _CHEAP or type(right) not in _CHEAP:
            budget.spend(OPERATION_WORK + compare_work(left, right, remaining(budget)))
        return self.comparisons[op](left, right)

    def contains(self, budget: Budget, item: Any, container: Any) -> bool:
        cost = contains_work(item, container, remaining(budget))
        if cost is not None:
            budget.spend(OPERATION_WORK + cost)
            return item in container
        for element in container:  # an iterator: only going through it tells the cost
            budget.spend(ITEM_WORK + compare_work(item, element, remaining(budget)))
            if element is item or element == item:
                return True
        return False

    def slice_checked(self, context: Context, obj: Any, start: Any, stop: Any,
                      step: Any) -> Any:
        """``obj[start:stop:step]``, its size checked before it is built and charged."""
        budget_of(context).spend(OPERATION_WORK)
        part = slice(start, stop, step)
        if isinstance(obj, str | bytes | list | tuple):
            length = len(range(*part.indices(len(obj))))
            require_size(length, "a slice")
            budget_of(context).spend(length if isinstance(obj, str | bytes)
                                     else ITEM_WORK * length)
        return obj[part]

    def getitem_checked(self, context: Context, obj: Any, key: Any) -> Any:
        return self.getitem(obj, self.key_checked(context, key))

    def key_checked(self, context: Context, key: Any) -> Any:
        """A key about to be hashed: a tuple is walked in full by hashing, so charged."""
        if isinstance(key, tuple):
            budget = budget_of(context)
            budget.spend(deep_work(key, remaining(budget)))
        return key

    def call(__self, __context: Context, __obj: Any, *args: Any,
             **kwargs: Any) -> Any:
        budget = budget_of(__context)
        budget.enter_call()
        try:
            budget.spend(CALL_WORK)
            kind = type(__obj)
            if kind is WeightedMacro:  # a macro call costs twice a plain call
                budget.spend(CALL_WORK + NODE_WORK * __obj.weight)
            elif kind is LoopContext and args:  # a recursive loop: its body again
                weight = getattr(getattr(__obj, "_iterable", None), "weight", 0)
                args = (CountedIterator(budget, args[0], weight), *args[1:])
            args = _check_method(__obj, args, kwargs, budget)
            result = super().call(__context, __obj, *args, **kwargs)
        finally:
            budget.leave_call()
        return charge(budget, result)

    def counted_iter(self, context: Context, iterable: Iterable[Any],
                     weight: int = 0) -> Iterator[Any]:
        return CountedIterator(budget_of(context), iterable, weight)

    def weighted(self, weight: int, macro: Macro) -> WeightedMacro:
        """``macro`` as a :class:`WeightedMacro` of ``weight`` nodes."""
        macro.__class__ = WeightedMacro
        assert isinstance(macro, WeightedMacro)
        macro.weight = weight
        return macro

    def concat_checked(self, context: Context, parts: tuple[Any, ...]) -> str:
        budget = budget_of(context)
        texts = [text_of(part, budget, "None") for part in parts]
        total = sum(len(t) for t in texts)
        require_size(total, "a '~' concatenation")
        budget.spend(OPERATION_WORK + total)
        return "".join(texts)

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        if not isinstance(value, types.MethodType | types.BuiltinMethodType) or (
            value.__name__ not in ("format", "format_map")
        ):
            return None
        owner = value.__self__
        if not isinstance(owner, str):
            return None
        is_map = value.__name__ == "format_map"
        env = self

        @jinja2.pass_context
        def bounded_format(context: Context, *args: Any, **kwargs: Any) -> str:
            if is_map:
                if kwargs or len(args) != 1:
                    raise TypeError("format_map() takes exactly one argument")
                kwargs, args = args[0], ()
            formatter = _BoundedFormatter(env, budget_of(context))
            return str(formatter.vformat(str(owner), args, kwargs))

        return bounded_format


# --- filters ---------------------------------------------------------------------------

Filter = Callable[..., Any]


def _first_argument(func: Filter) -> Callable[[Context], Any] | None:
    """What Jinja would pass ``func`` first (context, eval context, environment), if any."""
    name = getattr(getattr(func, "jinja_pass_arg", None), "name", None)
    if name == "context":
        return lambda context: context
    if name == "eval_context":
        return lambda context: context.eval_ctx
    if name == "environment":
        return lambda context: context.environment
    return None


def _text(value: Any, budget: Budget) -> str:
    return value if isinstance(value, str) else text_of(value, budget, "None")


#: Filters whose argument is a width, count or length: its position, keyword and default.
WIDTH_ARGUMENTS: Mapping[str, tuple[int, str, Any]] = {
    "center": (0, "width", 80), "indent": (0, "width", 4), "wordwrap": (0, "width", 79),
    "truncate": (0, "length", 255), "batch": (0, "linecount", 1), "slice": (0, "slices", 1),
    "tojson": (0, "indent", None),
}


def width_of(name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
    """The width argument of filter ``name`` (see :data:`WIDTH_ARGUMENTS`)."""
    index, keyword, default = WIDTH_ARGUMENTS[name]
    return argument(args, kwargs, index, keyword, default)


def check_round(precision: Any) -> None:
    """Refuse a ``round`` precision beyond :data:`MAX_ROUND_DIGITS` either way."""
    if (isinstance(precision, int) and not isinstance(precision, bool)
            and abs(precision) > MAX_ROUND_DIGITS):
        raise TemplateLimitError(
            f"a round precision of {precision:,} is beyond {MAX_ROUND_DIGITS} digits")


def _check_width(name: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
    width = width_of(name, args, kwargs)
    require_width(width, f"a {name} {WIDTH_ARGUMENTS[name][1]}")
    return width


def _pre_width(value: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any],
               name: str = "") -> None:
    _check_width(name, args, kwargs)


def _pre_indent(value: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
    width = _check_width("indent", args, kwargs)
    per_line = len(width) if isinstance(width, str) else max(int(width), 0)
    require_size(len(value) + (value.count("\n") + 1) * per_line, "an indented text")


def _pre_wordwrap(value: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
    width = _check_width("wordwrap", args, kwargs)
    wrap = argument(args, kwargs, 2, "wrapstring", None)
    wrap_len = len(wrap) if isinstance(wrap, str) else 1
    step = max(width, 1) if isinstance(width, int) else 1
    # A wrapped line holds at least half the width (a word that does not fit starts the
    # next line), so there are at most twice as many lines as full lines.
    lines = min(len(value) + 1, 2 * len(value) // step + value.count("\n") + 2)
    require_size(len(value) + lines * wrap_len, "a wrapped text")


def _pre_replace(value: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
    if len(args) >= 2:
        scratch = Budget()
        _check_replace(value, _text(args[0], scratch), _text(args[1], scratch),
                       argument(args, kwargs, 2, "count", None))


#: Filters that read their input as text, with the check to run before the filter.
_TEXT_FILTERS: dict[str, Callable[[str, tuple[Any, ...], Mapping[str, Any]], None] | None] = {
    "capitalize": None, "center": partial(_pre_width, name="center"), "e": None,
    "escape": None, "forceescape": None, "indent": _pre_indent, "lower": None,
    "replace": _pre_replace, "safe": None, "striptags": None, "title": None, "trim": None,
    "truncate": partial(_pre_width, name="truncate"), "upper": None, "wordcount": None,
    "wordwrap": _pre_wordwrap,
}


def _pre_tojson(value: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
    indent = _check_width("tojson", args, kwargs)
    width = len(indent) if isinstance(indent, str) else indent if isinstance(indent, int) else 0
    require_size(estimate_text(value) + indented_size(value, max(width, 0)), "a JSON text")


def _pre_round(value: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
    check_round(argument(args, kwargs, 0, "precision", 0))


_OTHER_CHECKS: dict[str, Callable[[Any, tuple[Any, ...], Mapping[str, Any]], None]] = {
    "batch": partial(_pre_width, name="batch"),
    "slice": partial(_pre_width, name="slice"),
    "tojson": _pre_tojson,
    "round": _pre_round,
}


def indented_size(value: Any, width: int) -> int:
    """What ``indent=width`` adds to JSON: every item on its own line, indented by its
    depth (counting stops past :data:`MAX_VALUE`)."""
    if not width:
        return 0
    total = 0
    stack = [(value, 0)]
    while stack and total <= MAX_VALUE:
        item, depth = stack.pop()
        total += width * depth + 1
        if isinstance(item, list | tuple):
            stack.extend((part, depth + 1) for part in item)
        elif isinstance(item, Mapping):
            stack.extend((part, depth + 1) for part in item.values())
    return total


#: Text filters that work through their input in Python (word by word), and what each
#: character costs against the work budget (others scan in C: one per character).
_TEXT_WORK = {"wordwrap": ITEM_WORK, "title": 2 * ITEM_WORK, "striptags": 4}

#: Filters that walk their whole input in Python: the input is charged as well as the result.
_WALKING_FILTERS = frozenset({
    "batch", "items", "list", "map", "reject", "rejectattr", "reverse", "select",
    "selectattr", "slice", "tojson",
})
#: Filters that compare or hash their items: comparing walks items at every level, so
#: the whole depth of the input is charged (:func:`deep_work`), not just its length.
_COMPARING_FILTERS = frozenset({"dictsort", "groupby", "max", "min", "sort", "unique"})


def _bounded(name: str, func: Filter) -> Filter:
    """``func`` as a filter that checks its input before and charges its result after."""
    text_check = _TEXT_FILTERS.get(name)
    is_text = name in _TEXT_FILTERS
    walks = name in _WALKING_FILTERS
    compares = name in _COMPARING_FILTERS
    weight = _TEXT_WORK.get(name, 1)
    other_check = _OTHER_CHECKS.get(name)

    first = _first_argument(func)

    @jinja2.pass_context
    def bounded(context: Context, value: Any, *args: Any, **kwargs: Any) -> Any:
        budget = budget_of(context)
        budget.spend(CALL_WORK)
        if is_text and not isinstance(value, jinja2.Undefined):
            if type(value) is not str:
                value = text_of(value, budget, "None")
            if text_check is not None:
                text_check(value, args, kwargs)
            budget.spend(weight * len(value))
        else:
            if other_check is not None:
                other_check(value, args, kwargs)
            if walks:
                budget.spend(work_of(value))
            elif compares:
                budget.spend(deep_work(value, remaining(budget)))
        if first is None:
            return charge(budget, func(value, *args, **kwargs))
        return charge(budget, func(first(context), value, *args, **kwargs))

    bounded.__name__ = f"{name}_filter"
    return bounded


@jinja2.pass_context
def _string_filter(context: Context, value: Any) -> str:
    budget = budget_of(context)
    budget.spend(CALL_WORK)
    return text_of(value, budget, "None")


@jinja2.pass_context
def _format_filter(context: Context, value: Any, *args: Any, **kwargs: Any) -> str:
    """``format`` (printf-style), bounded and printing data only, like ``%``."""
    budget = budget_of(context)
    budget.spend(CALL_WORK)
    text = _text(value, budget)
    if args and kwargs:
        raise FilterArgumentError(
            "can't handle positional and keyword arguments at the same time")
    budget.spend(len(text))
    return charge(budget, text % percent_args(text, kwargs or args, budget))  # type: ignore[no-any-return]


def _comparing_test(op: str) -> Callable[..., bool]:
    """A test that compares (``in``, ``eq``, ``lt``...), charged like the operator."""

    @jinja2.pass_context
    def test(context: Context, value: Any, other: Any) -> bool:
        env = context.environment
        assert isinstance(env, BoundedSandbox)
        budget = budget_of(context)
        budget.spend(CALL_WORK)
        return bool(env.compare(budget, op, value, other))

    test.__name__ = f"{op}_test"
    return test


#: The tests that compare, by the operator each one is.
_COMPARING_TESTS = {
    "in": "in", "eq": "eq", "equalto": "eq", "==": "eq", "ne": "ne", "!=": "ne",
    "lt": "lt", "lessthan": "lt", "<": "lt", "le": "lteq", "<=": "lteq", "gt": "gt",
    "greaterthan": "gt", ">": "gt", "ge": "gteq", ">=": "gteq",
}


@jinja2.pass_context
def _join_filter(context: Context, value: Any, d: str = "", attribute: Any = None) -> str:
    """``join``, with every item printed as data and the result's size known beforehand."""
    budget = budget_of(context)
    budget.spend(CALL_WORK)
    items: Iterable[Any] = value
    if attribute is not None:
        items = map(make_attrgetter(context.environment, attribute), value)
    separator = _text(d, budget)
    texts: list[str] = []
    total = 0
    sized = isinstance(value, str | list | tuple | dict | range)
    if sized:  # every item is one Python step: charged before the first
        require_size(len(value), "a join")
        budget.spend(ITEM_WORK * len(value))
    for item in items:
        if not sized:
            budget.spend(ITEM_WORK)
        kind = type(item)
        if kind is str:
            text = item
        elif kind is int or kind is float:
            text = str(item)
        else:
            require_size(total + estimate_text(item), "a join")
            text = _text(item, budget)
        total += len(text) + (len(separator) if texts else 0)
        require_size(total, "a join")
        texts.append(text)
    budget.spend(total)
    return separator.join(texts)


@jinja2.pass_context
def _sum_filter(context: Context, iterable: Any, attribute: Any = None, start: Any = 0) -> Any:
    """``sum``; adding lists together is bounded by the size of the result."""
    items: Iterable[Any] = iterable
    if attribute is not None:
        items = map(make_attrgetter(context.environment, attribute), iterable)
    values = list(items)
    budget = budget_of(context)
    budget.spend(CALL_WORK + ITEM_WORK * len(values))
    if not all(isinstance(v, int | float) for v in values):
        require_size(size_of(start) + sum(size_of(v) for v in values), "a sum")
    return charge(budget, sum(values, start))


@jinja2.pass_context
def _range(context: Context, *args: Any) -> range:
    """``range``, at most :data:`MAX_ITERATIONS` long (a loop cannot use more)."""
    try:
        result = range(*args)
        length = len(result)
    except OverflowError:
        length = MAX_ITERATIONS + 1
    if length > MAX_ITERATIONS:
        raise TemplateLimitError(f"a range would be longer than {MAX_ITERATIONS:,}")
    return result


_PLAIN = frozenset({str, int, float, bool})
#: Names a mapping has as attributes (``state.items`` is the method, as in Jinja).
_DICT_ATTRIBUTES = frozenset(dir(dict))
#: What a template reads of ``loop`` (all of it public and allowed by the sandbox).
_LOOP_ATTRIBUTES = frozenset({
    "index", "index0", "revindex", "revindex0", "first", "last", "length", "depth",
    "depth0", "previtem", "nextitem", "cycle", "changed",
})
#: Operands a comparison costs nothing extra for.
_CHEAP = frozenset({int, float, bool, type(None)})


@jinja2.pass_context
def _finalize(context: Context, value: Any) -> Any:
    """How ``{{ value }}`` prints: null as nothing, data as before, anything else refused.

    Text and numbers are passed on as they are (the generated code applies ``str``), which
    keeps the most common output the cheapest."""
    if type(value) in _PLAIN:
        return value
    if value is None:
        return ""
    return text_of(value, budget_of(context), "")


def bounded_filters(defaults: Mapping[str, Filter]) -> dict[str, Filter]:
    """Jinja's filters minus :data:`REMOVED_FILTERS`, each bounded."""
    filters = {name: _bounded(name, func) for name, func in defaults.items()
               if name not in REMOVED_FILTERS}
    filters["string"] = _string_filter
    filters["join"] = _join_filter
    filters["sum"] = _sum_filter
    filters["format"] = _format_filter
    return filters


def bounded_tests(defaults: Mapping[str, Callable[..., Any]]) -> dict[str, Callable[..., Any]]:
    """Jinja's tests, those that compare charged like the comparison operators."""
    tests: dict[str, Callable[..., Any]] = dict(defaults)
    for name, op in _COMPARING_TESTS.items():
        if name in tests:
            tests[name] = _comparing_test(op)
    return tests


@lru_cache(maxsize=1)
def bounded_environment() -> BoundedSandbox:
    """The one environment every phaseflow template is compiled in."""
    env = BoundedSandbox(
        undefined=jinja2.ChainableUndefined,
        autoescape=False,
        keep_trailing_newline=False,
        finalize=_finalize,
    )
    env.filters = bounded_filters(env.filters)
    env.tests = bounded_tests(env.tests)  # type: ignore[assignment, arg-type]
    env.globals = {"range": _range}
    return env


def format_fields(source: str) -> list[str]:
    """The format specs of a ``str.format`` string (empty when it does not parse)."""
    try:
        return [spec for _, _, spec, _ in string.Formatter().parse(source) if spec]
    except ValueError:
        return []
