"""A template that fails while rendering is an error record in the trace, with where it
was written, and the model gets the documented fallback, never internals."""

from __future__ import annotations

import phaseflow
from phaseflow.machine import State

WORKFLOW = """\
phaseflow: 1
name: broken-templates
initial: greet
state:
  amount: {type: number}
  items: {type: array}
phases:
  greet:
    goal: Greet.
    instructions: |
      Hello.
      Refund {{ state.amount + 1 }} now.
    transitions:
      - to: done
        when: state.amount
  done:
    goal: Done.
    instructions: "{% for i in state.items %}{{ i }}{% endfor %} ok"
    terminal: true
"""


def test_instructions_that_fail_give_the_fallback_and_a_trace_record() -> None:
    machine = phaseflow.load_workflow_text(WORKFLOW, path="broken.yaml").machine()
    text = machine.render_instructions(State())
    assert text == ""
    (record,) = machine.trace
    assert record.kind == "template_error"
    assert record.phase == "greet"
    assert record.source == "instructions"
    assert record.message.startswith("line 2: ")
    assert "NoneType" in record.message and "0x" not in record.message
    assert record.position is not None
    # the failing line of the template, where it was written: line 2 of the block
    assert (record.position.path, record.position.line, record.position.column) == (
        "broken.yaml", 12, 7)
    assert "[template error" not in record.message


def test_a_good_render_records_nothing() -> None:
    machine = phaseflow.load_workflow_text(WORKFLOW).machine()
    assert machine.render_instructions(State({"amount": 2})) == "Hello.\nRefund 3 now."
    assert machine.trace == ()


def test_iterating_an_absent_key_is_a_template_error_of_the_phase_entered() -> None:
    machine = phaseflow.load_workflow_text(WORKFLOW).machine()
    state = State({"amount": 5})
    result = machine.advance_sync(state, turn=1)
    assert result.to_phase == "done"
    assert result.transition is not None
    assert result.transition.instructions == ""
    (record,) = machine.trace
    assert (record.kind, record.phase, record.turn) == ("template_error", "done", 1)
    assert record.position is not None
    # a quoted scalar: its first character after the quote
    assert (record.position.line, record.position.column) == (18, 20)


def test_a_failing_navigation_template_falls_back_to_the_default_block() -> None:
    text = WORKFLOW + "navigation:\n  template: '{{ turn + state.amount.x }}'\n"
    machine = phaseflow.load_workflow_text(text).machine()
    block = machine.describe_navigation(State({"amount": "a"}))
    assert block.startswith("[Navigation]\nCurrent phase: greet")
    (record,) = machine.trace
    assert (record.kind, record.source) == ("template_error", "navigation.template")
