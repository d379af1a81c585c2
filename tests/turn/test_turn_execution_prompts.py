"""Turn execution: prompts admitted when idle or queued during a turn, and the turn's start."""

from __future__ import annotations

from phaseflow.turn import (
    ApprovalRequest,
    ExecStatus,
    PromptKind,
    Queued,
    RunActive,
    RunIdle,
    SendNext,
    SendNow,
    Starting,
    Thinking,
    TurnExecution,
)
from tests.support.turn_strategies import (
    ok,
    rejected,
)
from tests.support.turn_values import LS, active, thinking


def test_prompt_when_idle_is_sent_now_and_starts_the_turn() -> None:
    admitted = TurnExecution().admit_prompt(PromptKind.FOLLOW_UP, "hi")
    assert admitted.action == SendNow("hi")
    assert admitted.execution.phase == RunActive(Starting())


def test_prompts_during_a_turn_queue_in_order_and_drain_steering_first() -> None:
    ex = thinking()
    ex = ex.admit_prompt(PromptKind.FOLLOW_UP, "f1").execution
    step = ex.admit_prompt(PromptKind.STEERING, "s1")
    assert step.action == Queued(PromptKind.STEERING, 0)
    ex = step.execution.admit_prompt(PromptKind.FOLLOW_UP, "f2").execution
    ex = ex.admit_prompt(PromptKind.STEERING, "s2").execution
    ex = ok(ex.begin_completion())
    done = ok(ex.finish_completion())
    assert done.next == SendNext(("s1", "s2", "f1", "f2"))
    assert done.execution.phase == RunActive(Starting())
    assert done.execution.steering == () and done.execution.follow_up == ()


def test_finish_with_nothing_queued_is_idle() -> None:
    done = ok(ok(thinking().begin_completion()).finish_completion())
    assert done.next is None and done.execution.phase == RunIdle()


def test_begin_turn_while_active_is_turn_active() -> None:
    rejected(active().begin_turn(), "turn_active")


def test_begin_turn_from_failure() -> None:
    assert ok(TurnExecution().fail("x").begin_turn()).phase == RunActive(Starting())


def test_provider_started_needs_starting_without_approval() -> None:
    rejected(TurnExecution().provider_started(), "not_active")
    rejected(thinking().provider_started(), "invalid_phase")
    pending = ok(active().request_approval(ApprovalRequest(LS)))
    rejected(pending.provider_started(), "approval_pending")


def test_provider_started_clears_the_error() -> None:
    ex = active().report_error("boom")
    assert ex.status is ExecStatus.ERROR
    assert ok(ex.provider_started()).phase == RunActive(Thinking())
