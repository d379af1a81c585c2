"""How workflow YAML is read: YAML 1.2 scalars, duplicate keys, merge keys, one document."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phaseflow.spec.loader import check_text
from phaseflow.spec.yamlnodes import Mapping, compose, to_python

SPEC_EXAMPLE = (Path(__file__).parent / "data" / "refund_desk.yaml").read_text()


def value(text: str) -> object:
    doc = compose(f"v: {text}\n")
    assert isinstance(doc.root, Mapping)
    return to_python(doc.root)["v"]


@pytest.mark.parametrize("word", ["yes", "no", "on", "off", "y", "n", "Yes", "NO", "On", "OFF"])
def test_yaml11_booleans_stay_strings(word: str) -> None:
    assert value(word) == word


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("true", True),
        ("false", False),
        ("TRUE", True),
        ("False", False),
        ("True", True),
        ("FALSE", False),
    ],
)
def test_true_false_in_any_case_are_booleans(text: str, expected: bool) -> None:
    assert value(text) is expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1:20", "1:20"),
        ("2024-01-01", "2024-01-01"),
        ("2024-01-01T10:00:00Z", "2024-01-01T10:00:00Z"),
        ("0b101", "0b101"),
        ("1_000", "1_000"),
        ("012", 12),
        ("0o17", 15),
        ("0x1f", 31),
        ("1.5", 1.5),
        ("1e3", 1000.0),
        ("~", None),
        ("null", None),
        ("", None),
        ("'true'", "true"),
        ('"1"', "1"),
        ("!!str 5", "5"),
    ],
)
def test_yaml12_core_schema(text: str, expected: object) -> None:
    assert value(text) == expected
    assert type(value(text)) is type(expected)


def test_on_enter_as_a_value_means_what_it_says() -> None:
    # under YAML 1.1, `on` would be the boolean True and `answer: no` would be False
    text = SPEC_EXAMPLE.replace(
        "        with: {channel: email}", "        with: {channel: no, on: off}"
    )
    result = check_text(text)
    assert result.diagnostics == ()
    assert result.workflow is not None
    effect = result.workflow.phases["refund"].on_exit[0]
    assert dict(effect.args) == {"channel": "no", "on": "off"}  # type: ignore[union-attr]


def test_terminal_yes_is_a_type_error_not_true() -> None:
    text = SPEC_EXAMPLE.replace(
        "    goal: Close the conversation politely.\n    terminal: true",
        "    goal: Close the conversation politely.\n    terminal: yes",
    )
    diags = check_text(text).diagnostics
    assert [d.code for d in diags] == ["PF103"]
    assert "'terminal' must be true or false, not a string" in diags[0].message


def test_duplicate_keys_name_the_first_line() -> None:
    text = (
        "phaseflow: 1\nname: x\ninitial: a\nphases:\n  a:\n    goal: one\n"
        "    terminal: true\n    goal: two\n"
    )
    diags = check_text(text).diagnostics
    assert [(d.code, d.line, d.column) for d in diags] == [("PF003", 8, 5)]
    assert "duplicate key 'goal' (first written on line 6)" in diags[0].message


def test_every_duplicate_is_reported() -> None:
    text = (
        "phaseflow: 1\nname: x\nname: y\ninitial: a\nphases:\n  a: {goal: g, goal: h, "
        "terminal: true}\nname: z\n"
    )
    diags = check_text(text).diagnostics
    assert [(d.code, d.line) for d in diags] == [("PF003", 3), ("PF003", 6), ("PF003", 7)]
    assert all("first written on line" in d.message for d in diags)


def test_quoted_and_plain_duplicates_are_the_same_key() -> None:
    diags = check_text('phaseflow: 1\n"phaseflow": 1\n').diagnostics
    assert ("PF003", 2) in [(d.code, d.line) for d in diags]


def test_merge_keys() -> None:
    text = SPEC_EXAMPLE.replace(
        "  escalate:\n    goal: Hand the conversation to a human agent.\n    terminal: true",
        "  escalate: &final\n    goal: Hand the conversation to a human agent.\n    terminal: true",
    ).replace(
        "  done:\n    goal: Close the conversation politely.\n    terminal: true",
        "  done:\n    <<: *final\n    goal: Close the conversation politely.",
    )
    assert "<<: *final" in text
    result = check_text(text)
    assert result.diagnostics == ()
    assert result.workflow is not None
    done = result.workflow.phases["done"]
    assert done.terminal is True
    assert done.goal == "Close the conversation politely."  # own keys win over merged ones


def test_merge_of_a_list_of_mappings() -> None:
    text = (
        "phaseflow: 1\nname: x\ninitial: a\nphases:\n"
        "  a: &a {goal: g}\n  b: &b {goal: h, terminal: true}\n"
        "  c:\n    <<: [*a, *b]\n"
    )
    result = check_text(text)
    assert [(d.code, d.line) for d in result.diagnostics] == [
        ("PF203", 5),
        ("PF202", 6),
        ("PF202", 7),
    ]
    assert result.workflow is not None
    c = result.workflow.phases["c"]
    assert (c.goal, c.terminal) == ("g", True)  # the first mapping listed wins


def test_unknown_key_through_a_merge_points_at_the_anchor() -> None:
    text = (
        "phaseflow: 1\nname: x\ninitial: a\nbase: &base {goal: g, terminl: true}\n"
        "phases:\n  a:\n    <<: *base\n"
    )
    codes = [d.code for d in check_text(text).diagnostics]
    assert "PF102" in codes


@pytest.mark.parametrize("text", ["", "\n\n", "# just a comment\n", "---\n", "~\n", "null\n"])
def test_empty_file_is_pf004(text: str) -> None:
    diags = check_text(text).diagnostics
    assert [(d.code, d.line, d.column) for d in diags] == [("PF004", 1, 1)]
    assert "empty" in diags[0].message


def test_more_than_one_document_is_pf004() -> None:
    text = SPEC_EXAMPLE + "---\nphaseflow: 1\n"
    diags = check_text(text).diagnostics
    line = SPEC_EXAMPLE.count("\n") + 1
    assert [(d.code, d.line, d.column) for d in diags] == [("PF004", line, 1)]


def test_explicit_document_markers_are_fine() -> None:
    assert check_text("---\n" + SPEC_EXAMPLE + "...\n").diagnostics == ()


def test_a_non_string_key_is_read_as_its_text() -> None:
    text = SPEC_EXAMPLE.replace(
        "        with: {channel: email}", "        with: {1: email, true: x}"
    )
    result = check_text(text)
    assert result.diagnostics == ()


def test_positions_are_one_based_in_flow_and_block_style() -> None:
    text = "phaseflow: 1\nname: x\ninitial: a\nphases: {a: {goal: g, terminal: true, zz: 1}}\n"
    diags = check_text(text).diagnostics
    assert [(d.code, d.line, d.column) for d in diags] == [("PF102", 4, 39)]


_YAML_PIECES = st.sampled_from(
    ["a", "yes", "1", "0x1F", "~", "'q'", "!!str 3", "[1, *x]", "{k: v}", "*x", "*m",
     "{<<: *m, k: own}", "{<<: [*m, *m], z: 1}", "{k: 1, k: 2}", "[]", "{}"]
)


@settings(max_examples=150, deadline=None)
@given(st.lists(_YAML_PIECES, min_size=1, max_size=8))
def test_composed_data_is_what_to_python_gives(values: list[str]) -> None:
    """Document.data, built while composing, is exactly to_python of the root: the same
    values, merge keys applied, an alias one shared object."""
    text = "x: &x [1, two]\nm: &m {k: v, n: 2}\n" + "".join(
        f"f{i}: {v}\n" for i, v in enumerate(values)
    )
    doc = compose(text)
    assert doc.data == to_python(doc.root)
    assert repr(doc.data) == repr(to_python(doc.root))
    for i, v in enumerate(values):
        if v == "*x":
            assert doc.data[f"f{i}"] is doc.data["x"]
