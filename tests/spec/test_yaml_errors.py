"""PF002 says what is wrong in our words: a tab (YAML indents with spaces), a key or a
list item indented wrongly, a value with ': ' that needs quotes; libyaml's own text stays
in the message, and the position is the offending character's."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phaseflow.spec.diagnostics import Diagnostic
from phaseflow.spec.loader import check_text

WORKFLOW = """\
phaseflow: 1
name: tabs
initial: start
state:
  amount: {type: number}
phases:
  start:
    goal: Begin.
    tools: [lookup]
    transitions:
      - to: done
        when: state.amount > 1
        description: Go on.
  done:
    goal: Finish.
    terminal: true
"""


def _only(text: str) -> Diagnostic:
    diags = check_text(text).diagnostics
    assert [d.code for d in diags] == ["PF002"], diags
    return diags[0]


def test_a_tab_in_the_indentation_is_named() -> None:
    d = _only(WORKFLOW.replace("    goal: Begin.", "\tgoal: Begin."))
    assert (d.line, d.column) == (8, 1)
    assert "a tab character" in d.message
    assert "YAML indents with spaces" in d.message
    assert "found character that cannot start any token" in d.message  # libyaml's words


def test_a_tab_after_spaces_is_at_the_tab() -> None:
    d = _only(WORKFLOW.replace("    goal: Begin.", "  \tgoal: Begin."))
    assert (d.line, d.column) == (8, 3)
    assert "tab" in d.message and "spaces" in d.message


def test_a_tab_before_a_list_item() -> None:
    d = _only(WORKFLOW.replace("      - to: done", "\t- to: done"))
    assert d.line == 11 and d.column == 1
    assert "YAML indents with spaces" in d.message


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_a_tab_anywhere_in_an_indentation_is_pointed_at(data: st.DataObject) -> None:
    lines = WORKFLOW.split("\n")
    indented = [i for i, line in enumerate(lines) if line.startswith(" ")]
    number = data.draw(st.sampled_from(indented))
    line = lines[number]
    width = len(line) - len(line.lstrip(" "))
    at = data.draw(st.integers(0, width - 1))
    lines[number] = line[:at] + "\t" + line[at + 1 :]
    diags = check_text("\n".join(lines)).diagnostics
    assert diags and diags[0].code == "PF002", diags
    assert "tab" in diags[0].message and "YAML indents with spaces" in diags[0].message
    assert (diags[0].line, diags[0].column) == (number + 1, at + 1)


def test_a_key_indented_less_than_its_siblings() -> None:
    d = _only(WORKFLOW.replace("    tools: [lookup]", "   tools: [lookup]"))
    assert (d.line, d.column) == (9, 4)
    assert "did not find expected key" in d.message  # libyaml's words
    assert "indent it exactly as far as its sibling keys" in d.message


def test_a_key_indented_more_than_the_key_before_it() -> None:
    d = _only(WORKFLOW.replace("    tools: [lookup]", "      tools: [lookup]"))
    assert d.line == 9
    assert "mapping values are not allowed" in d.message
    assert "continuation of the value above" in d.message
    assert "line it up with its sibling keys" in d.message


def test_a_list_item_out_of_line() -> None:
    text = WORKFLOW.replace(
        "        description: Go on.\n", "        description: Go on.\n     - to: start\n"
    )
    d = _only(text)
    assert (d.line, d.column) == (14, 6)
    assert "list item" in d.message and "same column" in d.message


def test_a_key_of_a_list_item_out_of_line() -> None:
    d = _only(WORKFLOW.replace("        when: state.amount > 1", "       when: state.amount > 1"))
    assert (d.line, d.column) == (12, 8)
    assert "did not find expected '-' indicator" in d.message
    assert "line it up with that item's first key" in d.message


def test_a_value_with_colon_space_needs_quotes() -> None:
    d = _only(WORKFLOW.replace("description: Go on.", "description: Note: go on."))
    assert d.line == 13
    assert "must be quoted" in d.message


@pytest.mark.parametrize(
    "text",
    ["a: [1, 2\n", "a: 'x\n", "{", "a:\n  - b\n  c: 1\n", "\t", "- \t-\n", "a:\t\n\tb"],
)
def test_every_syntax_error_is_one_pf002_with_a_message(text: str) -> None:
    diags = check_text(text).diagnostics
    assert diags and diags[0].code == "PF002"
    assert diags[0].message.startswith("YAML syntax error: ")
    assert diags[0].line >= 1 and diags[0].column >= 1
