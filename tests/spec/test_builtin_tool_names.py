"""A tool named like one of the session's built-ins (``go_to_phase``, ``record``), and
what a user sees for it.

A catalogue tool of such a name used to pass ``validate``: the model was offered two tools
of that name and the host's never ran. It is PF408, at the tool's name. A phase's
``tools`` naming a built-in governs nothing (the session offers built-ins whatever it
lists): PF409, at the entry, with or without a catalogue.
"""

from __future__ import annotations

import pytest

from phaseflow.spec.builtin_tools import BUILTIN_TOOLS, GO_TO_PHASE, RECORD
from phaseflow.spec.loader import check_text

HEAD = """\
phaseflow: 1
name: t
initial: start
"""
END = """\
  done:
    goal: End.
    terminal: true
"""


def _lines(text: str) -> list[str]:
    """What ``validate`` prints for ``text``, one line per diagnostic."""
    return [d.format() for d in check_text(text, "flows/a.yaml").diagnostics]


def _found(text: str) -> list[tuple[str, int, int]]:
    return [(d.code, d.line, d.column) for d in check_text(text).diagnostics]


# -- PF408: a catalogue tool named like a built-in ----------------------------------


@pytest.mark.parametrize("name", [GO_TO_PHASE, RECORD])
def test_a_catalogue_tool_named_like_a_builtin_is_pf408_at_its_name(name: str) -> None:
    text = HEAD + f"""\
tools:
  lookup: {{description: Find it.}}
  {name}: {{description: The host's own.}}
phases:
  start:
    goal: Begin.
    tools: [lookup, {name}]
    transitions: [{{to: done, trigger: model}}]
{END}"""
    result = check_text(text, "flows/a.yaml")
    assert result.workflow is None
    [line] = _lines(text)
    assert line.startswith(f"flows/a.yaml:6:3: error PF408 tool '{name}' has the name of a "
                           f"built-in tool: the session offers its own '{name}' when ")
    assert f"two tools named '{name}' and this one would never run" in line
    assert f"rename it (a name may have a namespace, such as 'crm.{name}')" in line


def test_pf408_in_a_flow_catalogue_and_for_both_names_at_once() -> None:
    text = HEAD + """\
tools: {go_to_phase: {}, record: {writes: [note]}}
phases:
  start: {goal: Begin., terminal: true}
"""
    assert _found(text) == [("PF408", 4, 9), ("PF408", 4, 26)]


def test_a_namespaced_or_similar_name_is_not_a_builtin() -> None:
    text = HEAD + """\
tools:
  crm.record: {}
  go_to_phase_now: {}
  record_note: {}
phases:
  start: {goal: Begin., tools: [crm.record, go_to_phase_now, record_note], terminal: true}
"""
    assert _found(text) == []


# -- PF409: a phase's tools naming a built-in ---------------------------------------


def test_a_builtin_in_a_phases_tools_with_a_catalogue_is_pf409_not_pf400() -> None:
    text = HEAD + """\
state:
  reason: {type: string}
tools:
  lookup: {}
phases:
  start:
    goal: Begin.
    collect: [reason]
    tools: [lookup, record]
    transitions: [{to: done, trigger: model}]
""" + END
    [line] = _lines(text)
    assert line == (
        "flows/a.yaml:12:21: error PF409 phase 'start': 'record' is a built-in tool, which "
        "'tools' does not govern: the session offers it when the current phase collects "
        "keys; remove it from 'tools'"
    )


def test_pf409_without_a_catalogue_says_when_the_model_never_sees_the_builtin() -> None:
    text = HEAD + """\
phases:
  start:
    goal: Begin.
    tools: [lookup, record, go_to_phase]
    transitions: [{to: done, trigger: model}]
""" + END
    lines = _lines(text)
    assert [line.split(" PF409 ")[0] for line in lines] == [
        "flows/a.yaml:7:21: error", "flows/a.yaml:7:29: error"]
    assert "'record' is a built-in tool" in lines[0]
    assert "(this phase collects nothing, so the model never sees it here)" in lines[0]
    # start has a model transition: go_to_phase is offered, the entry only does nothing
    assert "'go_to_phase' is a built-in tool" in lines[1]
    assert "never sees it" not in lines[1]


def test_a_glob_matching_a_builtin_name_is_not_reported() -> None:
    text = HEAD + """\
phases:
  start: {goal: Begin., tools: ["*", "go_to_*", "rec?rd"], terminal: true}
"""
    assert _found(text) == []


def test_a_builtin_the_catalogue_defines_is_pf408_only() -> None:
    text = HEAD + """\
tools:
  record: {}
phases:
  start: {goal: Begin., tools: [record], terminal: true}
"""
    assert _found(text) == [("PF408", 5, 3)]


def test_the_session_offers_the_builtins_the_spec_reserves() -> None:
    """The spec's names are the session's (the session may not be imported by the spec;
    this test holds the two together)."""
    from phaseflow.session import core

    assert tuple(core.BUILTINS) == BUILTIN_TOOLS == ("go_to_phase", "record", "read_output")
