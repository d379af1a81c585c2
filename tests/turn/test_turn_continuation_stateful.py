"""Part 3: continuation, as a state machine - every operation in random order, with crashes
(a restore from JSON) at any point: no call runs twice, every call in the history has
exactly one result, revisions never go back, the JSON round trip is the identity. The
operations one by one are in ``test_turn_continuation.py``."""

from __future__ import annotations

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from phaseflow.turn import (
    NOT_EXECUTED_TEXT,
    OUTCOME_UNKNOWN_TEXT,
    AssistantMessage,
    Continuation,
    EffectState,
    History,
    Rejected,
    RequestOutcome,
    SystemMessage,
    ToolCall,
    ToolOutcome,
    ToolResultMessage,
    TurnId,
    UserMessage,
    history_problem,
)
from tests.support.turn_strategies import (
    STATEFUL,
    arguments,
    assert_json_identity,
    contents,
    names,
    ok,
    outcomes,
    rejected,
    well_formed_history,
)

# --- stateful ---------------------------------------------------------------------------------


class ContinuationMachine(RuleBasedStateMachine):
    """Every operation in random order, with crashes (restore from JSON) at any point."""

    def __init__(self) -> None:
        super().__init__()
        self.c = Continuation()
        self.n = 0
        self.admitted: set[tuple[str, str]] = set()
        self.runs: dict[tuple[str, str], int] = {}
        self.results: dict[tuple[str, str], ToolOutcome] = {}
        self.last_revision = 0
        self.display = 0
        self.persisted = self.c.to_json()  # what survives a crash

    def _id(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"

    @rule(content=st.one_of(st.none(), contents))
    def begin_request(self, content: object) -> None:
        result = self.c.begin_request(self._id("r"), TurnId(self.n), content)  # type: ignore[arg-type]
        if self.c.checkpoint is not None:
            rejected(result, "effect_reconciliation_required")
        elif self.c.request is not None:
            rejected(result, "request_active")
        else:
            self.c = ok(result)

    @precondition(lambda self: self.c.request is not None)
    @rule(n=st.integers(1, 3), name=names, args=arguments, duplicate=st.booleans())
    def checkpoint_group(self, n: int, name: str, args: object, duplicate: bool) -> None:
        req = self.c.request
        if req is None:
            return
        calls = [ToolCall.of(self._id("c"), name, args) for _ in range(n)]
        if duplicate:
            calls.append(calls[0])
        cp = self.c.checkpoint
        base = cp.resolved_messages() if cp else req.messages
        msgs = base.append(AssistantMessage("", tuple(calls)))
        result = self.c.checkpoint_tool_group(req.id, msgs, calls)
        if duplicate:
            rejected(result, "invalid_tool_calls")
        elif cp is not None and not cp.complete:
            rejected(result, "tool_effects_incomplete")
        else:
            self.c = ok(result)

    @precondition(lambda self: self.c.checkpoint is not None)
    @rule(pick=st.integers(0, 5), tamper=st.booleans())
    def admit(self, pick: int, tamper: bool) -> None:
        cp, req = self.c.checkpoint, self.c.request
        if cp is None or req is None:
            return
        effect = cp.effects[pick % len(cp.effects)]
        args = {"tampered": True} if tamper else effect.call.argument_value()
        result = self.c.admit_tool_effect(req.id, cp.id, effect.call.id, effect.call.name, args)
        key = (cp.id, effect.call.id)
        if tamper:
            rejected(result, "tool_call_identity_mismatch")
        elif effect.state is not EffectState.PENDING:
            rejected(result, "duplicate_admission")
            assert key in self.admitted
        else:
            assert key not in self.admitted, "a call was admitted twice"
            self.c = ok(result)
            self.admitted.add(key)
            self.persisted = self.c.to_json()  # the admission is durable before the tool runs
            event("admitted")
            self.runs[key] = self.runs.get(key, 0) + 1  # the host runs it now, once

    @precondition(lambda self: self.c.checkpoint is not None)
    @rule(pick=st.integers(0, 5), outcome=outcomes, repeat=st.booleans())
    def complete_effect(self, pick: int, outcome: ToolOutcome, repeat: bool) -> None:
        cp, req = self.c.checkpoint, self.c.request
        if cp is None or req is None:
            return
        effect = cp.effects[pick % len(cp.effects)]
        if repeat and effect.result is not None:
            outcome = effect.result
        result = self.c.complete_tool_effect(
            req.id, cp.id, effect.call.id, effect.call.name, effect.call.argument_value(), outcome
        )
        if effect.state is EffectState.PENDING:
            rejected(result, "not_admitted")
        elif effect.state is EffectState.COMPLETED:
            if outcome == effect.result:
                assert result is self.c
            else:
                rejected(result, "conflicting_tool_outcome")
        else:
            self.c = ok(result)
            self.results[(cp.id, effect.call.id)] = outcome
            event("effect completed")

    @precondition(lambda self: self.c.checkpoint is not None)
    @rule(outcome=outcomes, leave_one=st.booleans())
    def run_the_group(self, outcome: ToolOutcome, leave_one: bool) -> None:
        """What a host does: admit and complete every remaining call (maybe all but one)."""
        cp, req = self.c.checkpoint, self.c.request
        assert cp is not None and req is not None
        effects = cp.effects[:-1] if leave_one else cp.effects
        for effect in effects:
            key = (cp.id, effect.call.id)
            if effect.state is EffectState.PENDING:
                assert key not in self.admitted
                self.c = ok(self.c.admit_call(req.id, cp.id, effect.call))
                self.admitted.add(key)
                self.persisted = self.c.to_json()
                self.runs[key] = self.runs.get(key, 0) + 1
            if effect.state is not EffectState.COMPLETED:
                self.c = ok(self.c.complete_call(req.id, cp.id, effect.call, outcome))
                self.results[key] = outcome
        event("ran a group")

    @rule()
    def persist(self) -> None:
        self.persisted = self.c.to_json()

    @rule()
    def restore_from_current(self) -> None:
        restored = ok(Continuation.from_json(self.c.to_json()))
        assert restored == self.c
        self.c = restored

    @rule()
    def crash_and_restore(self) -> None:
        """The process dies: everything since the last snapshot is lost.

        Admissions are always in the snapshot (the host persists them before running the
        tool), so a restored ledger can never admit - run - a call a second time; results,
        groups and outcomes recorded after the snapshot are gone.
        """
        restored = ok(Continuation.from_json(self.persisted))
        if restored.checkpoint is not None:
            event("crash restored the middle of a tool group")
            for effect in restored.checkpoint.effects:
                key = (restored.checkpoint.id, effect.call.id)
                assert (effect.state is not EffectState.PENDING) == (key in self.admitted)
        self.c = restored
        self.last_revision = restored.revision

    @rule(dice=st.integers(0, 3))
    def reconcile(self, dice: int) -> None:
        if dice != 3:
            return  # rare: it ends the request
        cp = self.c.checkpoint
        result = self.c.reconcile_interrupted()
        if cp is None:
            rejected(result, "no_checkpoint")
            return
        rec = ok(result)
        for fate in ("completed", "outcome_unknown", "not_executed"):
            if getattr(rec, fate):
                event(f"reconciled with {fate} calls")
        tail = rec.continuation.messages.after(len(cp.messages))
        assert len(tail) == len(cp.effects)
        for effect, message in zip(cp.effects, tail, strict=True):
            assert isinstance(message, ToolResultMessage) and message.call_id == effect.call.id
            if effect.state is EffectState.COMPLETED:
                assert effect.result == self.results[(cp.id, effect.call.id)]
                assert message == effect.result.to_message(effect.call.id)  # type: ignore[union-attr]
            elif effect.state is EffectState.ADMITTED:
                assert message.is_error and message.content == OUTCOME_UNKNOWN_TEXT
            else:
                assert message.is_error and message.content == NOT_EXECUTED_TEXT
        self.c = rec.continuation

    @rule(variant=st.sampled_from(["good", "stale", "not_extending"]))
    def complete(self, variant: str) -> None:
        req, cp = self.c.request, self.c.checkpoint
        if req is None:
            fake = RequestOutcome("x", TurnId(1), 0, History([AssistantMessage("x")]))
            rejected(self.c.complete(fake), "duplicate_outcome")
            return
        base = cp.resolved_messages() if cp else req.messages
        messages = base.append(AssistantMessage("answer"))
        if variant == "not_extending":
            if not len(base):
                return
            forged = base.take(len(base) - 1).append(UserMessage("forged"))
            messages = forged.append(AssistantMessage("answer"))
        rid = req.id if variant != "stale" else "stale"
        result = self.c.complete(RequestOutcome(rid, req.turn_id, req.revision, messages))
        if variant == "stale":
            rejected(result, "stale_outcome")
        elif cp is not None and not cp.complete:
            rejected(result, "tool_effects_incomplete")
        elif variant == "not_extending":
            rejected(result, "history_mismatch")
        else:
            self.c = ok(result)
            assert self.c.messages is messages
            event("completed after a tool group" if cp else "completed")

    @rule(dice=st.integers(0, 3))
    def abandon(self, dice: int) -> None:
        if self.c.request is not None and dice == 3:
            r = self.c.abandon_request(self.c.request.id)
            if self.c.checkpoint is None:
                self.c = ok(r)
            else:
                rejected(r, "effect_reconciliation_required")

    @rule()
    def mark_durable(self) -> None:
        self.c = self.c.mark_durable()
        assert self.c.durable()

    @rule(pick=st.integers(0, 5))
    def branch_at(self, pick: int) -> None:
        if not self.c.marks:
            return
        b = self.c.marks[pick % len(self.c.marks)]
        result = self.c.branch_at(self._id("b"), b.display_entry)
        if self.c.request is not None:
            rejected(
                result,
                "request_active" if self.c.checkpoint is None else "effect_reconciliation_required",
            )
        else:
            nxt = ok(result)
            assert len(nxt.messages) == b.message_count
            event("branched")
            self.c = nxt

    @rule(pick=st.integers(0, 5), save=st.booleans())
    def switch_branch(self, pick: int, save: bool) -> None:
        if not self.c.branches or self.c.request is not None:
            return
        target = self.c.branches[pick % len(self.c.branches)]
        self.c = ok(self.c.switch_branch(target.name, self._id("s") if save else None))
        assert self.c.messages == target.messages

    @rule(data=st.data(), dice=st.integers(0, 3))
    def replace_messages(self, data: st.DataObject, dice: int) -> None:
        if dice != 3:
            return
        history = data.draw(well_formed_history())
        result = self.c.replace_messages(history)
        if self.c.request is None:
            self.c = ok(result)
        else:
            assert isinstance(result, Rejected)

    @rule(text=st.text("ab", max_size=3))
    def replace_system(self, text: str) -> None:
        result = self.c.replace_system(SystemMessage(text))
        if self.c.request is None:
            self.c = ok(result)
            assert self.c.messages[0] == SystemMessage(text)

    @invariant()
    def no_call_runs_twice(self) -> None:
        assert all(count == 1 for count in self.runs.values())

    @invariant()
    def history_is_well_formed(self) -> None:
        # every tool call in the canonical history has exactly one result
        assert history_problem(self.c.messages) == ""

    @invariant()
    def revisions(self) -> None:
        assert 0 <= self.c.durable_revision <= self.c.revision
        assert self.c.revision >= self.last_revision
        self.last_revision = self.c.revision
        if self.c.checkpoint is not None:
            assert self.c.request is not None

    @invariant()
    def json_round_trip_is_identity(self) -> None:
        assert_json_identity(self.c, Continuation.from_json)


TestContinuationMachine = ContinuationMachine.TestCase
TestContinuationMachine.settings = settings(STATEFUL, stateful_step_count=60)
