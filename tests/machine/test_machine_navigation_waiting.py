"""Property: the navigation block's "waiting for" never leaves out a key whose setting
could make a false condition true, and never lists a key it only tests for absence."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from phaseflow.expr import compile_guard
from phaseflow.expr.absence import absence_tested
from tests.support.guard_strategies import guard_sources

KEYS = ("z", "y")
ATOMS = [
    "state.{k} == null", "null == state.{k}", "state.{k} is None", "not state.{k}",
    "state.{k}.sub == null", "state.{k} > 1", "state.{k} != null", "state.{k}",
    "state.{k} == 'a'", "len(state.{k}) > 0", "turns_in_phase > 2", "true", "false",
]
VALUES = [None, 0, 2, "", "a", True, False, [], [1], {}, {"sub": 1}]


def guards() -> st.SearchStrategy[str]:
    return guard_sources(ATOMS, KEYS)


@settings(max_examples=400, deadline=None)
@given(source=guards(), base=st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES)))
def test_setting_an_absence_tested_key_never_makes_a_false_guard_true(
    source: str, base: dict[str, Any]
) -> None:
    guard = compile_guard(source)
    skipped = absence_tested(source)
    assert skipped <= guard.reads
    if guard(base):
        return
    for key in skipped:
        if base.get(key) is not None:
            continue
        for value in VALUES:
            assert not guard({**base, key: value}), (source, base, key, value)


def test_examples() -> None:
    assert absence_tested("state.x == null and state.y > 1") == {"x"}
    assert absence_tested("not (state.x == null)") == frozenset()
    assert absence_tested("state.x == null or state.x > 3") == frozenset()
    assert absence_tested("(state.x == null) == true") == frozenset()
    assert absence_tested("not not state.x") == frozenset()
    assert absence_tested("state['x'] is None and not state.y") == {"x", "y"}
    assert absence_tested("state.items[state.i] == null") == {"items"}
