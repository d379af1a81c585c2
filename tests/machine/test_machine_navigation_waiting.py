"""Property: the navigation block's "waiting for" never leaves out a key whose setting
could make a false condition true, and never lists a key it only tests for absence."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from phaseflow.expr import compile_guard
from phaseflow.expr.absence import absence_tested

KEYS = ("z", "y")
ATOMS = [
    "state.{k} == null", "null == state.{k}", "state.{k} is None", "not state.{k}",
    "state.{k}.sub == null", "state.{k} > 1", "state.{k} != null", "state.{k}",
    "state.{k} == 'a'", "len(state.{k}) > 0", "turns_in_phase > 2", "true", "false",
]
VALUES = [None, 0, 2, "", "a", True, False, [], [1], {}, {"sub": 1}]


@st.composite
def guards(draw: Any, depth: int = 3) -> str:
    if depth == 0 or draw(st.integers(0, 2)) == 0:
        return draw(st.sampled_from(ATOMS)).format(k=draw(st.sampled_from(KEYS)))
    kind = draw(st.sampled_from(["and", "or", "not", "cmp"]))
    if kind == "not":
        return f"not ({draw(guards(depth - 1))})"
    if kind == "cmp":
        return f"({draw(guards(depth - 1))}) == true"
    return f"({draw(guards(depth - 1))}) {kind} ({draw(guards(depth - 1))})"


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
