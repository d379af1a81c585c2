"""Real sessions for the store tests: the bundled support agent (refund desk, tools,
hooks, a scripted model), a small chat workflow, and a recorder of what a session
commits (so a store can be fed a real session's commits one by one)."""

from __future__ import annotations

import dataclasses
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import phaseflow
from examples import support_agent
from phaseflow.providers import ScriptedProvider
from phaseflow.session import Agent, Session
from phaseflow.stores import MemoryStore, SessionRecord, Store
from tests.support.phaseflow_cli import cli_env, run_phaseflow

CHAT = """\
phaseflow: 1
name: chat
initial: talk
state:
  topic: {type: string}
phases:
  talk:
    goal: Chat with the user.
    collect: [topic]
"""


def support(store: Store) -> Agent:
    """The example's agent on ``store``, with a fresh copy of its script."""
    return Agent(support_agent.WORKFLOW, ScriptedProvider(support_agent.SCRIPT),
                 hooks=support_agent.HOOKS,
                 tools=[support_agent.lookup_customer, support_agent.select_order,
                        support_agent.issue_refund],
                 system="You are the support agent of Acme.", store=store)


async def drain(stream: Any) -> list[Any]:
    return [e async for e in stream]


async def until_approval(session: Session) -> None:
    """The example's two messages; the second stops at the refund's approval."""
    await drain(session.send("Hi, I'd like a refund. I'm ada@example.com"))
    await drain(session.send("Order O-9. It arrived broken."))


def view(session: Session) -> dict[str, Any]:
    """What a host sees of a session (to compare a reopened one with the original)."""
    pending = session.pending_approval
    return {"id": session.id, "phase": session.phase, "status": session.status,
            "turn": session.turn, "history": session.history,
            "state": dict(session.state), "pending": None if pending is None else (
                pending.call_id, pending.name, pending.arguments, pending.arguments_hash,
                pending.reason)}


class Recorder(MemoryStore):
    """A memory store that keeps every commit it accepted: (record, events)."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[tuple[SessionRecord, tuple[Mapping[str, Any], ...]]] = []

    async def commit(self, record: SessionRecord, events: Sequence[Mapping[str, Any]], *,
                     expected_version: int, **options: Any) -> tuple[int, ...]:
        seqs = await super().commit(record, events, expected_version=expected_version,
                                    **options)
        self.log.append((record, tuple(events)))
        return seqs


async def chat_commits(turns: int, session_id: str = "chat") -> Recorder:
    """A real ``turns``-turn chat, on a recorder: its commits, in order."""
    recorder = Recorder()
    wf = phaseflow.load_workflow_text(CHAT)
    agent = Agent(wf, ScriptedProvider([f"Reply number {i}." for i in range(turns)]),
                  store=recorder)
    session = await agent.session(session_id)
    for i in range(turns):
        await drain(session.send(f"Message number {i}."))
    # Runner.record() stamps created_at = now on every commit of a session it created
    # (it never remembers the first): pin it to the first commit's, as a store keeps it.
    created = recorder.log[0][0].created_at
    recorder.log = [(dataclasses.replace(r, created_at=created), e) for r, e in recorder.log]
    return recorder


def cli(*args: str | bytes, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``phaseflow ARGS`` in a process of its own, as a user runs it (``bytes``: an
    argument as the shell passes it, not necessarily UTF-8)."""
    return run_phaseflow(*args, cwd=cwd, timeout=120, env=cli_env())


def renumber(record: SessionRecord, version: int, **changes: Any) -> SessionRecord:
    """``record`` at ``version`` with ``changes``; a new ``turn`` is its core's turn too
    (a record's turn is what its core says: one truth)."""
    if "turn" in changes:
        changes["core"] = {**record.core, "turn": changes["turn"]}
    return dataclasses.replace(record, version=version, **changes)


_ONE_TURN: list[SessionRecord] = []


async def seed(store: Store, session_id: str = "s", *, events: int = 1) -> SessionRecord:
    """A real session's record after one turn, committed as ``session_id`` (version 1)."""
    if not _ONE_TURN:
        _ONE_TURN.append((await chat_commits(1, "seed")).log[-1][0])
    first = renumber(_ONE_TURN[0], 1, session_id=session_id)
    await store.commit(first, [{"type": "note", "n": k} for k in range(events)],
                       expected_version=0)
    return first
