"""Argument validation: the message the model reads, and agreement with jsonschema."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from phaseflow.errors import ConfigError
from phaseflow.spec.jsonschema_check import compile_check, compile_checker
from phaseflow.tools import arguments
from phaseflow.tools.arguments import compile_validator, json_type, validate_arguments

CUSTOMER = {
    "type": "object",
    "properties": {
        "email": {"type": "string", "minLength": 3, "pattern": "@"},
        "count": {"type": "integer", "minimum": 1, "maximum": 10},
        "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        "mode": {"type": "string", "enum": ["fast", "slow"]},
        "lines": {"type": "array", "items": {
            "type": "object", "properties": {"sku": {"type": "string"}},
            "required": ["sku"], "additionalProperties": False}},
    },
    "required": ["email"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(("value", "message"), [
    ({"email": "a@b"}, None),
    ({"email": "a@b", "count": 3.0, "note": None, "lines": [{"sku": "x"}]}, None),
    ({}, "missing required argument 'email'"),
    ({"email": 5}, "'email' must be a string, got integer"),
    ({"email": "a@b", "count": "3"}, "'count' must be an integer, got string"),
    ({"email": "a@b", "count": True}, "'count' must be an integer, got boolean"),
    ({"email": "a@b", "count": 0}, "'count' must be >= 1, got 0"),
    ({"email": "a@b", "count": 11}, "'count' must be <= 10, got 11"),
    ({"email": "ab"}, "'email' must be at least 3 characters long, got 2"),
    ({"email": "abc"}, "'email' must match the pattern \"@\", got \"abc\""),
    ({"email": "a@b", "note": 1}, "'note' must be a string or null, got integer"),
    ({"email": "a@b", "mode": "medium"},
     "'mode' must be one of \"fast\", \"slow\", got \"medium\""),
    ({"email": "a@b", "lines": [{"sku": "x"}, {}]},
     "'lines[1]' is missing required property 'sku'"),
    ({"email": "a@b", "lines": [{"sku": "x", "qty": 1}]},
     "'lines[0]' has unexpected property 'qty'"),
    ({"emial": "a@b"}, "missing required argument 'email'"),
    ({"email": "a@b", "colour": "red"},
     "unexpected argument 'colour' (expected: email, count, note, mode, lines)"),
    (["a@b"], "the arguments must be an object, got array"),
])
def test_messages_name_the_argument_and_the_problem(value: Any, message: str | None) -> None:
    assert validate_arguments(CUSTOMER, value) == message
    assert Draft202012Validator(CUSTOMER).is_valid(value) is (message is None)


def test_several_missing_arguments_are_named_together() -> None:
    schema = {"type": "object", "properties": {}, "required": ["a", "b"]}
    assert validate_arguments(schema, {}) == "missing required arguments 'a', 'b'"


def test_messages_are_plain_strings() -> None:
    message = validate_arguments({"type": "string"}, 1)
    assert type(message) is str


def test_refs_to_defs_are_followed_also_recursively() -> None:
    schema = {
        "type": "object",
        "properties": {"tree": {"$ref": "#/$defs/Node"}},
        "$defs": {"Node": {"type": "object", "properties": {
            "name": {"type": "string"},
            "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}},
            "required": ["name"]}},
    }
    assert arguments._compile_own(schema) is not None
    assert validate_arguments(schema, {"tree": {"name": "r", "children": [{"name": "c"}]}}) is None
    assert validate_arguments(schema, {"tree": {"name": "r", "children": [{"nam": "c"}]}}) == (
        "'tree.children[0]' is missing required property 'name'")


def test_schemas_outside_the_subset_go_to_jsonschema() -> None:
    schema = {"type": "object", "properties": {"n": {"not": {"type": "string"}}}}
    assert arguments._compile_own(schema) is None
    assert validate_arguments(schema, {"n": 1}) is None
    message = validate_arguments(schema, {"n": "x"})
    assert message is not None and message.startswith("'n': ")


EFFECT = {
    "type": "object",
    "properties": {"set": {"type": "object"}, "call": {"type": "string"}, "with": {}},
    "allOf": [{"properties": {"note": {"type": "string"}}}],
    "dependentRequired": {"with": ["call"]},
    "propertyNames": {"pattern": "^[a-z]+$"},
    "unevaluatedProperties": False,
}


@pytest.mark.parametrize(("value", "message"), [
    ({"set": {}, "note": "n"}, None),
    ({"call": "f", "with": 1}, None),
    ({"note": 1}, "'note' must be a string, got integer"),
    ({"with": 1}, "missing argument 'call' (required when 'with' is given)"),
    ({"Set": {}}, "the argument name \"Set\" is not allowed"),
    ({"zz": 1}, "unexpected argument 'zz'"),
    ({"o": {"a": 1}}, "unexpected argument 'o'"),
])
def test_the_keywords_the_fast_check_had_alone_explain_a_no(
    value: Any, message: str | None,
) -> None:
    """allOf, dependentRequired, propertyNames, unevaluatedProperties: ours now, not
    jsonschema's, with a sentence like every other."""
    assert arguments._compile_own(EFFECT) is not None
    assert validate_arguments(EFFECT, value) == message
    assert Draft202012Validator(EFFECT).is_valid(value) is (message is None)


def test_nested_keywords_the_fast_check_had_alone_name_the_place() -> None:
    schema = {"type": "object", "properties": {"o": EFFECT}}
    assert validate_arguments(schema, {"o": {"with": 1}}) == (
        "'o' is missing property 'call' (required when 'with' is given)")
    assert validate_arguments(schema, {"o": {"Set": 1}}) == (
        "'o' has a property name that is not allowed: \"Set\"")
    assert validate_arguments(schema, {"o": {"zz": 1, "yy": 2}}) == (
        "'o' has unexpected properties 'zz', 'yy'")


def test_an_invalid_schema_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="not a valid JSON Schema"):
        compile_validator({"type": "strnig"})
    with pytest.raises(ConfigError):
        compile_validator({"properties": {"a": {"minimum": "one"}}})


def test_hostile_values_give_a_message_never_an_exception() -> None:
    deep: Any = "x"
    for _ in range(100_000):
        deep = [deep]
    recursive = {"$defs": {"l": {"type": "array", "items": {"$ref": "#/$defs/l"}}},
                 "$ref": "#/$defs/l"}
    assert validate_arguments(recursive, deep) is not None  # "x" is no array, or too deep
    assert validate_arguments({"type": "object"}, deep) == (
        "the arguments must be an object, got array")
    huge = 10 ** 5000
    assert validate_arguments({"type": "integer", "maximum": 1}, huge) == (
        "the arguments must be <= 1, got a very large integer")
    assert validate_arguments({"type": "string", "maxLength": 2}, "y" * 1_000_000) == (
        "the arguments must be at most 2 characters long, got 1000000")
    # jsonschema quotes values in its messages (repr): a value too deep to quote is refused
    fallback = {"not": {"type": "integer"}}
    assert validate_arguments(fallback, deep) == "the arguments are nested too deeply"
    assert validate_arguments(fallback, [[1]]) is None
    assert validate_arguments({"allOf": [recursive]}, deep) is not None


def test_json_type_names() -> None:
    assert [json_type(v) for v in (None, True, 1, 1.5, "s", [], {})] == [
        "null", "boolean", "integer", "number", "string", "array", "object"]


# -- agreement with jsonschema on the subset ------------------------------------------------

KEYS = ("a", "b", "c")
TYPES = ("array", "boolean", "integer", "null", "number", "object", "string")
scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 3),
                    st.sampled_from([0.0, 1.0, 2.5, -1.5, 1e300]),
                    st.sampled_from(["", "a", "ab@", "xyz"]))
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.sampled_from((*KEYS, "d")), inner, max_size=4)),
    max_leaves=10,
)
numbers = st.one_of(st.integers(-3, 3), st.sampled_from([0.5, -1.5, 2.0]))
counts = st.integers(0, 3)


@st.composite
def keywords(draw: st.DrawFn, children: st.SearchStrategy[Any] | None) -> dict[str, Any]:
    """A schema mixing a few subset keywords (each applies only to its own type)."""
    schema: dict[str, Any] = {}
    if draw(st.booleans()):
        schema["type"] = draw(st.one_of(
            st.sampled_from(TYPES),
            st.lists(st.sampled_from(TYPES), min_size=1, max_size=3, unique=True)))
    for name, strategy in (("minimum", numbers), ("maximum", numbers),
                           ("exclusiveMinimum", numbers), ("exclusiveMaximum", numbers),
                           ("minLength", counts), ("maxLength", counts),
                           ("minItems", counts), ("maxItems", counts),
                           ("minProperties", counts), ("maxProperties", counts),
                           ("pattern", st.sampled_from(["@", "^a", "b$", "^$"])),
                           ("enum", st.lists(scalars, max_size=4)), ("const", json_values),
                           ("description", st.just("annotation")), ("default", json_values)):
        if draw(st.integers(0, 9)) == 0:
            schema[name] = draw(strategy)
    if draw(st.integers(0, 9)) == 0:
        schema["uniqueItems"] = True
        schema["items"] = {"type": draw(st.sampled_from(["string", "integer", "number"]))}
    if children is not None:
        if draw(st.integers(0, 2)) == 0:
            schema["items"] = draw(children)
        if draw(st.integers(0, 4)) == 0:
            schema["prefixItems"] = draw(st.lists(children, min_size=1, max_size=2))
        if draw(st.integers(0, 2)) == 0:
            schema["properties"] = draw(st.dictionaries(st.sampled_from(KEYS), children,
                                                        max_size=3))
        if draw(st.integers(0, 3)) == 0:
            schema["required"] = draw(st.lists(st.sampled_from(KEYS), max_size=2, unique=True))
        if draw(st.integers(0, 3)) == 0:
            schema["additionalProperties"] = draw(st.one_of(st.booleans(), children))
        for name in ("anyOf", "oneOf", "allOf"):
            if draw(st.integers(0, 5)) == 0:
                schema[name] = draw(st.lists(children, min_size=1, max_size=3))
        if draw(st.integers(0, 5)) == 0:
            schema["propertyNames"] = draw(children)
        if draw(st.integers(0, 4)) == 0:
            schema["unevaluatedProperties"] = False
    if draw(st.integers(0, 6)) == 0:
        schema["dependentRequired"] = draw(st.dictionaries(
            st.sampled_from(KEYS), st.lists(st.sampled_from(KEYS), max_size=2, unique=True),
            max_size=2))
    if draw(st.integers(0, 9)) == 0:
        schema["propertyNames"] = {"pattern": draw(st.sampled_from(["^a", "b$", "^[ab]+$"]))}
    return schema


subset_schemas = st.recursive(
    st.one_of(st.booleans(), keywords(None)),
    lambda children: keywords(children),
    max_leaves=6,
)
REF = {"$ref": "#/$defs/A"}
#: Schemas naming ``#/$defs/A`` anywhere (A too, under items or properties, so a
#: recursive type: checking descends into the value and ends with it).
_with_refs = st.recursive(
    st.one_of(st.booleans(), keywords(None), st.just(REF)),
    lambda children: keywords(children),
    max_leaves=6,
)
ref_schemas = st.builds(
    lambda below, root: {"$defs": {"A": {"items": below, "properties": {"a": below}}},
                         "allOf": [root]},
    _with_refs, _with_refs,
)


@settings(max_examples=200, deadline=None)
@given(st.one_of(subset_schemas, ref_schemas), st.lists(json_values, min_size=1, max_size=5))
def test_agrees_with_jsonschema_on_the_subset(schema: Any, values: list[Any]) -> None:
    Draft202012Validator.check_schema(schema)
    assert arguments._compile_own(schema) is not None  # the subset is ours, not the fallback's
    check = compile_validator(schema)
    reference = Draft202012Validator(schema)
    for value in values:
        message = check(value)
        assert (message is None) == reference.is_valid(value), (schema, value, message)
        assert message is None or (isinstance(message, str) and 0 < len(message) < 400)


odd_values = st.recursive(
    st.one_of(scalars, st.floats(), st.integers(), st.text(max_size=3), st.binary(max_size=2),
              st.integers(13_300, 13_400).map(lambda bits: 1 << bits), st.just(object())),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.tuples(inner),
                            st.frozensets(st.integers(), max_size=2),
                            st.dictionaries(st.sampled_from(KEYS), inner, max_size=3)),
    max_leaves=8,
)


@settings(max_examples=80, deadline=None)
@given(st.one_of(subset_schemas, subset_schemas.map(lambda s: {"not": s}), ref_schemas),
       odd_values)
@example(schema={"uniqueItems": True, "items": False}, value=[([],)])  # found by hypothesis
def test_never_raises_whatever_the_value(schema: Any, value: Any) -> None:
    message = compile_validator(schema)(value)
    assert message is None or (type(message) is str and len(message) < 400)


@settings(max_examples=200, deadline=None)
@given(st.one_of(subset_schemas, ref_schemas), st.lists(json_values, min_size=1, max_size=5))
def test_the_fast_yes_no_check_agrees_with_jsonschema(schema: Any, values: list[Any]) -> None:
    """The shared compiler's yes/no answers the valid calls alone: a wrong yes would let a
    bad call through."""
    fast = compile_check(schema, annotations=arguments._ANNOTATIONS)
    assert fast is not None
    reference = Draft202012Validator(schema)
    for value in values:
        assert fast(value) is reference.is_valid(value), (schema, value)


@settings(max_examples=200, deadline=None)
@given(st.one_of(subset_schemas, ref_schemas), st.lists(json_values, min_size=1, max_size=5))
def test_the_explanation_finds_a_failure_exactly_for_a_no(
    schema: Any, values: list[Any],
) -> None:
    """The explanation of a no, compiled from the same keywords as the yes/no, finds a
    failure exactly when the yes/no says no (the door never has to guess)."""
    checker = compile_checker(schema, ignored=arguments._ANNOTATIONS)
    assert checker is not None
    for value in values:
        assert (checker.why_not(value, ()) is None) is checker.holds(value), (schema, value)
