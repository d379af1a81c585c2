"""The pure core: pass^k against hand-computed values, each funnel figure of known
transcripts, a conversation scored from its events, and two runs compared."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from phaseflow.evals.compare import compare, newcombe, wilson
from phaseflow.evals.criteria import compile_criterion
from phaseflow.evals.funnel import funnel
from phaseflow.evals.scoring import pass_hat_k, pass_hat_ks, score
from phaseflow.evals.transcript import Conversation, Judgement

# --- pass^k ---------------------------------------------------------------------------


def test_pass_hat_k_is_taus_estimate() -> None:
    # 5 trials, 4 passed: C(4,k)/C(5,k) = 4/5, 6/10, 4/10, 1/5, 0
    assert [pass_hat_k(5, 4, k) for k in range(1, 6)] == [0.8, 0.6, 0.4, 0.2, 0.0]
    # 4 trials, 2 passed: 2/4, 1/6, 0, 0
    assert [Fraction(pass_hat_k(4, 2, k)).limit_denominator(100) for k in range(1, 5)] == [
        Fraction(1, 2), Fraction(1, 6), 0, 0]
    assert pass_hat_k(3, 3, 3) == 1.0


def test_pass_hat_k_of_a_workflow_is_the_mean_over_its_tasks() -> None:
    # tasks (n=4, c=2) and (n=5, c=4): k up to 4, the fewest trials
    got = pass_hat_ks([(4, 2), (5, 4)])
    expected = [(1 / 2 + 4 / 5) / 2, (1 / 6 + 6 / 10) / 2, (0 + 4 / 10) / 2, (0 + 1 / 5) / 2]
    assert got == pytest.approx(expected, abs=1e-12)
    assert pass_hat_ks([]) == []


@pytest.mark.parametrize(("n", "c", "k"), [(3, 1, 0), (3, 1, 4), (3, 4, 1), (0, 0, 1)])
def test_pass_hat_k_refuses_what_it_cannot_mean(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError):
        pass_hat_k(n, c, k)


# --- transcripts ------------------------------------------------------------------------


def _conversation(events: list[dict[str, Any]], *, scenario: str = "s", trial: int = 1,
                  ended: str = "finished", status: str = "finished",
                  **more: Any) -> Conversation:
    return Conversation(workflow="desk", scenario=scenario, trial=trial,
                        session_id=f"eval-x-{scenario}-t{trial}", initial_phase="greet",
                        initial_state={"approval_threshold": 500}, events=tuple(events),
                        ended=ended, status=status, **more)


def _move(src: str, to: str) -> dict[str, Any]:
    return {"type": "phase_changed", "from_phase": src, "to_phase": to, "trigger": "guard"}


def _call(call_id: str, name: str, arguments: Any, status: str = "ok",
          content: str = "") -> list[dict[str, Any]]:
    return [{"type": "tool_call", "call_id": call_id, "name": name, "arguments": arguments},
            {"type": "tool_result", "call_id": call_id, "name": name, "status": status,
             "content": content}]


def _state(**values: Any) -> dict[str, Any]:
    return {"type": "state_changed", "keys": list(values), "new": values, "old": {}}


REFUNDED = [
    {"type": "turn_started", "message": "hi"},
    *_call("c1", "crm.lookup_customer", {"email": "a@x"}),
    _state(customer={"verified": False}),
    *_call("c2", "payments.issue_refund", {"amount": 600}, "refused",
           "payments.issue_refund is not available in this phase (greet)"),
    *_call("c3", "crm.verify_identity", {"answer": "Rex"}),
    _state(customer={"verified": True}),
    _move("greet", "locate_order"),
    *_call("c4", "go_to_phase", {"phase": "refund"}, "error", "Cannot move to 'refund': no"),
    _state(amount=600),
    _move("locate_order", "refund"),
    {"type": "approval_requested", "call_id": "c5", "name": "payments.issue_refund"},
    {"type": "approval_resolved", "call_id": "c5", "name": "payments.issue_refund",
     "decision": "approve"},
    *_call("c5", "payments.issue_refund", {"order_id": "O-9", "amount": 600}),
    _state(refund_id="R-1"),
    _move("refund", "done"),
    {"type": "hook_call", "name": "notify_customer"},
    {"type": "turn_finished", "status": "completed", "reply": "done"},
]


def _verdict(conversation: Conversation, expect: list[str] = (),  # type: ignore[assignment]
             never: list[str] = ()) -> tuple[bool, list[tuple[str, str]]]:  # type: ignore[assignment]
    verdict = score(conversation, [compile_criterion(e) for e in expect],
                    [compile_criterion(n) for n in never])
    return verdict.passed, [(f.kind, f.criterion) for f in verdict.failures]


def test_expect_holds_at_the_end_and_never_at_no_point() -> None:
    conversation = _conversation(REFUNDED)
    assert _verdict(conversation, [
        "phase == 'done'", "state.refund_id == 'R-1'", "called('notify_customer')",
        "args('payments.issue_refund').amount == 600", "approved('payments.issue_refund')",
        "refused('payments.issue_refund') and refused == 2", "entered('locate_order')",
        "status == 'finished'", "approvals == 1",
    ], ["entered('manager_approval')", "phase == 'refund' and not state.customer.verified"],
    ) == (True, [])


def test_each_kind_of_failure_is_named() -> None:
    conversation = _conversation(REFUNDED)
    # a policy broken on the way, even though the end looks fine: amount > 500 was
    # refunded without the manager's phase
    assert _verdict(conversation, ["phase == 'declined'"], [
        "called('payments.issue_refund') and state.amount > 500 "
        "and not entered('manager_approval')",
        "phase == 'locate_order'",  # held in the middle, not at the end
    ]) == (False, [
        ("never", "called('payments.issue_refund') and state.amount > 500 "
                  "and not entered('manager_approval')"),
        ("never", "phase == 'locate_order'"),
        ("expect", "phase == 'declined'")])


def test_a_conversation_that_did_not_end_normally_fails() -> None:
    failed = _conversation(REFUNDED[:3], ended="failed", status="failed",
                           error="the provider broke")
    assert _verdict(failed, ["true"]) == (False, [("ended", "failed")])


def test_a_judged_criterion_counts_when_judged_and_is_marked() -> None:
    judged_no = _conversation(REFUNDED, judgement=Judgement("polite", False, "rude"))
    assert _verdict(judged_no, ["true"]) == (False, [("judged", "polite")])
    not_judged = _conversation(REFUNDED, judgement=Judgement("polite", None, "no judge"))
    assert _verdict(not_judged, ["true"]) == (True, [])


def test_never_over_data_reads_the_data_set_after_each_call() -> None:
    events = [*_call("c1", "payments.issue_refund", {"amount": 1}),
              *_call("c2", "payments.issue_refund", {"amount": 2})]
    conversation = _conversation(events, data={"refunds": []}, data_after={
        "c1": {"refunds": [1]}, "c2": {"refunds": [1, 2]}})
    # two refunds at one point, none at the end (the data set was changed back)
    assert _verdict(conversation, ["len(data.refunds) == 0"], ["len(data.refunds) > 1"]) == (
        False, [("never", "len(data.refunds) > 1")])


# --- the funnel ------------------------------------------------------------------------

PHASES = ["greet", "locate_order", "manager_approval", "refund", "done", "declined",
          "handoff"]
TERMINAL = ["done", "declined", "handoff"]


def test_every_funnel_figure_of_known_transcripts() -> None:
    stalled = [*_call("c1", "crm.lookup_customer", {}), _move("greet", "locate_order"),
               *_call("c2", "go_to_phase", {"phase": "refund"}, "error",
                      "Cannot move to 'refund': it is entered by its guard"),
               *_call("c3", "go_to_phase", {"phase": "refund"}, "error",
                      "Cannot move to 'refund': it is entered by its guard"),
               *_call("c4", "orders.select", {}, "error", "RuntimeError: down"),
               {"type": "retrying", "attempt": 1}]
    bounced = [_move("greet", "locate_order"), _move("locate_order", "handoff")]
    never_left = [*_call("c1", "orders.search", {}, "refused", "not available")]
    conversations = [_conversation(REFUNDED, trial=1), _conversation(stalled, trial=2),
                     _conversation(bounced, trial=3), _conversation(never_left, trial=4)]
    result = funnel(conversations, PHASES, TERMINAL).to_json()
    phases = {p["phase"]: p for p in result["phases"]}
    assert result["conversations"] == 4
    assert {name: (p["entered"], p["ended"], p["stalled"]) for name, p in phases.items()} == {
        "greet": (4, 1, 1), "locate_order": (3, 1, 1), "manager_approval": (0, 0, 0),
        "refund": (1, 0, 0), "done": (1, 1, 0), "declined": (0, 0, 0),
        "handoff": (1, 1, 0)}
    assert phases["greet"]["exits"] == [{"to": "locate_order", "taken": 3}]
    assert phases["locate_order"]["exits"] == [{"to": "handoff", "taken": 1},
                                               {"to": "refund", "taken": 1}]
    assert result["blocked"] == [
        {"phase": "locate_order", "requested": "refund", "times": 2,
         "reason": "Cannot move to 'refund': it is entered by its guard"},
        {"phase": "locate_order", "requested": "refund", "times": 1,
         "reason": "Cannot move to 'refund': no"}]
    assert result["not_offered"] == [
        {"phase": "greet", "tool": "payments.issue_refund", "times": 1},
        {"phase": "greet", "tool": "orders.search", "times": 1}]
    assert result["tool_errors"] == [{"tool": "orders.select", "times": 1}]
    assert result["retries"] == 1
    assert result["closed_guards"] == []  # no guards given


def test_the_guards_still_closed_where_conversations_stalled() -> None:
    from phaseflow.expr import compile_guard

    verified = compile_guard("state.customer.verified == true")
    tried = compile_guard("state.verification_attempts >= 3")
    guards = {"greet": [("locate_order", verified.source, verified),
                        ("handoff", tried.source, tried)]}
    unverified = _conversation([_state(customer={"verified": False}, verification_attempts=1)],
                               trial=1, ended="user_done", status="idle")
    gave_up = _conversation([_state(verification_attempts=3)], trial=2, ended="max_turns",
                            status="idle")
    result = funnel([unverified, gave_up, _conversation(REFUNDED, trial=3)], PHASES,
                    TERMINAL, guards).to_json()
    assert result["closed_guards"] == [
        {"phase": "greet", "to": "locate_order", "when": "state.customer.verified == true",
         "times": 2},
        {"phase": "greet", "to": "handoff", "when": "state.verification_attempts >= 3",
         "times": 1}]


# --- compare ---------------------------------------------------------------------------


def test_the_intervals_are_newcombes() -> None:
    # Newcombe (1998), table II, example (a): 56/70 against 48/80
    low, high = newcombe(56, 70, 48, 80)
    assert (round(low, 4), round(high, 4)) == (-0.3339, -0.0524)
    assert tuple(round(x, 4) for x in wilson(0, 10)) == (0.0, 0.2775)


def _report(*scenarios: tuple[str, int, int]) -> dict[str, Any]:
    return {"workflows": [{"workflow": "desk", "scenarios": [
        {"name": name, "passed": passed, "trials": trials}
        for name, passed, trials in scenarios]}]}


def test_a_regression_is_flagged_and_noise_is_not() -> None:
    before = _report(("steady", 19, 20), ("broken", 19, 20), ("noisy", 6, 10),
                     ("better", 2, 20), ("dropped", 1, 1))
    after = _report(("steady", 20, 20), ("broken", 8, 20), ("noisy", 4, 10),
                    ("better", 18, 20), ("added", 1, 1))
    verdicts = {c.scenario.split(" :: ")[1]: c.verdict for c in compare(before, after)}
    assert verdicts == {"steady": "within noise", "broken": "regression",
                        "noisy": "within noise", "better": "improvement",
                        "dropped": "gone", "added": "new"}
