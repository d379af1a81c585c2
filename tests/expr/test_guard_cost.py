"""The cost of a guard is bounded: helpers that walk a list or mapping are charged by its
size against a per-evaluation budget, and running out makes the guard false with an
error, quickly, instead of a long evaluation."""

from __future__ import annotations

import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phaseflow.expr import compile_guard
from phaseflow.expr._runtime import WORK_LIMIT

BIG = list(range(200_000))


def _fastest_ms(source: str, state: dict[str, Any], runs: int = 5) -> tuple[float, Any]:
    guard = compile_guard(source)
    best = float("inf")
    result = None
    for _ in range(runs):
        start = time.perf_counter()
        result = guard.evaluate(state)
        best = min(best, time.perf_counter() - start)
    return best * 1000, result


@pytest.mark.parametrize("function", ["min", "max"])
def test_fifty_extremes_of_a_200k_list_are_within_the_work_limit(function: str) -> None:
    """The same list's extreme is walked once per evaluation (remembered), so fifty fit in
    the budget that one walk of a list 5x longer would use up. (Speed: benchmarks.)"""
    source = " and ".join([f"{function}(state.xs) >= 0"] * 50)
    _ms, result = _fastest_ms(source, {"xs": BIG})
    assert result.value is True and result.error is None


@pytest.fixture(scope="module")
def big_state() -> dict[str, Any]:
    nested = [list(range(1000)) for _ in range(2000)]  # 2,000,000 items, 2,000 at the top
    return {
        "xs": BIG, "ys": list(BIG), "ss": ["b"] * 200_000, "nested": nested,
        "other": [list(r) for r in nested], "lists": [[0], [1], [list(r) for r in nested]],
        **{f"x{i}": list(range(200_000)) for i in range(50)},
    }


@pytest.mark.parametrize("source", [
    " and ".join(["199999 in state.xs"] * 50),
    " and ".join(["state.xs == state.ys"] * 50),
    " and ".join([f"max(state.x{i}) >= 0" for i in range(50)]),
    " and ".join(["not startswith('a', state.ss)"] * 50),
    " and ".join(["len(state.xs + state.ys) > 0"] * 50),
    "state.nested == state.other",
    "state.nested in state.lists",
    "state.nested is state.other",
])
def test_running_out_of_work_is_a_quick_false_with_an_error(
    source: str, big_state: dict[str, Any]
) -> None:
    _ms, result = _fastest_ms(source, big_state, runs=2)
    assert result.value is False
    assert result.error is not None and "guard exceeded its work limit" in result.error


def test_the_limit_is_per_evaluation_not_per_guard() -> None:
    guard = compile_guard("max(state.xs) == 199999")
    for _ in range(10):
        assert guard.evaluate({"xs": BIG}).value is True


def test_a_single_walk_up_to_the_limit_is_allowed() -> None:
    state = {"xs": list(range(WORK_LIMIT))}
    assert compile_guard("max(state.xs) == 999999").evaluate(state).value is True
    assert compile_guard(f"{WORK_LIMIT - 1} in state.xs").evaluate(state).value is True
    over = {"xs": list(range(WORK_LIMIT + 1))}
    assert compile_guard("max(state.xs) > 0").evaluate(over).error is not None


def test_typical_guards_are_not_charged() -> None:
    # comparisons with literals and scalars, len, lookups: O(1) whatever the state holds
    state = {"xs": list(range(WORK_LIMIT * 2)), "amount": 1, "tags": ["a"]}
    for source in ["len(state.xs) > 5", "state.xs != [1, 2]", "state.xs != 'a'",
                   "state.xs[0] == 0", "state.xs is not null", "state.amount in [1, 2]",
                   "state.xs[5] not in state.tags", "max(state.amount, 3) == 3",
                   "startswith('abc', ['a', 'b'])", "state.xs[1] + 1 == 2"]:
        result = compile_guard(source).evaluate(state)
        assert result.error is None and result.value is True, source


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from(["a", "b"]),
              st.sampled_from([0.0, 1.5, float("nan")])),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.sampled_from(["k", "j"]), inner, max_size=2)),
    max_leaves=10,
)


@settings(max_examples=300, deadline=None)
@given(a=json_values, b=json_values, same=st.booleans())
def test_charged_comparisons_agree_with_python(a: Any, b: Any, same: bool) -> None:
    """The metered ``==``, ``!=``, ``is`` and ``in`` give Python's answers (identity first
    for items, as Python compares them: a NaN inside one list is equal to itself)."""
    if same:
        b = a
    state = {"a": a, "b": b, "l": [b, 1]}

    def ev(source: str) -> Any:
        result = compile_guard(source).evaluate(state)
        assert result.error is None, result.error
        return result.value

    assert ev("state.a == state.b") is bool(a == b)
    assert ev("state.a != state.b") is bool(a != b)
    assert ev("state.a in state.l") is (a in [b, 1])
    expected_is = a is b or (type(a) is type(b) and bool(a == b))
    assert ev("state.a is state.b") is expected_is
