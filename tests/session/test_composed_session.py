"""Sessions inside a callee three levels deep, through the public API (``Agent``,
``Session``): the ``top`` workflow talks, then enters ``mid``, which calls ``inner``,
where the tools are. An approval asked and answered there, plan mode, history
compaction, a fork at a turn inside the callee, what the model is sent with
``history: full``, ``since_call`` and ``summary``; and ``phase_changed`` naming the
phase the conversation ends up in, with its path."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from phaseflow import Agent, ScriptedProvider, SQLiteStore
from tests.support.composed_tree import (
    CRASH_SCRIPT,
    DEEP,
    ENTER,
    RUNS,
    TOOLS,
    tree,
)


def agent(folder: Path, replies: list[Any], history: str = "full", **options: Any
          ) -> tuple[Agent, ScriptedProvider]:
    model = ScriptedProvider(replies)
    return Agent(tree(folder, history), model, tools=TOOLS, **options), model


def test_an_approval_inside_a_callee(tmp_path: Path) -> None:
    RUNS.clear()
    desk, _ = agent(tmp_path, [ENTER, "In the order desk.",
                               {"calls": [{"orders.cancel": {"order_id": "O-9"}}]},
                               "O-9 is cancelled."])
    session = desk.session_sync("a1")
    session.reply_sync("Hello, my order please")
    assert session.path == DEEP
    moved = [e for e in session.events_sync() if e.type == "phase_changed"]
    # the move's target was `enter`; the conversation ended up in inner's `work`
    assert [(e.from_phase, e.to_phase, e.path) for e in moved] == [("chat", "work", DEEP)]
    waiting = session.reply_sync("Cancel O-9")
    assert waiting.status == "awaiting_approval" and RUNS == []
    pending = session.pending_approval
    assert pending is not None and pending.name == "orders.cancel"
    done = session.approve_sync(pending.call_id)
    assert done == "O-9 is cancelled." and RUNS == ["O-9"]
    assert session.path == DEEP


def test_plan_mode_inside_a_callee(tmp_path: Path) -> None:
    RUNS.clear()
    desk, _ = agent(tmp_path, [ENTER, "In.",
                               {"calls": [{"orders.find": {"order_id": "O-9"}},
                                          {"orders.cancel": {"order_id": "O-9"}}]},
                               "I would cancel O-9."], mode="plan")
    session = desk.session_sync("p1")
    session.reply_sync("Hi")
    session.reply_sync("Cancel O-9")
    assert [c.name for c in session.plan] == ["orders.cancel"] and RUNS == []
    assert session.path == DEEP


def test_compaction_inside_a_callee(tmp_path: Path) -> None:
    desk, model = agent(tmp_path, [ENTER, "In.", *["Noted."] * 40],
                        max_history_tokens=80)
    session = desk.session_sync("c1")
    session.reply_sync("Hi")
    for n in range(12):
        session.reply_sync(f"Message {n}: " + "tell me more about my order " * 3)
    assert session.path == DEEP
    told = [m for r in model.requests for m in r.history]
    assert any("Summary of the earlier conversation" in str(m.content) for m in told)
    assert "Message 11" in str(model.requests[-1].history[-1].content)


def test_fork_at_a_turn_inside_a_callee(tmp_path: Path) -> None:
    desk, _ = agent(tmp_path, [ENTER, "In.", "One.", "Two."])
    session = desk.session_sync("f1")
    for text in ("Hi", "first", "second"):
        session.reply_sync(text)
    fork = session.fork_sync("f2", at_turn=2)
    assert fork.path == DEEP and fork.turn == 2
    assert "second" not in [str(m.content) for m in fork.history]


@pytest.mark.parametrize("history", ["full", "since_call", "summary"])
def test_what_the_callee_is_sent(tmp_path: Path, history: str) -> None:
    desk, model = agent(tmp_path, [ENTER, "In.", "Inside."], history=history)
    session = desk.session_sync("h1")
    session.reply_sync("Top secret before the call")
    session.reply_sync("Now inside")
    assert session.path == DEEP
    sent = [str(m.content) for m in model.requests[-1].history if m.role != "system"]
    before = [t for t in sent if "Top secret before the call" in t]
    assert "Now inside" in sent[-1] or any("Now inside" in t for t in sent)
    if history == "full":
        assert before and sent[0] == "Top secret before the call"
    elif history == "since_call":
        assert before == [], sent
    else:
        # one user message sums up what came before: the last thing the user said
        assert len(before) == 1 and before[0] != "Top secret before the call", sent


CRASHING = """\
import sys, time
from pathlib import Path
from phaseflow import Agent, ScriptedProvider, SQLiteStore
from tests.support.composed_tree import CRASH_SCRIPT, TOOLS, tree

def note(order_id: str) -> str:
    with open({effects!r}, "a", encoding="utf-8") as f:
        f.write(order_id + "\\n")
    time.sleep(120)  # killed here, while the callee's tool runs
    return "noted"

agent = Agent(tree(Path({folder!r})), ScriptedProvider(CRASH_SCRIPT),
              tools={{**TOOLS, "orders.note": note}}, store=SQLiteStore({db!r}))
session = agent.session_sync("crash-1")
session.reply_sync("Hi")
session.reply_sync("Note O-9")
"""

def test_a_crash_while_a_callee_tool_runs_resumes_in_the_callee(tmp_path: Path) -> None:
    effects, db = tmp_path / "effects.txt", tmp_path / "s.db"
    code = CRASHING.format(effects=str(effects),
                           folder=str(tmp_path), db=str(db))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    child = subprocess.Popen([sys.executable, "-c", code], env=env)
    try:
        deadline = time.monotonic() + 60
        while not (effects.exists() and effects.read_text()) and time.monotonic() < deadline:
            assert child.poll() is None, "the worker ended before its tool ran"
            time.sleep(0.05)
        assert effects.read_text() == "O-9\n", "the tool never started"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)

    def never(order_id: str) -> str:
        raise AssertionError("the interrupted tool ran again")

    agent = Agent(tree(tmp_path), ScriptedProvider(CRASH_SCRIPT),
                  tools={**TOOLS, "orders.note": never}, store=SQLiteStore(str(db)))
    session = agent.session_sync("crash-1")
    assert session.status == "running" and session.path == DEEP
    recovered = session.recover_sync()
    results = [e for e in recovered if e.type == "tool_result"]
    assert [(e.name, e.status) for e in results] == [("orders.note", "unknown")]
    assert session.path == DEEP  # resumed inside the callee, at the same place
    assert effects.read_text() == "O-9\n"  # run once
    finished = [e for e in recovered if e.type == "turn_finished"]
    assert finished and finished[-1].reply == "The note is on O-9."
    # the callee goes on and returns to its callers as if nothing happened
    events = session.send_sync("Close it")
    assert session.path == ("top", "end")
    moved = [(e.from_phase, e.to_phase, e.path) for e in events if e.type == "phase_changed"]
    assert moved == [("work", "end", ("top", "end"))], moved
