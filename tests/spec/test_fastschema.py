"""The fast schema check agrees with jsonschema on every instance (it only decides
whether jsonschema has to run; a disagreement would hide or invent errors)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phaseflow.spec.fastschema import compile_schema
from phaseflow.spec.schema import _flat, _validator, schema_valid
from phaseflow.spec.yamlnodes import compose, to_python
from tests.support.bundled import bundled_workflows

ROOT = Path(__file__).resolve().parents[2]
SEEDS = [
    to_python(compose(p.read_text()).root)
    for p in bundled_workflows()
]

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 600) | st.floats()
    | st.sampled_from([0, 0.0, -0.0, 1e-9, "", "x", "greet", "Bad Name", "auto", "model",
                       "always", "1", "a.b", "object", "objekt"]),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.sampled_from(["to", "when", "goal", "set", "call", "with", "unset",
                                       "name", "x", "tools", "type", "default", "timeout",
                                       "idempotent", "parameters", "collect",
                                       "properties"]), inner,
                      max_size=4),
    max_leaves=12,
)


def _expected(instance: Any) -> bool:
    return not any(True for _ in _validator().iter_errors(instance))


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _paths(item, (*prefix, index))
    return found


@st.composite
def mutated(draw: st.DrawFn) -> Any:
    data = copy.deepcopy(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(data)
        path = draw(st.sampled_from(paths))
        if not path:
            continue
        parent = data
        for part in path[:-1]:
            parent = parent[part]
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "replace":
            parent[path[-1]] = draw(JSON)
        elif action == "delete" and isinstance(parent, dict):
            del parent[path[-1]]
        elif isinstance(parent, dict):
            key = draw(st.sampled_from(["zz", "goal", "when", "trigger", "with", "timeout",
                                        "idempotent", "parameters", "collect", "type"]))
            parent[key] = draw(JSON)
    return data


def test_the_real_schema_compiles() -> None:
    assert compile_schema(_flat()) is not None


def test_bundled_workflows_are_valid_in_both() -> None:
    for seed in SEEDS:
        assert schema_valid(seed) is True and _expected(seed)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutated_workflows_get_the_same_verdict(instance: Any) -> None:
    verdict = schema_valid(instance)
    assert verdict is None or verdict == _expected(instance), json.dumps(instance)[:500]


@settings(max_examples=300, deadline=None)
@given(JSON)
def test_arbitrary_json_gets_the_same_verdict(instance: Any) -> None:
    verdict = schema_valid(instance)
    assert verdict is None or verdict == _expected(instance)


def test_an_unknown_keyword_disables_the_fast_path() -> None:
    assert compile_schema({"type": "object", "patternProperties": {}}) is None
    assert compile_schema({"type": "object", "properties": {"a": {"format": "email"}}}) is None


def test_bounds_agree_with_jsonschema_on_nan_and_the_edges() -> None:
    from jsonschema import Draft202012Validator

    for bounds in ({"minimum": 0}, {"maximum": 0}, {"exclusiveMinimum": 0}):
        check = compile_schema({"type": "number", **bounds})
        assert check is not None
        for value in (float("nan"), float("inf"), float("-inf"), 0, 0.0, -0.0, 1e-300, -1):
            expected = Draft202012Validator({"type": "number", **bounds}).is_valid(value)
            assert check(value) is expected, (bounds, value)


def test_json_equality_rules() -> None:
    check = compile_schema({"enum": [1, "a", [1, {"b": True}]]})
    assert check is not None
    assert check(1.0) is True and check(True) is False
    assert check([1, {"b": True}]) is True and check([1, {"b": 1}]) is False
    unique = compile_schema({"uniqueItems": True})
    assert unique is not None
    assert unique([1, True]) is True and unique([1, 1.0]) is False
