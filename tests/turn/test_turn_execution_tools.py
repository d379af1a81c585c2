"""Turn execution: tools started and completed, and the auto-approvals they consume."""

from __future__ import annotations

from phaseflow.turn import (
    Completion,
    ExecStatus,
    RunActive,
    ToolExecution,
    TrustScope,
    TurnExecution,
)
from tests.support.turn_strategies import (
    ok,
    rejected,
)
from tests.support.turn_values import LS, thinking


def test_tools_start_in_order_and_last_out_is_completion() -> None:
    ex = thinking().report_error("transient")
    ex = ok(ex.tool_started("a", "bash")).execution
    assert ex.status is ExecStatus.TOOL_EXECUTING  # error cleared
    ex = ok(ex.tool_started("b", "read_file")).execution
    assert [t.call_id for t in ex.active_tools] == ["a", "b"]
    ex = ok(ex.tool_completed("a"))
    assert isinstance(ex.phase, RunActive) and isinstance(ex.phase.activity, ToolExecution)
    ex = ok(ex.tool_completed("b"))
    assert ex.phase == RunActive(Completion())


def test_tool_already_active() -> None:
    ex = ok(thinking().tool_started("a", "bash")).execution
    rejected(ex.tool_started("a", "bash"), "tool_already_active")


def test_tool_not_active_refuses_stale_and_duplicate_completions() -> None:
    ex = ok(thinking().tool_started("a", "bash")).execution
    rejected(ex.tool_completed("zzz"), "tool_not_active")
    done = ok(ex.tool_completed("a"))
    rejected(done.tool_completed("a"), "tool_not_active")
    rejected(TurnExecution().tool_completed("a"), "tool_not_active")


def test_tool_started_outside_a_turn() -> None:
    rejected(TurnExecution().tool_started("a", "bash"), "not_active")


def test_tool_started_consumes_its_auto_approval() -> None:
    ex = ok(thinking().auto_approve(LS, TrustScope.TURN))
    assert not ex.reclaimable
    started = ok(ex.tool_started("c1", "bash"))
    assert started.auto_approval is TrustScope.TURN
    assert started.execution.auto_approvals == ()
    assert ok(thinking().tool_started("c1", "bash")).auto_approval is None


def test_auto_approve_outside_a_turn() -> None:
    rejected(TurnExecution().auto_approve(LS, TrustScope.SESSION), "not_active")
