"""The desk, written once: the small workflow the ``phaseflow run`` and ``phaseflow serve``
tests drive as a user would. A tool ``pay`` that needs approval and sets ``paid``, which
ends the work; each suite adds the tools it needs (slow ones to cancel, one that leaves a
trace) and writes the tools module that defines them, ``pay`` included."""

from __future__ import annotations

#: ``pay`` as the desk's tools module defines it (the module imports ``tool``)
PAY_TOOL = '''\
@tool
def pay(amount: float) -> dict:
    """Pay."""
    return {"paid": True, "amount": amount}
'''


def desk_workflow(tools: str, phase_tools: str) -> str:
    """The desk workflow: ``pay`` and ``tools`` (their YAML, indented under ``tools:``),
    one phase of work offering ``phase_tools`` (a YAML list) until paid, then a terminal
    one."""
    return f"""\
phaseflow: 1
name: desk
initial: work
state:
  paid: {{type: boolean}}
tools:
  pay:
    description: Pay an amount
    approval: always
    writes: [paid]
{tools}phases:
  work:
    goal: Do the work.
    tools: {phase_tools}
    transitions:
      - to: finished
        when: state.paid
        description: Paid
  finished:
    goal: Say goodbye.
    terminal: true
"""
