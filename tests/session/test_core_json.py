"""A stored session keeps each tool call once: the open group names its calls by id and
reads them back from the call ledger's checkpoint (what the model made), so the two can
never disagree; a record of an earlier version, whose group wrote every call out, opens
the same."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from phaseflow.providers import ScriptedProvider
from phaseflow.session import Agent
from phaseflow.session.core_json import CoreDataError, core_from_json
from phaseflow.stores import MemoryStore
from phaseflow.stores.base import SessionRecord
from phaseflow.turn.execution import ApprovalDecision
from phaseflow.turn.messages import ToolOutcome
from phaseflow.turn.rejections import Rejected
from tests.support.hostile_desk import TOOLS, workflow


def _waiting_for_approval(first: str = "lookup") -> SessionRecord:
    """The stored session of a group whose second call (``pay``) waits for a human;
    its first, ``first``, runs with the group (a tool) or was refused at once (a tool
    that does not exist, so it has its result already)."""
    store = MemoryStore()
    provider = ScriptedProvider([{"calls": [{first: {}}, {"pay": {"amount": 50}}]}, "ok"])
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


def test_a_result_is_stored_without_its_outcome_which_the_ledger_keeps() -> None:
    record = _waiting_for_approval("nope")
    [[call_id, stored]] = record.core["group"]["results"]
    assert set(stored) == {"label", "writes", "move"} and stored["label"] == "refused"
    effect = record.continuation.checkpoint.effect(call_id)
    assert effect is not None and effect.result is not None
    assert "not available" in str(effect.result.content)
    core = core_from_json("s", record.core, record.execution, record.continuation)
    assert core.group is not None
    entry = core.group.entry(call_id)
    assert entry is not None and entry.ended is not None and entry.ended.label == "refused"


def test_an_older_result_that_wrote_its_outcome_out_opens_the_same_or_is_refused() -> None:
    record = _waiting_for_approval("nope")
    now = core_from_json("s", record.core, record.execution, record.continuation)
    [[call_id, stored]] = record.core["group"]["results"]
    effect = record.continuation.checkpoint.effect(call_id)
    assert effect is not None and effect.result is not None

    def older(outcome: dict[str, object]) -> dict[str, object]:
        group = {**record.core["group"], "results": [[call_id, {**stored, "outcome": outcome}]]}
        return {**record.core, "group": group}

    same = older(effect.result.to_json())
    assert core_from_json("s", same, record.execution, record.continuation) == now
    other = older(ToolOutcome.ok("something else").to_json())
    with pytest.raises(CoreDataError, match="differs from the call ledger"):
        core_from_json("s", other, record.execution, record.continuation)


def test_an_older_record_that_marked_running_calls_in_the_turn_core_opens_without_them() -> None:
    """Earlier versions also marked a group's running calls in the turn core's activity;
    the ledger says which calls run now, so the marks are cleared when a record opens (a
    turn left with them would not end as a turn does: its queued messages would wait)."""
    record = _waiting_for_approval()
    marked = record.execution.tool_started("call_x", "lookup")
    assert not isinstance(marked, Rejected)
    assert marked.execution.active_tools
    now = core_from_json("s", record.core, record.execution, record.continuation)
    opened = core_from_json("s", record.core, marked.execution, record.continuation)
    assert opened.execution.active_tools == ()
    assert replace(opened, execution=now.execution) == now
    # once the human decides, the turn can end as any other (not refused as "tools are
    # still executing", which would drop the queued messages)
    resolved = opened.execution.resolve_approval(None, ApprovalDecision.APPROVE)
    assert not isinstance(resolved, Rejected)
    assert not isinstance(resolved.execution.begin_completion(), Rejected)
