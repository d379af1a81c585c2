"""A tool's state writes are checked against the declared state types by the workflow's
own rule (the one PF305 applies to ``set``)."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from phaseflow.errors import ConfigError
from phaseflow.spec.reference_checks import TYPE_CHECKS
from phaseflow.tools.state_types import check_state_type, state_value

STATE_TYPES = ("string", "number", "integer", "boolean", "array", "object", "any")


@pytest.mark.parametrize(("value", "declared", "fits"), [
    ("C-1", "string", True),
    (3, "integer", True),
    (3, "number", True),
    (2.5, "number", True),
    (1.0, "integer", False),
    (True, "integer", False),
    (True, "number", False),
    (False, "boolean", True),
    ([1], "array", True),
    ((1, 2), "array", True),
    ({"a": 1}, "object", True),
    (MappingProxyType({"a": 1}), "object", True),
    ("3", "integer", False),
    ({"a": 1}, "array", False),
    (object(), "any", False),
    ({1, 2}, "array", False),
    (float("nan"), "number", False),
])
def test_values_against_declared_types(value: Any, declared: str, fits: bool) -> None:
    assert (check_state_type(value, declared) is None) is fits


def test_null_fits_every_type_it_makes_the_key_absent() -> None:
    for declared in STATE_TYPES:
        assert check_state_type(None, declared) is None


def test_messages_name_the_key_the_type_and_the_value() -> None:
    assert check_state_type(5, "string", key="customer_id") == (
        "state key 'customer_id' is declared string, got an integer (5)")
    assert check_state_type("x", "boolean") == "the value must be boolean, got a string ('x')"
    assert check_state_type([1], "object", key="order") == (
        "state key 'order' is declared object, got a list")
    message = check_state_type({"when": object()}, "object", key="order")
    assert message is not None and message.startswith("state key 'order' is not JSON: ")


def test_the_value_to_write_is_normalised_and_fresh() -> None:
    given_value = {"lines": ({"sku": "a"},)}
    checked = state_value(given_value, "object")
    assert checked.problem is None and checked.value == {"lines": [{"sku": "a"}]}
    assert checked.value is not given_value


def test_an_unknown_type_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="not a state type"):
        check_state_type(1, "int")


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=5),
              st.floats(allow_nan=False, allow_infinity=False)),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.text(max_size=3), inner, max_size=3)),
    max_leaves=8,
)


@given(json_values, st.sampled_from(STATE_TYPES))
def test_the_rule_is_the_workflows_rule(value: Any, declared: str) -> None:
    expected = value is None or TYPE_CHECKS[declared](value)
    assert (check_state_type(value, declared) is None) is expected
