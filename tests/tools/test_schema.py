"""A tool's JSON Schema, read from the signature and docstring, as the model is offered it."""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import functools
from typing import Annotated, Any, Literal, NewType, NotRequired, Optional, TypedDict, TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from phaseflow.errors import ConfigError
from phaseflow.tools.arguments import validate_arguments
from phaseflow.tools.function import ToolContext, tool
from phaseflow.tools.schema import parse_docstring, schema_for

try:  # optional: pydantic (and annotated_types, which it brings) may be absent
    import annotated_types
    import pydantic
except ImportError:  # pragma: no cover - the dev extra installs them
    annotated_types = pydantic = None

needs_pydantic = pytest.mark.skipif(pydantic is None, reason="pydantic is not installed")

if pydantic is not None:
    class Item(pydantic.BaseModel):
        sku: str

    class Order(pydantic.BaseModel):
        id: int
        items: list[Item] = pydantic.Field(default_factory=list)


def _params(fn: Any) -> dict[str, Any]:
    schema = schema_for(fn)
    Draft202012Validator.check_schema(schema)
    properties: dict[str, Any] = schema["properties"]
    return properties


def test_scalars_defaults_and_required() -> None:
    def f(name: str, count: int, ratio: float, flag: bool, anything: Any, untyped,  # type: ignore[no-untyped-def]
          limit: int = 5, label: str | None = None) -> None: ...

    schema = schema_for(f)
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    assert schema["required"] == ["name", "count", "ratio", "flag", "anything", "untyped"]
    assert schema["properties"] == {
        "name": {"type": "string"}, "count": {"type": "integer"},
        "ratio": {"type": "number"}, "flag": {"type": "boolean"},
        "anything": {}, "untyped": {},
        "limit": {"type": "integer", "default": 5},
        "label": {"type": ["string", "null"], "default": None},
    }


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


def test_containers_literals_and_enums() -> None:
    def f(tags: list[str], scores: dict[str, float], pair: tuple[int, str],
          many: tuple[int, ...], unique: set[str], mode: Literal["fast", "slow"],
          mixed: Literal[1, "one"], color: Color = Color.RED, raw: list = [],  # noqa: B006
          ) -> None: ...

    assert _params(f) == {
        "tags": {"type": "array", "items": {"type": "string"}},
        "scores": {"type": "object", "additionalProperties": {"type": "number"}},
        "pair": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}],
                 "minItems": 2, "maxItems": 2},
        "many": {"type": "array", "items": {"type": "integer"}},
        "unique": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
        "mode": {"type": "string", "enum": ["fast", "slow"]},
        "mixed": {"enum": [1, "one"]},
        "color": {"type": "string", "enum": ["red", "green"], "default": "red"},
        "raw": {"type": "array", "default": []},
    }


def test_unions_are_any_of_unless_every_branch_is_a_bare_type() -> None:
    def f(a: Optional[int], b: int | str, c: list[int] | None) -> None: ...  # noqa: UP045

    assert _params(f) == {
        "a": {"type": ["integer", "null"]},
        "b": {"type": ["integer", "string"]},
        "c": {"anyOf": [{"type": "array", "items": {"type": "integer"}}, {"type": "null"}]},
    }


@needs_pydantic
def test_annotated_descriptions_and_bounds() -> None:
    def f(email: Annotated[str, "the customer's email"],
          count: Annotated[int, annotated_types.Ge(1), annotated_types.Le(9), "how many"] = 1,
          ) -> None:
        """Look up.

        Args:
            email: overridden by Annotated.
            count: also overridden.
        """

    assert _params(f) == {
        "email": {"type": "string", "description": "the customer's email"},
        "count": {"type": "integer", "minimum": 1, "maximum": 9, "description": "how many",
                  "default": 1},
    }


class Address(TypedDict):
    """An address.

    Args:
        street: the street and number.
    """

    street: str
    zip: NotRequired[str]


@dataclasses.dataclass
class Line:
    sku: str
    qty: int = 1
    tags: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Node:
    name: str
    children: list[Node] = dataclasses.field(default_factory=list)


def test_typed_dicts_and_dataclasses_are_closed_objects() -> None:
    def f(address: Address, line: Line) -> None: ...

    assert _params(f) == {
        "address": {"type": "object", "properties": {
            "street": {"type": "string", "description": "the street and number."},
            "zip": {"type": "string"}},
            "required": ["street"], "additionalProperties": False},
        "line": {"type": "object", "properties": {
            "sku": {"type": "string"}, "qty": {"type": "integer", "default": 1},
            "tags": {"type": "array", "items": {"type": "string"}}},
            "required": ["sku"], "additionalProperties": False},
    }


def test_recursive_types_go_to_defs_and_validate() -> None:
    def f(tree: Node) -> None: ...

    schema = schema_for(f)
    Draft202012Validator.check_schema(schema)
    assert schema["properties"]["tree"] == {"$ref": "#/$defs/Node"}
    assert schema["$defs"]["Node"]["properties"]["children"] == {
        "type": "array", "items": {"$ref": "#/$defs/Node"}}
    assert validate_arguments(schema, {"tree": {"name": "r", "children": [{"name": "c"}]}}) is None
    assert validate_arguments(schema, {"tree": {"name": "r", "children": [{}]}}) == (
        "'tree.children[0]' is missing required property 'name'")


@needs_pydantic
def test_pydantic_models_use_their_own_schema_with_defs_at_the_top() -> None:
    def f(order: Order, ctx: ToolContext) -> None: ...

    schema = schema_for(f)
    Draft202012Validator.check_schema(schema)
    assert schema["required"] == ["order"]
    assert schema["properties"]["order"]["properties"]["items"]["items"] == {
        "$ref": "#/$defs/Item"}
    assert "Item" in schema["$defs"]
    assert validate_arguments(schema, {"order": {"id": 1, "items": [{"sku": "x"}]}}) is None
    assert validate_arguments(schema, {"order": {"id": 1, "items": [{}]}}) == (
        "'order.items[0]' is missing required property 'sku'")

    @tool
    def place(order: Order) -> Any:
        return order

    result = asyncio.run(place.invoke({"order": {"id": 1, "items": [{"sku": "x"}]}},
                                      ToolContext("s", "c", "p")))
    assert isinstance(result, Order) and result.items[0].sku == "x"


def test_the_context_parameter_is_not_in_the_schema() -> None:
    def f(email: str, ctx: ToolContext, *, limit: int = 3) -> None: ...

    schema = schema_for(f)
    assert list(schema["properties"]) == ["email", "limit"]
    assert schema["required"] == ["email"]


def test_kwargs_open_the_object() -> None:
    def f(a: int, **rest: str) -> None: ...

    schema = schema_for(f)
    assert schema["additionalProperties"] == {"type": "string"}
    assert validate_arguments(schema, {"a": 1, "b": "x"}) is None
    assert validate_arguments(schema, {"a": 1, "b": 2}) == "'b' must be a string, got integer"


UserId = NewType("UserId", str)
T = TypeVar("T")


class Custom:
    pass


@pytest.mark.parametrize(("annotation", "fragment"), [
    (Custom, "is annotated Custom"),
    (list[Custom], "is annotated Custom"),
    (dict[int, str], "JSON object keys are strings"),
    (T, "type variable"),
])
def test_unsupported_annotations_name_tool_parameter_and_the_way_out(
        annotation: Any, fragment: str) -> None:
    def f(x: int) -> None: ...

    f.__annotations__ = {"x": annotation}
    with pytest.raises(ConfigError) as raised:
        schema_for(f, name="crm.lookup")
    message = str(raised.value)
    assert "tool 'crm.lookup'" in message and "parameter 'x'" in message
    assert fragment in message and "tool(parameters=" in message


def test_newtype_and_a_field_of_an_unsupported_type() -> None:
    def f(user: UserId) -> None: ...

    assert _params(f) == {"user": {"type": "string"}}

    @dataclasses.dataclass
    class Holder:
        thing: Custom

    def g(h: Holder) -> None: ...

    with pytest.raises(ConfigError, match=r"parameter 'h' \(field 'thing' of Holder\)"):
        schema_for(g)


def test_unresolvable_annotations_and_star_args_are_config_errors() -> None:
    def f(x: Missing) -> None: ...  # type: ignore[name-defined]  # noqa: F821

    with pytest.raises(ConfigError, match="cannot resolve its annotations"):
        schema_for(f)

    def g(*args: int) -> None: ...

    with pytest.raises(ConfigError, match=r"\*args cannot be given by the model"):
        schema_for(g)


def test_partials_and_callable_objects() -> None:
    def f(a: int, b: str) -> None:
        """Do it."""

    assert list(schema_for(functools.partial(f, 1), name="p")["properties"]) == ["b"]

    class Lookup:
        """Look a customer up."""

        def __call__(self, email: str) -> None: ...

    made = tool(Lookup(), name="lookup")
    assert made.description == "Look a customer up."
    assert made.parameters["required"] == ["email"]
    with pytest.raises(ConfigError, match="pass tool"):
        tool(Lookup())


def test_google_docstrings() -> None:
    description, params = parse_docstring("""Find a customer
    by email.

    More detail that is not the description.

    Args:
        email (str): the email on their account,
            as they wrote it.
        limit: how many.

    Returns:
        the customer.
    """)
    assert description == "Find a customer by email."
    assert params == {"email": "the email on their account, as they wrote it.",
                      "limit": "how many."}


def test_rest_docstrings() -> None:
    description, params = parse_docstring("""Find a customer.

    :param email: the email,
        lowercased.
    :param int limit: how many.
    :returns: the customer.
    """)
    assert description == "Find a customer."
    assert params == {"email": "the email, lowercased.", "limit": "how many."}


def test_numpy_docstrings() -> None:
    description, params = parse_docstring("""Find a customer.

    Parameters
    ----------
    email : str
        The email.
    limit : int
        How many.

    Returns
    -------
    dict
    """)
    assert description == "Find a customer."
    assert params == {"email": "The email.", "limit": "How many."}


def test_a_docstring_that_starts_with_a_section_has_no_description() -> None:
    assert parse_docstring("""
        Args:
            x: the x.
        """) == ("", {"x": "the x."})
    assert parse_docstring(None) == ("", {})


# -- generated annotations: the schema accepts the values the annotation describes, and the
#    function gets them as the annotation says --------------------------------------------

Pair = tuple[Any, st.SearchStrategy[tuple[Any, Any]]]  # annotation, (JSON, Python) values

_text = st.text(max_size=4)
_ints = st.integers(-(10 ** 20), 10 ** 20)
_floats = st.floats(allow_nan=False, allow_infinity=False)
_LEAVES: list[Pair] = [
    (str, _text.map(lambda v: (v, v))),
    (int, _ints.map(lambda v: (v, v))),
    (float, st.one_of(_floats, st.integers(-100, 100)).map(lambda v: (v, float(v)))),
    (bool, st.booleans().map(lambda v: (v, v))),
    (Literal["a", 2, True], st.sampled_from(["a", 2, True]).map(lambda v: (v, v))),
    (Color, st.sampled_from(list(Color)).map(lambda m: (m.value, m))),
    (Line, st.builds(Line, _text, st.integers(0, 9)).map(
        lambda line: ({"sku": line.sku, "qty": line.qty}, line))),
]


def _extend(children: st.SearchStrategy[Pair]) -> st.SearchStrategy[Pair]:
    def as_list(pair: Pair) -> Pair:
        ann, values = pair
        return list[ann], st.lists(values, max_size=3).map(  # type: ignore[valid-type]
            lambda vs: ([j for j, _ in vs], [p for _, p in vs]))

    def as_dict(pair: Pair) -> Pair:
        ann, values = pair
        return dict[str, ann], st.dictionaries(_text, values, max_size=3).map(  # type: ignore[valid-type]
            lambda d: ({k: j for k, (j, _) in d.items()}, {k: p for k, (_, p) in d.items()}))

    def as_optional(pair: Pair) -> Pair:
        ann, values = pair
        return Optional[ann], st.one_of(st.just((None, None)), values)  # noqa: UP045

    def as_annotated(pair: Pair) -> Pair:
        ann, values = pair
        return Annotated[ann, "described"], values

    def as_tuple(pairs: list[Pair]) -> Pair:
        anns = tuple(a for a, _ in pairs)
        values = st.tuples(*(v for _, v in pairs)).map(
            lambda vs: ([j for j, _ in vs], tuple(p for _, p in vs)))
        return tuple[anns], values  # type: ignore[valid-type]

    def as_varied_tuple(pair: Pair) -> Pair:
        ann, values = pair
        return tuple[ann, ...], st.lists(values, max_size=3).map(  # type: ignore[valid-type]
            lambda vs: ([j for j, _ in vs], tuple(p for _, p in vs)))

    return st.one_of(
        children.map(as_list), children.map(as_dict), children.map(as_optional),
        children.map(as_annotated), children.map(as_varied_tuple),
        st.lists(children, min_size=1, max_size=3).map(as_tuple),
    )


annotations = st.recursive(st.sampled_from(_LEAVES), _extend, max_leaves=5)


@settings(max_examples=150, deadline=None)
@given(annotations, st.data())
def test_generated_annotations(pair: Pair, data: st.DataObject) -> None:
    annotation, values = pair

    def fn(x: Any) -> Any:
        return x

    fn.__annotations__ = {"x": annotation, "return": Any}
    made = tool(fn)
    schema = made.parameters
    Draft202012Validator.check_schema(schema)
    reference = Draft202012Validator(schema)
    for _ in range(3):
        as_json, as_python = data.draw(values)
        arguments = {"x": as_json}
        assert made.validate(arguments) is None, (schema, arguments)
        assert reference.is_valid(arguments)
        got = asyncio.run(made.invoke(arguments, ToolContext("s", "c", "p")))
        assert got == as_python and type(got) is type(as_python)
    assert made.validate({}) == "missing required argument 'x'"
    assert made.validate({"x": object.__new__(Custom)}) is not None
