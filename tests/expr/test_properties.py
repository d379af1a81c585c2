"""Property tests: the compiler and the evaluator are total, and agree with Python.

* Arbitrary expressions built from the guard grammar - plus forbidden constructs mixed in -
  either compile or raise :class:`GuardCompileError`, never anything else.
* A compiled guard evaluated on arbitrary JSON-like states returns a :class:`GuardResult`
  and leaves the state unchanged.
* On a null-free integer subset, where the guard language and Python mean the same thing,
  a guard's value equals Python's ``eval`` of the same text.
"""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from phaseflow.expr import (
    ALLOWED_FUNCTIONS,
    GUARD_NAMES,
    GuardCompileError,
    GuardContext,
    GuardResult,
    compile_guard,
)

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

KEYS = ["a", "b", "items", "name", "x", "_p", "__class__"]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=4), children, max_size=4)
    ),
    max_leaves=12,
)
states = st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=4), json_values, max_size=6)
contexts = st.builds(
    GuardContext,
    phase=st.sampled_from(["", "greet", "a"]),
    turn=st.integers(0, 100),
    turns_in_phase=st.integers(0, 10),
    seconds_in_phase=st.floats(0, 1e6),
    visits=st.dictionaries(st.sampled_from(["greet", "a", "x"]), st.integers(0, 5)),
)

# --- a generator of expression text, mostly valid, sometimes not --------------------

literals = st.one_of(
    st.integers(min_value=-(10**6), max_value=10**6).map(str),
    st.floats(allow_nan=False, allow_infinity=False, width=32).map(repr),
    st.text(max_size=5).map(repr),
    st.sampled_from(["true", "false", "null", "True", "False", "None", "[]", "1e308"]),
)
names = st.sampled_from([*sorted(GUARD_NAMES), "foo", "_ctx", "__import__", "len", "stat"])
accesses = st.builds(
    lambda base, key, style: f"{base}.{key}" if style else f"{base}[{key!r}]",
    st.sampled_from(["state", "visits", "state.a", "state.items"]),
    st.sampled_from(KEYS),
    st.booleans(),
)
atoms = st.one_of(literals, names, accesses)

BINARY = [
    "+",
    "-",
    "*",
    "/",
    "//",
    "%",
    "and",
    "or",
    "==",
    "!=",
    "<",
    "<=",
    ">",
    ">=",
    "in",
    "not in",
    "is",
    "is not",
]
FORBIDDEN_BINARY = ["**", "|", "&", "^", "<<", ">>", "@"]


def _compound(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    binary = st.builds(
        lambda a, op, b: f"({a} {op} {b})",
        children,
        st.sampled_from(BINARY + FORBIDDEN_BINARY[:2]),
        children,
    )
    chain = st.builds(lambda a, b, c: f"({a} < {b} <= {c})", children, children, children)
    unary = st.builds(
        lambda op, a: f"({op}{a})", st.sampled_from(["not ", "-", "+", "~"]), children
    )
    call = st.builds(
        lambda f, args: f"{f}({', '.join(args)})",
        st.sampled_from([*sorted(ALLOWED_FUNCTIONS), "open", "getattr"]),
        st.lists(children, min_size=1, max_size=3),
    )
    index = st.builds(lambda a, i: f"({a})[{i}]", children, children)
    listing = st.builds(lambda xs: f"[{', '.join(xs)}]", st.lists(children, max_size=3))
    forbidden = st.one_of(
        st.builds(lambda a: f"({a}).clear()", children),
        st.builds(lambda a: f"({a})[1:2]", children),
        st.builds(lambda a: f"(lambda: {a})", children),
        st.builds(lambda a, b, c: f"({a} if {b} else {c})", children, children, children),
        st.builds(lambda a: f"[x for x in {a}]", children),
        st.builds(lambda a: f"f'{{{a}}}'", children),
        st.builds(lambda a: f"(y := {a})", children),
        st.builds(lambda a: f"({a}, 1)", children),
        st.builds(lambda a: f"({a})._x", children),
        st.builds(lambda a: f"{{{a}: 1}}", children),
    )
    return st.one_of(binary, binary, chain, unary, call, index, listing, st.one_of(forbidden))


expressions = st.recursive(atoms, _compound, max_leaves=25)


# A drawn guard may put a literal left of ``is null`` ("(1 is null)"): the example pins it
# (Python would warn on such an ``is`` if the compiler kept it native).
@SETTINGS
@given(source=expressions, state=states, ctx=contexts)
@example(source="(1 is null)", state={}, ctx=GuardContext())
def test_compile_and_evaluate_are_total(
    source: str, state: dict[str, Any], ctx: GuardContext
) -> None:
    try:
        guard = compile_guard(source)
    except GuardCompileError as error:
        assert error.line >= 1 and error.column >= 0
        assert error.message
        return
    before = copy.deepcopy(state)
    outcome = guard.evaluate(state, ctx)
    assert isinstance(outcome, GuardResult)
    assert isinstance(outcome.value, bool)
    assert outcome.error is None or isinstance(outcome.error, str)
    assert outcome.value is False or outcome.error is None
    assert repr(state) == repr(before)  # repr: NaN != NaN


@SETTINGS
@given(source=st.text(max_size=60))
def test_arbitrary_text_only_raises_guard_compile_error(source: str) -> None:
    try:
        guard = compile_guard(source)
    except GuardCompileError as error:
        lines = source.split("\n")
        assert 1 <= error.line <= len(lines)
        assert 0 <= error.column <= len(lines[error.line - 1])
        return
    assert isinstance(guard.evaluate({}), GuardResult)


# --- agreement with Python on a null-free integer subset ----------------------------

int_leaves = st.one_of(
    st.integers(min_value=-50, max_value=50).map(lambda n: f"({n})"),
    st.sampled_from(["state.a", "state.b", "state['c']", "turn"]),
)


def _int_compound(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.builds(
            lambda a, op, b: f"({a} {op} {b})",
            children,
            st.sampled_from(["+", "-", "*", "//", "%"]),
            children,
        ),
        st.builds(lambda a: f"(-{a})", children),
        st.builds(lambda a: f"abs({a})", children),
        st.builds(
            lambda f, xs: f"{f}({', '.join(xs)})",
            st.sampled_from(["min", "max"]),
            st.lists(children, min_size=2, max_size=3),
        ),
        st.builds(lambda xs: f"max([{', '.join(xs)}])", st.lists(children, min_size=1, max_size=3)),
    )


int_expressions = st.recursive(int_leaves, _int_compound, max_leaves=10)


def _bool_compound(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.builds(
            lambda a, op, b: f"({a} {op} {b})", children, st.sampled_from(["and", "or"]), children
        ),
        st.builds(lambda a: f"(not {a})", children),
    )


comparisons = st.one_of(
    st.builds(
        lambda a, op, b: f"({a} {op} {b})",
        int_expressions,
        st.sampled_from(["==", "!=", "<", "<=", ">", ">="]),
        int_expressions,
    ),
    st.builds(
        lambda a, b, c: f"({a} < {b} <= {c})", int_expressions, int_expressions, int_expressions
    ),
    st.builds(
        lambda a, xs: f"({a} in [{', '.join(xs)}])",
        int_expressions,
        st.lists(int_expressions, max_size=3),
    ),
    st.builds(
        lambda a, xs: f"({a} not in [{', '.join(xs)}])",
        int_expressions,
        st.lists(int_expressions, max_size=3),
    ),
)
bool_expressions = st.recursive(comparisons, _bool_compound, max_leaves=6)
small_ints = st.integers(min_value=-1000, max_value=1000)


def _python(source: str, a: int, b: int, c: int, turn: int) -> Any:
    namespace = {
        "state": SimpleNamespace(a=a, b=b),
        "turn": turn,
        "abs": abs,
        "min": min,
        "max": max,
    }
    return eval(source.replace("state['c']", f"({c})"), {"__builtins__": {}}, namespace)


@SETTINGS
@given(
    source=st.one_of(int_expressions, bool_expressions),
    a=small_ints,
    b=small_ints,
    c=small_ints,
    turn=small_ints,
)
def test_agrees_with_python(source: str, a: int, b: int, c: int, turn: int) -> None:
    try:
        guard = compile_guard(source)
    except GuardCompileError as error:
        assert "nested deeper" in error.message  # the only legitimate refusal here
        return
    state = {"a": a, "b": b, "c": c}
    ctx = GuardContext(turn=turn)
    try:
        expected = _python(source, a, b, c, turn)
    except ZeroDivisionError:
        outcome = guard.evaluate(state, ctx)
        assert outcome.value is False and outcome.error is not None
        assert "ZeroDivisionError" in outcome.error
        return
    assert guard._function(state, ctx) == expected
    assert guard.evaluate(state, ctx).value is bool(expected)
