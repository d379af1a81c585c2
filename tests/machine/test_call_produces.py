"""A ``call`` effect that declares ``produces``: the reference checks count its keys (no
PF402 for a key it provides), an undeclared key in it is PF403, and at run time it may
write only those keys, each with a value of its declared type."""

from __future__ import annotations

from typing import Any

import pytest

from phaseflow import load_workflow_text
from phaseflow.machine import EffectContext, State
from phaseflow.spec.loader import check_text

DESK = """\
phaseflow: 1
name: desk
initial: intake
state:
  email: {type: string}
  ticket_id: {type: string}
  priority: {type: integer}
tools:
  crm.lookup: {writes: [email]}
phases:
  intake:
    goal: Learn the customer's email.
    tools: [crm.lookup]
    transitions:
      - {to: triage, when: state.email}
  triage:
    goal: Open a ticket.
    on_enter:
      - {call: open_ticket, with: {queue: support}PRODUCES}
    transitions:
      - {to: work, when: state.ticket_id}
  work:
    goal: Work the ticket.
    requires: [ticket_id]
    terminal: true
"""


def _desk(produces: str = ", produces: [ticket_id, priority]") -> str:
    return DESK.replace("PRODUCES", produces)


def test_a_key_a_call_effect_produces_is_not_pf402() -> None:
    assert check_text(_desk()).diagnostics == ()


def test_without_produces_the_required_key_is_pf402_and_the_message_names_call_effects(
) -> None:
    diags = check_text(_desk("")).diagnostics
    assert [(d.code, d.message) for d in diags] == [(
        "PF402", "phase 'work' requires 'ticket_id', but nothing can produce it: no default, "
                 "no tool writes it, no preparation or 'call' effect produces it, no 'set' "
                 "effect sets it, no phase collects it; if a 'call' effect returns it, "
                 "declare it there: produces: [ticket_id]")]


def test_an_undeclared_key_in_produces_is_pf403() -> None:
    diags = check_text(_desk(", produces: [ticket_id, tikcet]")).diagnostics
    assert [(d.code, d.message) for d in diags] == [
        ("PF403", "phase 'triage': 'call' effect produces names undeclared state key 'tikcet'; "
              "did you mean 'ticket_id'?")]


def test_produces_without_call_is_refused() -> None:
    text = _desk("").replace("{call: open_ticket, with: {queue: support}}",
                             "{set: {priority: 1}, produces: [priority]}")
    errors = [d for d in check_text(text).diagnostics if d.severity == "error"]
    assert [(e.code, e.message) for e in errors] == [
        ("PF103", "phase 'triage', on_enter #1: 'produces' names the keys a 'call' returns; "
                  "add 'call' or remove it")]


def _run(returned: dict[str, Any]) -> tuple[State, list[str]]:
    def open_ticket(ctx: EffectContext, queue: str) -> dict[str, Any]:
        assert queue == "support"
        return returned

    machine = load_workflow_text(_desk(), {"open_ticket": open_ticket}).machine()
    state = State({"email": "ada@example.com"})
    result = machine.advance_sync(state, turn=1)
    assert result.transitioned
    return state, [event.message for event in result.events]


def test_the_declared_keys_are_written() -> None:
    state, errors = _run({"ticket_id": "T-1", "priority": 2})
    assert errors == []
    assert state.to_dict() == {"email": "ada@example.com", "ticket_id": "T-1", "priority": 2}


def test_a_key_outside_produces_is_an_error_value_and_not_written() -> None:
    state, errors = _run({"ticket_id": "T-1", "email": "eve@example.com"})
    assert state["email"] == "ada@example.com" and state["ticket_id"] == "T-1"
    assert errors == [
        "call 'open_ticket' returned 'email', which its 'produces' does not declare (it "
        "declares 'ticket_id', 'priority'); the key was not written"]


@pytest.mark.parametrize(("value", "got"), [(7, "an integer"), (True, "a boolean")])
def test_a_value_of_the_wrong_type_is_an_error_value_and_not_written(value: Any,
                                                                     got: str) -> None:
    state, errors = _run({"ticket_id": value, "priority": 1})
    assert "ticket_id" not in state and state["priority"] == 1
    assert errors == [
        f"call 'open_ticket' returned a value for 'ticket_id' that does not fit its declared "
        f"type: string expected, got {got}; the key was not written"]


def test_an_integer_key_refuses_a_float_as_the_validator_does() -> None:
    state, errors = _run({"ticket_id": "T-1", "priority": 1.5})
    assert "priority" not in state
    assert errors[0].endswith("integer expected, got a number; the key was not written")
