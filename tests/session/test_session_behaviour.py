"""What a host sees a session do, rule by rule, with a scripted model and real tools."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import phaseflow
from phaseflow.providers import ScriptedProvider
from phaseflow.session import Agent, ResolutionRefused, SessionBusy, SessionFinished
from phaseflow.session.events import Event
from phaseflow.tools import tool

WORKFLOW = """\
phaseflow: 1
name: desk
initial: ask
state:
  customer_id: {type: string}
  count: {type: integer}
  name: {type: string}
  done: {type: boolean}
tools:
  lookup: {writes: [customer_id, count]}
  slow: {timeout: 0.05}
  boom: {}
  big: {}
  pay: {approval: always, writes: [done]}
  first: {writes: [count]}
  second: {writes: [count]}
  note: {approval: always}
phases:
  ask:
    goal: Find the customer.
    tools: [lookup, slow, boom, big, first, second, pay, note]
    collect: [name]
    transitions:
      - to: finish
        when: state.done
      - to: finish
        trigger: model
        when: state.customer_id
  finish:
    goal: Say goodbye.
    terminal: true
"""

RAN: list[str] = []


@tool
def lookup(email: str) -> dict[str, Any]:
    RAN.append("lookup")
    return {"customer_id": "C-1", "count": "three", "secret": "model only"}


@tool
async def slow() -> str:
    RAN.append("slow")
    await asyncio.sleep(5)
    return "late"


@tool
def boom() -> str:
    RAN.append("boom")
    raise RuntimeError("the CRM is down")


@tool
def big() -> str:
    RAN.append("big")
    return "\n".join(f"line {i}" for i in range(1000))


@tool
def pay(amount: int) -> dict[str, Any]:
    RAN.append(f"pay {amount}")
    return {"done": True}


@tool
async def first() -> dict[str, Any]:
    await asyncio.sleep(0.02)  # finishes after `second`
    RAN.append("first")
    return {"count": 1}


@tool
async def second() -> dict[str, Any]:
    RAN.append("second")
    return {"count": 2}


@tool
def note(text: str) -> str:
    RAN.append(f"note {text}")
    return "noted"


TOOLS = [lookup, slow, boom, big, pay, first, second, note]


def agent(script: list[Any], **options: Any) -> tuple[Agent, ScriptedProvider]:
    RAN.clear()
    provider = ScriptedProvider(script)
    wf = phaseflow.load_workflow_text(WORKFLOW)
    return Agent(wf, provider, tools=TOOLS, **options), provider


def send(session: Any, text: str) -> list[Event]:
    async def run() -> list[Event]:
        return [e async for e in session.send(text)]
    return asyncio.run(run())


def results(events: list[Event]) -> list[tuple[str, str]]:
    return [(e.name, e.status) for e in events if e.type == "tool_result"]


def test_writes_are_declared_keys_of_the_declared_type_and_the_model_sees_everything() -> None:
    a, provider = agent([{"calls": [{"lookup": {"email": "a@b"}}]}, "ok"])
    session = a.session_sync("s")
    events = send(session, "hi")
    assert session.state.get("customer_id") == "C-1"
    assert "count" not in session.state  # "three" is not an integer
    assert "secret" not in session.state  # not in the tool's writes
    refused = [e for e in events if e.type == "error" and e.code == "write_refused"]
    assert refused and "'count'" in refused[0].message
    shown = provider.requests[1].history[-1]
    assert "model only" in str(shown.content)


def test_a_slow_tool_times_out_and_an_exception_is_an_error_result() -> None:
    a, _ = agent([{"calls": [{"slow": {}}, {"boom": {}}]}, "sorry"])
    session = a.session_sync("s")
    events = send(session, "hi")
    assert results(events) == [("boom", "error"), ("slow", "error")] or results(events) == [
        ("slow", "error"), ("boom", "error")]
    contents = {e.name: e.content for e in events if e.type == "tool_result"}
    assert "timed out after 0.05 s" in contents["slow"]
    assert contents["boom"] == "boom failed: RuntimeError: the CRM is down"
    assert "Traceback" not in contents["boom"]


def test_a_large_output_is_cut_for_the_model_and_kept_whole_by_the_store() -> None:
    a, provider = agent([{"calls": [{"big": {}}]}, "done"], output_lines=10)
    session = a.session_sync("s")
    send(session, "hi")
    shown = str(provider.requests[1].history[-1].content)
    assert shown.startswith("line 0\n") and "line 10\n" not in shown
    assert "[output truncated: 990 lines not shown; full output is reference" in shown
    reference = shown.rsplit("reference ", 1)[1].split(" ", 1)[0]
    kept = asyncio.run(a.store.get_capture(reference))
    assert kept is not None and kept.decode().count("\n") == 999


def test_writes_apply_in_the_model_s_call_order_whatever_order_tools_finish_in() -> None:
    a, _ = agent([{"calls": [{"first": {}}, {"second": {}}]}, "ok"])
    session = a.session_sync("s")
    send(session, "hi")
    assert RAN == ["second", "first"]  # ran concurrently: second finished first
    assert session.state["count"] == 2  # but second's write is applied last


def test_parallel_tools_false_runs_one_by_one_in_order() -> None:
    a, _ = agent([{"calls": [{"first": {}}, {"second": {}}]}, "ok"], parallel_tools=False)
    send(a.session_sync("s"), "hi")
    assert RAN == ["first", "second"]


def test_hallucinated_and_invalid_calls_are_refused_and_never_run() -> None:
    a, provider = agent([{"calls": [{"delete_everything": {}}, {"lookup": {"mail": 1}}]},
                         "sorry"])
    session = a.session_sync("s")
    events = send(session, "hi")
    assert results(events) == [("delete_everything", "refused"), ("lookup", "refused")]
    assert RAN == []
    history = provider.requests[1].history
    assert "Tools available now: lookup" in str(history[-2].content)
    assert "Invalid arguments for lookup" in str(history[-1].content)


def test_record_writes_only_collected_keys_of_their_type() -> None:
    a, _ = agent([{"calls": [{"record": {"name": "Ada"}}, {"record": {"customer_id": "X"}}]},
                  "noted"])
    session = a.session_sync("s")
    events = send(session, "I'm Ada")
    assert results(events) == [("record", "ok"), ("record", "refused")]
    assert session.state.get("name") == "Ada" and "customer_id" not in session.state


def test_go_to_phase_refused_then_taken_and_a_second_move_is_ignored() -> None:
    a, _ = agent([
        {"calls": [{"go_to_phase": {"phase": "finish"}}]},
        "who are you?",
        {"calls": [{"lookup": {"email": "a@b"}}]},
        {"calls": [{"go_to_phase": {"phase": "finish"}}, {"go_to_phase": {"phase": "finish"}}]},
        "bye",
    ])
    session = a.session_sync("s")
    first = send(session, "hi")
    # the move's `when` (state.customer_id) does not hold: go_to_phase is not offered
    assert results(first) == [("go_to_phase", "refused")]
    assert session.phase == "ask"
    second = send(session, "a@b")
    assert sorted(results(second)[-2:]) == [("go_to_phase", "ignored"), ("go_to_phase", "ok")]
    assert session.phase == "finish" and session.status == "finished"
    with pytest.raises(SessionFinished):
        send(session, "still there?")


def test_an_approval_pauses_before_the_call_runs_and_is_bound_to_its_arguments() -> None:
    a, _ = agent([{"calls": [{"pay": {"amount": 5}}]}, "paid", "bye"])
    session = a.session_sync("s")
    events = send(session, "pay me")
    assert events[-1].type == "approval_requested" and RAN == []
    assert session.status == "awaiting_approval"
    pending = session.pending_approval
    assert pending is not None and pending.arguments == {"amount": 5}
    with pytest.raises(ResolutionRefused):
        session.resolve_sync(pending.call_id, "approve", arguments_hash="0" * 64)
    with pytest.raises(ResolutionRefused):
        session.resolve_sync("another-call", "approve")
    assert RAN == []
    done = session.resolve_sync(pending.call_id, "approve",
                                arguments_hash=pending.arguments_hash)
    assert RAN == ["pay 5"]
    assert done[0].type == "approval_resolved"
    assert session.phase == "finish"


def test_a_rejection_is_a_result_the_model_sees() -> None:
    a, provider = agent([{"calls": [{"pay": {"amount": 5}}]}, "ok, not paid"])
    session = a.session_sync("s")
    send(session, "pay me")
    pending = session.pending_approval
    assert pending is not None
    events = session.resolve_sync(pending.call_id, "reject", reason="too much")
    assert results(events) == [("pay", "rejected")] and RAN == []
    assert "The user rejected this call: too much" in str(provider.requests[1].history[-1].content)


def test_approve_session_trusts_the_same_call_later() -> None:
    a, _ = agent([{"calls": [{"note": {"text": "a"}}]}, "noted",
                  {"calls": [{"note": {"text": "a"}}, {"note": {"text": "b"}}]}, "noted again"])
    session = a.session_sync("s")
    send(session, "note a")
    pending = session.pending_approval
    assert pending is not None
    session.resolve_sync(pending.call_id, "approve_session")
    events = send(session, "again")
    # the same arguments are trusted; others are asked again
    asked = [e for e in events if e.type == "approval_requested"]
    assert len(asked) == 1 and asked[0].arguments == {"text": "b"}


def test_retryable_errors_are_retried_with_retry_after_then_succeed() -> None:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    a, _ = agent([{"error": "rate limited", "retryable": True, "retry_after": 2},
                  "hello"], sleep=sleep)
    session = a.session_sync("s")
    events = send(session, "hi")
    assert slept == [2]
    assert [e.type for e in events if e.type == "retrying"] == ["retrying"]
    assert events[-1].type == "turn_finished" and events[-1].reply == "hello"


def test_a_fatal_error_ends_the_turn_and_keeps_the_message() -> None:
    a, provider = agent([{"error": "bad request", "retryable": False}, "hello again"])
    session = a.session_sync("s")
    events = send(session, "first message")
    assert events[-1].type == "turn_finished" and events[-1].status == "failed"
    assert session.status == "failed"
    assert session.reply_sync("second message") == "hello again"
    contents = [str(m.content) for m in provider.requests[-1].history if m.role == "user"]
    assert contents == ["first message", "second message"]


def test_the_step_limit_ends_a_turn_with_a_valid_history() -> None:
    a, provider = agent([{"calls": [{"second": {}}]}] * 3, max_steps=3)
    session = a.session_sync("s")
    events = send(session, "loop")
    assert [e.code for e in events if e.type == "error"] == ["step_limit"]
    assert events[-1].status == "step_limit"
    assert session.status == "idle"
    assert len(provider.requests) == 3


def test_cancel_stops_a_running_tool_and_every_call_has_a_result() -> None:
    a, provider = agent([{"calls": [{"slow": {}}, {"second": {}}]}, "hello"])

    async def run() -> list[Event]:
        session = await a.session("s")
        seen: list[Event] = []

        async def consume() -> None:
            async for e in session.send("hi"):
                seen.append(e)
                if e.type == "tool_call" and e.name == "second":
                    asyncio.get_running_loop().call_later(0.01, session.cancel)

        await asyncio.wait_for(consume(), 2)
        assert session.status == "idle"
        assert session.state["count"] == 2  # the finished call's write is kept
        reply = await session.reply("again")
        assert reply == "hello"
        return seen

    seen = asyncio.run(run())
    assert seen[-1].type == "turn_finished" and seen[-1].status == "cancelled"
    statuses = dict(results(seen))
    assert statuses["slow"] == "cancelled" and statuses["second"] == "ok"
    # ... and shown to the host, in the cancel's commit, before the turn's end
    changed = [e for e in seen if e.type == "state_changed"]
    assert [(e.source, e.new) for e in changed] == [("tools", {"count": 2})]
    assert seen.index(changed[0]) < len(seen) - 1
    history = provider.requests[-1].history
    calls = [c.id for m in history if m.role == "assistant" for c in m.tool_calls]
    answered = [m.call_id for m in history if m.role == "tool"]
    assert sorted(calls) == sorted(answered)


def test_busy_reject_refuses_a_message_while_waiting_for_approval() -> None:
    a, _ = agent([{"calls": [{"pay": {"amount": 5}}]}], busy="reject")
    session = a.session_sync("s")
    send(session, "pay")
    with pytest.raises(SessionBusy):
        send(session, "hurry up")


def test_a_message_sent_while_waiting_is_queued_and_starts_the_next_turn() -> None:
    a, provider = agent([{"calls": [{"note": {"text": "x"}}]}, "noted", "you said hurry"])
    session = a.session_sync("s")
    send(session, "please note x")
    assert send(session, "hurry up") == []  # queued: nothing happens yet
    pending = session.pending_approval
    assert pending is not None
    events = session.resolve_sync(pending.call_id, "approve")
    finished = [e.reply for e in events if e.type == "turn_finished"]
    assert finished == ["noted", "you said hurry"]
    users = [str(m.content) for m in session.history if m.role == "user"]
    assert users == ["please note x", "hurry up"]
    provider.assert_complete()


def test_an_approval_is_resolved_by_another_agent_on_the_same_store() -> None:
    first, _ = agent([{"calls": [{"note": {"text": "x"}}]}, "noted"])
    session = first.session_sync("s")
    send(session, "note x")
    # a new agent (as after a restart) opens the session from the store
    wf = phaseflow.load_workflow_text(WORKFLOW)
    second = Agent(wf, ScriptedProvider([{"calls": [{"note": {"text": "x"}}]}, "noted"]),
                   tools=TOOLS, store=first.store)
    again = second.session_sync("s")
    assert again.status == "awaiting_approval"
    assert again.history == session.history and dict(again.state) == dict(session.state)
    pending = again.pending_approval
    assert pending is not None and pending.arguments == {"text": "x"}
    assert RAN == []
    events = again.resolve_sync(pending.call_id, "approve")
    assert RAN == ["note x"]
    assert events[-1].type == "turn_finished" and events[-1].reply == "noted"
    stored = [e.seq for e in again.events_sync()]
    assert stored == list(range(1, len(stored) + 1))  # one log, no gaps, no fork


def test_approve_turn_covers_an_identical_call_later_in_the_same_group() -> None:
    a, _ = agent([{"calls": [{"note": {"text": "a"}}, {"note": {"text": "a"}},
                             {"note": {"text": "b"}}]}, "noted"])
    session = a.session_sync("s")
    send(session, "note a twice and b")
    first = session.pending_approval
    assert first is not None
    events = session.resolve_sync(first.call_id, "approve_turn")
    asked = [e for e in events if e.type == "approval_requested"]
    assert [e.arguments for e in asked] == [{"text": "b"}]  # the second "a" is trusted
    pending = session.pending_approval
    assert pending is not None
    session.resolve_sync(pending.call_id, "approve")
    assert RAN == ["note a", "note a", "note b"]


def test_a_new_session_can_start_from_a_given_state_of_the_declared_types() -> None:
    a, _ = agent(["hello"])
    session = a.session_sync("s", state={"customer_id": "C-9"})
    assert session.state["customer_id"] == "C-9"
    with pytest.raises(phaseflow.ConfigError, match="'count'"):
        a.session_sync("t", state={"count": "three"})
    with pytest.raises(phaseflow.ConfigError, match="not JSON"):
        a.session_sync("u", state={"name": {1, 2}})


def test_one_long_line_is_cut_by_bytes_and_many_lines_count_the_whole_output() -> None:
    @tool(name="big")
    def one_line() -> str:
        return "x" * 50_000

    a, provider = agent([{"calls": [{"big": {}}]}, "done"], output_chars=1_000)
    a.tools["big"] = one_line
    send(a.session_sync("s"), "hi")
    shown = str(provider.requests[1].history[-1].content)
    assert shown.startswith("x" * 1_000 + "\n[output truncated: 49000 bytes not shown;")

    # 1,000 lines of 9 characters, cut by characters: the count is of the whole output
    b, provider = agent([{"calls": [{"big": {}}]}, "done"], output_chars=95)
    send(b.session_sync("s"), "hi")
    shown = str(provider.requests[1].history[-1].content)
    assert shown.startswith("line 0\n") and "[output truncated: 987 lines not shown;" in shown


def test_the_time_a_session_spent_stored_counts_as_time_in_phase() -> None:
    # Two processes: each has its own monotonic phase clock (unrelated readings); the
    # wall clock is the one they share.
    from phaseflow.stores import MemoryStore

    store = MemoryStore()
    wall = [1_000_000.0]
    first = Agent(phaseflow.load_workflow_text(WORKFLOW), ScriptedProvider(["Hello."]),
                  tools=TOOLS, store=store, clock=lambda: wall[0], phase_clock=lambda: 5.0)
    session = first.session_sync("s")
    assert session.reply_sync("hi") == "Hello."
    assert session.machine.current_phase_duration() == 0.0
    wall[0] += 420.0  # the worker is down for seven minutes
    again = Agent(phaseflow.load_workflow_text(WORKFLOW), ScriptedProvider([]),
                  tools=TOOLS, store=store, clock=lambda: wall[0],
                  phase_clock=lambda: 123.0)
    assert again.session_sync("s").machine.current_phase_duration() == 420.0
    # a worker whose wall clock is behind the commit's adds nothing
    behind = Agent(phaseflow.load_workflow_text(WORKFLOW), ScriptedProvider([]),
                   tools=TOOLS, store=store, clock=lambda: 999_000.0,
                   phase_clock=lambda: 7.0)
    assert behind.session_sync("s").machine.current_phase_duration() == 0.0
