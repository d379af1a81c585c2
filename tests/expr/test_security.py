"""Known sandbox escapes: each is rejected at compile time (with its position) or is harmless.

"Harmless" means: evaluation returns a :class:`GuardResult`, quickly, without reaching a
Python attribute, builtin or module, and leaves the state exactly as it was.
"""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest

from phaseflow.expr import GUARD_FALSE, GuardCompileError, GuardResult, compile_guard

STATE: dict[str, Any] = {
    "s": "a",
    "n": 7,
    "big": 10**1000,
    "items": [1, 2, 3],
    "nested": {"list": [{"k": "v"}]},
    "__class__": "data, not the class",
}


def evaluate_safely(source: str, state: dict[str, Any] | None = None) -> GuardResult:
    """Evaluate and check the invariants every evaluation must keep."""
    state = STATE if state is None else state
    before = copy.deepcopy(state)
    guard = compile_guard(source)
    started = time.perf_counter()
    outcome = guard.evaluate(state)
    assert time.perf_counter() - started < 0.5, "evaluation must be fast"
    assert isinstance(outcome, GuardResult)
    assert state == before, "evaluation must not mutate the state"
    return outcome


@pytest.mark.parametrize(
    ("source", "fragment", "column"),
    [
        # dunder walks
        ("state.__class__", "starting with '_'", 6),
        ("state.__class__.__mro__", "starting with '_'", 6),
        ("phase.__class__", "starting with '_'", 6),
        ("visits.__dict__", "starting with '_'", 7),
        ("().__class__.__bases__[0].__subclasses__()", "method calls", 0),
        ("[].__class__", "starting with '_'", 3),
        ("state.x._private", "starting with '_'", 8),
        ("state.ｘ.__globals__", "starting with '_'", 8),
        # builtins and internals by name
        ("__import__('os')", "function '__import__' is not allowed", 0),
        ("__import__", "unknown name '__import__'", 0),
        ("__builtins__", "unknown name '__builtins__'", 0),
        ("open('x')", "function 'open' is not allowed", 0),
        ("eval('1')", "function 'eval' is not allowed", 0),
        ("exec('1')", "function 'exec' is not allowed", 0),
        ("getattr(state, 'x')", "function 'getattr' is not allowed", 0),
        ("globals()", "function 'globals' is not allowed", 0),
        ("type(state)", "function 'type' is not allowed", 0),
        ("breakpoint()", "function 'breakpoint' is not allowed", 0),
        ("1 and compile('1', 'x', 'eval')", "function 'compile' is not allowed", 6),
        # our own generated names are not reachable from the source
        ("_ctx.visits", "unknown name '_ctx'", 0),
        ("_get(state, 'x')", "function '_get' is not allowed", 0),
        ("_t0", "unknown name '_t0'", 0),
        ("_f_len(state)", "function '_f_len' is not allowed", 0),
        # method calls, including on literals and via attribute-looking keys
        ("state.items.clear()", "method calls are not allowed", 0),
        ("state.items.append(1)", "method calls are not allowed", 0),
        ("state.nested.update(x=1)", "method calls are not allowed", 0),
        ("'x'.join(state.items)", "method calls are not allowed", 0),
        ("'{0.__class__}'.format(state)", "method calls are not allowed", 0),
        ("state['items'].pop()", "method calls are not allowed", 0),
        ("{}.get('x')", "method calls are not allowed", 0),
        ("{}", "dict literals are not allowed", 0),
        # code constructs
        ("[x for x in state.items]", "comprehensions", 0),
        ("len([x for x in state.items])", "comprehensions", 4),
        ("max(x for x in state.items)", "generator expressions", 3),
        ("(x := state.n)", "assignment expressions", 1),
        ("lambda: 1", "lambda", 0),
        ("(lambda: 1)()", "only these functions can be called", 0),
        ("f'{state.n}'", "f-strings", 0),
        ("f'{state.__class__}'", "f-strings", 0),
        ("1 if state.n else 2", "conditional expressions", 0),
        # exponentiation and repetition
        ("9**9**9", "'**' is not allowed", 0),
        ("'a' * 10**9", "'**' is not allowed", 6),
        ("'a' * 1000000000", "repetition is not allowed", 0),
        ("[0] * 1000000000", "repetition is not allowed", 0),
        ("1000000000 * ('a' + state.s)", "repetition is not allowed", 0),
        ("state.n << 100000", "'<<' is not allowed", 0),
        # subscripts and arguments
        ("state.items[::-1]", "slices are not allowed", 12),
        ("state.s[0:10**9]", "slices are not allowed", 8),
        ("max(*state.items)", "starred arguments", 4),
        ("round(1.5, ndigits=0)", "keyword arguments", 11),
        # unicode lookalikes: Cyrillic 'ѕ' is not NFKC-equal to 's', so not 'state'
        ("ѕtate.x", "unknown name 'ѕtate'", 0),
        ("ｏｐｅｎ('x')", "function 'open' is not allowed", 0),
        ("state.＿＿class＿＿", "invalid character", 6),  # fullwidth '_' cannot start a name
    ],
)
def test_rejected_at_compile_time(source: str, fragment: str, column: int) -> None:
    with pytest.raises(GuardCompileError) as info:
        compile_guard(source)
    assert fragment in info.value.message
    assert info.value.line == 1
    assert info.value.column == column


def test_nfkc_normalized_names_are_just_the_names() -> None:
    """Python NFKC-normalizes identifiers: fullwidth 'ｓｔａｔｅ.ｘ' *is* state.x - harmless."""
    guard = compile_guard("ｓｔａｔｅ.ｘ == 1")
    assert guard.reads == {"x"}
    assert guard({"x": 1})


def test_dunder_key_is_plain_data() -> None:
    assert compile_guard("state['__class__'] == 'data, not the class'")(STATE)
    assert evaluate_safely("state['__class__']").value is True
    assert compile_guard("state['__dict__']")._function(STATE, None) is None  # type: ignore[arg-type]
    assert compile_guard("state.nested['__class__']")._function(STATE, None) is None  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "source",
    [
        "state.s.join",
        "state.s.upper",
        "state.items.append",
        "state.n.real",
        "phase.format",
        "turn.bit_length",
        "state.nested.list[0].k.upper",
    ],
)
def test_attributes_of_non_mappings_are_null(source: str) -> None:
    assert compile_guard(source)._function(STATE, _context()) is None


def _context() -> Any:
    from phaseflow.expr import GuardContext

    return GuardContext(phase="p", turn=1)


def test_no_builtins_in_guard_globals() -> None:
    guard = compile_guard("state.n > 1")
    function_globals = guard._function.__globals__  # type: ignore[attr-defined]
    assert function_globals["__builtins__"] == {}
    assert not any(not name.startswith("_") for name in function_globals)


def test_runtime_repetition_is_a_type_error() -> None:
    outcome = evaluate_safely("state.s * 1000000000")
    assert outcome.value is False
    assert outcome.error == "'*' not supported between 'str' and 'int'"
    outcome = evaluate_safely("state.items * 1000000000 == []")
    assert outcome.error == "'*' not supported between 'list' and 'int'"


def test_huge_integer_products_are_capped() -> None:
    source = " * ".join(["state.big"] * 20) + " > 1"
    outcome = evaluate_safely(source)
    assert outcome.value is False
    assert outcome.error is not None and "too large" in outcome.error


def test_concatenation_is_capped() -> None:
    state = {"s": "x" * 400_000}
    outcome = evaluate_safely(" + ".join(["state.s"] * 40), state)
    assert outcome.error is not None and "too long" in outcome.error


def test_conversions_are_capped() -> None:
    assert "longer than 100" in (
        evaluate_safely("int(state.digits) > 1", {"digits": "9" * 5000}).error or ""
    )
    # CPython's int-to-str digit limit (or our own guard) turns into an error, not a hang.
    outcome = evaluate_safely("str(state.huge) == '1'", {"huge": 10**5000})
    assert outcome.value is False
    outcome = evaluate_safely("round(state.n, -1000000000)")
    assert outcome.error is not None and "digits" in outcome.error


def test_deep_parentheses_never_reach_the_parser() -> None:
    source = "(" * 100_000 + "1" + ")" * 100_000
    started = time.perf_counter()
    with pytest.raises(GuardCompileError) as info:
        compile_guard(source)
    assert time.perf_counter() - started < 0.1
    assert "characters long" in info.value.message


def test_one_megabyte_expression() -> None:
    source = "state.n == 1 and " * 60_000 + "true"
    assert len(source) > 1_000_000
    started = time.perf_counter()
    with pytest.raises(GuardCompileError):
        compile_guard(source)
    assert time.perf_counter() - started < 0.1


@pytest.mark.parametrize(
    "source",
    [
        "(" * 250 + "1" + ")" * 250,  # the parser's own nesting limit
        "[" * 60 + "]" * 60,
        "-" * 1999 + "1",
        "not " * 499 + "1",
        "len(" * 300 + "1" + ")" * 300,
        "state" + ".a" * 997,
        "state" + "[0]" * 600,
    ],
    ids=["parentheses", "lists", "unary-minus", "not", "calls", "attributes", "subscripts"],
)
def test_deep_nesting_is_a_compile_error(source: str) -> None:
    assert len(source) <= 2000
    with pytest.raises(GuardCompileError):
        compile_guard(source)


def test_max_of_a_huge_list_is_fine() -> None:
    state = {"list": list(range(1_000_000))}
    assert evaluate_safely("max(state.list) == 999999", state).value is True
    assert evaluate_safely("999999 in state.list", state).value is True


def test_self_referencing_state_does_not_crash() -> None:
    loop: list[Any] = [1]
    loop.append(loop)
    other: list[Any] = [1]
    other.append(other)
    outcome = compile_guard("state.loop == state.other").evaluate({"loop": loop, "other": other})
    assert outcome.value is False
    assert outcome.error is not None and "RecursionError" in outcome.error


def test_non_mapping_state_is_harmless() -> None:
    class Hostile:
        amount = 10**9

        def __getitem__(self, key: str) -> Any:
            raise AssertionError("must not be indexed")

    for state in (Hostile(), [1, 2], "text", None, 42):
        assert compile_guard("state.amount > 1").evaluate(state) is GUARD_FALSE  # type: ignore[arg-type]


def test_state_unchanged_after_many_guards() -> None:
    state = copy.deepcopy(STATE)
    for source in [
        "state.items + [4] == [1, 2, 3, 4]",
        "state.nested.list[0].k == 'v'",
        "len(state.items) == 3 and max(state.items) == 3 and min(state.items) == 1",
        "lower(state.s) == 'a' and upper(state.s) == 'A'",
        "str(state.n) == '7' and int('7') == state.n",
        "'k' in state.nested.list[0]",
    ]:
        assert evaluate_safely(source, state).value is True, source
    assert state == STATE
