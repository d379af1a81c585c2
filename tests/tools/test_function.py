"""Tools as the session uses them: made by ``@tool``, called with a context, their return
value split into the model's output and the state writes, and rendered as JSON text."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import enum
import json
import math
import threading
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from phaseflow.errors import ConfigError, PhaseflowError
from phaseflow.machine import State
from phaseflow.providers.protocol import ToolSpec
from phaseflow.spec.model import Tool
from phaseflow.tools.function import (
    FunctionTool,
    ToolContext,
    ToolOutputError,
    ToolResult,
    output_text,
    split_return,
    tool,
)

CTX = ToolContext("conv-42", "call-1", "greet", {"customer": {"tags": ["vip"]}})


def run(coro: Any) -> Any:
    return asyncio.run(coro)


# -- making tools ------------------------------------------------------------------------------

def test_tool_as_plain_decorator() -> None:
    @tool
    def lookup_customer(email: str) -> dict[str, Any]:
        """Find a customer by the email on their account.

        The second paragraph is not the description.
        """
        return {"customer_id": "C-1"}

    assert isinstance(lookup_customer, FunctionTool)
    assert lookup_customer.name == "lookup_customer"
    assert lookup_customer.description == "Find a customer by the email on their account."
    assert lookup_customer.parameters["required"] == ["email"]
    assert lookup_customer.timeout is None and lookup_customer.is_async is False
    assert lookup_customer.context_parameter is None
    assert lookup_customer("a@b") == {"customer_id": "C-1"}  # still the host's function
    assert lookup_customer.spec() == ToolSpec(
        "lookup_customer", lookup_customer.description, lookup_customer.parameters)


def test_tool_with_options_and_catalogue_names() -> None:
    @tool(name="crm.lookup-customer", description="Look up.", timeout=2)
    async def lookup(email: str, ctx: ToolContext) -> str:
        return ctx.idempotency_key

    assert lookup.name == "crm.lookup-customer" and lookup.description == "Look up."
    assert lookup.timeout == 2.0 and lookup.is_async is True
    assert lookup.context_parameter == "ctx"
    assert lookup.with_name("crm.find").name == "crm.find"
    assert lookup.name == "crm.lookup-customer"  # copies, never changes


@pytest.mark.parametrize("name", ["", "9lives", "has space", ".dot", "a" * 129, "ümlaut"])
def test_bad_names_are_config_errors(name: str) -> None:
    with pytest.raises(ConfigError, match="tool name"):
        tool(lambda: None, name=name)


@pytest.mark.parametrize("timeout", [0, -1, math.inf, math.nan, True, "5"])
def test_bad_timeouts_are_config_errors(timeout: Any) -> None:
    with pytest.raises(ConfigError, match="timeout"):
        tool(timeout=timeout)


def test_explicit_parameters_are_checked_and_kept_plain() -> None:
    schema = {"type": "object", "properties": {"when": {"type": "string"}},
              "required": ["when"]}

    @tool(parameters=schema)
    def book(when: datetime.date) -> None:  # no JSON form: fine, the schema is given
        return None

    assert book.parameters == schema and book.parameters is not schema
    assert book.validate({}) == "missing required argument 'when'"
    frozen = Tool("book", parameters=schema).parameters  # how a compiled workflow holds it
    assert isinstance(frozen, MappingProxyType)
    again = book.with_parameters(frozen)
    assert type(again.parameters) is dict and again.parameters == schema
    with pytest.raises(ConfigError, match="object schema"):
        tool(parameters={"type": "string"})(book.fn)
    with pytest.raises(ConfigError, match="not a valid JSON Schema"):
        tool(parameters={"type": "object", "properties": {"a": {"type": "strnig"}}})(book.fn)
    with pytest.raises(ConfigError, match="JSON Schema mapping"):
        tool(parameters=[1])(book.fn)  # type: ignore[arg-type]


def test_two_context_parameters_are_a_config_error() -> None:
    def f(a: ToolContext, b: ToolContext) -> None: ...

    with pytest.raises(ConfigError, match="more than one ToolContext"):
        tool(f)


# -- calling them -------------------------------------------------------------------------------

def test_sync_tools_run_in_the_event_loops_thread() -> None:
    threads: list[int] = []

    @tool
    def where(n: int) -> int:
        threads.append(threading.get_ident())
        return n + 1

    async def main() -> Any:
        loop_thread = threading.get_ident()
        return await where.invoke({"n": 1}, CTX), loop_thread

    result, loop_thread = run(main())
    assert result == 2 and threads == [loop_thread]


def test_async_tools_and_returned_awaitables_are_awaited() -> None:
    @tool
    async def slow(n: int) -> int:
        await asyncio.sleep(0)
        return n * 2

    async def later(n: int) -> int:
        return n * 3

    def lazy(n: int) -> Any:
        return later(n)

    assert run(slow.invoke({"n": 2}, CTX)) == 4
    assert run(tool(lazy).invoke({"n": 2}, CTX)) == 6


def test_the_context_reaches_the_tool_and_the_model_cannot_forge_it() -> None:
    seen: list[ToolContext] = []

    @tool
    def whoami(ctx: ToolContext, label: str = "") -> str:
        seen.append(ctx)
        return ctx.idempotency_key

    assert "ctx" not in whoami.parameters["properties"]
    assert run(whoami.invoke({"ctx": "forged"}, CTX)) == "conv-42:call-1"
    assert seen[0] is CTX and seen[0].phase == "greet" and seen[0].session_id == "conv-42"


def test_the_contexts_state_is_deeply_read_only() -> None:
    state = State({"customer": {"tags": ["vip"]}})
    ctx = ToolContext("s", "c", "p", state)
    with pytest.raises(TypeError):
        ctx.state["x"] = 1  # type: ignore[index]
    with pytest.raises((TypeError, AttributeError)):
        ctx.state["customer"]["tags"].append("x")
    with pytest.raises((TypeError, AttributeError)):
        ctx.state["customer"]["name"] = "x"
    assert ctx.state == {"customer": {"tags": ["vip"]}}
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.phase = "other"  # type: ignore[misc]


class Size(enum.Enum):
    S = "s"
    M = "m"


def test_arguments_are_converted_to_what_the_function_is_annotated_with() -> None:
    @dataclasses.dataclass
    class Line:
        sku: str
        qty: int = 1

    got: dict[str, Any] = {}

    @tool
    def order(lines: list[Line], size: Size, tags: set[str], at: tuple[float, float],
              ratio: float, count: int, /, note: str | None = None) -> None:
        got.update(lines=lines, size=size, tags=tags, at=at, ratio=ratio, count=count, note=note)

    run(order.invoke({"lines": [{"sku": "a"}], "size": "m", "tags": ["x", "y"], "at": [1, 2.5],
                      "ratio": 3, "count": 4.0}, CTX))
    assert got == {"lines": [Line("a", 1)], "size": Size.M, "tags": {"x", "y"},
                   "at": (1.0, 2.5), "ratio": 3.0, "count": 4, "note": None}
    assert type(got["ratio"]) is float and type(got["count"]) is int


def test_kwargs_receive_the_other_arguments() -> None:
    @tool
    def search(query: str, **filters: int) -> dict[str, Any]:
        return {"query": query, **filters}

    assert run(search.invoke({"query": "q", "year": 2024}, CTX)) == {"query": "q", "year": 2024}


def test_exceptions_propagate_for_the_runner() -> None:
    @tool
    def broken() -> None:
        raise LookupError("order service unavailable")

    with pytest.raises(LookupError, match="unavailable"):
        run(broken.invoke({}, CTX))


# -- what they return ---------------------------------------------------------------------------

def test_split_return_of_a_mapping_writes_declared_keys_and_shows_everything() -> None:
    value = {"customer_id": "C-1", "customer": {"name": "Ada"}, "note": "found"}
    output, writes = split_return(value, ("customer_id", "customer", "missing"))
    assert output is value
    assert writes == {"customer_id": "C-1", "customer": {"name": "Ada"}}
    assert list(writes) == ["customer_id", "customer"]
    assert split_return(value, ()) == (value, {})


def test_split_return_of_a_tool_result_keeps_output_and_writes_apart() -> None:
    result = ToolResult(output="verified", writes={"customer_id": "C-1", "secret": 1})
    assert split_return(result, ("customer_id",)) == ("verified", {"customer_id": "C-1",
                                                                     "secret": 1})
    assert split_return(ToolResult(), ("a",)) == (None, {})
    with pytest.raises(ConfigError, match="mapping of state keys"):
        ToolResult(writes=[("a", 1)])  # type: ignore[arg-type]


def test_split_return_of_other_values_writes_nothing() -> None:
    for value in ("text", 3, None, [{"customer_id": 1}]):
        assert split_return(value, ("customer_id",)) == (value, {})


@given(st.dictionaries(st.sampled_from("abcdef"), st.integers(), max_size=6),
       st.lists(st.sampled_from("abcxyz"), max_size=4))
def test_split_return_writes_exactly_the_declared_keys_present(
        value: dict[str, int], declared: list[str]) -> None:
    output, writes = split_return(value, tuple(declared))
    assert output is value
    assert writes == {k: v for k, v in value.items() if k in declared}


def test_output_text() -> None:
    class Label(str):
        def __str__(self) -> str:
            return "hijacked"

    assert output_text("plain text") == "plain text"
    assert type(output_text(Label("mine"))) is str and output_text(Label("mine")) == "mine"
    assert output_text(None) == "null"
    assert output_text({"b": 1, "a": [True, None, 1.5], "ü": "é"}) == (
        '{"b": 1, "a": [true, null, 1.5], "ü": "é"}')
    assert output_text(ToolResult(output={"ok": True}, writes={"x": 1})) == '{"ok": true}'
    assert output_text(ToolResult(output="done")) == "done"
    assert output_text((1, 2)) == "[1, 2]"
    assert output_text(MappingProxyType({"a": (1,)})) == '{"a": [1]}'
    assert output_text(State({"a": 1}).view()) == '{"a": 1}'
    assert output_text(Size.M) == '"m"'
    assert output_text({1: "one"}) == '{"1": "one"}'


def test_output_text_of_dataclasses_and_pydantic_models() -> None:
    @dataclasses.dataclass
    class Customer:
        name: str
        tags: tuple[str, ...] = ()

    assert output_text([Customer("Ada", ("vip",))]) == '[{"name": "Ada", "tags": ["vip"]}]'
    pydantic = pytest.importorskip("pydantic")

    class Order(pydantic.BaseModel):
        id: int
        placed: datetime.date

    assert output_text(Order(id=1, placed=datetime.date(2026, 1, 2))) == (
        '{"id": 1, "placed": "2026-01-02"}')


class Raising(Mapping[str, Any]):
    def __getitem__(self, key: str) -> Any:
        raise RuntimeError("boom")

    def __iter__(self) -> Iterator[str]:
        raise RuntimeError("boom")

    def __len__(self) -> int:
        return 1


def _cycle() -> list[Any]:
    items: list[Any] = []
    items.append(items)
    return items


def _deep() -> list[Any]:
    value: list[Any] = []
    for _ in range(100_000):
        value = [value]
    return value


@pytest.mark.parametrize(("value", "fragment"), [
    ({"a": {1, 2}}, "JSON has no sets"),
    (b"bytes", "a value of type bytes"),
    ({"when": datetime.date(2026, 1, 1)}, "isoformat()"),
    (math.nan, "NaN or an infinity"),
    ([math.inf], "NaN or an infinity"),
    ([10 ** 5000], "integer too long"),
    (_cycle(), "cycle"),
    (_deep(), "nested too deeply"),
    ({(1, 2): "tuple key"}, "keys must be"),
    (Raising(), "RuntimeError: boom"),
    (object(), "a value of type object"),
])
def test_values_without_json_text_are_tool_output_errors(value: Any, fragment: str) -> None:
    with pytest.raises(ToolOutputError) as raised:
        output_text(value, tool="crm.lookup")
    assert isinstance(raised.value, PhaseflowError)
    message = str(raised.value)
    assert message.startswith("tool 'crm.lookup' returned a value that has no JSON text")
    assert fragment in message and len(message) < 600


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.text(),
              st.floats(allow_nan=False, allow_infinity=False)),
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.text(max_size=5), inner, max_size=4)),
    max_leaves=15,
)


@given(json_values)
def test_output_text_is_json_that_reads_back_as_the_value(value: Any) -> None:
    text = output_text(value)
    if isinstance(value, str):
        assert text == value
    else:
        assert json.loads(text) == value
        assert "\n" not in text
        assert output_text(value) == text  # deterministic
