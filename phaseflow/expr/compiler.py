"""Compile a guard expression: parse, check against a whitelist, rewrite, compile once.

Why this shape:

* **Whitelist, not blacklist.** Only the node types the spec lists are accepted; anything
  new that a future Python adds to its grammar is rejected by default.
* **Rewrite instead of interpret.** After validation the tree is rebuilt from scratch:
  every attribute access, subscript, ordering comparison, arithmetic operation and call
  becomes a call of a helper in :mod:`phaseflow.expr._runtime`. The result is compiled
  once into a ``lambda state, _ctx: ...`` whose globals hold the helpers and an empty
  ``__builtins__``. Evaluation is then one Python call - about as fast as a guard can be -
  and the only operations left native are ``and``/``or``/``not``/``==``/``!=``, literals
  and local-variable loads, none of which can reach Python internals.
* **Bounded before parsing.** The length limit is checked before ``ast.parse`` sees the
  text, so a megabyte of parentheses never reaches the parser; nesting depth is measured
  iteratively, so a deep tree cannot blow the Python stack; the rewriting step recurses
  only after the depth is known to be small.
"""

from __future__ import annotations

import ast
import copyreg
import threading
import tokenize
import warnings
from io import StringIO
from typing import Any, Literal

from phaseflow.expr._runtime import HELPERS, WORK_LIMIT
from phaseflow.expr.absence import absence_tested_in, may_test_absence
from phaseflow.expr.describe import clip, did_you_mean
from phaseflow.expr.types import Guard, GuardCompileError

__all__ = [
    "ALLOWED_FUNCTIONS",
    "CONTEXT_NAMES",
    "GUARD_NAMES",
    "MAX_DEPTH",
    "MAX_LENGTH",
    "compile_guard",
]

#: Longest accepted expression, in characters (spec: "longer than 2,000 characters").
MAX_LENGTH = 2000
#: Deepest accepted nesting of expression nodes (spec: "nested deeper than 50 levels").
MAX_DEPTH = 50

#: Functions a guard may call, as plain functions: ``lower(state.name)``.
ALLOWED_FUNCTIONS: frozenset[str] = frozenset(
    {
        "len",
        "lower",
        "upper",
        "startswith",
        "endswith",
        "min",
        "max",
        "abs",
        "round",
        "int",
        "float",
        "str",
    }
)
#: Names bound from the :class:`GuardContext`.
CONTEXT_NAMES: frozenset[str] = frozenset(
    {"phase", "turn", "turns_in_phase", "seconds_in_phase", "visits", "returned"}
)
_CONSTANT_NAMES: dict[str, bool | None] = {"true": True, "false": False, "null": None}
#: Every name a guard may use as a value (for "did you mean").
GUARD_NAMES: frozenset[str] = frozenset(
    {"state", *CONTEXT_NAMES, *_CONSTANT_NAMES, "True", "False", "None"}
)

# (min, max) argument counts; None = unbounded.
_ARITY: dict[str, tuple[int, int | None]] = {
    "len": (1, 1),
    "lower": (1, 1),
    "upper": (1, 1),
    "startswith": (2, 2),
    "endswith": (2, 2),
    "min": (1, None),
    "max": (1, None),
    "abs": (1, 1),
    "round": (1, 2),
    "int": (1, 1),
    "float": (1, 1),
    "str": (1, 1),
}
assert set(_ARITY) == ALLOWED_FUNCTIONS

# A coarse static type, used only to reject repetition visible in the source ('a' * 3).
_Kind = Literal["str", "list", "num", "bool", "null", "any"]
_RESULT_KIND: dict[str, _Kind] = {
    "len": "num",
    "abs": "num",
    "round": "num",
    "int": "num",
    "float": "num",
    "lower": "str",
    "upper": "str",
    "str": "str",
    "startswith": "bool",
    "endswith": "bool",
    "min": "any",
    "max": "any",
}

_ORDERING: dict[type[ast.cmpop], str] = {
    ast.Lt: "_lt",
    ast.LtE: "_le",
    ast.Gt: "_gt",
    ast.GtE: "_ge",
    ast.Is: "_is",
    ast.IsNot: "_is_not",
    ast.In: "_in",
    ast.NotIn: "_not_in",
}
_ARITHMETIC: dict[type[ast.operator], str] = {
    ast.Add: "_add",
    ast.Sub: "_sub",
    ast.Mult: "_mul",
    ast.Div: "_truediv",
    ast.FloorDiv: "_floordiv",
    ast.Mod: "_mod",
}
_OPERATOR_TEXT: dict[type[ast.AST], str] = {
    ast.Pow: "**",
    ast.BitOr: "|",
    ast.BitAnd: "&",
    ast.BitXor: "^",
    ast.LShift: "<<",
    ast.RShift: ">>",
    ast.MatMult: "@",
    ast.Invert: "~",
}
_FORBIDDEN: dict[type[ast.AST], str] = {
    ast.Lambda: "lambda is not allowed",
    ast.ListComp: "comprehensions are not allowed",
    ast.SetComp: "comprehensions are not allowed",
    ast.DictComp: "comprehensions are not allowed",
    ast.GeneratorExp: "generator expressions are not allowed",
    ast.NamedExpr: "assignment expressions (:=) are not allowed",
    ast.JoinedStr: "f-strings are not allowed",
    ast.FormattedValue: "f-strings are not allowed",
    ast.IfExp: "conditional expressions (a if c else b) are not allowed",
    ast.Dict: "dict literals are not allowed",
    ast.Set: "set literals are not allowed",
    ast.Tuple: "tuples are not allowed; use a list: [a, b]",
    ast.Starred: "starred arguments are not allowed",
    ast.Slice: "slices are not allowed",
    ast.Await: "await is not allowed",
    ast.Yield: "yield is not allowed",
    ast.YieldFrom: "yield is not allowed",
}

# The globals of every compiled guard: the helpers and nothing else. No builtins means no
# __import__, open, eval, getattr... even if a name somehow slipped through validation.
_GLOBALS: dict[str, Any] = {"__builtins__": {}, **HELPERS}
_ALLOWED_CONSTANTS = (str, int, float, bool, type(None))
_WARNINGS_LOCK = threading.Lock()

#: Guards compiled so far, by source. A large workflow writes the same condition in many
#: phases (``state.customer_id``), and a :class:`Guard` is immutable and deterministic in
#: its source, so one compiled guard serves every copy. Bounded: emptied when full.
_COMPILED: dict[str, Guard] = {}
_COMPILED_MAX = 4096


def compile_guard(source: str) -> Guard:
    """Compile ``source`` into a :class:`Guard`, or raise :class:`GuardCompileError`.

    The expression may span several lines (a YAML block scalar): newlines are allowed
    anywhere a space is. Positions in the error are relative to ``source``.
    """
    if type(source) is str:  # exactly str: a subclass could lie about equality
        cached = _COMPILED.get(source)
        if cached is not None:
            return cached
    if not isinstance(source, str):
        raise GuardCompileError(f"a guard expression must be a string, not {type(source).__name__}")
    if len(source) > MAX_LENGTH:
        raise GuardCompileError(
            f"guard expression is {len(source)} characters long; the limit is {MAX_LENGTH}"
        )
    if not source.strip():
        raise GuardCompileError("empty guard expression")
    wrapped = _wrap(source)
    tree = _parse(source, wrapped)
    locator = _Locator(source, wrapped)
    _check_depth(tree.body, locator)
    rewriter = _Rewriter(source, locator)
    body, _ = rewriter.rewrite(tree.body)
    try:
        function = _build_metered(body) if rewriter.metered else _build(body)
    except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError) as exc:
        # Not expected for a validated tree; kept so compile_guard's contract holds.
        raise GuardCompileError(f"cannot compile guard expression: {exc}") from None
    guard = Guard(
        source,
        frozenset(rewriter.reads),
        rewriter.dynamic_reads,
        function,
        frozenset(rewriter.visits),
        absence_tested_in(tree.body) if may_test_absence(source) else frozenset(),
    )
    if type(source) is str:
        if len(_COMPILED) >= _COMPILED_MAX:
            _COMPILED.clear()
        _COMPILED[source] = guard
    return guard


def _reduce_guard(guard: Guard) -> tuple[Any, tuple[str]]:
    """Pickle (and deep-copy) a guard as its source: the compiled function cannot be
    pickled, and compiling the source again gives an equal guard."""
    return compile_guard, (guard.source,)


# Registered here, beside the only maker of guards, so that the value types never import
# the compiler (pickle and copy consult this table before ``__reduce_ex__``).
copyreg.pickle(Guard, _reduce_guard)


def _wrap(source: str) -> str:
    """Parenthesize so that newlines inside the expression are implicit line joins.

    The closing parenthesis goes on its own line so that a trailing ``# comment`` cannot
    swallow it. Line numbers are unchanged; columns on line 1 shift by one.
    """
    return "(" + source + "\n)"


class _Locator:
    """Maps AST positions (UTF-8 byte columns in the wrapped text) to source positions."""

    def __init__(self, source: str, wrapped: str) -> None:
        self._source_lines = source.split("\n")
        self._wrapped_lines = wrapped.split("\n")

    def line_bytes(self, line: int) -> bytes:
        if 1 <= line <= len(self._wrapped_lines):
            return self._wrapped_lines[line - 1].encode("utf-8")
        return b""

    def char_column(self, line: int, byte_col: int) -> int:
        if 1 <= line <= len(self._wrapped_lines):
            text = self._wrapped_lines[line - 1].encode("utf-8")[:byte_col]
            byte_col = len(text.decode("utf-8", errors="ignore"))
        return byte_col

    def position(self, line: int, char_col: int) -> tuple[int, int]:
        """Wrapped-text (line, character column) -> source (line, column), clamped."""
        if line == 1:
            char_col -= 1
        if line > len(self._source_lines):  # our closing parenthesis: end of the source
            line = len(self._source_lines)
            char_col = len(self._source_lines[-1])
        line = max(line, 1)
        return line, max(0, min(char_col, len(self._source_lines[line - 1])))

    def of(self, node: ast.AST) -> tuple[int, int]:
        line: int = getattr(node, "lineno", 1)
        col: int = getattr(node, "col_offset", 0)
        return self.position(line, self.char_column(line, col))

    def error(self, message: str, node: ast.AST) -> GuardCompileError:
        line, col = self.of(node)
        return GuardCompileError(message, line, col)


def _parse(source: str, wrapped: str) -> ast.Expression:
    locator = _Locator(source, wrapped)
    try:
        # Silence e.g. invalid-escape warnings: a guard is data, not the host's code, and a
        # host running with -W error must not see '\d' become a syntax error. The lock keeps
        # concurrent compilations from restoring each other's filter lists.
        with _WARNINGS_LOCK, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(wrapped, "<guard>", mode="eval")
    except SyntaxError as exc:
        line, col = locator.position(exc.lineno or 1, (exc.offset or 1) - 1)
        raise GuardCompileError(f"syntax error: {exc.msg}", line, col) from None
    except (RecursionError, MemoryError, ValueError, OverflowError) as exc:
        raise GuardCompileError(f"cannot parse guard expression: {exc}") from None
    body = tree.body
    if body.lineno == 1 and body.col_offset == 0:
        # The root starts at our own opening parenthesis, so the author's text closed it:
        # "a) or (b" would otherwise parse. (A bare tuple or generator also starts there.)
        unmatched = _unmatched_closer(source)
        if unmatched is not None:
            raise GuardCompileError(f"syntax error: unmatched {unmatched[2]!r}", *unmatched[:2])
    return tree


def _unmatched_closer(source: str) -> tuple[int, int, str] | None:
    """Position of the first closing bracket without an opening one, if any."""
    depth = 0
    try:
        for tok in tokenize.generate_tokens(StringIO(source).readline):
            if tok.type == tokenize.OP and tok.string in "([{":
                depth += 1
            elif tok.type == tokenize.OP and tok.string in ")]}":
                depth -= 1
                if depth < 0:
                    return tok.start[0], tok.start[1], tok.string
    except (tokenize.TokenError, SyntaxError):
        return 1, 0, ")"
    return None


def _check_depth(root: ast.expr, locator: _Locator) -> None:
    """Reject trees nested deeper than :data:`MAX_DEPTH`, without recursing."""
    stack: list[tuple[ast.AST, int]] = [(root, 1)]
    node_type, expr_type = ast.AST, ast.expr
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise locator.error(f"expression is nested deeper than {MAX_DEPTH} levels", node)
        # ast.iter_child_nodes, inlined (two generators per node were most of the cost)
        for name in node._fields:
            field = getattr(node, name, None)
            if isinstance(field, node_type):
                stack.append((field, depth + 1 if isinstance(field, expr_type) else depth))
            elif isinstance(field, list):
                for child in field:
                    if isinstance(child, node_type):
                        stack.append((child, depth + 1 if isinstance(child, expr_type) else depth))


def _guard_parameters() -> ast.arguments:
    """``(state, _ctx)``: what every compiled guard takes, lambda or metered function
    alike (the evaluator calls both the same way)."""
    return ast.arguments(
        posonlyargs=[],
        args=[ast.arg(arg="state"), ast.arg(arg="_ctx")],
        vararg=None,
        kwonlyargs=[],
        kw_defaults=[],
        kwarg=None,
        defaults=[],
    )


def _build(body: ast.expr) -> Any:
    """Compile the rewritten body into ``lambda state, _ctx: body``, once."""
    tree = ast.Expression(body=ast.Lambda(args=_guard_parameters(), body=body))
    _locate(tree)
    code = compile(tree, "<guard>", "eval")
    return eval(code, _GLOBALS)  # evaluates the lambda expression only: returns the function


def _build_metered(body: ast.expr) -> Any:
    """Compile the rewritten body of a guard that calls a metered helper into
    ``def _guard(state, _ctx): _m = [WORK_LIMIT]; return body``: a fresh meter per
    evaluation (so concurrent evaluations never share one), and only for these guards."""
    meter = ast.Assign(
        targets=[ast.Name(id=_METER, ctx=ast.Store())],
        value=ast.List(elts=[ast.Constant(value=WORK_LIMIT)], ctx=ast.Load()),
    )
    function = ast.FunctionDef(
        name="_guard",
        args=_guard_parameters(),
        body=[meter, ast.Return(value=body)],
        decorator_list=[],
        returns=None,
        type_comment=None,
    )
    tree = ast.Module(body=[function], type_ignores=[])
    _locate(tree)
    code = compile(tree, "<guard>", "exec")
    namespace: dict[str, Any] = {}
    exec(code, _GLOBALS, namespace)  # defines the function only; its globals: the helpers
    return namespace["_guard"]


def _locate(tree: ast.AST) -> None:
    """Give every node the position ``compile`` requires: line 1, column 0.

    Positions in the compiled guard are never shown to anyone (evaluation never raises
    into the host; compile errors are reported from the parsed source), so one flat pass
    replaces ``ast.fix_missing_locations``, which costs about twice as much per guard."""
    stack: list[ast.AST] = [tree]
    node_type = ast.AST
    while stack:
        node = stack.pop()
        if "lineno" in node._attributes:
            node.lineno = node.end_lineno = 1  # type: ignore[attr-defined]
            node.col_offset = node.end_col_offset = 0  # type: ignore[attr-defined]
        # ast.iter_child_nodes, inlined (two generators per node were most of the cost)
        for name in node._fields:
            field = getattr(node, name, None)
            if isinstance(field, node_type):
                stack.append(field)
            elif isinstance(field, list):
                stack.extend(child for child in field if isinstance(child, node_type))


def _call(helper: str, *args: ast.expr) -> ast.expr:
    return ast.Call(func=ast.Name(id=helper, ctx=ast.Load()), args=list(args), keywords=[])




class _Rewriter:
    """Validates each node and returns its replacement; collects the state keys read.

    Runs after :func:`_check_depth`, so its recursion is bounded by :data:`MAX_DEPTH`.
    """

    def __init__(self, source: str, locator: _Locator) -> None:
        self.source = source
        self.locator = locator
        self.reads: set[str] = set()
        self.visits: set[str] = set()
        self.dynamic_reads = False
        #: does the expression call a metered helper (then it is built with a meter)?
        self.metered = False
        self._temps = 0

    def metered_call(self, helper: str, *args: ast.expr) -> ast.expr:
        """A call of ``helper``'s metered twin, passing the evaluation's meter."""
        self.metered = True
        return _call(helper + "_m", ast.Name(id=_METER, ctx=ast.Load()), *args)

    def error(self, message: str, node: ast.AST) -> GuardCompileError:
        return self.locator.error(message, node)

    def text(self, node: ast.AST) -> str:
        """The author's text of ``node`` (for messages), trimmed to a readable length."""
        return clip(ast.unparse(node), 60)

    def rewrite(self, node: ast.expr) -> tuple[ast.expr, _Kind]:
        method = getattr(self, "rewrite_" + type(node).__name__, None)
        if method is None:
            message = _FORBIDDEN.get(type(node), f"{type(node).__name__} is not allowed")
            raise self.error(message, node)
        result: tuple[ast.expr, _Kind] = method(node)
        return result

    # --- leaves ---------------------------------------------------------------------

    def rewrite_Constant(self, node: ast.Constant) -> tuple[ast.expr, _Kind]:
        value = node.value
        if not isinstance(value, _ALLOWED_CONSTANTS):
            what = {bytes: "bytes literals", complex: "complex numbers"}.get(
                type(value), f"'{self.text(node)}'"
            )
            verb = "is" if what.startswith("'") else "are"
            raise self.error(f"{what} {verb} not allowed", node)
        kind: _Kind
        if value is None:
            kind = "null"
        elif isinstance(value, bool):
            kind = "bool"
        elif isinstance(value, str):
            kind = "str"
        else:
            kind = "num"
        return ast.Constant(value=value), kind

    def rewrite_Name(self, node: ast.Name) -> tuple[ast.expr, _Kind]:
        name = node.id
        if name in _CONSTANT_NAMES:
            value = _CONSTANT_NAMES[name]
            return ast.Constant(value=value), "null" if value is None else "bool"
        if name == "state":
            self.dynamic_reads = True  # the state as a whole: len(state), 'k' in state
            return ast.Name(id="state", ctx=ast.Load()), "any"
        if name in CONTEXT_NAMES:
            kind: _Kind = ("str" if name == "phase" else
                           "any" if name in ("visits", "returned") else "num")
            return _context(name), kind
        if name in ALLOWED_FUNCTIONS:
            raise self.error(f"'{name}' is a function; call it: {name}(...)", node)
        raise self.error(f"unknown name '{name}'{did_you_mean(name, GUARD_NAMES)}", node)

    def rewrite_List(self, node: ast.List) -> tuple[ast.expr, _Kind]:
        elements = [self.rewrite(element)[0] for element in node.elts]
        return ast.List(elts=elements, ctx=ast.Load()), "list"

    # --- access ---------------------------------------------------------------------

    def rewrite_Attribute(self, node: ast.Attribute) -> tuple[ast.expr, _Kind]:
        target = node.value
        special = _special_name(target)
        # The target first, so the leftmost offending part is the one reported.
        value = None if special else self.rewrite(target)[0]
        if node.attr.startswith("_"):
            raise GuardCompileError(
                f"attribute names starting with '_' are not allowed: '{node.attr}'",
                *self._attribute_position(node),
            )
        key = ast.Constant(value=node.attr)
        if special == "visits":
            self.visits.add(node.attr)
            return _call("_visit", _context("visits"), key), "any"
        if special == "state":
            self.reads.add(node.attr)
            return _call("_get", ast.Name(id="state", ctx=ast.Load()), key), "any"
        assert value is not None
        return _call("_get", value, key), "any"

    def _attribute_position(self, node: ast.Attribute) -> tuple[int, int]:
        """Point at the attribute name itself, which is the offending part.

        Found as the text after the last ``.`` between the target and the end of the node,
        because the name in the AST is NFKC-normalized and may differ from the source.
        """
        line = node.end_lineno or node.lineno
        value = node.value
        if value.end_lineno == line and value.end_col_offset is not None:
            raw = self.locator.line_bytes(line)[value.end_col_offset : node.end_col_offset]
            between = raw.decode("utf-8", errors="ignore")
            dot = between.rfind(".")
            gap = between[dot + 1 :]
            start = self.locator.char_column(line, value.end_col_offset) + dot + 1
            start += len(gap) - len(gap.lstrip())
            return self.locator.position(line, start)
        end = self.locator.char_column(line, node.end_col_offset or 0)
        return self.locator.position(line, end - len(node.attr))

    def rewrite_Subscript(self, node: ast.Subscript) -> tuple[ast.expr, _Kind]:
        target = node.value
        special = _special_name(target)
        value = None if special else self.rewrite(target)[0]
        index = node.slice
        if isinstance(index, ast.Slice):
            raise self.error(_FORBIDDEN[ast.Slice], index)
        literal_key: str | None = None
        if isinstance(index, ast.Constant) and isinstance(index.value, str):
            literal_key = index.value
        key, _ = self.rewrite(index)
        if special == "visits":
            if literal_key is not None:
                self.visits.add(literal_key)
            return _call("_visit", _context("visits"), key), "any"
        if special == "state":
            state = ast.Name(id="state", ctx=ast.Load())
            if literal_key is not None:
                self.reads.add(literal_key)
                return _call("_get", state, key), "any"
            self.dynamic_reads = True
            return _call("_index", state, key), "any"
        assert value is not None
        return _call("_index" if literal_key is None else "_get", value, key), "any"

    # --- operators ------------------------------------------------------------------

    def rewrite_BoolOp(self, node: ast.BoolOp) -> tuple[ast.expr, _Kind]:
        values = [self.rewrite(value)[0] for value in node.values]
        return ast.BoolOp(op=type(node.op)(), values=values), "any"

    def rewrite_UnaryOp(self, node: ast.UnaryOp) -> tuple[ast.expr, _Kind]:
        operand, _ = self.rewrite(node.operand)
        if isinstance(node.op, ast.Not):
            return ast.UnaryOp(op=ast.Not(), operand=operand), "bool"
        if isinstance(node.op, ast.USub):
            return _call("_neg", operand), "num"
        if isinstance(node.op, ast.UAdd):
            return _call("_pos", operand), "num"
        raise self.error(f"operator '{_OPERATOR_TEXT[type(node.op)]}' is not allowed", node)

    def rewrite_BinOp(self, node: ast.BinOp) -> tuple[ast.expr, _Kind]:
        helper = _ARITHMETIC.get(type(node.op))
        if helper is None:
            symbol = _OPERATOR_TEXT.get(type(node.op), type(node.op).__name__)
            raise self.error(f"operator '{symbol}' is not allowed", node)
        left, left_kind = self.rewrite(node.left)
        right, right_kind = self.rewrite(node.right)
        kinds = {left_kind, right_kind}
        if isinstance(node.op, ast.Mult) and kinds & {"str", "list"}:
            raise self.error(f"string or list repetition is not allowed: '{self.text(node)}'", node)
        if isinstance(node.op, ast.Mod) and left_kind == "str":
            raise self.error(f"'%' formatting of strings is not allowed: '{self.text(node)}'", node)
        kind: _Kind = "any"
        if isinstance(node.op, ast.Add):
            if "str" in kinds:
                kind = "str"
            elif "list" in kinds:
                kind = "list"
            elif kinds == {"num"}:
                kind = "num"
            if not kinds & _SCALAR_KINDS:  # may concatenate two lists of any length
                return self.metered_call(helper, left, right), kind
        else:
            kind = "num"
        return _call(helper, left, right), kind

    def rewrite_Compare(self, node: ast.Compare) -> tuple[ast.expr, _Kind]:
        """``a < b < c`` -> ``_lt(a, (_t0 := b)) and _lt(_t0, c)``: each operand once."""
        left, left_kind = self.rewrite(node.left)
        left_bounded = left_kind in _SCALAR_KINDS or _literal(node.left)
        pairs: list[ast.expr] = []
        last = len(node.ops) - 1
        for i, (op, comparator) in enumerate(zip(node.ops, node.comparators, strict=True)):
            right, right_kind = self.rewrite(comparator)
            right_bounded = right_kind in _SCALAR_KINDS or _literal(comparator)
            following: ast.expr = right
            if i < last:
                temp = f"_t{self._temps}"
                self._temps += 1
                right = ast.NamedExpr(target=ast.Name(id=temp, ctx=ast.Store()), value=right)
                following = ast.Name(id=temp, ctx=ast.Load())
            pairs.append(self._compare(op, left, right, comparator,
                                       left_bounded or right_bounded, right_bounded))
            left, left_bounded = following, right_bounded
        if len(pairs) == 1:
            return pairs[0], "bool"
        return ast.BoolOp(op=ast.And(), values=pairs), "bool"

    def _compare(
        self,
        op: ast.cmpop,
        left: ast.expr,
        right: ast.expr,
        original: ast.expr,
        either_bounded: bool,
        right_bounded: bool,
    ) -> ast.expr:
        """One comparison. ``either_bounded``: one operand is a scalar or a literal, so
        ``==`` costs at most the literal's size; ``right_bounded``: the right one is, so
        ``in`` costs at most its size. Otherwise the metered twin is called."""
        if isinstance(op, ast.Eq | ast.NotEq):
            if not either_bounded:  # two lists or mappings of any size, maybe
                return self.metered_call("_eq" if isinstance(op, ast.Eq) else "_ne",
                                         left, right)
            # Native: equality cannot reach internals and null == null is plain Python.
            return ast.Compare(left=left, ops=[type(op)()], comparators=[right])
        if (
            isinstance(op, ast.Is | ast.IsNot)
            and isinstance(original, ast.Constant | ast.Name)
            and _is_singleton(original)
            and not _warns_with_is(left)
        ):
            # `x is null`: identity with a singleton is exact, so keep it native (fast).
            return ast.Compare(left=left, ops=[type(op)()], comparators=[right])
        helper = _ORDERING[type(op)]
        if (isinstance(op, ast.Is | ast.IsNot) and not either_bounded) or (
            isinstance(op, ast.In | ast.NotIn) and not right_bounded
        ):
            return self.metered_call(helper, left, right)
        return _call(helper, left, right)

    # --- calls ----------------------------------------------------------------------

    def rewrite_Call(self, node: ast.Call) -> tuple[ast.expr, _Kind]:
        func = node.func
        if not isinstance(func, ast.Name):
            if isinstance(func, ast.Attribute):
                message = f"method calls are not allowed: '{self.text(node)}'"
            else:
                message = f"only these functions can be called: {_function_list()}"
            raise self.error(message, node)
        name = func.id
        if name not in ALLOWED_FUNCTIONS:
            hint = did_you_mean(name, ALLOWED_FUNCTIONS)
            raise self.error(
                f"function '{name}' is not allowed{hint or '; allowed: ' + _function_list()}",
                node,
            )
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                raise self.error(_FORBIDDEN[ast.Starred], arg)
        if node.keywords:
            raise self.error("keyword arguments are not allowed", node.keywords[0])
        low, high = _ARITY[name]
        count = len(node.args)
        if count < low or (high is not None and count > high):
            expected = (
                f"{low}"
                if low == high
                else f"at least {low}"
                if high is None
                else f"{low} to {high}"
            )
            plural = "" if (low if high is None else high) == 1 else "s"
            raise self.error(f"{name}() takes {expected} argument{plural} ({count} given)", node)
        rewritten = [self.rewrite(arg) for arg in node.args]
        args = [arg for arg, _ in rewritten]
        if name in _WALKING_FUNCTIONS:
            # min/max of one list, startswith/endswith with a list of alternatives: their
            # cost is that list's length, bounded only when the list is written literally
            walked = node.args[0] if name in ("min", "max") else node.args[1]
            walked_kind = rewritten[0 if name in ("min", "max") else 1][1]
            if (len(node.args) == 1 or name not in ("min", "max")) and not (
                walked_kind in _SCALAR_KINDS or _literal(walked)
            ):
                return self.metered_call("_f_" + name, *args), _RESULT_KIND[name]
        return _call("_f_" + name, *args), _RESULT_KIND[name]


#: Kinds of values that ``==`` and ``in`` compare in O(1) (or at memory speed: strings).
_SCALAR_KINDS: frozenset[str] = frozenset({"str", "num", "bool", "null"})
#: Functions whose cost is the length of a list argument.
_WALKING_FUNCTIONS = frozenset({"min", "max", "startswith", "endswith"})
#: The local holding an evaluation's meter (no guard can name it: names are whitelisted).
_METER = "_m"


def _literal(node: ast.expr) -> bool:
    """Is ``node`` a literal made of constants only (its size is bounded by the source)?"""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Name):
        return node.id in _CONSTANT_NAMES or node.id in ("True", "False", "None")
    if isinstance(node, ast.List):
        return all(_literal(element) for element in node.elts)
    return False


def _special_name(node: ast.expr) -> str | None:
    """``state`` or ``visits`` when ``node`` is that bare name: their access is rewritten
    specially (``reads`` bookkeeping, visit counts default to 0)."""
    if isinstance(node, ast.Name) and node.id in ("state", "visits"):
        return node.id
    return None


def _context(name: str) -> ast.expr:
    """``_ctx.<name>``: reads our own :class:`GuardContext`, never an author's object."""
    return ast.Attribute(value=ast.Name(id="_ctx", ctx=ast.Load()), attr=name, ctx=ast.Load())


def _warns_with_is(node: ast.expr) -> bool:
    """A left operand on which Python's ``is`` warns ("is" with a literal): a constant
    other than None, True and False, or a tuple (folded into a constant before Python
    compiles). Such a guard (``1 is null``) is called through the helper instead: the
    same answer, and a guard never makes Python warn."""
    if isinstance(node, ast.Tuple):
        return True
    return isinstance(node, ast.Constant) and not _is_singleton(node)


def _is_singleton(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return node.value is None or isinstance(node.value, bool)
    return isinstance(node, ast.Name) and node.id in _CONSTANT_NAMES


def _function_list() -> str:
    return ", ".join(sorted(ALLOWED_FUNCTIONS))
