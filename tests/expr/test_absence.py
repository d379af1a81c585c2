"""A compiled guard knows, once, which keys it only tests for absence; the navigation
block's "waiting for" reads that instead of re-parsing the source on every render."""

from __future__ import annotations

import copy
import pickle

from hypothesis import given, settings
from hypothesis import strategies as st

from phaseflow.expr import compile_guard
from phaseflow.expr.absence import absence_tested
from tests.support.guard_strategies import guard_sources

KEYS = ("z", "y")
ATOMS = [
    "state.{k} == null", "null == state.{k}", "state.{k} is None", "not state.{k}",
    "state.{k}.sub == null", "state.{k} > 1", "state.{k} != null", "state.{k}",
    "state['{k}'] is null", "state.items[state.{k}] == null", "turns_in_phase > 2", "true",
]


def guards() -> st.SearchStrategy[str]:
    return guard_sources(ATOMS, KEYS)


@settings(max_examples=200, deadline=None)
@given(source=guards())
def test_the_compiled_guard_carries_what_the_source_says(source: str) -> None:
    guard = compile_guard(source)
    assert guard.absence_tested == absence_tested(source)
    assert guard.absence_tested <= guard.reads


def test_examples_on_compiled_guards() -> None:
    assert compile_guard("state.x == null and state.y > 1").absence_tested == {"x"}
    assert compile_guard("not (state.x == null)").absence_tested == frozenset()
    assert compile_guard("state.x == null or state.x > 3").absence_tested == frozenset()
    assert compile_guard("state['x'] is None and not state.y").absence_tested == {"x", "y"}
    # a multi-line (block scalar) guard: newlines are spaces
    assert compile_guard("state.x == null\nand not state.y\n").absence_tested == {"x", "y"}
    assert compile_guard("true").absence_tested == frozenset()


def test_source_that_does_not_parse_tests_nothing() -> None:
    assert absence_tested("state.x ==") == frozenset()
    assert absence_tested("(" * 200_000) == frozenset()


def test_pickling_and_copying_keep_it() -> None:
    guard = compile_guard("state.x is null and state.y")
    for clone in (pickle.loads(pickle.dumps(guard)), copy.deepcopy(guard), copy.copy(guard)):
        assert clone == guard
        assert clone.absence_tested == {"x"}
        assert clone.evaluate({"y": 1}).value
