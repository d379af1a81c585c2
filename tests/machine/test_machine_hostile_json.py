"""What a host callable returns must be JSON: a value that is not is refused (the other
keys kept, every refused key reported), tuples are kept as lists, and a set effect built in
code or read from YAML obeys the same rule."""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phaseflow.errors import ConfigError
from phaseflow.machine import EffectContext, State
from phaseflow.spec.model import CallEffect, Phase, SetEffect, Transition
from tests.support.machines import workflow


class Obj:
    pass


NOT_JSON: list[Any] = [
    {1, 2}, frozenset({1}), b"bytes", bytearray(b"x"), math.nan, math.inf, -math.inf, Obj(),
    complex(1, 2), {"k": {1}}, {1: "int key"}, {(1, 2): "tuple key"}, [1, [math.nan]],
    {"deep": [[[[{"x": object()}]]]]}, 10**5000, Obj,
]


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("bad", [*NOT_JSON, _nested(150)],
                         ids=lambda v: type(v).__name__)
def test_a_value_that_is_not_json_is_refused_and_the_other_keys_are_kept(bad: Any) -> None:
    def hook(ctx: EffectContext) -> dict[Any, Any]:
        return {"before": 1, "bad": bad, "after": (1, 2)}

    a = Phase("a", transitions=[Transition("b", "state.go")])
    b = Phase("b", on_enter=[CallEffect("hook")])
    m = workflow([a, b], registry={"hook": hook}).machine()
    s = State({"go": True})
    r = m.advance_sync(s, turn=1)
    assert r.transitioned and "bad" not in s
    assert s["before"] == 1 and s["after"] == [1, 2]  # a tuple is stored as a list
    assert len(r.events) == 1 and r.events[0].kind == "effect_error"
    assert "'bad'" in r.events[0].message and "not JSON" in r.events[0].message
    json.dumps(s.to_dict(), allow_nan=False)


def test_a_non_string_key_is_refused() -> None:
    def hook(ctx: EffectContext) -> dict[Any, Any]:
        return {1: "one", "two": 2}

    a = Phase("a", transitions=[Transition("b", "state.go")])
    b = Phase("b", on_enter=[CallEffect("hook")])
    m = workflow([a, b], registry={"hook": hook}).machine()
    s = State({"go": True})
    r = m.advance_sync(s, turn=1)
    assert s["two"] == 2 and 1 not in s.to_dict()
    assert [e.kind for e in r.events] == ["effect_error"]
    assert "key of type int" in r.events[0].message


json_leaves = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=5),
                        st.floats(allow_nan=False, allow_infinity=False))
json_values = st.recursive(json_leaves, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.tuples(inner, inner),
    st.dictionaries(st.text(max_size=3), inner, max_size=3)), max_leaves=8)
bad_leaves = st.one_of(st.sampled_from([math.nan, math.inf, -math.inf, b"x", 1j]),
                       st.sets(st.integers(), max_size=2), st.builds(Obj))
maybe_bad = st.recursive(st.one_of(json_leaves, bad_leaves), lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.tuples(inner),
    st.dictionaries(st.one_of(st.text(max_size=3), st.integers()), inner, max_size=3)),
    max_leaves=8)


def _is_json(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    if isinstance(value, dict):
        return all(type(k) is str and _is_json(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return all(_is_json(v) for v in value)
    return True


@settings(max_examples=80, deadline=None)
@given(returned=st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), maybe_bad, max_size=4),
       mode=st.sampled_from(["sync", "async"]))
def test_the_state_stays_json_and_every_refused_key_is_reported(
    returned: dict[str, Any], mode: str
) -> None:
    async def ahook(ctx: EffectContext) -> dict[str, Any]:
        return returned

    def hook(ctx: EffectContext) -> dict[str, Any]:
        return returned

    a = Phase("a", transitions=[Transition("b", "state.go")])
    b = Phase("b", on_enter=[CallEffect("hook")])
    m = workflow([a, b], registry={"hook": ahook if mode == "async" else hook}).machine()
    s = State({"go": True})
    r = m.advance_sync(s, turn=1) if mode == "sync" else asyncio.run(m.advance(s, turn=1))
    json.dumps(s.to_dict(), allow_nan=False)
    refused = {k for k, v in returned.items() if not _is_json(v)}
    assert {k for k in returned if k in s} == set(returned) - refused
    assert len(r.events) == len(refused)
    for key in refused:
        assert any(f"'{key}'" in e.message for e in r.events)


@settings(max_examples=50, deadline=None)
@given(value=json_values)
def test_json_values_are_kept_with_tuples_as_lists(value: Any) -> None:
    def hook(ctx: EffectContext) -> dict[str, Any]:
        return {"v": value}

    a = Phase("a", transitions=[Transition("b", "state.go")])
    b = Phase("b", on_enter=[CallEffect("hook")])
    m = workflow([a, b], registry={"hook": hook}).machine()
    s = State({"go": True})
    assert m.advance_sync(s, turn=1).events == ()
    assert json.loads(json.dumps(s["v"])) == json.loads(json.dumps(value))


@pytest.mark.parametrize("bad", NOT_JSON[:12], ids=lambda v: type(v).__name__)
def test_a_set_effect_built_in_code_must_be_json(bad: Any) -> None:
    with pytest.raises(ConfigError, match=r"not JSON|must be a string"):
        SetEffect({"k": bad} if not isinstance(bad, dict) else bad)


def test_a_set_effect_normalises_tuples() -> None:
    assert SetEffect({"k": (1, (2,))}).values == {"k": [1, [2]]}


def test_a_yaml_set_of_nan_is_pf103() -> None:
    import phaseflow

    with pytest.raises(phaseflow.WorkflowError) as caught:
        phaseflow.load_workflow_text("""
phaseflow: 1
name: nan
initial: a
phases:
  a:
    goal: g
    on_enter:
      - set: {x: .nan}
    transitions: [{to: b}]
  b: {goal: h, terminal: true}
""")
    (d,) = caught.value.diagnostics
    assert d.code == "PF103" and "not JSON" in d.message and d.line == 9
