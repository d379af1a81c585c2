"""All four parts together, driven the way a session drives them, with crashes.

A crash throws away everything in memory; the host restarts from the JSON it persisted
(it persists the continuation after every ledger step, before running a tool) and must
then reconcile. The invariants are the layer's promises, checked after every step.
"""

from __future__ import annotations

from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from phaseflow.turn import (
    AssistantMessage,
    CaptureComplete,
    CaptureIncomplete,
    CaptureReason,
    Continuation,
    EffectState,
    ExecutingTools,
    Generating,
    Idle,
    OutputReference,
    PromptKind,
    RequestOutcome,
    SendNext,
    SendNow,
    StopReason,
    ToolCall,
    ToolOutcome,
    ToolResultMessage,
    TrustScope,
    TurnExecution,
    TurnProgress,
    UserMessage,
    history_problem,
    present_lines,
    result,
)
from tests.support.turn_strategies import STATEFUL, assert_json_identity, ok

REF = OutputReference("out-1", "text/plain", 10, "0" * 64)


class Session(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.ex = TurnExecution()
        self.tm = TurnProgress()
        self.cont = Continuation()
        self.persisted = self.cont.to_json()
        self.rid = ""
        self.n = 0
        self.runs: dict[str, int] = {}
        self.prompts_admitted: list[str] = []
        self.prompts_in_history_or_queued: list[str] = []

    # --- helpers ---

    def _persist(self) -> None:
        self.persisted = self.cont.to_json()

    def _start(self, content: str) -> None:
        started = ok(self.tm.start_turn())
        self.tm, turn = started.progress, started.turn_id
        self.rid = f"req{turn}"
        self.cont = ok(self.cont.begin_request(self.rid, turn, content))
        self.ex = ok(self.ex.provider_started())
        self._persist()

    # --- rules ---

    @rule(kind=st.sampled_from(PromptKind))
    def user_prompt(self, kind: PromptKind) -> None:
        self.n += 1
        text = f"prompt{self.n}"
        self.prompts_admitted.append(text)
        admitted = self.ex.admit_prompt(kind, text)
        self.ex = admitted.execution
        if isinstance(admitted.action, SendNow):
            self._start(text)
        elif isinstance(admitted.action, SendNext):  # queued prompts of an aborted turn first
            self._start("\n".join(str(c) for c in admitted.action.contents))

    @precondition(lambda self: isinstance(self.tm.stage, Generating))
    @rule(count=st.integers(1, 3), trusted=st.booleans())
    def model_calls_tools(self, count: int, trusted: bool) -> None:
        state, req = self.tm.stage, self.cont.request
        if not isinstance(state, Generating) or req is None:
            return
        turn = state.turn_id
        calls = []
        for _ in range(count):
            self.n += 1
            calls.append(ToolCall.of(f"t{self.n}", "bash", {"command": f"echo {self.n}"}))
        for call in calls:
            self.tm = ok(self.tm.tool_call(turn, call))
            if trusted:
                self.ex = ok(self.ex.auto_approve(call, TrustScope.TURN))
        ended = ok(self.tm.stream_ended(turn, StopReason.TOOL_USE))
        self.tm = ended.progress
        cp = self.cont.checkpoint
        base = cp.resolved_messages() if cp else req.messages
        msgs = base.append(AssistantMessage("", ended.tool_calls))
        self.cont = ok(self.cont.checkpoint_tool_group(self.rid, msgs, ended.tool_calls))
        self._persist()

    @precondition(lambda self: isinstance(self.tm.stage, ExecutingTools))
    @rule(
        pick=st.integers(0, 5),
        incomplete=st.booleans(),
        crash_before_result=st.integers(0, 9).map(lambda x: x == 0),
    )
    def run_a_tool(self, pick: int, incomplete: bool, crash_before_result: bool) -> None:
        state, cp = self.tm.stage, self.cont.checkpoint
        if not isinstance(state, ExecutingTools) or cp is None:
            return
        missing = state.missing
        call = next(c for c in state.calls if c.id == missing[pick % len(missing)])
        self.ex = ok(self.ex.tool_started(call.id, call.name)).execution
        self.cont = ok(self.cont.admit_call(self.rid, cp.id, call))
        self._persist()  # the admission is durable before the tool runs
        self.runs[call.id] = self.runs.get(call.id, 0) + 1
        event("a tool ran")
        if crash_before_result:
            self.crash()
            return
        capture = CaptureIncomplete(CaptureReason.TIMEOUT) if incomplete else CaptureComplete()
        output = ok(present_lines("a\nb\nc\n", 2, capture=capture, reference=REF))
        outcome = result(output)
        assert outcome.is_error == incomplete
        self.cont = ok(self.cont.complete_call(self.rid, cp.id, call, outcome))
        self._persist()
        self.tm = ok(self.tm.tool_result(state.turn_id, call.id, outcome)).progress
        self.ex = ok(self.ex.tool_completed(call.id))

    @precondition(lambda self: isinstance(self.tm.stage, ExecutingTools))
    @rule()
    def run_every_tool(self) -> None:
        while isinstance(self.tm.stage, ExecutingTools):
            self.run_a_tool(0, False, False)

    @precondition(lambda self: isinstance(self.tm.stage, Generating))
    @rule()
    def model_answers(self) -> None:
        state, req = self.tm.stage, self.cont.request
        if not isinstance(state, Generating) or req is None:
            return
        turn = state.turn_id
        self.tm = ok(self.tm.text_delta(turn, "answer"))
        ended = ok(self.tm.stream_ended(turn, StopReason.END_TURN))
        self.tm = ended.progress
        cp = self.cont.checkpoint
        base = cp.resolved_messages() if cp else req.messages
        outcome = RequestOutcome(
            req.id, req.turn_id, req.revision, base.append(AssistantMessage(ended.text))
        )
        self.cont = ok(self.cont.complete(outcome))
        event("answered after tools" if cp else "answered")
        self._persist()
        self._finish_turn()

    def _finish_turn(self) -> None:
        ex = self.ex.begin_completion()
        self.ex = ok(ex)
        finished = ok(self.ex.finish_completion())
        self.ex = finished.execution
        if finished.next is not None:
            self._start("\n".join(str(c) for c in finished.next.contents))

    @precondition(lambda self: not isinstance(self.tm.stage, Idle))
    @rule(dice=st.integers(0, 3))
    def user_cancels(self, dice: int) -> None:
        state, req = self.tm.stage, self.cont.request
        if dice != 3:
            return
        if isinstance(state, Idle) or req is None:
            return
        turn = state.turn_id
        self.tm = ok(self.tm.cancel(turn, 1.0))
        cp = self.cont.checkpoint
        if cp is not None:
            event("cancelled during a tool group")
            for effect in cp.effects:
                if effect.state is EffectState.PENDING:
                    self.cont = ok(self.cont.admit_call(self.rid, cp.id, effect.call))
                if effect.state is not EffectState.COMPLETED:
                    self.cont = ok(
                        self.cont.complete_call(
                            self.rid, cp.id, effect.call, ToolOutcome.cancelled()
                        )
                    )
        cancelling = self.tm.stage
        # the machine's slots and the ledger agree on every call's outcome
        cp = self.cont.checkpoint
        if cp is not None and cancelling.calls:  # type: ignore[union-attr]
            for call, outcome in zip(cancelling.calls, cancelling.outcomes, strict=True):  # type: ignore[union-attr]
                assert cp.effect(call.id).result == outcome  # type: ignore[union-attr]
        self.tm = ok(self.tm.confirm_stopped(turn))
        base = cp.resolved_messages() if cp else req.messages
        self.cont = ok(self.cont.complete(RequestOutcome(req.id, req.turn_id, req.revision, base)))
        self._persist()
        self.ex = self.ex.abort()

    @rule(dice=st.integers(0, 4))
    def crash_sometimes(self, dice: int) -> None:
        """Crashes are rare (1 in 5 draws) so that turns get far enough to matter."""
        if dice == 4:
            self.crash()

    def crash(self) -> None:
        """Everything in memory is lost; restart from the persisted continuation."""
        queued = (self.ex.steering, self.ex.follow_up)
        cont = ok(Continuation.from_json(self.persisted))
        if cont.checkpoint is not None:
            rec = ok(cont.reconcile_interrupted())
            event("crash in the middle of a tool group")
            for call_id in rec.completed + rec.outcome_unknown + rec.not_executed:
                assert self.runs.get(call_id, 0) <= 1
            cont = rec.continuation
        elif cont.request is not None:
            cont = ok(
                cont.complete(
                    RequestOutcome(
                        cont.request.id,
                        cont.request.turn_id,
                        cont.request.revision,
                        cont.request.messages,
                    )
                )
            )
        self.cont = cont
        self._persist()
        self.tm = TurnProgress(last_turn_id=self.tm.last_turn_id)
        # queued prompts were persisted by the host alongside the continuation
        restored = ok(TurnExecution.from_json(self.ex.to_json())).abort()
        assert (restored.steering, restored.follow_up) == queued
        self.ex = restored

    # --- invariants ---

    @invariant()
    def no_tool_runs_twice(self) -> None:
        assert all(n == 1 for n in self.runs.values())

    @invariant()
    def canonical_history_answers_every_call(self) -> None:
        assert history_problem(self.cont.messages) == ""

    @invariant()
    def no_prompt_lost(self) -> None:
        in_history = {
            m.content
            for m in (self.cont.request.messages if self.cont.request else self.cont.messages)
            if isinstance(m, UserMessage) and isinstance(m.content, str)
        }
        sent = {p for text in in_history for p in text.split("\n")}
        queued = set(self.ex.steering) | set(self.ex.follow_up)
        assert set(self.prompts_admitted) <= sent | queued  # type: ignore[operator]

    @invariant()
    def turn_trust_gone_outside_turns(self) -> None:
        if not self.ex.active:
            assert self.ex.auto_approvals == ()
            assert all(e.scope is TrustScope.SESSION for e in self.ex.trust)

    @invariant()
    def parts_agree(self) -> None:
        # a turn is running in all three parts or in none
        idle = isinstance(self.tm.stage, Idle)
        assert (self.cont.request is None) == idle
        assert self.ex.active == (not idle)
        # the turn machine's slots and the ledger agree on every tool call
        state, cp = self.tm.stage, self.cont.checkpoint
        if isinstance(state, ExecutingTools):
            assert cp is not None
            assert tuple(e.call for e in cp.effects) == state.calls
            for effect, slot in zip(cp.effects, state.outcomes, strict=True):
                assert effect.result == slot
        # every result in the history belongs to a call that ran, or says it did not run
        for m in self.cont.messages:
            if isinstance(m, ToolResultMessage) and m.call_id not in self.runs:
                assert m.is_error

    @invariant()
    def json_round_trips(self) -> None:
        assert_json_identity(self.cont, Continuation.from_json)
        assert_json_identity(self.tm, TurnProgress.from_json)
        assert_json_identity(self.ex, TurnExecution.from_json)


TestSession = Session.TestCase
TestSession.settings = STATEFUL
