"""The session's pure step core, input by input: what it commits, in which order, and
what it hands the runner to perform. No I/O: the inputs are built by hand (as the runner
would build them) and the commands are read as data.

Each test names the rule it holds the core to; most try to break it (a hallucinated
tool, a reused call id, a reply to an old request, a cancellation in the middle of a
group).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phaseflow.providers.protocol import ProviderFailure
from phaseflow.session import events as ev
from phaseflow.session.core import ResolutionRefused, arguments_hash
from phaseflow.session.values import (
    BoundaryDone,
    CallProvider,
    Cancel,
    Core,
    Done,
    Limits,
    Pause,
    Persist,
    Replied,
    RequestFailed,
    Resolve,
    Resume,
    RunBoundary,
    RunTools,
    Send,
    Sleep,
    ToolDone,
    TurnOver,
)
from phaseflow.turn.continuation import EffectState
from phaseflow.turn.execution import ApprovalDecision, PromptKind
from phaseflow.turn.messages import (
    AssistantMessage,
    ToolOutcome,
    ToolResultMessage,
    UserMessage,
)
from tests.support.session_fakes import (
    Q_SCHEMA,
    Trace,
    call,
    go_to_phase,
    offered,
    open_or_doubled,
    reply,
    view,
)

WORK = view("work", offered("lookup", writes=("topic",), parameters=Q_SCHEMA),
            offered("open_ticket", writes=("ticket",)),
            offered("pay", approval=True, writes=("paid",)),
            go_to_phase("review", "intake"))
TERMINAL = view("closed", terminal=True)


def ok(text: str = "done", **writes: Any) -> Done:
    return Done(ToolOutcome.ok(text), "ok", tuple(writes.items()))


def started(limits: Limits | None = None, phase_view: Any = WORK) -> Trace:
    """A trace whose first turn has begun: the first request is asked."""
    t = Trace(Core("s"), limits or Limits())
    t.feed(Send("hello", phase_view))
    return t


def request_id(t: Trace) -> str:
    last = [c for c in t.commands if isinstance(c, CallProvider)][-1]
    return last.request_id


def run_tools(commands: tuple[Any, ...]) -> RunTools:
    runs = [c for c in commands if isinstance(c, RunTools)]
    assert len(runs) == 1, commands
    return runs[0]


def effects(t: Trace) -> dict[str, EffectState]:
    checkpoint = t.core.continuation.checkpoint
    assert checkpoint is not None
    return {e.call.id: e.state for e in checkpoint.effects}


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


# --- a reply with calls: admission is committed before anything runs ------------------------


def test_admission_is_in_the_committed_values_before_the_tools_run() -> None:
    t = started()
    commands = t.feed(Replied(request_id(t), reply(
        "", call("a", "lookup", {"q": "x"}), call("b", "open_ticket")), WORK))
    kinds = [type(c) for c in commands]
    assert kinds == [Persist, RunTools]
    # what the Persist commits is the step's core: both calls admitted, none completed
    assert effects(t) == {"a": EffectState.ADMITTED, "b": EffectState.ADMITTED}
    assert [p.call.id for p in run_tools(commands).calls] == ["a", "b"]
    assert [e.call_id for e in commands[0].events if isinstance(e, ev.ToolCallEvent)] == [
        "a", "b"]


def test_refused_and_hallucinated_calls_never_run_and_get_their_result_at_once() -> None:
    t = started()
    commands = t.feed(Replied(request_id(t), reply(
        "",
        call("a", "lookup", {"q": "x"}),
        call("b", "delete_everything"),             # not in any catalogue
        call("c", "lookup", {"q": 3}),               # invalid arguments
        call("d", "lookup", "{not json"),           # arguments that are not JSON
        call("e", "record", {"name": "x"}),          # this phase collects nothing
        call("f", "go_to_phase", {"target": "review"}),  # a move without a phase
    ), WORK))
    assert [p.call.id for p in run_tools(commands).calls] == ["a"]
    results = {e.call_id: e.status for e in t.of_type(ev.ToolResultEvent)}
    assert results == dict.fromkeys("bcdef", "refused")
    assert effects(t) == {"a": EffectState.ADMITTED, **dict.fromkeys("bcdef",
                                                                      EffectState.COMPLETED)}


def test_a_move_to_a_phase_not_offered_is_checked_by_the_runner_not_run_as_a_tool() -> None:
    """go_to_phase is not refused by the offered enum: the runner checks the target
    against the machine (to give its reason). It is handed out as a move, never as a
    host tool."""
    t = started()
    commands = t.feed(Replied(request_id(t), reply(
        "", call("m", "go_to_phase", {"phase": "nowhere"})), WORK))
    assert [(p.call.id, p.kind) for p in run_tools(commands).calls] == [("m", "move")]


def test_a_second_move_in_one_reply_is_ignored_not_run() -> None:
    t = started()
    commands = t.feed(Replied(request_id(t), reply(
        "", call("m1", "go_to_phase", {"phase": "review"}),
        call("m2", "go_to_phase", {"phase": "intake"})), WORK))
    assert [p.call.id for p in run_tools(commands).calls] == ["m1"]
    assert [(e.call_id, e.status) for e in t.of_type(ev.ToolResultEvent)] == [
        ("m2", "ignored")]


def test_record_writes_only_collected_keys_of_their_declared_type() -> None:
    intake = view("intake", collect={"name": "string", "age": "integer"})
    t = started(phase_view=intake)
    t.feed(Replied(request_id(t), reply(
        "", call("r1", "record", {"name": "Ada"}),
        call("r2", "record", {"age": "old"}),
        call("r3", "record", {"ticket": "T1"})), intake))
    results = {e.call_id: e.status for e in t.of_type(ev.ToolResultEvent)}
    assert results == {"r1": "ok", "r2": "refused", "r3": "refused"}
    boundary = [c for c in t.commands if isinstance(c, RunBoundary)]
    assert boundary == [RunBoundary((("r1", "record", "name", "Ada"),), None)]


def test_every_result_of_a_group_is_committed() -> None:
    """The results of a group wait in the values until its last call finishes, then
    go out in one commit: none of them may be dropped on the way."""
    t = started()
    t.feed(Replied(request_id(t), reply(
        "", call("a", "lookup", {"q": "x"}), call("b", "open_ticket"),
        call("c", "open_ticket")), WORK))
    t.feed(ToolDone("b", ok("b")))
    t.feed(ToolDone("a", ok("a", topic="x")))
    commands = t.feed(ToolDone("c", ok("c", ticket="T")))
    assert isinstance(commands[-1], RunBoundary)
    assert sorted(e.call_id for e in t.of_type(ev.ToolResultEvent)) == ["a", "b", "c"]


def test_a_quiet_boundary_is_committed_with_the_groups_results() -> None:
    """A phase whose boundaries call nothing outside the process: the group's results
    are not committed on their own; the boundary runs first and one commit carries both,
    before the next request."""
    quiet = replace(WORK, quiet=True)
    t = started(phase_view=quiet)
    t.feed(Replied(request_id(t), reply("", call("a", "open_ticket")), quiet))
    commands = t.feed(ToolDone("a", ok(ticket="T")))
    assert commands == (RunBoundary((("a", "open_ticket", "ticket", "T"),), None),)
    changed = ev.StateChanged(keys=("ticket",), old={"ticket": None}, new={"ticket": "T"})
    commands = t.feed(BoundaryDone(quiet, (changed,)))
    assert isinstance(commands[0], Persist) and isinstance(commands[1], CallProvider)
    assert [type(e) for e in commands[0].events] == [ev.ToolResultEvent, ev.StateChanged]
    assert t.core.pending == ()
    # not quiet: the results are committed before the boundary runs, as before
    t = started()
    t.feed(Replied(request_id(t), reply("", call("a", "open_ticket")), WORK))
    commands = t.feed(ToolDone("a", ok(ticket="T")))
    assert isinstance(commands[0], Persist) and isinstance(commands[1], RunBoundary)


def test_writes_go_to_the_boundary_in_the_models_call_order() -> None:
    t = started()
    t.feed(Replied(request_id(t), reply(
        "", call("a", "open_ticket"), call("b", "open_ticket")), WORK))
    t.feed(ToolDone("b", ok(ticket="second")))
    commands = t.feed(ToolDone("a", ok(ticket="first")))
    assert commands[-1] == RunBoundary((("a", "open_ticket", "ticket", "first"),
                                        ("b", "open_ticket", "ticket", "second")), None)


def test_repeated_and_missing_call_ids_get_ids_of_their_own() -> None:
    t = started()
    commands = t.feed(Replied(request_id(t), reply(
        "", call("x", "open_ticket"), call("x", "open_ticket"), call("", "open_ticket"),
        call("x_1", "open_ticket")), WORK))
    ids = [p.call.id for p in run_tools(commands).calls]
    assert len(set(ids)) == 4 and "" not in ids and ids[0] == "x"


def test_a_model_that_reuses_a_call_id_of_an_earlier_group_gets_a_fresh_one() -> None:
    """Some models number their calls ``call_0`` in every reply. The id a tool sees
    (and its idempotency key, ``session:call id``) must still be new: a payment service
    that deduplicates by that key would otherwise drop the second, different payment."""
    t = started()
    first = t.feed(Replied(request_id(t), reply("", call("call_0", "open_ticket")), WORK))
    t.feed(ToolDone(run_tools(first).calls[0].call.id, ok(ticket="T1")))
    t.feed(BoundaryDone(WORK))
    second = t.feed(Replied(request_id(t), reply("", call("call_0", "open_ticket")), WORK))
    ids = [run_tools(first).calls[0].call.id, run_tools(second).calls[0].call.id]
    assert ids[0] != ids[1]


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
    assert commands[0] == RunBoundary((("a", "open_ticket", "ticket", "T"),), None,
                                      advance=False)
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


# --- a property: any sequence of inputs keeps the history well formed -----------------------

CALLS = st.lists(st.tuples(st.sampled_from(["a", "b", "c", ""]),
                           st.sampled_from(["lookup", "open_ticket", "pay", "go_to_phase",
                                            "record", "ghost"]),
                           st.sampled_from(['{"q":"x"}', "{}", '{"phase":"review"}', "{x"])),
                 max_size=4)

OPS = st.lists(st.one_of(
    st.tuples(st.just("reply"), st.text("ab", max_size=2), CALLS),
    st.tuples(st.just("fail"), st.booleans()),
    st.tuples(st.just("done"), st.integers(0, 3)),
    st.tuples(st.just("boundary"), st.booleans()),
    st.tuples(st.just("resolve"), st.sampled_from(list(ApprovalDecision))),
    st.tuples(st.just("cancel")),
    st.tuples(st.just("send"), st.sampled_from(["x", "y"])),
    st.tuples(st.just("stale")),
), max_size=30)


@settings(max_examples=200, deadline=None)
@given(OPS)
def test_any_input_sequence_leaves_every_call_with_exactly_one_result(ops: list[Any]) -> None:
    """Whatever a runner may legitimately feed, in whatever order (and stale inputs on
    top): a call is handed out once, only once it is admitted; once no group is open,
    every call in the history has exactly one result."""
    t = started(Limits(max_steps=4, max_retries=1))
    ran: set[tuple[str, str]] = set()
    running: list[str] = []
    boundary: RunBoundary | None = None
    for op in ops:
        kind = op[0]
        rid = t.core.request_id
        event: Any
        if kind == "reply" and rid is not None:
            event = Replied(rid, reply(op[1], *op[2]), WORK)
        elif kind == "fail" and rid is not None:
            event = RequestFailed(rid, ProviderFailure("x", retryable=op[1]))
        elif kind == "done" and running:
            event = ToolDone(running.pop(op[1] % len(running)), ok(ticket="T"))
        elif kind == "boundary" and boundary is not None:
            event = BoundaryDone(TERMINAL if op[1] else WORK, final=boundary.final)
            boundary = None
        elif kind == "resolve" and t.core.status == "awaiting_approval":
            pending = t.core.pending_approval
            assert pending is not None
            event = Resolve(pending.call.id, op[1])
        elif kind == "cancel" and boundary is None:
            event = Cancel(1.0)
            running = []
        elif kind == "send" and t.core.status != "finished" and boundary is None:
            event = Send(op[1], WORK, PromptKind.FOLLOW_UP)
        elif kind == "stale":
            before = t.core
            assert t.feed(Replied("s:0:0", reply("old"), WORK)) == ()
            assert t.feed(ToolDone("never", ok())) == ()
            assert t.core is before
            continue
        else:
            continue
        for c in t.feed(event):
            if isinstance(c, RunTools):
                group = t.core.group
                assert group is not None
                for p in c.calls:
                    key = (group.checkpoint_id, p.call.id)
                    assert key not in ran, "a call was handed to the runner twice"
                    assert effects(t)[p.call.id] is EffectState.ADMITTED
                    assert p.kind in ("run", "move", "approval")
                    ran.add(key)
                    running.append(p.call.id)
            elif isinstance(c, RunBoundary) and c.advance:
                boundary = c
        if t.core.group is None:
            assert open_or_doubled(t.core.history()) == {}


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
