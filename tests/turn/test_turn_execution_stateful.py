"""Turn execution: random interleavings of every operation against a small model of the
queues (a hypothesis state machine)."""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from phaseflow.turn import (
    ApprovalDecision,
    ApprovalRequest,
    ExecStatus,
    Mode,
    PromptKind,
    Queued,
    Rejected,
    RunActive,
    RunFailed,
    RunIdle,
    SendNext,
    SendNow,
    Starting,
    Thinking,
    ToolCall,
    ToolExecution,
    TrustScope,
    TurnExecution,
)
from tests.support.turn_strategies import (
    STATEFUL,
    arguments,
    assert_json_identity,
    names,
    ok,
    rejected,
)


class ExecutionMachine(RuleBasedStateMachine):
    """Random interleavings of every operation against a small model of the queues."""

    def __init__(self) -> None:
        super().__init__()
        self.ex = TurnExecution()
        self.counter = 0
        self.admitted: list[str] = []
        self.sent: list[str] = []
        self.steering: list[str] = []
        self.follow_up: list[str] = []
        self.call_ids = 0

    def _fresh(self) -> str:
        self.counter += 1
        return f"p{self.counter}"

    @rule(kind=st.sampled_from(PromptKind))
    def admit(self, kind: PromptKind) -> None:
        prompt = self._fresh()
        was_active = self.ex.active
        step = self.ex.admit_prompt(kind, prompt)
        self.admitted.append(prompt)
        if was_active:
            assert isinstance(step.action, Queued)
            (self.steering if kind is PromptKind.STEERING else self.follow_up).append(prompt)
        elif not self.steering and not self.follow_up:
            assert step.action == SendNow(prompt)
            self.sent.append(prompt)
        else:  # prompts still queued from an aborted turn go out first, in queue order
            (self.steering if kind is PromptKind.STEERING else self.follow_up).append(prompt)
            assert step.action == SendNext((*self.steering, *self.follow_up))
            self.sent.extend(self.steering + self.follow_up)
            self.steering, self.follow_up = [], []
        self.ex = step.execution

    @rule()
    def begin_turn(self) -> None:
        result = self.ex.begin_turn()
        if self.ex.active:
            rejected(result, "turn_active")
        else:
            self.ex = ok(result)

    @rule()
    def provider_started(self) -> None:
        phase = self.ex.phase
        result = self.ex.provider_started()
        if not isinstance(phase, RunActive):
            rejected(result, "not_active")
        elif not isinstance(phase.activity, Starting):
            rejected(result, "invalid_phase")
        elif phase.pending_approval is not None:
            rejected(result, "approval_pending")
        else:
            self.ex = ok(result)
            assert self.ex.phase == RunActive(Thinking())

    @rule(name=names, reuse=st.booleans(), auto=st.booleans())
    def tool_started(self, name: str, reuse: bool, auto: bool) -> None:
        running = self.ex.active_tools
        if reuse and running:
            rejected(self.ex.tool_started(running[0].call_id, name), "tool_already_active")
            return
        pending = {p.call_id: p.scope for p in self.ex.auto_approvals}
        if auto and pending:
            call_id = sorted(pending)[0]  # a call that was auto-approved starts
        else:
            self.call_ids += 1
            call_id = f"c{self.call_ids}"
        result = self.ex.tool_started(call_id, name)
        if not self.ex.active:
            rejected(result, "not_active")
            return
        started = ok(result)
        assert started.execution.active_tools[-1].call_id == call_id
        assert started.auto_approval == pending.get(call_id)  # consumed and returned
        assert call_id not in {p.call_id for p in started.execution.auto_approvals}
        phase = started.execution.phase
        assert isinstance(phase, RunActive) and phase.error is None
        self.ex = started.execution

    @rule(index=st.integers(0, 3))
    def tool_completed(self, index: int) -> None:
        running = self.ex.active_tools
        if index < len(running):
            self.ex = ok(self.ex.tool_completed(running[index].call_id))
        else:
            rejected(self.ex.tool_completed("never"), "tool_not_active")

    @rule(name=names, args=arguments)
    def request_approval(self, name: str, args: object) -> None:
        self.call_ids += 1
        self._apply(
            self.ex.request_approval(ApprovalRequest(ToolCall.of(f"c{self.call_ids}", name, args)))
        )

    @rule(decision=st.sampled_from(ApprovalDecision), by_id=st.booleans())
    def resolve(self, decision: ApprovalDecision, by_id: bool) -> None:
        pending = self.ex.pending_approval
        result = self.ex.resolve_approval(pending.call_id if pending and by_id else None, decision)
        if pending is None:
            rejected(result, "no_pending_approval")
            return
        resolved = ok(result)
        if decision in (ApprovalDecision.APPROVE_SESSION, ApprovalDecision.APPROVE_TURN):
            assert resolved.execution.trusted_scope(pending.call) is not None
        self.ex = resolved.execution

    @rule(name=names, args=arguments, scope=st.sampled_from(TrustScope))
    def auto_approve(self, name: str, args: object, scope: TrustScope) -> None:
        self.call_ids += 1
        self._apply(self.ex.auto_approve(ToolCall.of(f"c{self.call_ids}", name, args), scope))

    @rule()
    def begin_completion(self) -> None:
        self._apply(self.ex.begin_completion())

    @rule()
    def finish_completion(self) -> None:
        result = self.ex.finish_completion()
        if isinstance(result, Rejected):
            return
        expected = self.steering + self.follow_up
        if expected:
            assert result.next == SendNext(tuple(expected))
            assert result.execution.phase == RunActive(Starting())
            self.sent.extend(expected)
        else:
            assert result.next is None
            assert result.execution.phase == RunIdle()
        # the turn is over even when the next one starts at once: its trust is gone
        assert all(e.scope is TrustScope.SESSION for e in result.execution.trust)
        assert result.execution.auto_approvals == ()
        self.steering, self.follow_up = [], []
        self.ex = result.execution

    @rule(how=st.sampled_from(["abort", "fail", "report_error", "recover"]))
    def end(self, how: str) -> None:
        if how == "abort":
            self.ex = self.ex.abort()
        elif how == "fail":
            self.ex = self.ex.fail("f")
        elif how == "report_error":
            self.ex = self.ex.report_error("e")
        else:
            self._apply(self.ex.recover())

    @rule(plan=st.booleans())
    def mode(self, plan: bool) -> None:
        self.ex = self.ex.enter_plan() if plan else self.ex.enter_exec()
        assert self.ex.pending_approval is None or not plan

    @rule(path=st.sampled_from(["/a", "/b", "rel"]), start=st.integers(0, 3), end=st.integers(0, 3))
    def edit_range(self, path: str, start: int, end: int) -> None:
        result = self.ex.set_edit_range(path, start, end)
        valid = path.startswith("/") and 1 <= start <= end
        assert isinstance(result, Rejected) != valid
        self._apply(result)

    @rule()
    def crash_and_restore(self) -> None:
        self.ex = ok(TurnExecution.from_json(self.ex.to_json()))

    def _apply(self, result: TurnExecution | Rejected) -> None:
        if not isinstance(result, Rejected):
            self.ex = result

    @invariant()
    def queues_match_the_model(self) -> None:
        assert list(self.ex.steering) == self.steering
        assert list(self.ex.follow_up) == self.follow_up

    @invariant()
    def no_prompt_lost_or_duplicated(self) -> None:
        everything = self.sent + self.steering + self.follow_up
        assert sorted(everything) == sorted(self.admitted)
        assert len(set(everything)) == len(everything)
        # queued prompts keep their admission order (each queue is FIFO)
        for queue in (self.steering, self.follow_up):
            assert queue == sorted(queue, key=self.admitted.index)

    @invariant()
    def no_prompt_jumps_the_queue(self) -> None:
        # across turns, aborts and failures: whatever still waits was admitted after
        # everything that has gone out (a new prompt never overtakes a queued one)
        last_sent = max((self.admitted.index(p) for p in self.sent), default=-1)
        waiting = self.steering + self.follow_up
        assert all(self.admitted.index(p) > last_sent for p in waiting)

    @invariant()
    def turn_scoped_state_gone_outside_a_turn(self) -> None:
        if not self.ex.active:
            assert all(e.scope is TrustScope.SESSION for e in self.ex.trust)
            assert self.ex.auto_approvals == ()
            assert self.ex.pending_approval is None

    @invariant()
    def tool_execution_never_empty(self) -> None:
        phase = self.ex.phase
        if isinstance(phase, RunActive) and isinstance(phase.activity, ToolExecution):
            ids = [t.call_id for t in phase.activity.active_tools]
            assert ids and len(set(ids)) == len(ids)

    @invariant()
    def reclaimable_and_status_agree(self) -> None:
        ex = self.ex
        assert ex.reclaimable == (
            not ex.active and not ex.steering and not ex.follow_up and not ex.auto_approvals
        )
        phase = ex.phase
        if ex.mode is Mode.PLAN:
            expected = ExecStatus.PLAN
        elif isinstance(phase, RunFailed) or (
            isinstance(phase, RunActive) and phase.error is not None
        ):
            expected = ExecStatus.ERROR
        elif isinstance(phase, RunIdle):
            expected = ExecStatus.IDLE
        elif isinstance(phase.activity, ToolExecution):
            expected = ExecStatus.TOOL_EXECUTING
        else:
            expected = ExecStatus.THINKING
        assert ex.status is expected

    @invariant()
    def json_round_trip_is_identity(self) -> None:
        assert_json_identity(self.ex, TurnExecution.from_json)


TestExecutionMachine = ExecutionMachine.TestCase
TestExecutionMachine.settings = STATEFUL
