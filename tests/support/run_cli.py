"""The desk project of the ``phaseflow run`` tests and how they run it: a workflow with
one tool that needs approval and two slow ones, its tools module, a script for the scripted
model, and ``phaseflow run`` as a real process with an environment of known variables."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

#: a small workflow: one tool that needs approval, two slow ones, a terminal phase
DESK = """\
phaseflow: 1
name: desk
initial: work
state:
  paid: {type: boolean}
tools:
  pay:
    description: Pay an amount
    approval: always
    writes: [paid]
  slow.wait:
    description: Wait a long time (async, so a cancellation stops it)
  slow.block:
    description: Block the process a long time (sync)
phases:
  work:
    goal: Do the work.
    tools: [pay, "slow.*"]
    transitions:
      - to: finished
        when: state.paid
        description: Paid
  finished:
    goal: Say goodbye.
    terminal: true
"""

TOOLS = '''\
import asyncio
import time

from phaseflow.tools import tool


@tool
def pay(amount: float) -> dict:
    """Pay."""
    return {"paid": True, "amount": amount}


@tool(name="slow.wait")
async def wait() -> str:
    await asyncio.sleep(60)
    return "waited"


@tool(name="slow.block")
def block() -> str:
    time.sleep(60)
    return "blocked"


TOOLS = [pay, wait, block]
NOT_TOOLS = 42
'''

PAY_SCRIPT = """\
- calls: [{pay: {amount: 5}}]
- Paid, thank you.
"""


def project(tmp_path: Path, script: str = PAY_SCRIPT) -> Path:
    """A folder with the desk workflow, its tools module and a script."""
    (tmp_path / "desk.yaml").write_text(DESK, encoding="utf-8")
    (tmp_path / "desk_tools.py").write_text(TOOLS, encoding="utf-8")
    (tmp_path / "script.yaml").write_text(script, encoding="utf-8")
    return tmp_path


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OPENAI_", "FORCE_COLOR")) and k != "NO_COLOR"}
    env.update(extra)
    return env


def run(cwd: Path, *args: str, stdin: str | None = None,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "phaseflow.cli.main", "run", *args], cwd=cwd,
        input=stdin, stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True, text=True, timeout=120, check=False,
        env=env if env is not None else clean_env())


DESK_ARGS = ("desk.yaml", "--provider", "scripted:script.yaml", "--tools", "desk_tools:TOOLS")


#: the line a run prints when it creates the default store file
STORE_NOTICE = "phaseflow run: sessions are kept in "


def besides_the_store(stderr: str) -> str:
    """``stderr`` without the line naming the store file a run created."""
    return "".join(line for line in stderr.splitlines(keepends=True)
                   if not line.startswith(STORE_NOTICE))


def events(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines()]
