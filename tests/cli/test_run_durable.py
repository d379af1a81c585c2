"""``phaseflow run`` as a durable worker: killed with SIGKILL in the middle of a tool and
resumed with ``--session`` in a new process, and two processes sending to one session at
once (on SQLite and on PostgreSQL). Real processes, a real store, a tool that appends
every run to a file: no tool runs twice, no message is lost, one conversation."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.phaseflow_cli import PHASEFLOW, cli_env

WORKFLOW = """\
phaseflow: 1
name: desk
initial: work
tools:
  pay:
    description: Pay an amount
phases:
  work:
    goal: Do the work.
    tools: [pay]
"""

TOOLS = '''\
import os, time
from pathlib import Path
from phaseflow.tools import tool

@tool
def pay(amount: float) -> dict:
    """Pay."""
    with open("effects.log", "a") as f:
        f.write(f"pay {amount}\\n")
    if os.environ.get("PAY_WAITS_FOR") :  # blocks until the test lets it go (or 60 s)
        deadline = time.monotonic() + 60
        while not Path(os.environ["PAY_WAITS_FOR"]).exists() and time.monotonic() < deadline:
            time.sleep(0.01)
    return {"paid": amount}

TOOLS = [pay]
'''

SCRIPT = """\
- calls: [{pay: {amount: 5}}]
- Paid, thank you.
- Hello again.
"""


def project(tmp_path: Path) -> Path:
    (tmp_path / "desk.yaml").write_text(WORKFLOW)
    (tmp_path / "desk_tools.py").write_text(TOOLS)
    (tmp_path / "script.yaml").write_text(SCRIPT)
    return tmp_path


def command(store: str, session: str, message: str) -> list[str]:
    return [*PHASEFLOW, "run", "desk.yaml", "--provider",
            "scripted:script.yaml", "--tools", "desk_tools:TOOLS", "--store", store,
            "--session", session, "--message", message]


def start(cwd: Path, store: str, session: str, message: str, **env: str
          ) -> subprocess.Popen[str]:
    return subprocess.Popen(command(store, session, message), cwd=cwd, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=cli_env(**env))


def run(cwd: Path, store: str, session: str, message: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command(store, session, message), cwd=cwd, text=True,
                          capture_output=True, timeout=120, check=False, env=cli_env())


def wait_for_pay(cwd: Path, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    log = cwd / "effects.log"
    # the line itself, not the file: opening it creates the file before the write
    while not (log.exists() and log.read_text().endswith("\n")):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the tool never ran"
        time.sleep(0.01)


def effects(cwd: Path) -> list[str]:
    return (cwd / "effects.log").read_text().splitlines()


def shown(cwd: Path, store: str, session: str) -> dict[str, Any]:
    proc = subprocess.run([*PHASEFLOW, "sessions", "show",
                           session, "--json", "--store", store], cwd=cwd, text=True,
                          capture_output=True, timeout=60, check=False, env=cli_env())
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


def one_conversation(view: dict[str, Any]) -> list[tuple[str, str]]:
    """The history as (role, text) pairs; every tool call has exactly one result."""
    history = view["history"]
    calls = [c["id"] for m in history if m["role"] == "assistant"
             for c in m.get("tool_calls", ())]
    results = [m["tool_call_id"] for m in history if m["role"] == "tool"]
    assert sorted(calls) == sorted(results) and len(set(calls)) == len(calls)
    return [(m["role"], m["content"]) for m in history
            if m["role"] in ("user", "assistant") and m["content"]]


def test_a_killed_run_is_resumed_by_the_next_without_running_its_tool_again(
        tmp_path: Path) -> None:
    cwd = project(tmp_path)
    first = start(cwd, "s.db", "s1", "pay 5", PAY_WAITS_FOR=str(cwd / "never"))
    wait_for_pay(cwd, first)
    first.send_signal(signal.SIGKILL)
    first.communicate()
    assert shown(cwd, "s.db", "s1")["status"] == "running"

    # The dead process held the session's lease for 30 s more; the next run on this
    # machine sees that its holder is gone, takes the session over and finishes the turn.
    second = run(cwd, "s.db", "s1", "are you there?")
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines() == [
        # which turn the bare result belongs to, before it
        "[resuming turn 1 of session s1: the process that ran it stopped before it ended]",
        # (docs/run.md: a call whose outcome is not known is shown as `unknown`)
        "  < pay: unknown The session was interrupted while this call ran; its outcome is "
        "unknown and it was not run again.",
        "agent: Paid, thank you.",
        "you: are you there?",
        "agent: Hello again.",
    ]
    assert effects(cwd) == ["pay 5.0"]  # once
    view = shown(cwd, "s.db", "s1")
    assert view["status"] == "idle" and view["turn"] == 2
    assert one_conversation(view) == [
        ("user", "pay 5"), ("assistant", "Paid, thank you."),
        ("user", "are you there?"), ("assistant", "Hello again.")]


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "s.db")
    dsn: str = request.getfixturevalue("postgres_dsn")
    return dsn


def test_two_runs_at_once_on_one_session_keep_one_conversation(tmp_path: Path,
                                                               store: str) -> None:
    cwd = project(tmp_path)
    session = f"both-{time.monotonic_ns()}"
    gate = cwd / "go"
    holder = start(cwd, store, session, "pay 5", PAY_WAITS_FOR=str(gate))
    wait_for_pay(cwd, holder)

    # While the first process runs the turn, a second one sends to the same session: its
    # message is queued for the holder, and it says so.
    other = run(cwd, store, session, "hello?")
    assert other.returncode == 0, other.stderr
    notice = other.stdout.splitlines()
    assert len(notice) == 1 and notice[0].startswith(f"[session {session} is busy: worker ")
    assert "runs its turn; the message is queued for it" in notice[0]

    gate.touch()  # the tool returns; the holder finishes its turn, then answers the queue
    out, err = holder.communicate(timeout=120)
    assert holder.returncode == 0, err
    assert out.splitlines() == [
        "you: pay 5", "  > pay {\"amount\": 5}", "  < pay: ok {\"paid\": 5.0}",
        "agent: Paid, thank you.", "you: hello?", "agent: Hello again."]
    assert effects(cwd) == ["pay 5.0"]
    view = shown(cwd, store, session)
    assert view["status"] == "idle" and view["turn"] == 2
    assert one_conversation(view) == [
        ("user", "pay 5"), ("assistant", "Paid, thank you."),
        ("user", "hello?"), ("assistant", "Hello again.")]
