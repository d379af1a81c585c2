"""The session's pure step core and a reply with tool calls: the admission is committed
before anything runs; refused, ignored and recorded calls get their result at once; every
result of a group is committed; call ids are unique.
"""

from __future__ import annotations

from dataclasses import replace

from phaseflow.session import events as ev
from phaseflow.session.values import (
    BoundaryDone,
    CallProvider,
    Persist,
    Replied,
    RunBoundary,
    RunTools,
    ToolDone,
)
from phaseflow.turn.continuation import EffectState
from tests.support.core_steps import WORK, effects, ok, request_id, run_tools, started
from tests.support.session_fakes import (
    call,
    reply,
    view,
)

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
