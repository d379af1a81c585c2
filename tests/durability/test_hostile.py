"""A store whose rows were damaged (a disk, an operator, a bug elsewhere): opening the
session raises a PhaseflowError that names it - never a traceback of some other error
type, never a silently different session. Hypothesis damages the snapshot at random."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phaseflow.errors import PhaseflowError
from tests.support.durability.worker import Killer, WorkerSpec, build_agent

SID = "hostile-1"


async def _make(db: str) -> None:
    agent, store = build_agent(WorkerSpec(db, SID, "/dev/null", "send", approval_every=0),
                               Killer(None, ""))
    session = await agent.session(SID)
    for text in ("message 1", "message 2"):
        async for _e in session.send(text):
            pass
    store.inner.close()


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("hostile") / "pristine.db"
    asyncio.run(_make(str(db)))
    return db


def _copy(pristine: Path, tmp: Path) -> str:
    target = tmp / "damaged.db"
    src = sqlite3.connect(pristine)
    dst = sqlite3.connect(target)
    src.backup(dst)
    src.close()
    dst.close()
    return str(target)


async def _open(db: str) -> Any:
    agent, store = build_agent(WorkerSpec(db, SID, "/dev/null", "read", approval_every=0),
                               Killer(None, ""))
    try:
        session = await agent.session(SID)
        await session.events()
        return session
    finally:
        store.inner.close()


def _open_raises_naming_the_session(db: str) -> PhaseflowError:
    with pytest.raises(PhaseflowError) as caught:
        asyncio.run(_open(db))
    assert SID in str(caught.value), f"the error does not name the session: {caught.value}"
    return caught.value


def _snapshot(db: str) -> dict[str, Any]:
    with sqlite3.connect(db) as conn:
        (text,) = conn.execute("SELECT snapshot FROM sessions WHERE id = ?", (SID,)).fetchone()
    value: dict[str, Any] = json.loads(text)
    return value


def _set_snapshot(db: str, value: Any) -> None:
    text = value if isinstance(value, str) else json.dumps(value)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE sessions SET snapshot = ? WHERE id = ?", (text, SID))


def _sql(statement: str, *args: Any) -> Callable[[str], None]:
    def damage(db: str) -> None:
        with sqlite3.connect(db) as conn:
            changed = conn.execute(statement, args).rowcount
        assert changed, f"the damage changed nothing: {statement}"
    return damage


def _snap(change: Callable[[dict[str, Any]], Any]) -> Callable[[str], None]:
    def damage(db: str) -> None:
        value = _snapshot(db)
        result = change(value)
        _set_snapshot(db, value if result is None else result)
    return damage


DAMAGES: dict[str, Callable[[str], None]] = {
    "snapshot truncated": lambda db: _set_snapshot(db, json.dumps(_snapshot(db))[:40]),
    "snapshot not an object": lambda db: _set_snapshot(db, "[1, 2]"),
    "snapshot of a later schema": _snap(lambda s: s.update(schema=99)),
    "snapshot without its history part": _snap(lambda s: s.pop("continuation")),
    "run state garbage": _snap(lambda s: s.update(execution={"phase": "flying"})),
    "machine in a phase that does not exist": _snap(
        lambda s: s["machine"].update(current="nowhere")),
    "machine not an object": _snap(lambda s: s.update(machine="a")),
    "state not an object": _snap(lambda s: s.update(state=[1])),
    "core garbage": _snap(lambda s: s.update(core={"status": 7, "group": "x"})),
    "core status unknown": _snap(lambda s: s["core"].update(status="dancing")),
    "a message row not JSON": _sql(
        "UPDATE messages SET data = '{\"role\": \"user\", \"con' WHERE session_id = ? AND idx = 1",
        SID),
    "a message of no known role": _sql(
        "UPDATE messages SET data = '{\"role\": \"alien\", \"content\": \"hi\"}'"
        " WHERE session_id = ? AND idx = 0", SID),
    "a tool result for a call nobody made": _sql(
        "UPDATE messages SET data = json_set(data, '$.call_id', 'call_nobody')"
        " WHERE session_id = ? AND json_extract(data, '$.role') = 'tool'", SID),
    "a message row lost from the middle": _sql(
        "DELETE FROM messages WHERE session_id = ? AND idx = 2", SID),
    "the last message rows lost": _sql(
        "DELETE FROM messages WHERE session_id = ? AND idx >= 5", SID),
    "a mark row not JSON": _sql("UPDATE marks SET data = 'x' WHERE session_id = ?", SID),
    "the phase column names no phase": _sql("UPDATE sessions SET phase = 'gone' WHERE id = ?",
                                            SID),
    "another workflow's session": _sql("UPDATE sessions SET workflow = 'other' WHERE id = ?",
                                       SID),
    "an event row not JSON": _sql(
        "UPDATE events SET data = '{\"type\"' WHERE session_id = ? AND seq = 2", SID),
    "an event row lost from the middle": _sql(
        "DELETE FROM events WHERE session_id = ? AND seq = 2", SID),
    "an event row added": _sql(
        "INSERT INTO events (session_id, seq, data) SELECT session_id, max(seq) + 1, data"
        " FROM events WHERE session_id = ?", SID),
    "NaN in the state": lambda db: _set_snapshot(db, json.dumps(
        {**_snapshot(db), "state": {"n": 7777.25}}).replace("7777.25", "NaN")),
    "the status column edited": _sql(
        "UPDATE sessions SET status = 'finished' WHERE id = ?", SID),
    "the turn column edited": _sql("UPDATE sessions SET turn = turn + 5 WHERE id = ?", SID),
}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_row_is_an_error_naming_the_session(pristine: Path, tmp_path: Path,
                                                      damage: str) -> None:
    db = _copy(pristine, tmp_path)
    asyncio.run(_open(db))  # the copy opens
    DAMAGES[damage](db)
    _open_raises_naming_the_session(db)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                max_size=3),
    max_leaves=6)


def _paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*path, i))
    return out


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_randomly_damaged_snapshot_opens_or_is_an_error_naming_the_session(
        pristine: Path, tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    """Any part of the snapshot replaced by any JSON value (or removed): the session
    opens (the damage was harmless to the session core's checks) or the error is a
    PhaseflowError naming the session - never another exception."""
    db = _copy(pristine, tmp_path_factory.mktemp("random"))
    snapshot = _snapshot(db)
    paths = [p for p in _paths(snapshot) if p]
    path = data.draw(st.sampled_from(paths))
    parent: Any = snapshot
    for part in path[:-1]:
        parent = parent[part]
    if data.draw(st.booleans()) and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[path[-1]] = data.draw(JSON)
    _set_snapshot(db, snapshot)
    try:
        asyncio.run(_open(db))
    except PhaseflowError as exc:
        assert SID in str(exc), f"the error does not name the session: {exc}"
