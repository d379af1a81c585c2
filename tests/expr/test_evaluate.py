"""Semantics of evaluation: each allowed construct, each null rule, each run-time error."""

from __future__ import annotations

from typing import Any

import pytest

from phaseflow.expr import (
    GUARD_FALSE,
    GUARD_TRUE,
    GuardContext,
    GuardResult,
    compile_guard,
)
from phaseflow.expr._runtime import get, index

STATE: dict[str, Any] = {
    "amount": 120,
    "price": 2.5,
    "name": "Alice",
    "empty": "",
    "flag": True,
    "off": False,
    "nothing": None,
    "items": [10, 20, 30],
    "words": ["a", "b"],
    "customer": {"id": "c1", "tier": "gold", "address": {"city": "Paris"}},
    "zero": 0,
}
CTX = GuardContext(
    phase="review", turn=7, turns_in_phase=2, seconds_in_phase=12.5, visits={"greet": 3}
)


def value(source: str, state: dict[str, Any] | None = None) -> Any:
    """The raw (pre-bool) value of an expression, via the compiled function."""
    guard = compile_guard(source)
    return guard._function(STATE if state is None else state, CTX)


def result(source: str, state: dict[str, Any] | None = None) -> GuardResult:
    return compile_guard(source).evaluate(STATE if state is None else state, CTX)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        # literals
        ("1", 1),
        ("2.5", 2.5),
        ("'x'", "x"),
        ('"x"', "x"),
        ("[1, 'a', null]", [1, "a", None]),
        ("[]", []),
        ("true", True),
        ("false", False),
        ("null", None),
        ("True", True),
        ("False", False),
        ("None", None),
        # access
        ("state.amount", 120),
        ("state['amount']", 120),
        ("state.customer.id", "c1"),
        ("state.customer['tier']", "gold"),
        ("state['customer'].address.city", "Paris"),
        ("state.items[0]", 10),
        ("state.items[-1]", 30),
        ("state.items[turn - 6]", 20),
        ("state.name[0]", "A"),
        ("state[phase]", None),
        # context
        ("phase", "review"),
        ("turn", 7),
        ("turns_in_phase", 2),
        ("seconds_in_phase", 12.5),
        ("visits.greet", 3),
        ("visits['greet']", 3),
        ("visits.never", 0),
        ("visits[phase]", 0),
        ("'greet' in visits", True),
        # boolean operators: Python short-circuit, value-returning
        ("state.amount and state.name", "Alice"),
        ("state.missing or 'default'", "default"),
        ("state.empty or state.zero", 0),
        ("not state.flag", False),
        ("not state.missing", True),
        ("not null", True),
        # comparisons
        ("state.amount == 120", True),
        ("state.amount != 120", False),
        ("state.amount < 500", True),
        ("state.amount <= 120", True),
        ("state.amount > 500", False),
        ("state.amount >= 121", False),
        ("state.price > 2", True),
        ("'abc' < 'abd'", True),
        ("1 < state.amount < 500", True),
        ("1 < state.amount < 100", False),
        ("1 < 2 == 2 < 3", True),
        ("'b' in state.words", True),
        ("'z' not in state.words", True),
        ("'lic' in state.name", True),
        ("'id' in state.customer", True),
        ("state.nothing is null", True),
        ("state.missing is None", True),
        ("state.flag is true", True),
        ("state.flag is not false", True),
        ("state.amount is 120", True),
        ("state.amount is 120.0", False),
        ("state.amount == 120.0", True),
        ("[1, 2] is [1, 2]", True),
        # arithmetic
        ("state.amount + 1", 121),
        ("state.amount - 20", 100),
        ("state.amount * 2", 240),
        ("state.amount / 50", 2.4),
        ("state.amount // 50", 2),
        ("state.amount % 50", 20),
        ("-state.amount", -120),
        ("+state.price", 2.5),
        ("(1 + 2) * 3", 9),
        ("state.name + '!'", "Alice!"),
        ("state.words + ['c']", ["a", "b", "c"]),
        ("2 * 3.5", 7.0),
        # functions
        ("len(state.items)", 3),
        ("len(state.name)", 5),
        ("len(state.customer)", 3),
        ("len(visits)", 1),
        ("lower(state.name)", "alice"),
        ("upper(state.name)", "ALICE"),
        ("startswith(state.name, 'Al')", True),
        ("startswith(state.name, ['x', 'A'])", True),
        ("endswith(state.name, 'ce')", True),
        ("endswith(state.name, 'x')", False),
        ("min(state.items)", 10),
        ("max(state.items)", 30),
        ("min(3, 1, 2)", 1),
        ("max('a', 'b')", "b"),
        ("abs(-3)", 3),
        ("round(2.567, 1)", 2.6),
        ("round(2.5)", 2),
        ("int('42')", 42),
        ("int(' 7 ')", 7),
        ("int(3.9)", 3),
        ("int(true)", 1),
        ("float('1.5')", 1.5),
        ("float(2)", 2.0),
        ("str(12)", "12"),
        ("str(1.5)", "1.5"),
        ("str(true)", "True"),
        ("str('x')", "x"),
        # multi-line source (a YAML block scalar)
        ("state.amount > 1\nand state.name", "Alice"),
        ("\n  state.amount > 1  # big enough\n  and state.flag\n", True),
    ],
)
def test_value(source: str, expected: Any) -> None:
    got = value(source)
    assert got == expected
    assert type(got) is type(expected)


@pytest.mark.parametrize(
    "source",
    [
        "state.missing",
        "state.missing.deeper",
        "state.missing[0]",
        "state.items[3]",
        "state.items[-4]",
        "state.items['x']",
        "state.customer[0]",
        "state.items[true]",
        "state.items[1.0]",
        "state.name.upper",  # attribute of a non-mapping: never a Python attribute
        "'x'.join",
        "state.amount.real",
        "visits.greet.x",
        "visits[1]",
        "state['__class__']",
        "state.customer['__dict__']",
        # ordering / arithmetic with null
        "state.missing < 1",
        "1 >= state.missing",
        "state.missing + 1",
        "1 - state.missing",
        "state.missing * 2",
        "state.missing / 2",
        "state.missing // 2",
        "state.missing % 2",
        "-state.missing",
        "+state.missing",
        "1 < state.missing < 3",
        # membership with a null container
        "1 in state.missing",
        "1 not in state.missing",
        "null in 'abc'",
        # functions of null
        "len(state.missing)",
        "lower(state.missing)",
        "upper(null)",
        "startswith(null, 'a')",
        "startswith('a', null)",
        "endswith(null, 'a')",
        "min(state.missing)",
        "max(1, null)",
        "abs(null)",
        "round(null)",
        "int(null)",
        "float(null)",
        "str(null)",
    ],
)
def test_null(source: str) -> None:
    assert value(source) is None
    assert result(source) is GUARD_FALSE


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("state.missing == null", True),
        ("state.missing != null", False),
        ("state.missing == 0", False),
        ("state.missing != 0", True),
        ("not state.missing", True),
        ("not (state.missing < 1)", True),
        ("state.missing is null", True),
        ("null == None", True),
        ("null in [1, null]", True),
    ],
)
def test_null_equality(source: str, expected: bool) -> None:
    assert value(source) is expected


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("state.name < 1", "'<' not supported between 'str' and 'int'"),
        ("1 <= 'a'", "'<=' not supported between 'int' and 'str'"),
        ("state.items > 1", "'>' not supported between 'list' and 'int'"),
        ("state.flag >= 1", "'>=' not supported between 'bool' and 'int'"),
        ("state.flag + 1", "'+' not supported between 'bool' and 'int'"),
        ("state.name + 1", "'+' not supported between 'str' and 'int'"),
        ("state.name - 'a'", "'-' not supported between 'str' and 'str'"),
        ("state.name * 3", "'*' not supported between 'str' and 'int'"),
        ("state.items * 3", "'*' not supported between 'list' and 'int'"),
        ("state.name % 3", "'%' not supported between 'str' and 'int'"),
        ("-state.name", "bad operand type for unary -: 'str'"),
        ("+state.items", "bad operand type for unary +: 'list'"),
        ("1 / state.zero", "ZeroDivisionError: division by zero"),
        ("1 // state.zero", "ZeroDivisionError"),
        ("1 % state.zero", "ZeroDivisionError"),
        ("len(5)", "len() of 'int' is not supported"),
        ("lower(5)", "lower() needs a str, not 'int'"),
        ("upper(state.items)", "upper() needs a str"),
        ("startswith(5, 'a')", "startswith() needs a str first"),
        ("endswith('a', 5)", "endswith() needs a str or a list of str second"),
        ("min([])", "min() of an empty list"),
        ("max(5)", "max() of one argument needs a list"),
        ("max(1, 'a')", "max() needs all numbers or all strings"),
        ("abs('x')", "abs() needs a number"),
        ("round('x')", "round() needs a number"),
        ("round(1.5, 'x')", "round() digits must be an int"),
        ("round(5, -1000000)", "round() digits must be between"),
        ("int('x')", "ValueError"),
        ("int(state.items)", "int() needs a number or a str"),
        ("float('abc')", "ValueError"),
        ("float(state.customer)", "float() needs a number or a str"),
        ("str(state.items)", "str() needs a str, number or bool"),
        ("1 in 5", "'in' needs a str, list or mapping on the right, not 'int'"),
        ("1 in 'abc'", "'in <str>' requires a str on the left, not 'int'"),
        ("state.price * 1e308 * 1e308 > 1 and int(state.price * 1e308 * 1e308)", "Overflow"),
    ],
)
def test_runtime_type_error(source: str, message: str) -> None:
    outcome = result(source)
    assert outcome.value is False
    assert outcome.error is not None
    assert message in outcome.error


def test_error_only_when_evaluated() -> None:
    """Short-circuiting means a type error in an untaken branch is no error."""
    assert result("false and state.name < 1") is GUARD_FALSE
    assert result("true or state.name < 1") is GUARD_TRUE


def test_results_are_preallocated() -> None:
    guard = compile_guard("state.amount <= 500 and state.customer")
    assert guard.evaluate(STATE) is GUARD_TRUE
    assert guard.evaluate({}) is GUARD_FALSE
    assert guard(STATE) is True
    assert guard({}) is False
    assert bool(GUARD_TRUE) and not GUARD_FALSE


def test_truthiness_of_result() -> None:
    assert result("state.items") is GUARD_TRUE
    assert result("state.empty") is GUARD_FALSE
    assert result("[]") is GUARD_FALSE
    assert result("state.zero") is GUARD_FALSE
    assert result("0.0") is GUARD_FALSE


def test_default_context() -> None:
    guard = compile_guard("phase == '' and turn == 0 and visits.x == 0 and seconds_in_phase == 0")
    assert guard.evaluate({}) is GUARD_TRUE


def test_chained_comparison_evaluates_middle_once() -> None:
    """The middle operand is bound once; the rewrite must not duplicate subtrees."""
    assert value("1 < state.amount + 1 < 200 > state.amount") is True
    # (2 < True) orders an int against a bool: a type error, reported.
    assert "'int' and 'bool'" in (result("1 < (2 < (3 < 4 < 5) < 6) < 7").error or "")
    # 20 nested chains would be 2**20 copies if the middle operand were duplicated.
    nested = "state.a == " + "(state.a == " * 20 + "1" + " == 2)" * 20 + " == 2"
    assert compile_guard(nested).evaluate({}) is GUARD_FALSE


def test_guard_is_immutable_and_picklable() -> None:
    import dataclasses
    import pickle

    guard = compile_guard("state.amount > 1")
    with pytest.raises(dataclasses.FrozenInstanceError):
        guard.source = "x"  # type: ignore[misc]
    clone = pickle.loads(pickle.dumps(guard))
    assert clone == guard
    assert clone.evaluate({"amount": 2}) is GUARD_TRUE


def test_host_mapping_types() -> None:
    from types import MappingProxyType

    state = MappingProxyType({"a": MappingProxyType({"b": (1, 2)})})
    assert compile_guard("state.a.b[1] == 2 and len(state.a.b) == 2")(state)
    assert compile_guard("state.a.b + [3] == [1, 2, 3]")(state)


def test_helpers_never_touch_attributes() -> None:
    class Sneaky:
        secret = "x"

    assert get(Sneaky(), "secret") is None
    assert index(Sneaky(), "secret") is None


def test_host_mapping_that_raises() -> None:
    from collections.abc import Iterator, Mapping

    class Broken(Mapping[str, Any]):
        def __getitem__(self, key: str) -> Any:
            raise RuntimeError("backend down")

        def __iter__(self) -> Iterator[str]:
            return iter(())

        def __len__(self) -> int:
            return 0

    outcome = compile_guard("state.x").evaluate(Broken())
    assert outcome.value is False
    assert outcome.error == "RuntimeError: backend down"
