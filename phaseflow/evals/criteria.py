"""Success criteria: the expressions of an eval scenario's ``expect`` and ``never``.

A criterion is written in the guard language (``phaseflow.expr``), with a few more
names for what a conversation did. It is rewritten into a plain guard over one mapping
of facts, and compiled by the guard compiler: the same whitelist, the same limits, the
same null rules, nothing new that could run code.

Names a criterion may use, besides the guard language's own:

- ``state`` (the session state), ``phase``, ``status`` (the session's), ``data`` (the
  scenario's data set, as the stand-in tools left it), ``turns`` (the user's messages);
- ``called('TOOL')``: the tool ran (a host tool or a workflow ``call``);
  ``args('TOOL')``: the arguments of its last call (``args('x').amount > 500``);
- ``entered('PHASE')``: the conversation entered the phase (the first one included);
- ``refused`` (calls refused: a tool not offered, a move not allowed) and
  ``refused('TOOL')``; ``approvals`` (approvals asked) and ``approved('TOOL')``,
  ``rejected('TOOL')``; ``errors`` (tool calls that ended in an error).
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from phaseflow.errors import PhaseflowError
from phaseflow.expr import Guard, GuardCompileError, GuardContext, compile_guard

__all__ = ["FUNCTIONS", "NAMES", "Criterion", "CriterionError", "compile_criterion"]

#: the functions a criterion adds to the guard language: name -> the fact it reads
FUNCTIONS: dict[str, str] = {
    "called": "called", "args": "args", "entered": "entered", "refused": "refused_tools",
    "approved": "approved", "rejected": "rejected",
}
#: the bare names a criterion adds: name -> the fact it reads
NAMES: dict[str, str] = {
    "state": "state", "status": "status", "data": "data", "turns": "turns",
    "refused": "refused", "approvals": "approvals", "errors": "errors",
    "args": "args",  # in a stand-in's case: the call's arguments
}
_FACTS = "state"  # the one name the rewritten guard reads everything through


class CriterionError(PhaseflowError):
    """A criterion that cannot be compiled; ``column`` is 0-based in its text."""

    def __init__(self, message: str, column: int = 0) -> None:
        super().__init__(message)
        self.column = column


@dataclass(frozen=True, slots=True)
class Criterion:
    """One compiled criterion: its text as written and the guard it became."""

    source: str
    guard: Guard
    #: where it is written (1-based; 0 when not read from a file)
    line: int = 0
    column: int = 0

    def holds(self, facts: Mapping[str, Any], phase: str) -> tuple[bool, str | None]:
        """Whether it holds of ``facts`` (``phase``: the phase then); the guard's
        run-time error (a type error makes it false) as the second value."""
        context = _CONTEXTS.get(phase)
        if context is None:
            if len(_CONTEXTS) > 1000:
                _CONTEXTS.clear()
            context = _CONTEXTS[phase] = GuardContext(phase=phase)
        result = self.guard.evaluate(facts, context)
        return result.value, result.error


#: the guard context of each phase a criterion is evaluated in (immutable, so shared)
_CONTEXTS: dict[str, GuardContext] = {}


def _fact(name: str) -> ast.expr:
    return ast.Subscript(value=ast.Name(id=_FACTS, ctx=ast.Load()),
                         slice=ast.Constant(value=name), ctx=ast.Load())


class _Rewrite(ast.NodeTransformer):
    def visit_Call(self, node: ast.Call) -> ast.AST:
        func = node.func
        if isinstance(func, ast.Name) and func.id in FUNCTIONS:
            if len(node.args) != 1 or node.keywords:
                raise CriterionError(f"{func.id}() takes one argument, a name",
                                     node.col_offset - 1)
            argument = node.args[0]
            if not (isinstance(argument, ast.Constant) and isinstance(argument.value, str)):
                raise CriterionError(f"{func.id}() takes a name in quotes: "
                                     f"{func.id}('...')", argument.col_offset - 1)
            read = ast.Subscript(value=_fact(FUNCTIONS[func.id]), slice=argument,
                                 ctx=ast.Load())
            if func.id == "args":
                return read
            # present (a count of at least 1) or absent (null): `!= null` is the guard
            # language's own comparison, with no helper call and no metering
            return ast.Compare(left=read, ops=[ast.NotEq()],
                               comparators=[ast.Name(id="null", ctx=ast.Load())])
        return self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in NAMES:
            return _fact(NAMES[node.id])
        return node


def compile_criterion(source: str) -> Criterion:
    """``source`` compiled; :class:`CriterionError` says what is wrong with it."""
    if not isinstance(source, str) or not source.strip():
        raise CriterionError("a criterion is a non-empty expression")
    try:
        tree = ast.parse("(" + source + "\n)", mode="eval")
    except SyntaxError as exc:
        raise CriterionError(f"not an expression: {exc.msg}",
                             max(0, (exc.offset or 1) - 2)) from None
    try:
        body = _Rewrite().visit(tree.body)
        rewritten = ast.unparse(ast.fix_missing_locations(body))
    except RecursionError:
        raise CriterionError("the expression is nested too deeply") from None
    try:
        guard = compile_guard(rewritten)
    except GuardCompileError as exc:
        message = str(exc).replace("state['", "'").replace("'state'", "state")
        raise CriterionError(message) from None
    return Criterion(source, guard)
