"""Timers inside a called workflow: a callee's ``after`` and its guard on
``seconds_in_phase`` fire as timers of the session that called it - through
``Agent.fire_timers`` and through ``phaseflow sessions tick`` as cron runs it - each
once, the deadline read from the callee's current phase."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from phaseflow import load_workflow
from phaseflow.providers.scripted import ScriptedProvider
from phaseflow.session import Agent
from phaseflow.stores.sqlite import SQLiteStore
from tests.support.phaseflow_cli import RunCli, cli_env

TOP = """\
phaseflow: 1
name: top
initial: chat
uses: {waiter: waiter.yaml}
state:
  go: {type: boolean}
phases:
  chat:
    goal: Chat until the customer is to wait.
    collect: [go]
    transitions:
      - to: waiting
        when: state.go
  waiting:
    goal: The waiting desk.
    call: waiter
    transitions:
      - to: end
        when: returned == 'done'
  end:
    goal: Done.
    terminal: true
"""

WAITER = """\
phaseflow: 1
name: waiter
initial: wait
phases:
  wait:
    goal: Wait for the customer's answer.
    transitions:
      - to: follow_up
        after: AFTER
  follow_up:
    goal: Follow up with the customer.
    transitions:
      - to: done
        when: seconds_in_phase >= GUARD
  done:
    goal: Give up waiting.
    terminal: true
"""


def _tree(folder: Path, after: str, guard: str) -> Path:
    (folder / "top.yaml").write_text(TOP)
    (folder / "waiter.yaml").write_text(WAITER.replace("AFTER", after).replace("GUARD", guard))
    return folder / "top.yaml"


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _timer_turns(events: tuple[Any, ...]) -> list[Any]:
    return [e for e in events if e.type == "turn_started" and e.note == "timer"]


def test_a_callees_after_and_time_guard_fire_through_fire_timers(tmp_path: Path) -> None:
    async def body() -> None:
        clock = Clock()
        top = load_workflow(_tree(tmp_path, "10m", "300"))
        provider = ScriptedProvider([{"calls": [{"record": {"go": True}}]}, "Please wait.",
                                     "Any news?", "I give up waiting."])
        agent = Agent(top, provider, store=SQLiteStore(str(tmp_path / "s.db")), clock=clock,
                      phase_clock=clock)
        session = await agent.session("s")
        await session.reply("I will check and come back")
        assert session.path == ("top", "waiting", "waiter", "wait")
        assert session.next_timer_at == clock.now + 600  # the callee's phase's timer
        clock.now += 599
        assert await agent.fire_timers() == 0
        clock.now += 1
        assert await agent.fire_timers() == 1
        s = await agent.session("s")
        assert s.path == ("top", "waiting", "waiter", "follow_up")
        assert "Follow up with the customer" in provider.told()
        assert s.next_timer_at == clock.now + 300  # the callee's guard on time
        clock.now += 300
        assert await agent.fire_timers() == 1
        s = await agent.session("s")
        assert s.path == ("top", "end") and s.status == "finished"
        assert len(_timer_turns(await s.events())) == 2
        assert await agent.fire_timers() == 0 and s.next_timer_at is None
    asyncio.run(body())


def test_a_callees_timers_fire_through_sessions_tick(tmp_path: Path,
                                                      phaseflow_cli: RunCli) -> None:
    _tree(tmp_path, "1s", "1")
    (tmp_path / "replies.yaml").write_text(
        "- calls: [{record: {go: true}}]\n- Please wait.\n- Any news?\n- I give up waiting.\n")
    store = str(tmp_path / "s.db")
    ran = phaseflow_cli("run", "top.yaml", "--provider", "scripted:replies.yaml", "--store",
                        store, "--session", "c1", "-m", "I will check", cwd=tmp_path,
                        env=cli_env())
    assert ran.returncode == 0, ran.stderr
    tick = ("sessions", "tick", "--store", store, "--workflow", "top.yaml", "--provider",
            "scripted:replies.yaml")

    def show() -> dict[str, Any]:
        shown: dict[str, Any] = json.loads(phaseflow_cli(
            "sessions", "show", "c1", "--store", store, "--json", env=cli_env()).stdout)
        return shown

    for phase in ("follow_up", "end"):
        due = show()["next_timer_at"]
        assert due is not None
        time.sleep(max(0.0, due - time.time()) + 0.1)
        fired = phaseflow_cli(*tick, cwd=tmp_path, env=cli_env())
        assert fired.returncode == 0, fired.stderr
        assert fired.stdout.strip() == "fired 1 timer(s) of top"
        assert show()["phase"] == phase
    again = phaseflow_cli(*tick, cwd=tmp_path, env=cli_env())
    assert again.stdout.strip() == "fired 0 timer(s) of top"
    shown = show()
    assert (shown["status"], shown["next_timer_at"]) == ("finished", None)
    notes = [m for m in shown["history"] if m.get("note") == "timer"]
    assert len(notes) == 2 and all(m["content"].startswith("[timer]") for m in notes)
