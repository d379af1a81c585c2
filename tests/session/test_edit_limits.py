"""Edit limits: the host says which lines of a file tools may change; a tool reads them
from its context (``ctx.may_edit``) and refuses the rest. Stored with the session."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import phaseflow
from phaseflow.providers import ScriptedProvider
from phaseflow.session import Agent, EditLimitRefused
from phaseflow.stores import SQLiteStore
from phaseflow.tools import ToolContext, tool

WORKFLOW = """\
phaseflow: 1
name: editor
initial: edit
tools:
  patch: {}
phases:
  edit:
    goal: Edit files.
    tools: [patch]
"""

DONE: list[str] = []


@tool
def patch(ctx: ToolContext, path: str, start: int, end: int) -> str:
    """Replace lines start..end of a file."""
    if not ctx.may_edit(path, start, end):
        return f"refused: lines {start}-{end} of {path} are outside what you may edit"
    DONE.append(f"{path}:{start}-{end}")
    return "patched"


def agent(script: list[Any], **options: Any) -> Agent:
    return Agent(phaseflow.load_workflow_text(WORKFLOW), ScriptedProvider(script),
                 tools=[patch], **options)


def test_a_tool_may_edit_only_the_lines_the_host_allows(tmp_path: Path) -> None:
    DONE.clear()
    script = [{"calls": [{"patch": {"path": "/src/a.py", "start": 10, "end": 12}},
                         {"patch": {"path": "/src/a.py", "start": 30, "end": 31}},
                         {"patch": {"path": "/src/b.py", "start": 1, "end": 2}}]},
              "Done."]
    store = SQLiteStore(tmp_path / "s.db")
    session = agent(script, store=store).session_sync("s")
    session.limit_edits_sync("/src/a.py", 5, 20)
    assert session.edit_ranges == (("/src/a.py", 5, 20),)
    reopened = agent(script, store=SQLiteStore(tmp_path / "s.db")).session_sync("s")
    assert reopened.edit_ranges == (("/src/a.py", 5, 20),)  # stored
    events = reopened.send_sync("fix it")
    results = [e.content for e in events if e.type == "tool_result"]
    assert results[0] == "patched" and results[2] == "patched"
    assert results[1].startswith("refused: lines 30-31")
    assert DONE == ["/src/a.py:10-12", "/src/b.py:1-2"]  # b.py is not limited
    reopened.lift_edit_limit_sync("/src/a.py")
    assert reopened.edit_ranges == ()


def test_an_edit_limit_that_is_not_one_is_refused() -> None:
    session = agent([]).session_sync("s")
    with pytest.raises(EditLimitRefused, match="absolute"):
        session.limit_edits_sync("src/a.py", 1, 2)
    with pytest.raises(EditLimitRefused, match="range"):
        session.limit_edits_sync("/src/a.py", 5, 2)
    ctx = ToolContext("s", "c", "edit", {}, (("/a", 1, 3),))
    assert ctx.may_edit("/a", 1, 3) and not ctx.may_edit("/a", 2)  # (to the end: no)
    assert ctx.may_edit("/b")
