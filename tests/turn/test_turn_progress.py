"""Part 2: turn state - stale events, tool-result slots, cancellation, compaction."""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from phaseflow.turn import (
    Cancelling,
    Compacting,
    CompactionTrigger,
    ExecutingTools,
    Generating,
    Idle,
    NextStep,
    OutcomeStatus,
    Rejected,
    StopReason,
    SubPhase,
    ToolCall,
    ToolOutcome,
    TurnId,
    TurnProgress,
)
from tests.support.turn_strategies import STATEFUL, assert_json_identity, ok, outcomes, rejected
from tests.support.turn_values import A, B, executing, generating


def test_turn_ids_are_fresh_and_increasing() -> None:
    m, t1 = generating()
    rejected(m.start_turn(), "turn_active")
    m = ok(m.stream_ended(t1, StopReason.END_TURN)).progress
    t2 = ok(m.start_turn()).turn_id
    assert t2 > t1
    restored = ok(TurnProgress.from_json(m.to_json()))
    assert ok(restored.start_turn()).turn_id == t2


def test_stale_events_change_nothing_and_say_so() -> None:
    m, t = generating()
    old = TurnId(t - 1)
    for result in (
        m.text_delta(old, "x"),
        m.reasoning_delta(old, "x"),
        m.tool_call(old, A),
        m.stream_ended(old, StopReason.END_TURN),
        m.cancel(old, 0.0),
        m.confirm_stopped(old),
        m.compact(old, CompactionTrigger.AUTO_THRESHOLD),
        m.tool_result(old, "a", ToolOutcome.ok("")),
    ):
        rejected(result, "stale_turn")
    rejected(TurnProgress().text_delta(TurnId(1), "x"), "stale_turn")


def test_streaming_sub_phases_and_commit() -> None:
    m, t = generating()
    assert isinstance(m.stage, Generating) and m.stage.sub_phase is SubPhase.SENDING
    m = ok(m.reasoning_delta(t, "hmm"))
    assert m.stage.sub_phase is SubPhase.THINKING  # type: ignore[union-attr]
    m = ok(ok(m.text_delta(t, "Hel")).text_delta(t, "lo"))
    m = ok(m.token_estimate(t, 42))
    ended = ok(m.stream_ended(t, StopReason.END_TURN))
    assert (ended.text, ended.reasoning, ended.next) == ("Hello", "hmm", NextStep.DONE)
    assert ended.progress.stage == Idle()


def test_duplicate_tool_call_id_in_stream_is_refused() -> None:
    m, t = generating()
    m = ok(m.tool_call(t, A))
    rejected(m.tool_call(t, A), "invalid_tool_calls")


def test_slots_first_result_wins_and_follow_up_only_when_all_filled() -> None:
    m, t = executing()
    assert isinstance(m.stage, ExecutingTools) and m.stage.missing == ("a", "b")
    step = ok(m.tool_result(t, "b", ToolOutcome.ok("B")))
    assert step.completed is None and isinstance(step.progress.stage, ExecutingTools)
    rejected(step.progress.tool_result(t, "b", ToolOutcome.ok("other")), "duplicate_result")
    rejected(step.progress.tool_result(t, "zzz", ToolOutcome.ok("")), "unknown_call")
    rejected(step.progress.text_delta(t, "x"), "invalid_state")
    rejected(step.progress.fail(t), "invalid_state")
    done = ok(step.progress.tool_result(t, "a", ToolOutcome.ok("A")))
    assert done.completed == ((A, ToolOutcome.ok("A")), (B, ToolOutcome.ok("B")))
    assert done.progress.stage == Generating(t)


def test_cancel_fills_empty_slots_and_waits_for_confirmation() -> None:
    m, t = executing()
    m = ok(m.tool_result(t, "a", ToolOutcome.ok("A"))).progress
    m = ok(m.cancel(t, 12.5))
    assert isinstance(m.stage, Cancelling) and m.stage.since == 12.5
    assert m.stage.outcomes == (ToolOutcome.ok("A"), ToolOutcome.cancelled())
    assert m.stage.outcomes[1].status is OutcomeStatus.CANCELLED
    rejected(m.tool_result(t, "b", ToolOutcome.ok("late")), "duplicate_result")
    rejected(m.cancel(t, 13.0), "cancelling")
    rejected(m.start_turn(), "turn_active")
    assert ok(m.confirm_stopped(t)).stage == Idle()


def test_cancel_time_must_survive_json() -> None:
    m, t = generating()
    for bad in (float("nan"), float("inf"), 10**400, True):
        rejected(m.cancel(t, bad), "invalid_state")  # type: ignore[arg-type]
    c = ok(m.cancel(t, 5))
    assert c.stage.since == 5.0 and isinstance(c.stage.since, float)  # type: ignore[union-attr]
    assert_json_identity(c, TurnProgress.from_json)


def test_cancel_from_compaction_and_late_events() -> None:
    m, t = generating()
    m = ok(ok(m.compact(t, CompactionTrigger.AUTO_THRESHOLD)).cancel(t, 2.0))
    rejected(m.compaction_finished(t), "cancelling")
    rejected(m.fail(t), "cancelling")
    rejected(m.tool_result(t, "a", ToolOutcome.ok("")), "unknown_call")
    idle = ok(m.confirm_stopped(t))
    rejected(idle.confirm_stopped(t), "stale_turn")  # a second confirmation is stale
    rejected(idle.stream_ended(t, StopReason.END_TURN), "stale_turn")


def test_stream_end_while_cancelling_commits_nothing() -> None:
    m, t = generating()
    m = ok(ok(m.text_delta(t, "partial")).cancel(t, 1.0))
    rejected(m.stream_ended(t, StopReason.END_TURN), "cancelling")
    rejected(m.text_delta(t, "more"), "cancelling")
    assert isinstance(m.stage, Cancelling)
    rejected(TurnProgress().confirm_stopped(TurnId(1)), "stale_turn")
    g, tg = generating()
    rejected(g.confirm_stopped(tg), "invalid_state")


def test_truncation_keeps_the_continuation_flag_through_compaction() -> None:
    m, t = generating()
    ended = ok(ok(m.text_delta(t, "first half")).stream_ended(t, StopReason.MAX_TOKENS))
    assert ended.next is NextStep.CONTINUE and not ended.continuation
    m = ended.progress
    assert m.stage == Generating(t, continuation=True)
    m = ok(m.compact(t, CompactionTrigger.TRUNCATION_RECOVERY))
    assert m.stage == Compacting(t, CompactionTrigger.TRUNCATION_RECOVERY, True)
    m = ok(ok(TurnProgress.from_json(m.to_json())).compaction_finished(t))
    assert m.stage == Generating(t, continuation=True)
    second = ok(ok(m.text_delta(t, " second half")).stream_ended(t, StopReason.END_TURN))
    assert second.continuation and second.next is NextStep.DONE


def test_other_compactions() -> None:
    m, t = generating()
    rejected(m.compact(t, CompactionTrigger.MANUAL), "invalid_state")
    m = ok(m.compact(t, CompactionTrigger.CONTEXT_LIMIT_RETRY))
    assert m.stage == Compacting(t, CompactionTrigger.CONTEXT_LIMIT_RETRY, False)
    assert ok(m.compaction_finished(t)).stage == Generating(t)
    assert ok(m.fail(t)).stage == Idle()
    manual = ok(TurnProgress(last_turn_id=4).start_compaction())
    assert manual.turn_id == 5
    assert ok(manual.progress.compaction_finished(manual.turn_id)).stage == Idle()
    rejected(manual.progress.start_compaction(), "turn_active")


def test_restore_validation() -> None:
    rejected(
        TurnProgress.from_json({"last_turn_id": 1, "stage": {"kind": "nope"}}), "malformed_json"
    )
    bad = {
        "last_turn_id": 1,
        "stage": {
            "kind": "compacting",
            "turn_id": 7,
            "trigger": "manual",
            "resume_continuation": False,
        },
    }
    rejected(TurnProgress.from_json(bad), "invalid_restore")
    m, _ = executing()
    data = m.to_json()
    data["stage"]["outcomes"] = [{"status": "ok", "content": ""}] * 2  # type: ignore[index]
    rejected(TurnProgress.from_json(data), "invalid_restore")


class TurnStateMachine(RuleBasedStateMachine):
    """Random event streams, with events for the wrong turn mixed in, and crashes."""

    def __init__(self) -> None:
        super().__init__()
        self.m = TurnProgress()
        self.ids: list[int] = []
        self.committed: dict[str, ToolCall] = {}
        self.results: dict[str, ToolOutcome] = {}
        self.first: dict[str, ToolOutcome] = {}
        self.n = 0

    def _turn(self, stale: bool) -> TurnId:
        current = self.m.turn_id
        if stale or current is None:
            return TurnId(self.m.last_turn_id + 1 if current is None else current - 1)
        return current

    def _event(self, stale: bool, result: object, refused_while_cancelling: bool = True) -> object:
        """Check the refusals every event shares: stale turn ids, and a cancelling turn."""
        if stale or self.m.turn_id is None:
            rejected(result, "stale_turn")
            return None
        if refused_while_cancelling and isinstance(self.m.stage, Cancelling):
            rejected(result, "cancelling")  # e.g. a stream that ends while cancelling
            return None
        return result

    @rule()
    def start(self) -> None:
        result = self.m.start_turn()
        if isinstance(result, Rejected):
            assert self.m.turn_id is not None
            return
        assert all(result.turn_id > i for i in self.ids)
        self.ids.append(result.turn_id)
        self.committed, self.results, self.first = {}, {}, {}
        self.m = result.progress

    @rule()
    def start_manual_compaction(self) -> None:
        result = self.m.start_compaction()
        if not isinstance(result, Rejected):
            assert all(result.turn_id > i for i in self.ids)
            self.ids.append(result.turn_id)
            self.committed, self.results, self.first = {}, {}, {}
            self.m = result.progress

    @rule(stale=st.booleans(), text=st.text("ab", max_size=3), reasoning=st.booleans())
    def delta(self, stale: bool, text: str, reasoning: bool) -> None:
        t = self._turn(stale)
        r = self.m.reasoning_delta(t, text) if reasoning else self.m.text_delta(t, text)
        self._keep(self._event(stale, r))

    @rule(stale=st.booleans(), name=st.sampled_from(["bash", "read"]))
    def tool_call(self, stale: bool, name: str) -> None:
        self.n += 1
        r = self.m.tool_call(self._turn(stale), ToolCall.of(f"k{self.n}", name, {}))
        self._keep(self._event(stale, r))

    @rule(stale=st.booleans(), stop=st.sampled_from(StopReason))
    def stream_ended(self, stale: bool, stop: StopReason) -> None:
        before = self.m.stage
        r = self._event(stale, self.m.stream_ended(self._turn(stale), stop))
        if r is None or isinstance(r, Rejected):
            return
        assert isinstance(before, Generating)
        assert r.text == before.text  # type: ignore[attr-defined]
        for call in r.tool_calls:  # type: ignore[attr-defined]
            self.committed[call.id] = call
        self.m = r.progress  # type: ignore[attr-defined]

    @rule(stale=st.booleans(), pick=st.integers(0, 5), outcome=outcomes)
    def tool_result(self, stale: bool, pick: int, outcome: ToolOutcome) -> None:
        ids = [*sorted(self.committed), "unknown"]
        call_id = ids[pick % len(ids)]
        r = self._event(stale, self.m.tool_result(self._turn(stale), call_id, outcome), False)
        if r is None:
            return
        if isinstance(r, Rejected):
            assert r.reason in {"unknown_call", "duplicate_result", "invalid_state", "cancelling"}
            if r.reason == "duplicate_result":
                assert call_id in self.first
            return
        assert call_id not in self.first, "a filled slot was overwritten"
        self.first[call_id] = outcome
        if r.completed is not None:  # type: ignore[attr-defined]
            for call, got in r.completed:  # type: ignore[attr-defined]
                assert got == self.first[call.id]
                self.results[call.id] = got
        self.m = r.progress  # type: ignore[attr-defined]

    @rule(stale=st.booleans())
    def cancel(self, stale: bool) -> None:
        r = self._event(stale, self.m.cancel(self._turn(stale), 3.0))
        if r is None or isinstance(r, Rejected):
            return
        assert isinstance(r, TurnProgress) and isinstance(r.stage, Cancelling)
        for call, got in zip(r.stage.calls, r.stage.outcomes, strict=True):
            if call.id in self.first:
                assert got == self.first[call.id]
            else:
                assert got.status is OutcomeStatus.CANCELLED
                self.first[call.id] = got  # cancelling filled the slot: it is the first result
            self.results[call.id] = got
        self.m = r

    @rule(stale=st.booleans())
    def confirm(self, stale: bool) -> None:
        before = self.m.stage
        r = self._event(stale, self.m.confirm_stopped(self._turn(stale)), False)
        if isinstance(before, Cancelling) and r is not None:
            assert ok(r).stage == Idle()  # only confirmation leaves Cancelling
        elif r is not None:
            rejected(r, "invalid_state")
        self._keep(r)

    @rule(stale=st.booleans(), trigger=st.sampled_from(CompactionTrigger))
    def compact(self, stale: bool, trigger: CompactionTrigger) -> None:
        before = self.m.stage
        r = self._event(stale, self.m.compact(self._turn(stale), trigger))
        if isinstance(r, TurnProgress):
            assert isinstance(before, Generating) and isinstance(r.stage, Compacting)
            if before.continuation:
                assert r.stage.resume_continuation
        self._keep(r)

    @rule(stale=st.booleans())
    def compaction_finished(self, stale: bool) -> None:
        before = self.m.stage
        r = self._event(stale, self.m.compaction_finished(self._turn(stale)))
        if isinstance(r, TurnProgress) and isinstance(r.stage, Generating):
            assert isinstance(before, Compacting)
            assert r.stage.continuation == before.resume_continuation
        self._keep(r)

    @rule(stale=st.booleans())
    def fail(self, stale: bool) -> None:
        self._keep(self._event(stale, self.m.fail(self._turn(stale))))

    @rule()
    def crash_and_restore(self) -> None:
        self.m = ok(TurnProgress.from_json(self.m.to_json()))

    def _keep(self, r: object) -> None:
        if isinstance(r, TurnProgress):
            self.m = r

    @invariant()
    def no_tool_call_without_a_result_once_past_tools(self) -> None:
        # Outside ExecutingTools (in particular at the end of a turn, and while
        # cancelling) every tool call the model made has exactly its first result.
        if isinstance(self.m.stage, Idle | Generating | Cancelling):
            assert set(self.committed) == set(self.results)
            assert all(self.results[k] == self.first[k] for k in self.results)

    @invariant()
    def executing_tools_has_an_empty_slot(self) -> None:
        s = self.m.stage
        if isinstance(s, ExecutingTools):
            assert any(o is None for o in s.outcomes)
            assert {c.id for c in s.calls} <= set(self.committed)

    @invariant()
    def turn_id_is_the_latest(self) -> None:
        if self.m.turn_id is not None:
            assert self.m.turn_id == self.ids[-1] == self.m.last_turn_id

    @invariant()
    def json_round_trip_is_identity(self) -> None:
        assert_json_identity(self.m, TurnProgress.from_json)


TestTurnStateMachine = TurnStateMachine.TestCase
TestTurnStateMachine.settings = STATEFUL
