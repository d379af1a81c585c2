"""``session.fork(new_id, at_turn=N)``, through the public API, on every store: the fork is
the original as it stood at the end of turn N (compared with what the original was right
after that turn, recorded during the test), the original is untouched, no tool of the
fork's past runs again, the fork talks on (the scripted model picks the reply the
original got next), resumes from the store and forks again; and every refusal leaves the
store as it was."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from phaseflow.errors import ConfigError
from phaseflow.session import ForkRefused, SessionForked
from phaseflow.stores import InvalidSessionId, SessionRecord, Store
from tests.support import forks
from tests.support.store_backends import (
    Backend,
    SQLiteBackend,
    open_backend,
)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    yield from open_backend(request.param, request, tmp_path)


async def _talk(store: Store, turns: int) -> list[dict[str, Any]]:
    """``turns`` turns of the original ``orig``; what it was right after each (index
    turn - 1): its stored record, its events, its replies, the tool runs so far."""
    agent = forks.agent(store)
    session = await agent.session("orig")
    seen = []
    for i in range(turns):
        reply = await session.reply(f"Message {i}")
        record = await store.load("orig")
        assert record is not None
        seen.append({"record": record, "comparable": forks.comparable(record),
                     "reply": str(reply), "history": session.history,
                     "events": await store.events("orig"), "runs": len(forks.RUNS)})
    return seen


def test_a_fork_is_the_session_at_the_end_of_the_turn(backend: Backend) -> None:
    async def body() -> None:
        store = await backend.open()
        seen = await _talk(store, 4)
        original = await forks.agent(store).session("orig")
        before = await store.load("orig")
        assert before is not None
        log = await store.events("orig")
        runs = len(forks.RUNS)

        for at, phase in ((1, "low"), (3, "high")):
            fork = await original.fork(f"fork-{at}", at_turn=at)
            then = seen[at - 1]
            assert (fork.id, fork.turn, fork.status, fork.phase) == (
                f"fork-{at}", at, "idle", phase)
            assert fork.history == then["history"]
            assert dict(fork.state) == {"n": at, "paid": False}
            stored = await store.load(f"fork-{at}")
            assert stored is not None and stored.version == 1
            # history, state, phase, machine snapshot, call ledger, core: all of them
            assert forks.comparable(stored) == then["comparable"]
            # its log: one new event, the original's are not copied
            events = await fork.events()
            assert [type(e) for e in events] == [SessionForked]
            assert (events[0].seq, events[0].turn, events[0].from_session,
                    events[0].at_turn, events[0].session_id) == (1, at, "orig", at, fork.id)

        # the original is untouched: record, version and log
        assert await store.load("orig") == before
        assert await store.events("orig") == log
        assert len(forks.RUNS) == runs  # nothing of the past ran again

        # the fork talks on: the model gets the history of turn 1, so it answers what
        # the original answered at turn 2, and only the new call runs
        fork = await forks.agent(await backend.open()).session("fork-1")
        reply = await fork.reply("Message 1")
        assert str(reply) == seen[1]["reply"]
        assert forks.RUNS[runs:] == [1]
        assert fork.history == seen[1]["history"]
        assert dict(fork.state) == {"n": 2, "paid": False} and fork.phase == "high"
        # a fork of the fork: at its own turn, and at a turn it began with
        again = await fork.fork("fork-1-2", at_turn=2)
        assert again.history == seen[1]["history"] and again.phase == "high"
        older = await fork.fork("fork-1-1", at_turn=1)
        assert older.history == seen[0]["history"] and older.phase == "low"
        assert len(forks.RUNS) == runs + 1
        assert await store.load("orig") == before
    backend.run(body)


def test_refusals_write_nothing(backend: Backend) -> None:
    async def body() -> None:
        store = await backend.open()
        await _talk(store, 2)
        session = await forks.agent(store).session("orig")
        await session.fork("taken", at_turn=1)
        listed = await store.sessions()

        async def refused(new_id: Any, at_turn: Any, match: str,
                          kind: type[Exception] = ForkRefused) -> None:
            with pytest.raises(kind, match=match):
                await session.fork(new_id, at_turn=at_turn)
        await refused("taken", 1, "session 'taken' exists already")
        await refused("orig", 1, "session 'orig' exists already")
        await refused("new", 3, "session 'orig' has not reached turn 3 .it is at turn 2.")
        await refused("new", 10**30, "session 'orig' has not reached turn 1000000")
        await refused("new", 0, "at_turn is a turn number from 1", ConfigError)
        await refused("new", True, "at_turn is a turn number", ConfigError)
        await refused("", 1, "non-empty string", InvalidSessionId)
        await refused("a\x00b", 1, "NUL", InvalidSessionId)
        assert await store.sessions() == listed
        assert await store.version("new") == 0
    backend.run(body)


def test_a_turn_that_has_not_ended_cannot_be_forked(backend: Backend) -> None:
    """A turn waiting for a human, and one that runs (its tool is still running)."""
    async def body() -> None:
        store = await backend.open()
        agent = forks.agent(store, 0, extra=[{"calls": [{"pay": {}}]}, "Paid."])
        session = await agent.session("orig")
        await session.reply("Pay, please")
        assert session.status == "awaiting_approval"
        with pytest.raises(ForkRefused, match=r"turn 1 of session 'orig' has not ended "
                           r"\(it waits for approval\)"):
            await session.fork("new", at_turn=1)
        await session.cancel_pending()  # a cancelled turn has ended: it can be forked
        fork = await session.fork("new", at_turn=1)
        assert fork.status == "idle" and fork.pending_approval is None

        started, release = asyncio.Event(), asyncio.Event()

        async def slow(n: int = 0) -> dict[str, Any]:
            started.set()
            await release.wait()
            return {"n": n + 1}
        import phaseflow
        blocking = phaseflow.Agent(
            phaseflow.load_workflow_text(forks.WORKFLOW),
            phaseflow.ScriptedProvider([{"calls": [{"bump": {"n": 5}}]}, "Counted."]),
            tools={"bump": slow}, store=store)
        running = await blocking.session("busy")
        turn = asyncio.ensure_future(running.reply("Count"))
        await asyncio.wait_for(started.wait(), 60)
        with pytest.raises(ForkRefused, match=r"turn 1 of session 'busy' has not ended "
                           r"\(it is running\)"):
            await running.fork("new-2", at_turn=1)
        release.set()
        assert str(await asyncio.wait_for(turn, 60)) == "Counted."
        assert (await running.fork("new-2", at_turn=1)).state["n"] == 6
    backend.run(body)


def test_a_turn_the_store_has_no_record_of_is_refused_saying_so(tmp_path: Path) -> None:
    """A turn that ended before the store kept records (its rows deleted, as in a store
    upgraded from schema version 1): refused, naming the reason; later turns fork."""
    sqlite = SQLiteBackend(tmp_path / "s.db")
    try:
        async def body() -> None:
            store = await sqlite.open()
            await _talk(store, 2)
            await sqlite.sql("DELETE FROM turns WHERE turn = 1")
            session = await forks.agent(await sqlite.open()).session("orig")
            with pytest.raises(ForkRefused, match=r"the store has no record of the end of "
                               r"turn 1 of session 'orig'.*schema version 2"):
                await session.fork("new", at_turn=1)
            assert await store.version("new") == 0
            assert (await session.fork("new", at_turn=2)).turn == 2
        sqlite.run(body)
    finally:
        sqlite.finish()


def test_two_forks_onto_one_id_one_wins(tmp_path: Path) -> None:
    """Two writers (two store objects on one file) fork onto the same id at once: one
    fork is made, the other is refused (by the check, or by the commit's compare-and-set
    when both passed the check)."""
    sqlite = SQLiteBackend(tmp_path / "s.db")
    try:
        async def body() -> None:
            await _talk(await sqlite.open(), 2)
            sessions = [await forks.agent(await sqlite.open()).session("orig")
                        for _ in range(2)]
            outcomes = await asyncio.gather(
                *(s.fork("same", at_turn=t) for s, t in zip(sessions, (1, 2), strict=True)),
                return_exceptions=True)
            made = [o for o in outcomes if not isinstance(o, BaseException)]
            lost = [o for o in outcomes if isinstance(o, BaseException)]
            assert len(made) == 1 and len(lost) == 1, outcomes
            assert isinstance(lost[0], ForkRefused)
            assert "session 'same' exists already" in str(lost[0])
            stored = await (await sqlite.open()).load("same")
            assert isinstance(stored, SessionRecord) and stored.turn == made[0].turn
        sqlite.run(body)
    finally:
        sqlite.finish()


def test_fork_sync() -> None:
    from phaseflow.stores import MemoryStore

    store = MemoryStore()
    session = forks.agent(store).session_sync("orig")
    session.reply_sync("Message 0")
    session.reply_sync("Message 1")
    fork = session.fork_sync("sync", at_turn=1)
    assert fork.turn == 1 and fork.state["n"] == 1
    assert str(fork.reply_sync("Message 1")) == "Reply 1"


def test_a_fork_s_first_turns_come_from_its_original_only_while_it_is_the_same(
        tmp_path: Path) -> None:
    """A fork of a fork at a turn the first fork began with is read from the original;
    once the original is deleted, or made anew under its id with another conversation,
    that turn is refused (never another conversation's history)."""
    sqlite = SQLiteBackend(tmp_path / "s.db")
    try:
        async def body() -> None:
            store = await sqlite.open()
            seen = await _talk(store, 2)
            branch = await (await forks.agent(store).session("orig")).fork("b", at_turn=2)
            assert (await branch.fork("b1", at_turn=1)).history == seen[0]["history"]
            assert await store.delete("orig")
            with pytest.raises(ForkRefused, match="no record of the end of turn 1"):
                await branch.fork("b2", at_turn=1)
            other = await forks.agent(store).session("orig")
            await other.reply("Something else entirely")
            await other.reply("And more")
            with pytest.raises(ForkRefused, match="no record of the end of turn 1"):
                await branch.fork("b2", at_turn=1)
            assert await store.version("b2") == 0
        sqlite.run(body)
    finally:
        sqlite.finish()


def test_the_last_message_edited_is_asked_again_as_a_branch(tmp_path: Path) -> None:
    """``edit_last``: the session forked at the end of the turn before its last, the
    edited message sent there; the earlier branch (the session itself) kept; both
    listed and opened by id."""
    sqlite = SQLiteBackend(tmp_path / "s.db")
    try:
        async def body() -> None:
            store = await sqlite.open()
            seen = await _talk(store, 2)
            session = await forks.agent(store).session("orig")
            before = await store.load("orig")
            runs = len(forks.RUNS)
            first = await session.edit_last("Message 1, edited")
            assert first.id == "orig~1" and first.turn == 2
            assert first.history[:4] == seen[0]["history"]
            assert first.history[4].content == "Message 1, edited"
            assert str(first.history[-1].content) == seen[1]["reply"]  # the model's answer
            assert forks.RUNS[runs:] == [1]  # the edited turn's call, once
            second = await session.edit_last("Message 1, again", branch="orig-b")
            third = await session.edit_last("Message 1, once more")
            assert (second.id, third.id) == ("orig-b", "orig~2")
            assert await store.load("orig") == before  # the earlier branch, kept
            assert await session.branches() == ("orig~1", "orig~2")  # ID~k, forked from it
            again = await forks.agent(await sqlite.open()).session("orig~1")
            assert again.history == first.history
            # a branch's own last message can be edited in turn
            assert (await again.edit_last("Edited twice")).id == "orig~1~1"
            fresh = await forks.agent(store).session("one")
            await fresh.reply("Only message")
            with pytest.raises(ForkRefused, match="session 'one' has one turn: a branch "
                               "starts from the end of the turn before"):
                await fresh.edit_last("Edited")
            assert await store.version("one~1") == 0
        sqlite.run(body)
    finally:
        sqlite.finish()
