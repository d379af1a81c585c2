"""A small workflow for conversation tests, and a helper that runs a conversation
written as YAML against it through ``run_test_file`` (what ``phaseflow test`` runs)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from phaseflow.testing import TestFileResult, run_test_file

WORKFLOW = """\
phaseflow: 1
name: shop
initial: ask
state:
  name: {type: string}
  customer_id: {type: string}
  receipt: {type: string}
tools:
  crm.lookup:
    description: Find the customer
    writes: [customer_id]
  pay:
    description: Take the payment
    writes: [receipt]
    approval: always
  helpdesk.note:
    description: Leave a note
phases:
  ask:
    goal: Find out who the customer is.
    instructions: Ask who they are.
    collect: [name]
    tools: [crm.lookup]
    transitions:
      - to: pay
        when: state.customer_id
        description: The customer is known
      - to: human
        trigger: model
        description: The customer asks for a human
  pay:
    goal: Take the payment.
    instructions: Take the payment.
    tools: [pay]
    on_enter:
      - call: notify
        with: {channel: email}
    transitions:
      - to: done
        when: state.receipt
        description: Paid
  done:
    goal: Say goodbye.
    terminal: true
  human:
    goal: Hand over.
    tools: [helpdesk.note]
    terminal: true
"""

HEADER = """\
phaseflow-test: 1
workflow: shop.yaml
mocks:
  notify: {}
tools:
  crm.lookup: {returns: {customer_id: C-1, tier: gold}}
  pay: {returns: {receipt: R-1}}
  helpdesk.note: {returns: noted}
scenarios:
"""


def write(tmp_path: Path, text: str, workflow: str = WORKFLOW) -> Path:
    (tmp_path / "shop.yaml").write_text(workflow)
    path = tmp_path / "shop.test.yaml"
    path.write_text(text)
    return path


def conversation(tmp_path: Path, steps: str, *, header: str = HEADER,
                 extra: str = "", workflow: str = WORKFLOW) -> TestFileResult:
    """Run one conversation scenario (``steps``: the YAML list of its steps) against
    ``workflow`` (the shop's unless given)."""
    body = textwrap.indent(textwrap.dedent(steps).strip("\n"), " " * 6)
    text = f"{header}  - name: the conversation\n{extra}    conversation:\n{body}\n"
    return run_test_file(str(write(tmp_path, text, workflow)))


def line_of(tmp_path: Path, needle: str) -> int:
    """The line of the test file on which ``needle`` is written (the first)."""
    lines = (tmp_path / "shop.test.yaml").read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if needle in line)


def failure(result: TestFileResult) -> str:
    assert result.error is None, result.error
    (scenario,) = result.scenarios
    assert scenario.failure is not None, "the scenario passed"
    return scenario.failure
