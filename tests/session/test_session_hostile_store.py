"""The session under attack from its store: a pending approval altered in the database
(as an operator with sqlite3 would) is refused when the session loads and reported as
damage by ``phaseflow sessions show``, never run or shown with the forged amount."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from phaseflow.providers import ScriptedProvider
from phaseflow.session import Agent, SessionError
from phaseflow.stores import SQLiteStore
from tests.support.hostile_desk import RAN, TOOLS, workflow
from tests.support.phaseflow_cli import PHASEFLOW


def _rewrite_approval_arguments(path: Path, amount: float) -> int:
    """As an operator with sqlite3 would: change the amount of the stored pending
    approval only (the copy a human is shown). Returns how many copies changed."""
    db = sqlite3.connect(path)
    (snapshot,) = db.execute("SELECT snapshot FROM sessions WHERE id = 's'").fetchone()
    data = json.loads(snapshot)
    changed = 0

    def walk(node: Any, inside: bool) -> Any:
        nonlocal changed
        if isinstance(node, dict):
            out = {}
            for key, value in node.items():
                out[key] = walk(value, inside or key == "pending_approval")
            return out
        if isinstance(node, list):
            return [walk(v, inside) for v in node]
        if inside and node == 5000:
            changed += 1
            return amount
        return node

    data = walk(data, False)
    db.execute("UPDATE sessions SET snapshot = ? WHERE id = 's'", (json.dumps(data),))
    db.commit()
    db.close()
    return changed


def test_an_approval_altered_in_the_store_is_refused_and_never_runs(tmp_path: Path) -> None:
    RAN.clear()
    path = tmp_path / "s.db"
    provider = ScriptedProvider([{"calls": [{"pay": {"amount": 5000}}]}, "paid"])
    first = Agent(workflow(), provider, tools=TOOLS, store=SQLiteStore(path))
    session = first.session_sync("s")
    assert session.reply_sync("pay 5000").status == "awaiting_approval"
    assert _rewrite_approval_arguments(path, 5) == 1
    again = Agent(workflow(), ScriptedProvider(["paid"]), tools=TOOLS,
                  store=SQLiteStore(path))
    with pytest.raises(SessionError, match=r"'s'.*pending approval.*altered"):
        again.session_sync("s")
    assert RAN == []


def test_sessions_show_reports_an_altered_approval_as_damage(tmp_path: Path) -> None:
    """What an approver reads on the command line is what the API would run, or nothing:
    the altered approval is one line, exit 1, never the forged amount."""
    import subprocess

    path = tmp_path / "s.db"
    provider = ScriptedProvider([{"calls": [{"pay": {"amount": 5000}}]}, "paid"])
    session = Agent(workflow(), provider, tools=TOOLS, store=SQLiteStore(path)).session_sync("s")
    assert session.reply_sync("pay 5000").status == "awaiting_approval"
    assert _rewrite_approval_arguments(path, 5) == 1
    for extra in ([], ["--json"]):
        out = subprocess.run([*PHASEFLOW, "sessions", "show",
                              "s", "--store", str(path), *extra],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 1, out
        assert out.stdout == ""
        assert "pending approval of call" in out.stderr and "altered" in out.stderr
        assert len(out.stderr.strip().splitlines()) == 1
