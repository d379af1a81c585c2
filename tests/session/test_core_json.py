"""A stored session keeps each tool call once: the open group names its calls by id and
reads them back from the call ledger's checkpoint (what the model made), so the two can
never disagree; a record of an earlier version, whose group wrote every call out, opens
the same."""

from __future__ import annotations

import asyncio

from phaseflow.providers import ScriptedProvider
from phaseflow.session import Agent
from phaseflow.session.core_json import core_from_json
from phaseflow.stores import MemoryStore
from phaseflow.stores.base import SessionRecord
from tests.support.hostile_desk import TOOLS, workflow


def _waiting_for_approval() -> SessionRecord:
    store = MemoryStore()
    provider = ScriptedProvider([{"calls": [{"lookup": {}}, {"pay": {"amount": 50}}]}, "ok"])
    session = Agent(workflow(), provider, tools=TOOLS, store=store).session_sync("s")
    assert session.reply_sync("pay 50").status == "awaiting_approval"
    record = asyncio.run(store.load("s"))
    assert record is not None
    return record


def test_the_open_group_stores_its_calls_by_id_only() -> None:
    record = _waiting_for_approval()
    stored = record.core["group"]["calls"]
    assert [set(c) for c in stored] == [{"id", "kind", "note", "writes"}] * 2
    core = core_from_json("s", record.core, record.execution, record.continuation)
    assert core.group is not None
    assert [p.call.name for p in core.group.calls] == ["lookup", "pay"]
    made = {e.call.id: e.call for e in record.continuation.checkpoint.effects}
    assert all(made[p.call.id] is p.call for p in core.group.calls)


def test_a_group_that_wrote_its_calls_out_opens_the_same() -> None:
    record = _waiting_for_approval()
    now = core_from_json("s", record.core, record.execution, record.continuation)
    assert now.group is not None
    older = dict(record.core)
    older["group"] = {**record.core["group"], "calls": [
        {"call": p.call.to_json(), **{k: v for k, v in c.items() if k != "id"}}
        for p, c in zip(now.group.calls, record.core["group"]["calls"], strict=True)]}
    assert core_from_json("s", older, record.execution, record.continuation) == now
