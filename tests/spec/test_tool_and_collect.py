"""The tool keys ``parameters``, ``timeout``, ``idempotent`` and the phase key ``collect``:
what a valid file compiles into, and where each mistake is reported."""

from __future__ import annotations

import json
import subprocess
import sys
from types import MappingProxyType
from typing import Any

import pytest

from phaseflow.errors import ConfigError
from phaseflow.spec.loader import check_text
from phaseflow.spec.model import Tool

HEAD = """\
phaseflow: 1
name: t
initial: start
"""
PHASES = """\
phases:
  start:
    goal: Begin.
    terminal: true
"""


def _tool(body: str) -> str:
    """A workflow whose one tool ``find_order`` is written as ``body`` (block, line 5 on)."""
    return HEAD + "tools:\n  find_order:\n" + body + PHASES


def _found(text: str) -> list[tuple[str, int, int, str]]:
    return [(d.code, d.line, d.column, d.message) for d in check_text(text).diagnostics]


# -- parameters ----------------------------------------------------------------------

VALID_PARAMETERS = """\
    parameters:
      type: object
      properties:
        order_id: {type: string, description: The order's number}
        items: {type: array, items: {type: integer}}
      required: [order_id]
      additionalProperties: false
"""


def test_parameters_compile_into_an_immutable_schema_with_a_plain_copy() -> None:
    result = check_text(_tool(VALID_PARAMETERS))
    assert result.diagnostics == ()
    assert result.workflow is not None and result.workflow.tools is not None
    tool = result.workflow.tools["find_order"]
    expected = {
        "type": "object",
        "properties": {
            "order_id": {"type": "string", "description": "The order's number"},
            "items": {"type": "array", "items": {"type": "integer"}},
        },
        "required": ["order_id"],
        "additionalProperties": False,
    }
    assert isinstance(tool.parameters, MappingProxyType)
    assert tool.parameters["required"] == ("order_id",)
    with pytest.raises(TypeError):
        tool.parameters["properties"]["order_id"]["type"] = "integer"  # type: ignore[index]
    plain = tool.parameters_json()
    assert plain == expected and type(plain) is dict
    assert json.loads(json.dumps(plain)) == expected
    plain["properties"]["order_id"]["type"] = "integer"  # a fresh copy: the tool is unchanged
    assert tool.parameters_json() == expected
    assert tool.timeout is None and tool.idempotent is False


@pytest.mark.parametrize(
    ("body", "code", "line", "column", "words"),
    [
        # a misspelt type at the top: the workflow schema says it must be 'object'
        ("    parameters: {type: objekt}\n", "PF103", 6, 24, ["parameters, type", "'object'",
                                                            "'objekt'"]),
        # a top-level type that is not an object: a tool takes keyword arguments
        ("    parameters: {type: string}\n", "PF103", 6, 24, ["must be 'object'", "'string'"]),
        ("    parameters: {properties: {}}\n", "PF101", 6, 5,
         ["missing required key 'type'", "tool 'find_order', parameters"]),
        ("    parameters: 5\n", "PF103", 6, 17, ["'parameters' must be a mapping", "integer"]),
        # the meta-schema check, at the exact node inside the schema
        ("    parameters:\n      type: object\n      properties: 5\n", "PF103", 8, 19,
         ["tool 'find_order'", "at 'properties'", "not a valid JSON Schema", "5"]),
        ("    parameters:\n      type: object\n      required: order_id\n", "PF103", 8, 17,
         ["at 'required'", "array"]),
        ("    parameters:\n      type: object\n      properties:\n        n: {type: objekt}\n",
         "PF103", 9, 19, ["at 'properties.n.type'", "did you mean 'object'?"]),
        ("    parameters:\n      type: object\n      properties:\n        n: {pattern: '['}\n",
         "PF103", 9, 22, ["at 'properties.n.pattern'", "regex"]),
        ("    parameters:\n      type: object\n      properties:\n        - x\n", "PF103", 9, 9,
         ["at 'properties'"]),
    ],
)
def test_a_bad_parameters_schema_is_reported_at_the_node(
    body: str, code: str, line: int, column: int, words: list[str]
) -> None:
    found = _found(_tool(body))
    assert [(c, ln, col) for c, ln, col, _ in found] == [(code, line, column)], found
    for word in words:
        assert word in found[0][3], found[0][3]
    assert check_text(_tool(body)).workflow is None


def test_a_huge_parameters_schema_is_refused_quickly() -> None:
    props = ", ".join(f"p{i}: {{type: string}}" for i in range(6000))
    found = _found(_tool(f"    parameters: {{type: object, properties: {{{props}}}}}\n"))
    assert [(c, ln, col) for c, ln, col, _ in found] == [("PF103", 6, 5)]
    assert "too large" in found[0][3]


# -- timeout, idempotent -------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("0", ["timeout", "greater than 0", "not 0"]),
        ("-1", ["timeout", "greater than 0", "not -1"]),
        ("-.inf", ["timeout", "greater than 0"]),
        ('"x"', ["'timeout' must be a number", "string"]),
        ("true", ["'timeout' must be a number", "boolean"]),
        (".inf", ["tool 'find_order'", "finite number of seconds"]),
        (".nan", ["tool 'find_order'", "finite number of seconds"]),
    ],
)
def test_a_timeout_that_is_not_a_positive_number_is_pf103(value: str, words: list[str]) -> None:
    found = _found(_tool(f"    timeout: {value}\n"))
    assert [(c, ln, col) for c, ln, col, _ in found] == [("PF103", 6, 14)], found
    for word in words:
        assert word in found[0][3], found[0][3]


@pytest.mark.parametrize(("value", "expected"), [("30", 30), ("0.5", 0.5), ("1e-3", 0.001)])
def test_a_positive_timeout_compiles(value: str, expected: float) -> None:
    workflow = check_text(_tool(f"    timeout: {value}\n")).workflow
    assert workflow is not None and workflow.tools is not None
    assert workflow.tools["find_order"].timeout == expected


@pytest.mark.parametrize("value", ['"yes"', "yes", "1", "null"])
def test_idempotent_must_be_a_boolean(value: str) -> None:
    found = _found(_tool(f"    idempotent: {value}\n"))
    assert [(c, ln, col) for c, ln, col, _ in found] == [("PF103", 6, 17)], found
    assert "'idempotent' must be true or false" in found[0][3]


@pytest.mark.parametrize(("value", "expected"), [("true", True), ("False", False)])
def test_idempotent_compiles(value: str, expected: bool) -> None:
    workflow = check_text(_tool(f"    idempotent: {value}\n")).workflow
    assert workflow is not None and workflow.tools is not None
    assert workflow.tools["find_order"].idempotent is expected


def test_a_tool_built_in_code_is_frozen_and_type_checked() -> None:
    schema: dict[str, Any] = {"type": "object", "properties": {"q": {"type": "string"}}}
    tool = Tool("search", parameters=schema, timeout=5, idempotent=True)
    schema["properties"]["q"]["type"] = "integer"  # the tool holds its own frozen copy
    assert tool.parameters_json() == {"type": "object", "properties": {"q": {"type": "string"}}}
    assert Tool("search").parameters_json() is None
    for bad in (
        {"parameters": ["type", "object"]},
        {"timeout": 0},
        {"timeout": -2.5},
        {"timeout": float("nan")},
        {"timeout": True},
        {"timeout": "10"},
        {"idempotent": "yes"},
    ):
        with pytest.raises(ConfigError, match="tool 'search'"):
            Tool("search", **bad)  # type: ignore[arg-type]


# -- collect -------------------------------------------------------------------------

COLLECT = """\
phaseflow: 1
name: c
initial: ask
state:
  customer_name: {type: string}
  visit_date: {type: string}
tools:
  book: {writes: [booking_id]}
phases:
  ask:
    goal: Learn the name and the date.
    collect: [customer_name, visit_date]
    transitions:
      - to: confirm
  confirm:
    goal: Confirm the booking.
    requires: [customer_name, visit_date]
    terminal: true
"""


def test_collect_compiles_and_counts_as_a_producer_for_pf402() -> None:
    result = check_text(COLLECT)
    assert result.diagnostics == ()  # no PF402: the model collects both required keys
    assert result.workflow is not None
    assert result.workflow.phases["ask"].collect == ("customer_name", "visit_date")
    assert result.workflow.phases["confirm"].collect == ()
    without = COLLECT.replace("    collect: [customer_name, visit_date]\n", "")
    assert [(d.code, d.line) for d in check_text(without).diagnostics] == [
        ("PF402", 16), ("PF402", 16)
    ]


def test_pf407_names_every_tool_that_writes_the_key() -> None:
    text = COLLECT.replace(
        "  book: {writes: [booking_id]}\n",
        "  book: {writes: [visit_date]}\n  reschedule: {writes: [visit_date]}\n",
    )
    found = _found(text)
    assert [(c, ln, col) for c, ln, col, _ in found] == [("PF407", 13, 30)]
    assert "tools 'book', 'reschedule' write" in found[0][3]
    # without a catalogue nothing is known to write it
    no_tools = COLLECT.replace("tools:\n  book: {writes: [booking_id]}\n", "")
    assert _found(no_tools) == []


def test_collect_of_a_key_declared_in_an_empty_state_is_pf406() -> None:
    text = COLLECT.replace(
        "state:\n  customer_name: {type: string}\n  visit_date: {type: string}\n", "state: {}\n"
    )
    codes = [(c, ln, col) for c, ln, col, _ in _found(text)]
    # and PF401 for requires: declaring state (even empty) switches the warnings on
    assert codes == [("PF406", 10, 15), ("PF406", 10, 30), ("PF401", 15, 16), ("PF401", 15, 31)]


# -- start-up cost -------------------------------------------------------------------


def _imports_jsonschema(text: str) -> bool:
    code = (
        "import sys\n"
        "from phaseflow.spec.loader import check_text\n"
        f"result = check_text({text!r})\n"
        "assert result.workflow is not None, result.diagnostics\n"
        "print('jsonschema' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.strip() == "True"


def test_jsonschema_is_imported_only_for_a_tool_with_parameters() -> None:
    assert not _imports_jsonschema(COLLECT)
    assert not _imports_jsonschema(_tool("    timeout: 10\n    idempotent: true\n"))
    assert _imports_jsonschema(_tool(VALID_PARAMETERS))


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("{type: number, default: .nan}", "state key 'n': default: nan is not a JSON number"),
        ("{type: array, default: [1, .inf]}",
         "state key 'n': default: inf is not a JSON number (at [1])"),
        ("{default: {a: -.inf}}", "state key 'n': default: -inf is not a JSON number (at a)"),
    ],
)
def test_a_default_that_is_not_json_is_pf103(spec: str, message: str) -> None:
    """A session starts with every default in its state, and the state is JSON."""
    text = ("phaseflow: 1\nname: x\ninitial: a\nstate:\n  n: " + spec +
            "\nphases:\n  a:\n    goal: g\n    terminal: true\n")
    result = check_text(text, "w.yaml")
    assert [(d.code, d.line, d.message) for d in result.diagnostics] == [("PF103", 5, message)]
