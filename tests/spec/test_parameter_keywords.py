"""Keywords JSON Schema does not have, in a tool's ``parameters``, and what a user sees.

The draft 2020-12 meta-schema lets unknown keywords through, so a YAML slip such as
``{description: The phone, E.164}`` (a cut description and a keyword ``"E.164": null``
sent to the model) or a typo such as ``requried`` (every argument optional) passed
``validate --strict``. Each is PF104 at the keyword, at any depth, with the fix.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from phaseflow.spec.loader import check_text
from phaseflow.spec.tool_parameters import SCHEMA_KEYWORDS
from tests.support.phaseflow_cli import RunCli

REPO = Path(__file__).resolve().parents[2]

HEAD = """\
phaseflow: 1
name: t
initial: start
"""


def _lines(text: str) -> list[str]:
    """What ``validate`` prints for ``text``, one line per diagnostic."""
    return [d.format() for d in check_text(text, "flows/a.yaml").diagnostics]


def _found(text: str) -> list[tuple[str, int, int]]:
    return [(d.code, d.line, d.column) for d in check_text(text).diagnostics]


def _tool(parameters: str) -> str:
    """A workflow whose tool ``find`` has ``parameters`` written from line 7 on (each line
    of ``parameters`` indented by six spaces)."""
    body = "".join(f"      {line}\n" for line in parameters.splitlines())
    return HEAD + "tools:\n  find:\n    parameters:\n      type: object\n" + body + """\
phases:
  start: {goal: Begin., terminal: true}
"""


def test_the_refund_desk_slip_is_pf104_with_the_quoted_fix() -> None:
    text = _tool("""\
properties:
  phone: {type: string, description: The phone number on the account, E.164}""")
    result = check_text(text, "flows/a.yaml")
    assert result.workflow is None
    assert _lines(text) == [
        "flows/a.yaml:9:77: error PF104 tool 'find': parameters at 'properties.phone' has "
        "unknown JSON Schema keyword 'E.164' with no value: in a flow mapping ({...}) a ',' "
        "ends an unquoted value, so this is the text after a ',' in 'description'; quote "
        "that text: description: \"The phone number on the account, E.164\""
    ]


def test_two_commas_give_two_diagnostics_with_the_whole_text() -> None:
    text = _tool("""\
properties:
  when: {type: string, description: A date, a time, or both}""")
    found = check_text(text).diagnostics
    assert [(d.code, d.line, d.column) for d in found] == [("PF104", 9, 51), ("PF104", 9, 59)]
    for d in found:
        assert d.message.endswith('description: "A date, a time, or both"')


def _at(text: str, needle: str) -> tuple[int, int]:
    """The 1-based line and column of ``needle``'s only occurrence in ``text``."""
    assert text.count(needle) == 1, needle
    before = text[: text.index(needle)]
    return before.count("\n") + 1, len(before) - before.rfind("\n")


@pytest.mark.parametrize(
    ("schema", "keyword", "where", "tail"),
    [
        ("requried: [a]", "requried", "", "; did you mean 'required'?"),
        ("properties:\n  a: {type: string, minLenght: 2}", "minLenght", " at 'properties.a'",
         "; did you mean 'minLength'?"),
        ("properties:\n  a:\n    type: array\n    items: {type: string, desciption: x}",
         "desciption", " at 'properties.a.items'", "; did you mean 'description'?"),
        ("properties:\n  a: {prefixItems: [{type: string}, {exampels: [1]}]}", "exampels",
         " at 'properties.a.prefixItems.1'", "; did you mean 'examples'?"),
        ("properties:\n  a: {anyOf: [{type: string}, {type: integer, maximun: 3}]}",
         "maximun", " at 'properties.a.anyOf.1'", "; did you mean 'maximum'?"),
        ("additionalProperties: {type: string, formt: email}", "formt",
         " at 'additionalProperties'", "; did you mean 'format'?"),
        ("$defs:\n  id: {type: string, patern: '^a'}", "patern", " at '$defs.id'",
         "; did you mean 'pattern'?"),
        ("patternProperties:\n  '^x_': {type: string, mxLength: 3}", "mxLength",
         " at 'patternProperties.^x_'", "; did you mean 'maxLength'?"),
        ("not: {required: [a], minProperty: 1}", "minProperty", " at 'not'",
         "; did you mean 'minProperties'?"),
        ("if: {required: [a]}\nthen: {required: [b], dependentRequire: {}}",
         "dependentRequire", " at 'then'", "; did you mean 'dependentRequired'?"),
        ("properties:\n  a: {type: array, contains: {cnst: 1}}", "cnst",
         " at 'properties.a.contains'", "; did you mean 'const'?"),
        ("properties:\n  a: {type: integer, nullable: true}", "nullable",
         " at 'properties.a'", "; 'nullable' is OpenAPI 3.0, not JSON Schema: allow null with "
         "type: [integer, 'null']"),
        ("properties:\n  a: {type: array, prefixItems: [true], additionalItems: false}",
         "additionalItems", " at 'properties.a'", "; draft 2020-12 has no 'additionalItems'"),
        ("email: {type: string}", "email", "",
         "; to declare an argument 'email', write it under 'properties'"),
        ("strict: true", "strict", "", "; JSON Schema has no such keyword (extension keywords "
         "start with 'x-')"),
    ],
)
def test_an_unknown_keyword_at_any_depth_is_pf104_at_the_keyword(
    schema: str, keyword: str, where: str, tail: str
) -> None:
    text = _tool(schema)
    [d] = check_text(text, "flows/a.yaml").diagnostics
    assert (d.code, d.line, d.column, d.severity) == ("PF104", *_at(text, keyword), "error")
    assert d.message.startswith(f"tool 'find': parameters{where} has unknown JSON Schema "
                                f"keyword '{keyword}'")
    assert tail in d.message


def test_a_key_without_a_value_in_a_block_or_after_a_colon_is_not_a_cut_value() -> None:
    block = _tool("properties:\n  a:\n    type: string\n    E.164:")
    [d] = check_text(block).diagnostics
    assert (d.code, d.line, d.column) == ("PF104", *_at(block, "E.164"))
    assert "'E.164' with no value; JSON Schema has no such keyword" in d.message
    flow = _tool("properties:\n  a: {type: string, foo: }")
    [d] = check_text(flow).diagnostics
    assert "'foo' with no value; JSON Schema has no such keyword" in d.message
    assert "quote" not in d.message


# every keyword of draft 2020-12 in use, names that look like keywords where they are names,
# nulls where they are data, and extensions
LEGITIMATE = """\
$schema: https://json-schema.org/draft/2020-12/schema
$id: https://example.com/find
$comment: Every keyword of the vocabulary, used once.
title: Find
description: Find an order.
properties:
  E.164: {type: string, description: "A phone number, E.164", format: phone}
  requried: {type: [string, "null"], default: null, examples: [null, a], x-hint: names}
  order: {$ref: "#/$defs/order"}
  kind: {enum: [a, null], const: a, deprecated: false, readOnly: true, writeOnly: false}
  count: {type: integer, minimum: 0, maximum: 9, exclusiveMinimum: -1, exclusiveMaximum: 10,
          multipleOf: 1}
  tags:
    type: array
    items: {type: string, minLength: 1, maxLength: 20, pattern: "^[a-z]+$"}
    prefixItems: [{const: first}]
    contains: {const: a}
    minContains: 1
    maxContains: 3
    minItems: 1
    maxItems: 5
    uniqueItems: true
    unevaluatedItems: false
  blob: {type: string, contentEncoding: base64, contentMediaType: application/json,
         contentSchema: {type: object}}
  either: {anyOf: [{type: string}, {type: integer}], oneOf: [{minimum: 0}, {type: string}],
           allOf: [{}], not: {const: 13}}
  cond: {if: {minimum: 5}, then: {maximum: 9}, else: {minimum: 0}}
  nested:
    type: object
    properties: {nullable: {type: boolean}, additionalItems: {type: string}}
    patternProperties: {"^x_": {type: string}}
    additionalProperties: false
    propertyNames: {maxLength: 10}
    minProperties: 1
    maxProperties: 3
    dependentRequired: {a: [b]}
    dependentSchemas: {a: {required: [c]}}
    unevaluatedProperties: false
  old: {definitions: {x: {type: string}}, dependencies: {a: [b], c: {required: [d]}}}
  dynamic: {$dynamicAnchor: node, $anchor: here}
  recursive: {$recursiveAnchor: rec}
required: [order]
$defs:
  order: {type: string, description: The order's number}
x-owner: payments team
$vocabulary: {"https://json-schema.org/draft/2020-12/vocab/core": true}
"""


def test_every_keyword_of_draft_2020_12_names_and_data_are_not_reported() -> None:
    result = check_text(_tool(LEGITIMATE))
    assert result.diagnostics == ()
    assert result.workflow is not None and result.workflow.tools is not None
    parameters = result.workflow.tools["find"].parameters_json()
    assert parameters is not None and parameters["x-owner"] == "payments team"


def test_the_vocabulary_is_the_draft_2020_12_meta_schemas() -> None:
    """The keyword list is the union of the properties of jsonschema's copies of the
    draft 2020-12 meta-schemas (its vocabularies and the top-level one)."""
    from jsonschema_specifications import REGISTRY

    meta: set[str] = set()
    for uri in REGISTRY:
        if uri.startswith("https://json-schema.org/draft/2020-12/"):
            contents = REGISTRY.contents(uri)
            if isinstance(contents, dict):
                meta |= set(contents.get("properties", {}))
    assert meta == SCHEMA_KEYWORDS


def test_a_null_a_keyword_needs_a_value_for_is_pf103_in_plain_words() -> None:
    text = _tool("properties:\n  a:\n    type: string\n    description:")
    line, column = _at(text, "description:")
    assert _lines(text) == [
        f"flows/a.yaml:{line}:{column + len('description:')}: error PF103 tool 'find': "
        "parameters at 'properties.a.description' is not a valid JSON Schema: 'description' "
        "is empty (null), but must be a string; write its value, or remove it"
    ]
    schema = _lines(_tool("properties:\n  a:"))
    assert len(schema) == 1 and "'a' is empty (null), but must be a schema (a mapping, or " \
        "true or false)" in schema[0]


def test_pf103_and_pf104_in_one_schema_are_both_reported() -> None:
    text = _tool("properties:\n  a: {type: strin}\n  b: {type: string, desription: x}")
    assert _found(text) == [("PF103", *_at(text, "strin}")), ("PF104", *_at(text, "desription"))]


def test_a_keyword_written_in_merged_content_is_reported_once_where_it_is_written() -> None:
    text = _tool("$defs:\n  base: &base {type: string, minLenght: 1}\n"
                 "properties:\n  a: {<<: *base, maxLength: 5}\n  b: *base")
    [d] = check_text(text).diagnostics
    assert (d.code, d.line, d.column) == ("PF104", *_at(text, "minLenght"))
    assert d.message.startswith("tool 'find': parameters at '$defs.base' has unknown")


def test_an_extension_keyword_is_sent_as_written() -> None:
    result = check_text(_tool("x-examples: [{a: 1}]\nproperties:\n  a: {type: integer, "
                              "x-unit: cents}"))
    assert result.diagnostics == ()


def test_thousands_of_unknown_keywords_are_each_reported_and_hinted_for_a_hundred() -> None:
    """A garbage schema stays linear: one mapping of 5,000 keys cut by commas from one
    value, and 3,000 misspelt keywords in another."""
    cut = ", ".join(f"k{i}" for i in range(5000))
    text = _tool(f"properties:\n  a: {{type: string, description: x, {cut}}}")
    found = check_text(text).diagnostics
    assert len(found) == 5000 and {d.code for d in found} == {"PF104"}
    # the text as it was meant, clipped to a line's worth
    assert found[0].message.endswith('..."')
    assert 'quote that text: description: "x, k0, k1, k2, k3, ' in found[0].message
    assert all(d.message == found[0].message.replace("'k0'", f"'k{i}'")
               for i, d in enumerate(found))
    typos = "".join(f"  requried{i}: 1\n" for i in range(3000))
    found = check_text(_tool("properties: {}\nnot:\n" + typos)).diagnostics
    assert len(found) == 3000
    assert sum("did you mean" in d.message for d in found) == 100


def test_aliases_repeating_a_schema_tens_of_thousands_of_times_are_bounded() -> None:
    """16,384 uses of one mapping: too large to check against the meta-schema (PF103),
    and its one unknown keyword is reported once, where it is written."""
    lines = ["$defs:", "  l0: &l0 {bogus: 1}"]
    for i in range(1, 8):
        lines.append(f"  l{i}: &l{i} {{allOf: [*l{i - 1}, *l{i - 1}, *l{i - 1}, *l{i - 1}]}}")
    text = _tool("\n".join(lines))
    found = check_text(text).diagnostics
    assert [(d.code, d.line, d.column) for d in found] == [
        ("PF103", *_at(text, "parameters")), ("PF104", *_at(text, "bogus"))]
    assert "too large to check (over 10,000 values)" in found[0].message


# -- the bundled workflows and what a user runs --------------------------------------


def test_the_bundled_refund_desk_sends_the_whole_phone_description() -> None:
    result = check_text((REPO / "workflows" / "refund-desk.yaml").read_text(encoding="utf-8"))
    assert result.diagnostics == ()
    assert result.workflow is not None and result.workflow.tools is not None
    parameters = result.workflow.tools["crm.lookup_customer"].parameters_json()
    assert parameters is not None
    assert parameters["properties"]["phone"] == {
        "type": "string", "description": "The phone number on the account, E.164"}


def test_validate_strict_reports_the_old_refund_desk_line(
    tmp_path: Path, phaseflow_cli: RunCli
) -> None:
    original = (REPO / "workflows" / "refund-desk.yaml").read_text(encoding="utf-8")
    fixed = '{type: string, description: "The phone number on the account, E.164"}'
    assert original.count(fixed) == 1
    broken = original.replace(
        fixed, "{type: string, description: The phone number on the account, E.164}")
    path = tmp_path / "refund-desk.yaml"
    path.write_text(broken, encoding="utf-8")
    line = next(i for i, text in enumerate(broken.splitlines(), 1) if "E.164}" in text)
    proc = phaseflow_cli("validate", "--strict", "--format", "json", str(path))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    [d] = json.loads(proc.stdout)["diagnostics"]
    assert (d["line"], d["column"], d["severity"], d["code"]) == (line, 77, "error", "PF104")
    assert d["message"].startswith("tool 'crm.lookup_customer': parameters at "
                                   "'properties.phone' has unknown JSON Schema keyword 'E.164'")
    clean = phaseflow_cli("validate", "--strict", str(REPO / "workflows"))
    assert clean.returncode == 0, clean.stdout
