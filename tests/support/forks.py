"""A small counting agent for the fork tests (the session API's, the CLI's, the stores'):
a tool whose every run is counted, a state key it writes, a phase change when the count
reaches 2, a tool that needs approval, and a scripted model whose reply depends only on
how many assistant messages the history holds (so a fork asks for the same reply the
original got at the same point)."""

from __future__ import annotations

from typing import Any

import phaseflow
from phaseflow import Agent, ScriptedProvider, tool
from phaseflow.stores import SessionRecord, Store

WORKFLOW = """\
phaseflow: 1
name: counter
initial: low
state:
  n: {type: integer, default: 0}
  paid: {type: boolean, default: false}
tools:
  bump:
    description: Add one to the count.
    writes: [n]
  pay:
    description: Pay.
    approval: always
    writes: [paid]
phases:
  low:
    goal: Count.
    tools: [bump, pay]
    transitions:
      - to: high
        when: state.n >= 2
  high:
    goal: Count on.
    tools: [bump, pay]
"""

#: every run of ``bump``: the argument it was called with
RUNS: list[int] = []


@tool
def bump(n: int = 0) -> dict[str, Any]:
    """Add one to the count."""
    RUNS.append(n)
    return {"n": n + 1}


@tool
def pay() -> dict[str, Any]:
    """Pay."""
    return {"paid": True}


def script(turns: int) -> list[Any]:
    """Two replies a turn: a call of ``bump`` with the turn's index, then the text
    ``Reply i`` (turn ``i + 1``)."""
    out: list[Any] = []
    for i in range(turns):
        out += [{"calls": [{"bump": {"n": i}}]}, f"Reply {i}"]
    return out


def agent(store: Store, turns: int = 8, *, extra: list[Any] | None = None) -> Agent:
    """The counting agent on ``store`` (``extra``: replies after the counting ones)."""
    wf = phaseflow.load_workflow_text(WORKFLOW)
    return Agent(wf, ScriptedProvider(script(turns) + (extra or [])), tools=[bump, pay],
                 store=store)


def comparable(record: SessionRecord) -> dict[str, Any]:
    """Everything a record says but its id, version and times, as plain values."""
    return {
        "workflow": record.workflow, "workflow_hash": record.workflow_hash,
        "status": record.status, "phase": record.phase, "turn": record.turn,
        "execution": record.execution.to_json(),
        "continuation": record.continuation.to_json(), "machine": dict(record.machine),
        "state": dict(record.state), "core": dict(record.core),
    }

