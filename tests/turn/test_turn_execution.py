"""Part 1: turn execution - unit tests for every rule and rejection, and a stateful test."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from phaseflow.errors import PhaseflowError
from phaseflow.turn import (
    ApprovalDecision,
    ApprovalRequest,
    Completion,
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
    TextPart,
    Thinking,
    ToolCall,
    ToolExecution,
    TrustEntry,
    TrustKey,
    TrustKeyKind,
    TrustScope,
    TurnExecution,
    trust_key,
)
from tests.support.turn_strategies import (
    STATEFUL,
    arguments,
    assert_json_identity,
    names,
    ok,
    rejected,
)

BASH_LS = ToolCall.of("c1", "bash", {"command": "ls"})


def active() -> TurnExecution:
    return ok(TurnExecution().begin_turn())


def thinking() -> TurnExecution:
    return ok(active().provider_started())


# --- prompts and queues -------------------------------------------------------------


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
    pending = ok(active().request_approval(ApprovalRequest(BASH_LS)))
    rejected(pending.provider_started(), "approval_pending")


def test_provider_started_clears_the_error() -> None:
    ex = active().report_error("boom")
    assert ex.status is ExecStatus.ERROR
    assert ok(ex.provider_started()).phase == RunActive(Thinking())


# --- tools ------------------------------------------------------------------------


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
    ex = ok(thinking().auto_approve(BASH_LS, TrustScope.TURN))
    assert not ex.reclaimable
    started = ok(ex.tool_started("c1", "bash"))
    assert started.auto_approval is TrustScope.TURN
    assert started.execution.auto_approvals == ()
    assert ok(thinking().tool_started("c1", "bash")).auto_approval is None


def test_auto_approve_outside_a_turn() -> None:
    rejected(TurnExecution().auto_approve(BASH_LS, TrustScope.SESSION), "not_active")


# --- approvals and trust -------------------------------------------------------------


def test_request_approval_never_replaces_a_pending_one() -> None:
    ex = ok(thinking().request_approval(ApprovalRequest(BASH_LS)))
    other = ApprovalRequest(ToolCall.of("c2", "bash", {"command": "pwd"}))
    rejected(ex.request_approval(other), "approval_pending")
    rejected(TurnExecution().request_approval(other), "not_active")


def test_resolve_approval_rejections() -> None:
    rejected(thinking().resolve_approval(None, ApprovalDecision.APPROVE), "no_pending_approval")
    ex = ok(thinking().request_approval(ApprovalRequest(BASH_LS)))
    rejected(ex.resolve_approval("other", ApprovalDecision.APPROVE), "approval_not_found")


def test_resolve_approval_none_matches_pending() -> None:
    ex = ok(thinking().request_approval(ApprovalRequest(BASH_LS)))
    resolved = ok(ex.resolve_approval(None, ApprovalDecision.REJECT))
    assert resolved.approval.call_id == "c1" and not resolved.approved
    assert resolved.execution.pending_approval is None
    assert resolved.execution.trust == ()


def test_approve_session_and_turn_store_trust_by_key() -> None:
    ex = ok(thinking().request_approval(ApprovalRequest(BASH_LS)))
    ex = ok(ex.resolve_approval("c1", ApprovalDecision.APPROVE_SESSION)).execution
    same_cmd = ToolCall.of("c9", "bash", {"command": "ls"})
    other_cmd = ToolCall.of("c9", "bash", {"command": "rm -rf /"})
    assert ex.trusted_scope(same_cmd) is TrustScope.SESSION
    assert ex.trusted_scope(other_cmd) is None

    read = ToolCall.of("r1", "read_file", {"path": "/a"})
    ex = ok(
        ok(ex.request_approval(ApprovalRequest(read))).resolve_approval(
            None, ApprovalDecision.APPROVE_TURN
        )
    ).execution
    assert ex.trusted_scope(ToolCall.of("r2", "read_file", {"path": "/a"})) is TrustScope.TURN
    assert ex.trusted_scope(ToolCall.of("r2", "read_file", {"path": "/b"})) is None
    done = ok(ok(ex.begin_completion()).finish_completion()).execution
    assert done.trusted_scope(read) is None  # turn trust dropped
    assert done.trusted_scope(same_cmd) is TrustScope.SESSION  # session trust kept


def test_plain_approve_stores_no_trust() -> None:
    ex = ok(thinking().request_approval(ApprovalRequest(BASH_LS)))
    assert ok(ex.resolve_approval(None, ApprovalDecision.APPROVE)).execution.trust == ()


def test_trusted_scope_falls_back_to_a_host_set_bare_name() -> None:
    host = TurnExecution(trust=(TrustEntry(TrustKey("list_files"), TrustScope.SESSION),))
    assert (
        host.trusted_scope(ToolCall.of("y", "list_files", {"path": "/any"})) is TrustScope.SESSION
    )
    assert host.trusted_scope(ToolCall.of("y", "read_file", {})) is None


def test_approving_a_call_without_arguments_trusts_only_that_call() -> None:
    no_args = ToolCall.of("x", "list_files", {})
    ex = ok(thinking().request_approval(ApprovalRequest(no_args)))
    ex = ok(ex.resolve_approval(None, ApprovalDecision.APPROVE_SESSION)).execution
    assert ex.trusted_scope(ToolCall.of("z", "list_files", {})) is TrustScope.SESSION
    assert ex.trusted_scope(ToolCall.of("y", "list_files", {"path": "/any"})) is None


def test_trusted_scope_prefers_the_specific_key_over_the_bare_name() -> None:
    bare = TrustEntry(TrustKey("bash"), TrustScope.SESSION)  # only a host sets a bare name
    ex = ok(replace(thinking(), trust=(bare,)).request_approval(ApprovalRequest(BASH_LS)))
    ex = ok(ex.resolve_approval(None, ApprovalDecision.APPROVE_TURN)).execution  # bash + ls
    assert ex.trusted_scope(BASH_LS) is TrustScope.TURN  # specific key first
    assert ex.trusted_scope(ToolCall.of("y", "bash", {"command": "pwd"})) is TrustScope.SESSION
    after = ok(ok(ex.begin_completion()).finish_completion()).execution
    assert after.trusted_scope(BASH_LS) is TrustScope.SESSION  # falls back once turn is gone


def test_resolve_approval_reads_a_plain_string_decision_by_value() -> None:
    ex = ok(thinking().request_approval(ApprovalRequest(BASH_LS)))
    resolved = ok(ex.resolve_approval(None, "reject"))  # type: ignore[arg-type]
    assert not resolved.approved and resolved.execution.trust == ()
    session = ok(ex.resolve_approval(None, "approve_session"))  # type: ignore[arg-type]
    assert session.execution.trusted_scope(BASH_LS) is TrustScope.SESSION


def test_trust_key_of_arguments_with_a_lone_surrogate() -> None:
    odd = ToolCall.of("s", "write_file", {"text": "\ud800"})
    assert trust_key(odd).kind is TrustKeyKind.ARGUMENTS
    ex = ok(thinking().request_approval(ApprovalRequest(odd)))
    ex = ok(ex.resolve_approval(None, ApprovalDecision.APPROVE_SESSION)).execution
    assert ex.trusted_scope(odd) is TrustScope.SESSION
    assert_json_identity(ex, TurnExecution.from_json)


def test_trust_keys() -> None:
    assert trust_key(BASH_LS) == TrustKey("bash", TrustKeyKind.COMMAND, '{"command":"ls"}')
    no_args = trust_key(ToolCall.of("a", "t", {}))  # never the bare name: that trusts all calls
    assert no_args.kind is TrustKeyKind.ARGUMENTS and len(no_args.detail) == 64
    k1 = trust_key(ToolCall.of("a", "t", {"x": 1, "y": 2}))
    k2 = trust_key(ToolCall.of("b", "t", {"y": 2, "x": 1}))
    assert k1 == k2 and k1.kind is TrustKeyKind.ARGUMENTS and len(k1.detail) == 64
    assert trust_key(ToolCall.of("a", "t", {"x": 2})) != k1
    # the shell-like set is configurable
    run = ToolCall.of("a", "run", {"command": "ls"})
    assert trust_key(run).kind is TrustKeyKind.ARGUMENTS
    assert TurnExecution(shell_tools=("run",)).trust_key(run) == TrustKey(
        "run", TrustKeyKind.COMMAND, '{"command":"ls"}'
    )


def test_session_trust_is_never_narrowed_to_turn() -> None:
    ex = ok(thinking().request_approval(ApprovalRequest(BASH_LS)))
    ex = ok(ex.resolve_approval(None, ApprovalDecision.APPROVE_SESSION)).execution
    ex = ok(ex.request_approval(ApprovalRequest(BASH_LS)))
    ex = ok(ex.resolve_approval(None, ApprovalDecision.APPROVE_TURN)).execution
    assert ex.abort().trusted_scope(BASH_LS) is TrustScope.SESSION


# --- ending, failing, modes -------------------------------------------------------------


def test_completion_rejections() -> None:
    rejected(TurnExecution().begin_completion(), "not_active")
    rejected(TurnExecution().finish_completion(), "not_active")
    rejected(thinking().finish_completion(), "invalid_phase")
    tools = ok(thinking().tool_started("a", "bash")).execution
    rejected(tools.begin_completion(), "invalid_phase")
    pending = ok(thinking().request_approval(ApprovalRequest(BASH_LS)))
    rejected(pending.begin_completion(), "approval_pending")


def test_abort_keeps_queues_and_drops_turn_state() -> None:
    ex = thinking().admit_prompt(PromptKind.STEERING, "s").execution
    ex = ok(ex.auto_approve(BASH_LS, TrustScope.TURN))
    ex = ok(
        ok(ex.request_approval(ApprovalRequest(BASH_LS))).resolve_approval(
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
    ex = ok(thinking().request_approval(ApprovalRequest(BASH_LS)))
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
    assert ok(thinking().auto_approve(BASH_LS, TrustScope.SESSION)).abort().reclaimable


def test_values_never_hold_a_list() -> None:
    ex = TurnExecution(steering=["a", [TextPart("b")]])  # type: ignore[list-item]
    assert ex.steering == ("a", (TextPart("b"),))
    assert_json_identity(ex, TurnExecution.from_json)
    admitted = ok(thinking().admit_prompt(PromptKind.FOLLOW_UP, [TextPart("x")]))  # type: ignore[arg-type]
    assert admitted.execution.follow_up == ((TextPart("x"),),)
    call = ToolCall("c", "t", '{"b": 1, "a": [1.5, "\u00e9"]}')
    assert call.arguments == '{"a":[1.5,"é"],"b":1}' and call == ToolCall.of(
        "c", "t", {"b": 1, "a": [1.5, "é"]}
    )
    assert ToolCall("c", "t", {"x": 1}).arguments == '{"x":1}'  # type: ignore[arg-type]
    with pytest.raises(PhaseflowError):
        ToolCall("c", "t", "not json")
    with pytest.raises(PhaseflowError):
        ToolCall("c", "t", "NaN")


def test_status_and_reclaimable() -> None:
    assert TurnExecution().status is ExecStatus.IDLE and TurnExecution().reclaimable
    assert thinking().status is ExecStatus.THINKING and not thinking().reclaimable


def test_edit_ranges() -> None:
    ex = ok(TurnExecution().set_edit_range("/src/a.py", 10, 20))
    assert ex.may_edit("/src/a.py", 12, 18) and not ex.may_edit("/src/a.py", 5, 12)
    assert ex.may_edit("/src/other.py", 1, 1000)
    assert ok(ex.set_edit_range("/src/a.py", 1, 2)).edit_range("/src/a.py").end == 2  # type: ignore[union-attr]
    rejected(ex.set_edit_range("relative/a.py", 1, 2), "invalid_edit_range")
    rejected(ex.set_edit_range("/a", 5, 2), "invalid_edit_range")
    rejected(ex.set_edit_range("/a", 0, 2), "invalid_edit_range")
    assert ok(ex.set_edit_range("C:\\w\\a.py", 1, 1)).edit_range("C:\\w\\a.py")
    assert ex.clear_edit_range("/src/a.py").edit_ranges == ()


def test_json_restore_rejects_inconsistent_values() -> None:
    good = ok(thinking().tool_started("a", "bash")).execution.to_json()
    bad = dict(
        good,
        phase={
            "kind": "active",
            "activity": {"kind": "tool_execution", "active_tools": []},
            "pending_approval": None,
            "error": None,
        },
    )
    rejected(TurnExecution.from_json(bad), "invalid_restore")
    turn_trust = dict(
        TurnExecution().to_json(),
        trust=[{"key": {"tool": "t", "kind": "name", "detail": ""}, "scope": "turn"}],
    )
    rejected(TurnExecution.from_json(turn_trust), "invalid_restore")
    rejected(TurnExecution.from_json({"mode": "exec"}), "malformed_json")
    rejected(TurnExecution.from_json([1, 2]), "malformed_json")


# --- stateful --------------------------------------------------------------------------


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
