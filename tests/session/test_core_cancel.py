"""The session's pure step core cancelled: every call of the group gets exactly one result,
whatever it was doing.
"""

from __future__ import annotations

from phaseflow.session import events as ev
from phaseflow.session.values import (
    Cancel,
    Core,
    Persist,
    Replied,
    RunBoundary,
    RunTools,
    ToolDone,
    TurnOver,
)
from phaseflow.turn.messages import UserMessage
from tests.support.core_steps import WORK, ok, request_id, started
from tests.support.session_fakes import (
    Trace,
    call,
    open_or_doubled,
    reply,
)

# --- cancellation: every call gets a result ---------------------------------------------------


def test_cancel_while_tools_run_gives_every_call_one_result() -> None:
    t = started()
    t.feed(Replied(request_id(t), reply(
        "", call("a", "open_ticket"), call("b", "open_ticket"), call("z", "nope")), WORK))
    t.feed(ToolDone("a", ok(ticket="T")))
    commands = t.feed(Cancel(5.0))
    statuses = {e.call_id: e.status for e in t.of_type(ev.ToolResultEvent)}
    assert statuses == {"z": "refused", "a": "ok", "b": "cancelled"}
    assert commands[-1] == TurnOver("cancelled")
    # the finished call's write is kept; nothing advances the phase
    assert not any(isinstance(c, RunBoundary) for c in commands)
    (commit,) = [c for c in commands if isinstance(c, Persist)]
    assert commit.writes == (("a", "open_ticket", "ticket", "T"),)
    assert open_or_doubled(t.core.history()) == {}
    assert t.core.status == "idle" and t.core.continuation.request is None


def test_a_call_still_running_at_cancel_says_its_outcome_is_unknown() -> None:
    t = started()
    t.feed(Replied(request_id(t), reply("", call("a", "open_ticket")), WORK))
    t.feed(Cancel(1.0))
    result = t.of_type(ev.ToolResultEvent)[0]
    assert result.status == "cancelled" and "unknown" in result.content.lower()


def test_cancel_while_awaiting_approval_runs_nothing() -> None:
    t = started()
    t.feed(Replied(request_id(t), reply("", call("a", "open_ticket"), call("p", "pay")), WORK))
    commands = t.feed(Cancel(1.0))
    assert not any(isinstance(c, RunTools | RunBoundary) for c in commands)
    assert {e.call_id: e.status for e in t.of_type(ev.ToolResultEvent)} == {
        "a": "cancelled", "p": "cancelled"}
    assert open_or_doubled(t.core.history()) == {}
    assert t.core.pending_approval is None


def test_cancel_before_the_reply_keeps_the_message_and_ignores_the_late_reply() -> None:
    t = started()
    rid = request_id(t)
    t.feed(Cancel(1.0))
    assert t.core.history().to_tuple() == (UserMessage("hello"),)
    before = t.core
    assert t.feed(Replied(rid, reply("late"), WORK)) == ()
    assert t.core is before


def test_cancel_when_idle_changes_nothing() -> None:
    t = Trace(Core("s"))
    assert t.feed(Cancel(1.0)) == ()


def test_results_that_arrive_with_the_cancel_are_kept() -> None:
    t = started()
    t.feed(Replied(request_id(t), reply("", call("a", "open_ticket"), call("b", "open_ticket")),
                   WORK))
    t.feed(Cancel(2.0, (ToolDone("b", ok(ticket="B")),)))
    statuses = {e.call_id: e.status for e in t.of_type(ev.ToolResultEvent)}
    assert statuses == {"a": "cancelled", "b": "ok"}
