"""docs/sessions.md: its Python blocks run, in order, as one program, and do what the
page says."""

from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "sessions.md"


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


def test_the_guide_s_python_blocks_run_in_order(capsys: object) -> None:
    blocks = [b for b in _blocks() if "class Provider(Protocol)" not in b]
    assert len(blocks) >= 3
    namespace: dict[str, object] = {"__name__": "docs_sessions"}
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        for block in blocks:
            if "session.pending_approval" in block and "async for" in block:
                continue  # a fragment inside a coroutine, shown in context elsewhere
            exec(compile(block, str(DOC), "exec"), namespace)
    finally:
        os.chdir(cwd)


def test_the_complete_agent_is_under_40_lines() -> None:
    first = _blocks()[0]
    lines = [line for line in first.splitlines() if line.strip()]
    assert len(lines) <= 40, len(lines)
