"""The desk project of the ``phaseflow run`` tests and how they run it: a workflow with
one tool that needs approval and two slow ones, its tools module, a script for the scripted
model, and ``phaseflow run`` as a real process (launched and given its environment by
:mod:`tests.support.phaseflow_cli`)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.support.desk_project import PAY_TOOL, desk_workflow
from tests.support.phaseflow_cli import cli_env, run_phaseflow

#: a small workflow: one tool that needs approval, two slow ones, a terminal phase
DESK = desk_workflow("""\
  slow.wait:
    description: Wait a long time (async, so a cancellation stops it)
  slow.block:
    description: Block the process a long time (sync)
""", '[pay, "slow.*"]')

TOOLS = '''\
import asyncio
import time

from phaseflow.tools import tool


''' + PAY_TOOL + '''

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


def run(cwd: Path, *args: str, stdin: str | None = None,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``phaseflow run ARGS`` in ``cwd``, to the end (two minutes at most)."""
    return run_phaseflow("run", *args, cwd=cwd, input=stdin, timeout=120,
                         env=env if env is not None else cli_env())


DESK_ARGS = ("desk.yaml", "--provider", "scripted:script.yaml", "--tools", "desk_tools:TOOLS")


#: the line a run prints when it creates the default store file
STORE_NOTICE = "phaseflow run: sessions are kept in "


def besides_the_store(stderr: str) -> str:
    """``stderr`` without the line naming the store file a run created."""
    return "".join(line for line in stderr.splitlines(keepends=True)
                   if not line.startswith(STORE_NOTICE))


def events(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines()]
