"""The small desk the session's hostile tests (tests/session/test_session_hostile*.py,
test_session_config.py) share: a workflow with a tool that needs approval (``pay``), a
blocking sync tool with a short timeout (``napper``) and a plain ``lookup``, every tool
run written down in ``RAN`` (a test clears it first), and a stream's events collected
within a time limit, so a hanging session fails its test instead of hanging the suite."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import phaseflow
from phaseflow.session.events import Event
from phaseflow.tools import tool

WORKFLOW = """\
phaseflow: 1
name: desk
initial: ask
state:
  paid: {type: number}
  note: {type: string}
tools:
  pay: {approval: always, writes: [paid]}
  napper: {timeout: 0.2, writes: [note]}
  lookup: {}
phases:
  ask:
    goal: Help.
    tools: [pay, napper, lookup]
    transitions:
      - to: done
        when: state.paid
  done:
    goal: Say goodbye.
    terminal: true
"""


#: what the tools did, in order (a tool that ran twice shows twice)
RAN: list[str] = []


@tool
def pay(amount: float) -> dict[str, Any]:
    """Pay an amount."""
    RAN.append(f"pay {amount}")
    return {"paid": amount}


NAPPED = threading.Event()


@tool
def napper(seconds: float) -> dict[str, Any]:
    """Sleep (a blocking, sync tool)."""
    time.sleep(seconds)
    NAPPED.set()
    RAN.append("napper")
    return {"note": "slept"}


@tool
def lookup(q: str) -> str:
    """Look something up."""
    RAN.append(f"lookup {q}")
    return "found"


TOOLS = [pay, napper, lookup]


def workflow() -> phaseflow.Workflow:
    return phaseflow.load_workflow_text(WORKFLOW)


def collect(stream: AsyncIterator[Event], seconds: float = 20.0) -> list[Event]:
    """The events of a stream, or a failed test when it hangs (never a hung suite)."""
    async def run() -> list[Event]:
        return [e async for e in stream]

    async def bounded() -> list[Event]:
        return await asyncio.wait_for(run(), seconds)

    return asyncio.run(bounded())


async def collect_async(stream: AsyncIterator[Event]) -> list[Event]:
    return [e async for e in stream]
