"""The session's pure step core resumed after a worker stopped mid-turn: it finishes from the
last commit, never running an admitted call again unless its tool is idempotent.
"""

from __future__ import annotations

from phaseflow.session import events as ev
from phaseflow.session.values import (
    CallProvider,
    Persist,
    Replied,
    Resume,
    RunTools,
    Send,
    ToolDone,
)
from tests.support.core_steps import WORK, ok, request_id, run_tools, started
from tests.support.session_fakes import (
    Trace,
    call,
    reply,
)

# --- a worker that stopped mid-turn: Resume finishes from the last commit ----------------------


def test_resume_reports_a_result_that_was_committed_with_a_queued_message() -> None:
    """A group's first result waits in the values; a message queued meanwhile commits
    those values (the result among them); the worker stops. The worker that resumes
    must still commit that result's event: every call gets exactly one result event."""
    t = started()
    t.feed(Replied(request_id(t), reply("", call("a", "open_ticket"), call("b", "open_ticket")),
                   WORK))
    t.feed(ToolDone("a", ok(ticket="A")))
    assert t.feed(Send("meanwhile", WORK)) == (Persist(),)  # the commit a crash resumes from
    resumed = Trace(t.core, t.limits)
    commands = resumed.feed(Resume(WORK))
    for c in commands:
        if isinstance(c, RunTools):
            for p in c.calls:
                resumed.feed(ToolDone(p.call.id, ok(ticket="B")))
    statuses = {e.call_id: e.status for e in resumed.of_type(ev.ToolResultEvent)}
    assert statuses.get("a") == "ok" and "b" in statuses


def test_resume_never_runs_an_admitted_call_again_unless_it_is_idempotent() -> None:
    t = started()
    t.feed(Replied(request_id(t), reply("", call("a", "open_ticket"), call("l", "lookup",
                                                                          {"q": "x"})), WORK))
    stopped = t.core  # the committed admission; the worker stops while both run
    resumed = Trace(stopped, t.limits)
    commands = resumed.feed(Resume(WORK, idempotent=frozenset({"lookup"})))
    assert [p.call.id for p in run_tools(commands).calls] == ["l"]
    assert [(e.call_id, e.status) for e in resumed.of_type(ev.ToolResultEvent)] == [
        ("a", "unknown")]


def test_resume_with_a_request_in_flight_asks_it_again_with_the_same_history() -> None:
    t = started()
    rid = request_id(t)
    sent = [c for c in t.commands if isinstance(c, CallProvider)][-1].history
    commands = Trace(t.core, t.limits).feed(Resume(WORK))
    assert commands == (CallProvider(rid, sent, False),)
