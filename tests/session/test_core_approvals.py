"""The session's pure step core and a human's decisions: nothing is admitted before the
decision, a rejected call never runs, a decision for another call or other arguments is
refused, and trust lasts the turn or the session.
"""

from __future__ import annotations

import pytest

from phaseflow.session import events as ev
from phaseflow.session.core import ResolutionRefused
from phaseflow.session.tool_calls import arguments_hash
from phaseflow.session.values import (
    BoundaryDone,
    Pause,
    Persist,
    Replied,
    Resolve,
    RunBoundary,
    RunTools,
    Send,
    ToolDone,
)
from phaseflow.turn.continuation import EffectState
from phaseflow.turn.execution import ApprovalDecision
from phaseflow.turn.messages import ToolResultMessage
from tests.support.core_steps import WORK, effects, ok, request_id, run_tools, started
from tests.support.session_fakes import (
    call,
    offered,
    reply,
    view,
)

# --- approvals -------------------------------------------------------------------------------


def test_a_call_that_needs_approval_pauses_before_anything_is_admitted() -> None:
    t = started()
    commands = t.feed(Replied(request_id(t), reply(
        "", call("a", "open_ticket"), call("p", "pay")), WORK))
    assert [type(c) for c in commands] == [Persist, Pause]
    asked = [e for e in commands[0].events if isinstance(e, ev.ApprovalRequested)]
    assert [(e.call_id, e.arguments_hash) for e in asked] == [
        ("p", arguments_hash(t.core.group.calls[1].call))]  # type: ignore[union-attr]
    # nothing is admitted while the human decides: not the call, not its neighbours
    assert effects(t) == {"a": EffectState.PENDING, "p": EffectState.PENDING}
    assert t.core.status == "awaiting_approval"
    commands = t.feed(Resolve("p", ApprovalDecision.APPROVE))
    assert [type(c) for c in commands] == [Persist, RunTools]
    assert [p.call.id for p in run_tools(commands).calls] == ["a", "p"]
    assert effects(t) == {"a": EffectState.ADMITTED, "p": EffectState.ADMITTED}


def test_a_rejected_call_never_runs_and_the_model_sees_why() -> None:
    t = started()
    t.feed(Replied(request_id(t), reply("", call("p", "pay")), WORK))
    commands = t.feed(Resolve("p", ApprovalDecision.REJECT, "too much"))
    assert not any(isinstance(c, RunTools) for c in commands)
    assert isinstance(commands[-1], RunBoundary)
    results = t.of_type(ev.ToolResultEvent)
    assert [(e.call_id, e.status) for e in results] == [("p", "rejected")]
    assert "too much" in results[0].content
    last = t.core.history().to_tuple()[-1]
    assert isinstance(last, ToolResultMessage) and last.is_error


def test_a_flagged_call_needs_approval_too() -> None:
    t = started()
    commands = t.feed(Replied(request_id(t), reply("", call("a", "open_ticket")), WORK,
                              flagged=frozenset({0})))
    assert isinstance(commands[-1], Pause)


@pytest.mark.parametrize("wrong", [
    Resolve("other", ApprovalDecision.APPROVE),
    Resolve("p", ApprovalDecision.APPROVE, arguments_hash="0" * 64),
])
def test_a_decision_for_another_call_or_other_arguments_is_refused(wrong: Resolve) -> None:
    t = started()
    t.feed(Replied(request_id(t), reply("", call("p", "pay")), WORK))
    before = t.core
    with pytest.raises(ResolutionRefused):
        t.feed(wrong)
    assert t.core is before


def test_no_decision_is_taken_when_nothing_is_pending() -> None:
    t = started()
    with pytest.raises(ResolutionRefused):
        t.feed(Resolve("p", ApprovalDecision.APPROVE))


def test_approve_session_trusts_the_same_call_later_but_not_other_arguments() -> None:
    pay = offered("pay", approval=True, parameters={"type": "object"})
    v = view("work", pay)
    t = started(phase_view=v)
    t.feed(Replied(request_id(t), reply("", call("p1", "pay", {"n": 1})), v))
    t.feed(Resolve("p1", ApprovalDecision.APPROVE_SESSION))
    t.feed(ToolDone("p1", ok()))
    t.feed(BoundaryDone(v))
    same = t.feed(Replied(request_id(t), reply("", call("p2", "pay", {"n": 1})), v))
    assert [p.call.id for p in run_tools(same).calls] == ["p2"]
    t.feed(ToolDone("p2", ok()))
    t.feed(BoundaryDone(v))
    other = t.feed(Replied(request_id(t), reply("", call("p3", "pay", {"n": 2})), v))
    assert isinstance(other[-1], Pause)

def test_approve_turn_trusts_the_call_in_this_turn_only() -> None:
    pay = offered("pay", approval=True)
    v = view("work", pay)
    t = started(phase_view=v)
    t.feed(Replied(request_id(t), reply("", call("p1", "pay")), v))
    t.feed(Resolve("p1", ApprovalDecision.APPROVE_TURN))
    t.feed(ToolDone("p1", ok()))
    t.feed(BoundaryDone(v))
    again = t.feed(Replied(request_id(t), reply("", call("p2", "pay")), v))
    assert [p.call.id for p in run_tools(again).calls] == ["p2"]
    t.feed(ToolDone("p2", ok()))
    t.feed(BoundaryDone(v))
    t.feed(Replied(request_id(t), reply("done"), v))
    t.feed(BoundaryDone(v, final=True))
    t.feed(Send("next turn", v))
    later = t.feed(Replied(request_id(t), reply("", call("p3", "pay")), v))
    assert isinstance(later[-1], Pause)
