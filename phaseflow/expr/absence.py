"""Which state keys a guard only tests for *absence*: what "waiting for" must leave out.

The navigation block tells the model which absent keys a false condition is waiting for.
A key the condition only tests for absence (``state.x == null``, ``state.x is None``,
``not state.x``) is not one of them: its absence is what the condition asks for, and
setting it can only make the condition false. That is a fact about the expression, so it
is computed here once, when the guard compiles (:attr:`phaseflow.expr.Guard.absence_tested`),
instead of by every reader re-parsing the source.
"""

from __future__ import annotations

import ast

__all__ = ["absence_tested", "absence_tested_in", "may_test_absence"]


def may_test_absence(source: str) -> bool:
    """A cheap pre-check: an absence test needs ``not``, ``null`` or ``None`` in the text
    (``state.k == null``, ``state.k is None``, ``not state.k``), so a guard without any of
    these words tests nothing for absence and need not be walked. (A false alarm, such as
    ``state.note == 'nothing'``, only costs the walk.)"""
    return "not" in source or "null" in source or "None" in source


def _state_key(node: ast.expr) -> str | None:
    """The top-level key of a ``state.k...`` / ``state['k']...`` chain, else ``None``."""
    while isinstance(node, ast.Attribute | ast.Subscript):
        inner = node.value
        if isinstance(inner, ast.Name) and inner.id == "state":
            if isinstance(node, ast.Attribute):
                return node.attr
            key = node.slice
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                return key.value
            return None
        node = inner
    return None


def _is_null(node: ast.expr) -> bool:
    return (isinstance(node, ast.Constant) and node.value is None) or (
        isinstance(node, ast.Name) and node.id in ("null", "None")
    )


def absence_tested_in(body: ast.expr) -> frozenset[str]:
    """The state keys the parsed guard ``body`` reads *only* in absence tests that it
    wants to hold: ``state.k == null`` (or ``null == state.k``, ``is null``/``is None``,
    also of a part, ``state.k.sub == null``) and ``not state.k``, reached from the top
    through ``and``, ``or`` and an even number of ``not``.

    The guard's truth is then a monotone function of those tests, which all hold while
    ``k`` is absent; setting ``k`` can only make them false, so a false guard is never
    *waiting for* ``k``. A key that is also read anywhere else (``state.k == null or
    state.k > 3``), or tested under a ``not`` (``not (state.k == null)``, a presence test),
    is not in the result. The body is at most :data:`~phaseflow.expr.MAX_DEPTH` deep when
    the compiler calls this, so the recursion is bounded."""
    tested: set[str] = set()
    other: set[str] = set()

    def chain_parts(node: ast.expr) -> None:
        # index expressions inside a chain (state.items[state.i]) are ordinary reads
        while isinstance(node, ast.Attribute | ast.Subscript):
            if isinstance(node, ast.Subscript):
                visit(node.slice, False)
            node = node.value

    def test(key: str, operand: ast.expr, wanted: bool) -> None:
        (tested if wanted else other).add(key)
        chain_parts(operand)

    def visit(node: ast.AST, positive: bool | None) -> None:
        """``positive``: True where the guard is monotone in ``node`` (reached through
        and/or and an even number of not), False under an odd number of not, None
        anywhere else (an operand of a comparison, a call, arithmetic)."""
        if isinstance(node, ast.BoolOp):
            for value in node.values:
                visit(value, positive)
            return
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            key = _state_key(node.operand)
            if key is not None:
                test(key, node.operand, positive is True)
                return
            visit(node.operand, None if positive is None else not positive)
            return
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(
            node.ops[0], ast.Eq | ast.Is
        ):
            left, right = node.left, node.comparators[0]
            for operand, other_side in ((left, right), (right, left)):
                key = _state_key(operand)
                if key is not None and _is_null(other_side):
                    test(key, operand, positive is True)
                    return
        if isinstance(node, ast.Attribute | ast.Subscript):
            key = _state_key(node)
            if key is not None:
                test(key, node, False)
                return
        for child in ast.iter_child_nodes(node):
            visit(child, None)

    visit(body, True)
    return frozenset(tested - other)


def absence_tested(source: str) -> frozenset[str]:
    """:func:`absence_tested_in` for guard source text (empty when it does not parse).

    Compiled guards carry the answer already (``guard.absence_tested``); this is for a
    reader holding only the text."""
    try:
        tree = ast.parse(f"(\n{source}\n)", mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return frozenset()
    try:
        return absence_tested_in(tree.body)
    except RecursionError:
        return frozenset()
