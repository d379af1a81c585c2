"""What the sandbox would refuse, found at load when it is visible in the template's text.

Reading an attribute or key that starts with ``_`` and breaking a limit with constants
(``'a' * 10**8``, ``'x'|center(100000000)``, ``range(10**9)``, nested loops over constant
ranges that run more than the iteration limit) can never succeed at render time, so they
are diagnostics when the workflow loads (PF304), at the template's line. Everything that
depends on the session's values is checked again while rendering
(:mod:`phaseflow.template.sandbox`); this module only moves the certain failures
forward.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, TypeGuard

from jinja2 import nodes

from phaseflow.template.limits import (
    MAX_INT_BITS,
    MAX_ITERATIONS,
    MAX_LOOP_NESTING,
    MAX_NESTING,
    TemplateLimitError,
    check_binop,
    check_format_spec,
    check_percent_widths,
    require_width,
)
from phaseflow.template.sandbox import (
    WIDTH_ARGUMENTS,
    WIDTH_METHODS,
    argument,
    check_round,
    format_fields,
    width_of,
)

#: Filters that take an attribute name, and the position of that argument.
_ATTRIBUTE_ARGS = {
    "attr": 0, "selectattr": 0, "rejectattr": 0, "groupby": 0, "sort": 2, "unique": 1,
    "min": 1, "max": 1, "sum": 0, "join": 1,
}

Refusal = tuple[str, int]


def _private(name: Any) -> TypeGuard[str]:
    return isinstance(name, str) and any(part.startswith("_") for part in name.split("."))


def _private_message(name: str) -> str:
    return (f"'{name}' is not available to templates: names starting with '_' are refused "
            "(they reach Python internals)")


def _const(node: nodes.Node | None) -> Any:
    """The value of a literal (numbers, strings, lists of literals), else ``None``."""
    if isinstance(node, nodes.Const):
        return node.value
    if isinstance(node, nodes.List | nodes.Tuple):
        items = [_const(item) for item in node.items]
        return None if any(i is None for i in items) else items
    if isinstance(node, nodes.Neg):
        value = _const(node.node)
        return -value if isinstance(value, int | float) else None
    if isinstance(node, nodes.Pow | nodes.Mul | nodes.Add | nodes.Sub):
        return _fold(node.operator, _const(node.left), _const(node.right))
    return None


def _fold(operator: str, left: Any, right: Any) -> Any:
    """``left operator right`` for two integers, or a text repeated a number of times,
    when the sandbox would allow it (so the result is small)."""
    if operator == "*" and isinstance(left, str) and isinstance(right, int):
        return left * right if _limit(check_binop, operator, left, right) is None else None
    if not (isinstance(left, int) and isinstance(right, int)):
        return None
    if _limit(check_binop, operator, left, right) is not None:
        return None
    if operator == "**":
        return left**right if right >= 0 else None
    if operator == "*":
        return left * right
    return left + right if operator == "+" else left - right


def _keywords(node: nodes.Filter | nodes.Call) -> dict[str, nodes.Expr]:
    return {str(keyword.key): keyword.value for keyword in node.kwargs}


def _limit(check: Any, *args: Any) -> str | None:
    try:
        check(*args)
    except TemplateLimitError as exc:
        return str(exc)
    return None


def _check_node(node: nodes.Node) -> str | None:
    """Why ``node`` must be refused, if its text alone shows it."""
    if isinstance(node, nodes.Getattr) and _private(node.attr):
        return _private_message(node.attr)
    if (isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const)
            and _private(node.arg.value)):
        return _private_message(node.arg.value)
    if isinstance(node, nodes.Pow):
        return _check_pow(node)
    if isinstance(node, nodes.Mul | nodes.Mod):
        left, right = _const(node.left), _const(node.right)
        if isinstance(node.left, nodes.Concat):
            left = "x"
        if isinstance(node.right, nodes.Concat):
            right = "x"
        if left is not None and right is not None:
            return _limit(check_binop, node.operator, left, right)
        if isinstance(node, nodes.Mod) and isinstance(left, str):
            return _limit(check_percent_widths, left, ())
    if isinstance(node, nodes.Filter):
        return _check_filter(node)
    if isinstance(node, nodes.Call):
        return _check_call(node)
    return None


def _check_pow(node: nodes.Pow) -> str | None:
    exponent, base = _const(node.right), _const(node.left)
    if isinstance(base, int) and isinstance(exponent, int):
        return _limit(check_binop, "**", base, exponent)
    if base is None and isinstance(exponent, int) and exponent > MAX_INT_BITS:
        # whatever the base, an integer base other than -1, 0, 1 breaks the limit
        return (f"a power with the exponent {exponent:,} would be larger than "
                f"{MAX_INT_BITS:,} bits")
    return None


def _check_filter(node: nodes.Filter) -> str | None:
    for keyword in node.kwargs:
        if keyword.key == "attribute" and _private(_const(keyword.value)):
            return _private_message(_const(keyword.value))
    position = _ATTRIBUTE_ARGS.get(node.name)
    if position is not None and len(node.args) > position:
        name = _const(node.args[position])
        if _private(name):
            return _private_message(name)
    if node.name == "map" and node.args and _const(node.args[0]) == "attr":
        name = _const(node.args[1]) if len(node.args) > 1 else None
        if _private(name):
            return _private_message(name)
    if node.name in WIDTH_ARGUMENTS:
        width = _const(width_of(node.name, node.args, _keywords(node)))
        if width is not None:
            return _limit(require_width, width, f"a {node.name} {WIDTH_ARGUMENTS[node.name][1]}")
    if node.name == "round":
        precision = _const(argument(node.args, _keywords(node), 0, "precision"))
        if precision is not None:
            return _limit(check_round, precision)
    if node.name == "format" and isinstance(_const(node.node), str):
        return _limit(check_percent_widths, _const(node.node), ())
    return None


def _check_call(node: nodes.Call) -> str | None:
    func = node.node
    if isinstance(func, nodes.Name) and func.name == "range":
        bounds = [_const(arg) for arg in node.args]
        if bounds and all(isinstance(b, int) for b in bounds) and not node.kwargs:
            length = _range_length(bounds)
            if length is not None and length > MAX_ITERATIONS:
                return f"a range would be longer than {MAX_ITERATIONS:,}"
    if isinstance(func, nodes.Getattr):
        if func.attr in WIDTH_METHODS and node.args:
            width = _const(node.args[0])
            if width is not None:
                return _limit(require_width, width, f"a {func.attr} width")
        if func.attr in ("format", "format_map") and isinstance(_const(func.node), str):
            for spec in format_fields(_const(func.node)):
                problem = _limit(check_format_spec, spec)
                if problem:
                    return problem
    return None


def _range_length(bounds: list[int]) -> int | None:
    try:
        return len(range(*bounds))
    except (OverflowError, ValueError, TypeError):
        return MAX_ITERATIONS + 1


def _loops(children: Iterable[nodes.Node], factor: int) -> Iterator[Refusal]:
    """Nested loops over constant ranges whose iterations multiply past the limit.

    Only a loop's body runs once per item; its ``else`` and its iterable run once.
    """
    for child in children:
        if not isinstance(child, nodes.For):
            yield from _loops(child.iter_child_nodes(), factor)
            continue
        length = _constant_length(child.iter)
        inner = factor * max(length, 1) if length is not None else factor
        if inner > MAX_ITERATIONS:
            yield (f"nested loops would run {inner:,} iterations, more than "
                   f"{MAX_ITERATIONS:,}", child.lineno)
            return
        yield from _loops(child.body, inner)
        yield from _loops(child.else_, factor)


def _constant_length(node: nodes.Node) -> int | None:
    if (isinstance(node, nodes.Call) and isinstance(node.node, nodes.Name)
            and node.node.name == "range" and not node.kwargs):
        bounds = [_const(arg) for arg in node.args]
        if bounds and all(isinstance(b, int) for b in bounds):
            return _range_length(bounds)
    value = _const(node)
    if isinstance(value, list | str):
        return len(value)
    return None


def too_deep(tree: nodes.Template) -> Refusal | None:
    """A template nested deeper than Python code can be (checked without recursion, so
    that the recursive checks after it never meet a deep tree)."""
    stack: list[tuple[nodes.Node, int, int]] = [(tree, 1, 0)]
    while stack:
        node, depth, loops = stack.pop()
        if isinstance(node, nodes.For):
            loops += 1
            if loops > MAX_LOOP_NESTING:
                return (f"loops are nested more than {MAX_LOOP_NESTING} deep", node.lineno)
        if depth > MAX_NESTING:
            return (f"the template is nested more than {MAX_NESTING} levels deep", node.lineno)
        stack.extend((child, depth + 1, loops) for child in node.iter_child_nodes())
    return None


def refused(tree: nodes.Template) -> Refusal | None:
    """The first construct the sandbox is certain to refuse: ``(message, line)``."""
    for node in tree.find_all(nodes.Node):
        problem = _check_node(node)
        if problem is not None:
            return problem, node.lineno
    return next(_loops(tree.body, 1), None)
