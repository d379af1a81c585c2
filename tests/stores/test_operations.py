"""The durable stores' operations on their own (``phaseflow/stores/operations.py``): the
steps a commit and a lease take, driven here by a script of answers instead of a
database, so what every backend is asked to do, and in which order, is tested once."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from phaseflow.stores import StoreConflict, StoreError, StoreFenced, codec, operations
from phaseflow.stores.base import Lease
from phaseflow.stores.operations import CommitRequest
from tests.support.store_sessions import chat_commits, renumber

_LOG = asyncio.run(chat_commits(2, "s")).log
_FIRST = renumber(_LOG[1][0], 1)  # the end of turn 1: 2 messages, a mark
_SECOND = renumber(_LOG[3][0], 2)  # the end of turn 2: it extends the first


def _run(steps: operations.Steps[Any], answers: dict[type, Any]) -> tuple[list[Any], Any]:
    """Drive ``steps``, answering each step by its type (a write gets ``None``); the
    steps taken and the result."""
    taken: list[Any] = []

    def do(step: operations.Step) -> Any:
        taken.append(step)
        return answers.get(type(step))
    return taken, operations.drive(steps, do)


def _kinds(steps: list[Any]) -> list[str]:
    return [type(s).__name__ for s in steps]


def test_a_first_commit_creates_the_row_and_writes_the_whole_history() -> None:
    taken, (seqs, known) = _run(
        operations.commit(_FIRST, [{"type": "a"}, {"type": "b"}], None, CommitRequest(0)),
        {operations.CreateSession: True})
    assert _kinds(taken) == ["ReadCommit", "CreateSession", "DropHistory", "Append",
                             "Append", "Append"]
    messages, events = taken[3], taken[5]
    assert (messages.table, messages.start) == ("messages", 0)
    assert len(messages.rows) == len(_FIRST.continuation.messages)
    assert (events.table, events.start, len(events.rows)) == ("events", 1, 2)
    assert seqs == (1, 2) and len(known.messages) == len(_FIRST.continuation.messages)


def test_a_later_commit_updates_the_row_and_appends_only_what_was_added() -> None:
    _, (_, known) = _run(operations.commit(_FIRST, [], None, CommitRequest(0)),
                         {operations.CreateSession: True})
    stored = (1, len(_FIRST.continuation.messages), len(_FIRST.continuation.marks), 3, 4,
              "w")
    lease = Lease("s", "w", 4, 100.0)
    taken, (seqs, _) = _run(
        operations.commit(_SECOND, [{"type": "c"}], known, CommitRequest(
            1, lease=lease, consumed=9, release=True, keep_turn=True)),
        {operations.ReadCommit: stored})
    assert _kinds(taken)[:2] == ["ReadCommit", "UpdateSession"]
    assert "DropHistory" not in _kinds(taken)
    update = taken[1]
    assert (update.placeholder, update.release) == (False, True)
    appended = {s.table: s for s in taken if isinstance(s, operations.Append)}
    assert appended["messages"].start == len(_FIRST.continuation.messages)
    assert appended["events"].start == 4 and seqs == (4,)
    assert taken[-2:] == [operations.Consume("s", 9), taken[-1]]
    assert isinstance(taken[-1], operations.KeepTurn)


def test_a_creation_another_writer_won_conflicts_and_writes_nothing_more() -> None:
    with pytest.raises(StoreConflict, match="no longer 0"):
        _run(operations.commit(_FIRST, [{"type": "a"}], None, CommitRequest(0)),
             {operations.CreateSession: False})


def test_a_fenced_commit_stops_at_its_read() -> None:
    taken: list[Any] = []
    with pytest.raises(StoreFenced):
        operations.drive(
            operations.commit(_SECOND, [], None, CommitRequest(
                1, lease=Lease("s", "w", 4, 100.0))),
            lambda step: taken.append(step) or (1, 0, 0, 0, 5, "other"))
    assert _kinds(taken) == ["ReadCommit"]


def test_what_is_not_json_is_refused_before_the_first_step() -> None:
    with pytest.raises(StoreError, match="an event is not JSON"):
        operations.commit(_FIRST, [{"type": object()}], None, CommitRequest(0))


def test_a_lease_is_written_only_when_the_rule_gives_it() -> None:
    taken, lease = _run(operations.acquire("s", "w2", 10.0, 100.0, force=False,
                                           replacing=None),
                        {operations.LockLease: ("w1", 105.0, 3, 7)})
    assert lease is None and _kinds(taken) == ["LockLease"]
    taken, lease = _run(operations.acquire("s", "w2", 10.0, 200.0, force=False,
                                           replacing=None),
                        {operations.LockLease: ("w1", 105.0, 3, 7)})
    assert lease == Lease("s", "w2", 4, 210.0) and lease.version == 7
    assert taken[-1] == operations.SetLease("s", "w2", 210.0, 4)


def test_a_lease_on_a_session_deleted_meanwhile_conflicts() -> None:
    with pytest.raises(StoreConflict, match="deleted"):
        _run(operations.acquire("s", "w", 10.0, 0.0, force=False, replacing=None), {})


def test_the_async_driver_runs_the_same_steps() -> None:
    async def do(step: operations.Step) -> Any:
        return True if isinstance(step, operations.CreateSession) else None

    seqs, _ = asyncio.run(operations.drive_async(
        operations.commit(_FIRST, [{"type": "a"}], None, CommitRequest(0)), do))
    assert seqs == (1,)


def test_a_damaged_counter_read_by_a_commit_is_an_error() -> None:
    with pytest.raises(codec.StoreDataError, match="version"):
        _run(operations.commit(_SECOND, [], None, CommitRequest(1)),
             {operations.ReadCommit: (-1, 0, 0, 0, 0, None)})
