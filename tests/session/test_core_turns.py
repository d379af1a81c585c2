"""A turn of the session's pure step core from the message to the end: what it commits first,
the step limit, provider failures and retries, stale inputs, and the final request in a
terminal phase.
"""

from __future__ import annotations

import pytest

from phaseflow.providers.protocol import ProviderFailure
from phaseflow.session import events as ev
from phaseflow.session.values import (
    BoundaryDone,
    CallProvider,
    Core,
    Done,
    Limits,
    Persist,
    Replied,
    RequestFailed,
    RunBoundary,
    RunTools,
    Send,
    Sleep,
    ToolDone,
    TurnOver,
)
from phaseflow.turn.messages import (
    AssistantMessage,
    ToolOutcome,
    UserMessage,
)
from tests.support.core_steps import TERMINAL, WORK, ok, request_id, started
from tests.support.session_fakes import (
    Trace,
    call,
    open_or_doubled,
    reply,
)

# --- a turn begins --------------------------------------------------------------------------


def test_a_message_commits_the_turn_then_asks_the_model_with_it() -> None:
    t = Trace(Core("s"))
    commands = t.feed(Send("hello", WORK))
    assert isinstance(commands[0], Persist)
    assert [type(e) for e in commands[0].events] == [ev.TurnStartedEvent]
    assert commands[0].events[0].message == "hello"
    assert isinstance(commands[1], CallProvider)
    assert commands[1].history.to_tuple() == (UserMessage("hello"),)
    assert not commands[1].final
    assert t.core.status == "running" and t.core.turn == 1


def test_a_message_during_a_turn_is_queued_and_opens_the_next_turn_in_order() -> None:
    t = started()
    assert t.feed(Send("second", WORK)) == (Persist(),)
    assert t.feed(Send("third", WORK)) == (Persist(),)
    commands = t.feed(Replied(request_id(t), reply("first answer"), WORK))
    assert isinstance(commands[-1], RunBoundary) and commands[-1].final
    commands = t.feed(BoundaryDone(WORK, final=True))
    assert TurnOver("completed") in commands
    # the queued messages start the next turn at once, as one message, in order
    nxt = commands[commands.index(TurnOver("completed")) + 1:]
    assert isinstance(nxt[0], Persist)
    assert nxt[0].events[0].message == "second\n\nthird"
    assert isinstance(nxt[1], CallProvider)
    assert nxt[1].history.to_tuple()[-1] == UserMessage("second\n\nthird")
    assert t.core.turn == 2

# --- the step limit ---------------------------------------------------------------------------


def test_the_step_limit_ends_the_turn_with_every_call_answered() -> None:
    t = started(Limits(max_steps=2))
    for n in range(2):
        t.feed(Replied(request_id(t), reply("", call(f"c{n}", "open_ticket")), WORK))
        t.feed(ToolDone(f"c{n}", ok(ticket=str(n))))
        commands = t.feed(BoundaryDone(WORK))
    assert commands[-1] == TurnOver("step_limit")
    assert [e.code for e in t.of_type(ev.ErrorEvent)] == ["step_limit"]
    assert len([c for c in t.commands if isinstance(c, CallProvider)]) == 2
    assert open_or_doubled(t.core.history()) == {}
    assert t.core.status == "idle"


def test_after_the_step_limit_the_session_takes_the_next_message() -> None:
    t = started(Limits(max_steps=1))
    t.feed(Replied(request_id(t), reply("", call("c", "open_ticket")), WORK))
    t.feed(ToolDone("c", ok()))
    assert t.feed(BoundaryDone(WORK))[-1] == TurnOver("step_limit")
    commands = t.feed(Send("again", WORK))
    assert isinstance(commands[-1], CallProvider)
    assert commands[-1].history.to_tuple()[-1] == UserMessage("again")


# --- provider failures and retries --------------------------------------------------------------


def test_a_retryable_failure_waits_retry_after_and_asks_the_same_request_again() -> None:
    t = started()
    rid = request_id(t)
    history = t.core.history()
    commands = t.feed(RequestFailed(rid, ProviderFailure("busy", retryable=True, retry_after=3.0)))
    assert [type(c) for c in commands] == [Persist, Sleep, CallProvider]
    assert commands[1] == Sleep(3.0)
    assert commands[2] == CallProvider(rid, history, False)
    assert t.of_type(ev.Retrying)[0].delay == 3.0


def test_retry_after_is_capped_and_backoff_grows_without_it() -> None:
    t = started(Limits(max_retries=3, backoff=1.0, max_backoff=5.0))
    rid = request_id(t)
    delays = []
    for retry_after in (999.0, None, None):
        commands = t.feed(RequestFailed(rid, ProviderFailure("x", retryable=True,
                                                      retry_after=retry_after), jitter=0.999))
        delays.append(next(c.seconds for c in commands if isinstance(c, Sleep)))
    assert delays[0] == 5.0
    assert delays[1] == pytest.approx(2.0, rel=0.01) and delays[2] == pytest.approx(4.0, rel=0.01)


def test_retries_stop_at_max_retries_and_the_turn_fails() -> None:
    t = started(Limits(max_retries=2))
    rid = request_id(t)
    for _ in range(2):
        failed = t.feed(RequestFailed(rid, ProviderFailure("x", retryable=True)))
        assert isinstance(failed[1], Sleep)
    commands = t.feed(RequestFailed(rid, ProviderFailure("x", retryable=True)))
    assert commands[-1] == TurnOver("failed")
    assert t.core.status == "failed"
    assert t.core.history().to_tuple() == (UserMessage("hello"),)


def test_a_failure_that_is_not_retryable_fails_the_turn_at_once() -> None:
    t = started()
    commands = t.feed(RequestFailed(request_id(t), ProviderFailure("bad key", status=401)))
    assert commands[-1] == TurnOver("failed")
    assert [e.code for e in t.of_type(ev.ErrorEvent)] == ["provider_error"]


def test_a_failed_session_takes_the_next_message() -> None:
    t = started()
    t.feed(RequestFailed(request_id(t), ProviderFailure("bad key")))
    commands = t.feed(Send("again", WORK))
    assert isinstance(commands[-1], CallProvider)
    assert commands[-1].history.to_tuple() == (UserMessage("hello"), UserMessage("again"))


# --- stale inputs change nothing ----------------------------------------------------------------


def test_stale_replies_failures_and_results_change_nothing() -> None:
    t = started()
    rid = request_id(t)
    t.feed(Replied(rid, reply("", call("a", "open_ticket")), WORK))
    before = t.core
    assert t.feed(Replied(rid, reply("again"), WORK)) == ()
    assert t.feed(Replied("s:1:9", reply("other"), WORK)) == ()
    assert t.feed(RequestFailed(rid, ProviderFailure("late", retryable=True))) == ()
    assert t.feed(ToolDone("nope", ok())) == ()
    assert t.core is before
    t.feed(ToolDone("a", ok(ticket="T")))
    after = t.core
    assert t.feed(ToolDone("a", ok(ticket="other"))) == ()
    assert t.core is after


# --- the final request in a terminal phase -------------------------------------------------------


def test_entering_a_terminal_phase_asks_once_more_without_tools_then_finishes() -> None:
    t = started()
    t.feed(Replied(request_id(t), reply("", call("m", "go_to_phase", {"phase": "review"})),
                   WORK))
    t.feed(ToolDone("m", Done(ToolOutcome.ok("moving"), "ok", move="review")))
    t.feed(BoundaryDone(TERMINAL))
    final = [c for c in t.commands if isinstance(c, CallProvider)][-1]
    assert final.final
    # a model that calls tools anyway in the final request: the calls are dropped
    commands = t.feed(Replied(final.request_id, reply("bye", call("x", "open_ticket")),
                              TERMINAL))
    assert not any(isinstance(c, RunTools) for c in commands)
    assert TurnOver("completed") in commands
    assert t.core.status == "finished"
    last = t.core.history().to_tuple()[-1]
    assert last == AssistantMessage("bye")
