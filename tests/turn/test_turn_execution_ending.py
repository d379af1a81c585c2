"""Turn execution: a turn's completion, abort and failure, plan mode, the status shown and
when an execution is reclaimable."""

from __future__ import annotations

from phaseflow.turn import (
    ApprovalDecision,
    ApprovalRequest,
    ExecStatus,
    Mode,
    PromptKind,
    RunActive,
    RunFailed,
    RunIdle,
    SendNow,
    Starting,
    Thinking,
    TrustScope,
    TurnExecution,
)
from tests.support.turn_strategies import (
    ok,
    rejected,
)
from tests.support.turn_values import LS, active, thinking


def test_completion_rejections() -> None:
    rejected(TurnExecution().begin_completion(), "not_active")
    rejected(TurnExecution().finish_completion(), "not_active")
    rejected(thinking().finish_completion(), "invalid_phase")
    tools = ok(thinking().tool_started("a", "bash")).execution
    rejected(tools.begin_completion(), "invalid_phase")
    pending = ok(thinking().request_approval(ApprovalRequest(LS)))
    rejected(pending.begin_completion(), "approval_pending")


def test_abort_keeps_queues_and_drops_turn_state() -> None:
    ex = thinking().admit_prompt(PromptKind.STEERING, "s").execution
    ex = ok(ex.auto_approve(LS, TrustScope.TURN))
    ex = ok(
        ok(ex.request_approval(ApprovalRequest(LS))).resolve_approval(
            None, ApprovalDecision.APPROVE_TURN
        )
    ).execution
    aborted = ex.abort()
    assert aborted.phase == RunIdle()
    assert aborted.steering == ("s",)
    assert aborted.trust == () and aborted.auto_approvals == ()
    assert not aborted.reclaimable  # something is still queued


def test_fail_report_error_recover() -> None:
    failed = thinking().fail("down")
    assert failed.phase == RunFailed("down") and failed.status is ExecStatus.ERROR
    assert ok(failed.recover()).phase == RunIdle()
    rejected(TurnExecution().recover(), "invalid_phase")
    kept = ok(thinking().tool_started("a", "bash")).execution.report_error("warn")
    assert kept.active_tools and kept.status is ExecStatus.ERROR
    assert TurnExecution().report_error("x").phase == RunFailed("x")


def test_plan_mode_drops_pending_approval_and_keeps_phase() -> None:
    ex = ok(thinking().request_approval(ApprovalRequest(LS)))
    plan = ex.enter_plan()
    assert plan.mode is Mode.PLAN and plan.pending_approval is None
    assert plan.phase == RunActive(Thinking())
    assert plan.status is ExecStatus.PLAN
    assert plan.enter_exec().status is ExecStatus.THINKING


def test_status_values() -> None:
    assert TurnExecution().status is ExecStatus.IDLE
    assert active().status is ExecStatus.THINKING  # starting shows as thinking
    assert thinking().status is ExecStatus.THINKING
    tools = ok(thinking().tool_started("a", "bash")).execution
    assert tools.status is ExecStatus.TOOL_EXECUTING
    assert ok(tools.tool_completed("a")).status is ExecStatus.THINKING  # completion
    assert thinking().report_error("").status is ExecStatus.ERROR  # an empty message is an error
    assert TurnExecution().fail("x").status is ExecStatus.ERROR
    assert TurnExecution().fail("x").enter_plan().status is ExecStatus.PLAN
    assert {s.value for s in ExecStatus} == {"plan", "idle", "thinking", "tool_executing", "error"}


def test_admit_prompt_from_failure_sends_now_and_reclaimable_needs_empty_queues() -> None:
    admitted = TurnExecution().fail("x").admit_prompt(PromptKind.STEERING, "again")
    assert admitted.action == SendNow("again")
    assert admitted.execution.phase == RunActive(Starting())
    ex = thinking().admit_prompt(PromptKind.FOLLOW_UP, "later").execution.abort()
    assert not ex.reclaimable and ex.follow_up == ("later",)
    assert ok(thinking().auto_approve(LS, TrustScope.SESSION)).abort().reclaimable


def test_status_and_reclaimable() -> None:
    assert TurnExecution().status is ExecStatus.IDLE and TurnExecution().reclaimable
    assert thinking().status is ExecStatus.THINKING and not thinking().reclaimable
