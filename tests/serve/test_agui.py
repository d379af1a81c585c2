"""The AG-UI endpoint against the real server, read as an AG-UI client reads it: every
event validated with the protocol's own published models (``ag-ui-protocol``), the
refund desk's conversation through to an approval interrupt and its resume."""

from __future__ import annotations

import copy
import json
import uuid

import httpx
from ag_ui.core import Event, EventType, RunAgentInput, UserMessage
from pydantic import TypeAdapter

from phaseflow.serve.agui import _Run
from phaseflow.session import events as ev
from tests.support.serve_server import DEMO, Server, frames

EVENTS: TypeAdapter[Event] = TypeAdapter(Event)


def _run(client: httpx.Client, thread: str, messages: list[UserMessage], *,
         resume: list[dict] | None = None) -> list[Event]:
    run = RunAgentInput(thread_id=thread, run_id=f"run-{uuid.uuid4().hex[:6]}", state={},
                        messages=messages, tools=[], context=[], forwarded_props={})
    body = run.model_dump(by_alias=True, exclude_none=True)
    if resume is not None:
        body["resume"] = resume
    with client.stream("POST", "/v1/ag-ui/refund-desk", json=body,
                       headers={"Accept": "text/event-stream"}) as response:
        assert response.status_code == 200, response.read()
        return [EVENTS.validate_python(f.data) for f in frames(response.iter_lines())
                if f.data is not None]


def _apply(state: dict, patch: list[dict]) -> dict:
    out = copy.deepcopy(state)
    for op in patch:
        key = op["path"][1:].replace("~1", "/").replace("~0", "~")
        if op["op"] == "remove":
            del out[key]
        else:
            out[key] = op["value"]
    return out


def test_a_conversation_an_interrupt_and_its_resume(client: httpx.Client, desk: Server
                                                    ) -> None:
    thread = f"t-{uuid.uuid4().hex[:8]}"
    messages: list[UserMessage] = []
    state: dict = {}
    for n, text in enumerate(DEMO):
        messages.append(UserMessage(id=f"u{n}", content=text))
        events = _run(client, thread, messages)
        kinds = [e.type for e in events]
        assert kinds[:3] == [EventType.RUN_STARTED, EventType.STATE_SNAPSHOT,
                             EventType.STEP_STARTED]
        assert events[0].thread_id == thread
        state = events[1].snapshot
        for e in events:
            if e.type == EventType.STATE_DELTA:
                state = _apply(state, [op.model_dump() if hasattr(op, "model_dump") else op
                                       for op in e.delta])
        assert kinds[-1] == EventType.RUN_FINISHED
        # what the official client's verifier requires: no step left open at the end
        # (an interrupt included), every text message ended
        assert [e.step_name for e in events if e.type == EventType.STEP_STARTED] == [
            e.step_name for e in events if e.type == EventType.STEP_FINISHED]
        assert kinds[-2] == EventType.STEP_FINISHED
        assert kinds.count(EventType.TEXT_MESSAGE_START) == kinds.count(
            EventType.TEXT_MESSAGE_END)
        # a call names the assistant message of its reply (one of this run's)
        for e in events:
            if e.type == EventType.TOOL_CALL_START:
                assert (e.parent_message_id or "").startswith(f"{events[0].run_id}-m")
        starts = [e.tool_call_id for e in events if e.type == EventType.TOOL_CALL_START]
        results = [e.tool_call_id for e in events if e.type == EventType.TOOL_CALL_RESULT]
        if n < 3:
            assert events[-1].outcome.type == "success"
            assert sorted(starts) == sorted(results)
            text_events = [e for e in events if e.type == EventType.TEXT_MESSAGE_CONTENT]
            assert "".join(e.delta for e in text_events) == events[-1].result["reply"]
            assert kinds.count(EventType.TEXT_MESSAGE_START) == kinds.count(
                EventType.TEXT_MESSAGE_END) == 1
    interrupt = events[-1].outcome
    assert interrupt.type == "interrupt"
    [pending] = interrupt.interrupts
    session = client.get(f"/v1/sessions/{thread}").json()
    assert pending.id == pending.tool_call_id == session["pending_approval"]["call_id"]
    assert state == session["state"]  # the snapshot and the patches, applied
    resumed = _run(client, thread, messages, resume=[{
        "interruptId": pending.id, "status": "resolved", "payload": {"decision": "approve"}}])
    kinds = [e.type for e in resumed]
    assert EventType.TOOL_CALL_RESULT in kinds and kinds[-1] == EventType.RUN_FINISHED
    steps = [e.step_name for e in resumed if e.type == EventType.STEP_STARTED]
    assert steps[-1] == "done" and resumed[-1].outcome.type == "success"
    assert resumed[-1].result["reply"].startswith("Done: refund R-77")
    assert client.get(f"/v1/sessions/{thread}").json()["status"] == "finished"


def test_bad_runs_are_problems(client: httpx.Client) -> None:
    url = "/v1/ag-ui/refund-desk"
    base = {"threadId": f"t-{uuid.uuid4().hex[:8]}", "runId": "r1",
            "messages": [{"id": "1", "role": "user", "content": "hi"}]}
    for body, field in (({**base, "threadId": 3}, "threadId"),
                        ({**base, "messages": []}, "messages"),
                        ({**base, "resume": [{"interruptId": "x", "status": "maybe"}]},
                         "resume")):
        r = client.post(url, json=body)
        assert r.status_code == 400 and r.json()["field"] == field, r.text
    assert client.post("/v1/ag-ui/nope", json=base).status_code == 404
    # a resume for a call nobody waits for: the run is refused, as a problem
    r = client.post(url, json={**base, "resume": [{"interruptId": "call_9", "status":
                                                   "resolved"}]})
    assert r.status_code == 409 and r.json()["code"] == "resolution_refused", r.text
    assert json.loads(r.text)["session_id"] == base["threadId"]


def _mapped(events: list[ev.Event]) -> list[Event]:
    run = _Run("t1", "r1", "work", ("desk", "work"), "desk")
    out = run.start({})
    for event in events:
        out += run.map(event)
    return [EVENTS.validate_python(e) for e in out]


def test_a_continued_reply_is_one_message_and_a_custom_event() -> None:
    """``reply_continued`` is ``phaseflow.reply_continued`` naming the open message; the
    continuation's text goes on in it (one message, the stitched text); a cut reply's
    calls (none run) end that message, and the text after them is a message of its
    own, as in the history."""
    out = _mapped([ev.TextDeltaEvent(text="Once upon a "),
                   ev.ReplyContinued(continuation=1, of=3),
                   ev.TextDeltaEvent(text="time."),
                   ev.TurnFinished(reply="Once upon a time.", status="completed")])
    kinds = [e.type for e in out]
    assert kinds.count(EventType.TEXT_MESSAGE_START) == 1
    [custom] = [e for e in out if e.type == EventType.CUSTOM]
    assert custom.name == "phaseflow.reply_continued"
    assert custom.value == {"messageId": "r1-m1", "continuation": 1, "of": 3, "calls": 0}
    assert "".join(e.delta for e in out if e.type == EventType.TEXT_MESSAGE_CONTENT) == \
        "Once upon a time."
    with_calls = _mapped([ev.TextDeltaEvent(text="Let me "),
                          ev.ReplyContinued(continuation=1, of=3, calls=1),
                          ev.ToolCallEvent(call_id="c1", name="note", arguments={}),
                          ev.ToolResultEvent(call_id="c1", name="note", status="refused",
                                             content="Not run"),
                          ev.TextDeltaEvent(text="Done."),
                          ev.TurnFinished(reply="Done.", status="completed")])
    [custom] = [e for e in with_calls if e.type == EventType.CUSTOM]
    assert custom.value["calls"] == 1 and custom.value["messageId"] == "r1-m1"
    assert [e.message_id for e in with_calls if e.type == EventType.TEXT_MESSAGE_START
            ] == ["r1-m1", "r1-m2"]


def test_a_cancel_that_waits_is_a_custom_event_and_a_step_closed_at_the_end() -> None:
    out = _mapped([ev.ToolCallEvent(call_id="c1", name="slow", arguments={}),
                   ev.TurnCancelling(tools=("slow",)),
                   ev.TurnCancelling(tools=("slow",)),  # once open, the step stays one
                   ev.ToolResultEvent(call_id="c1", name="slow", status="cancelled"),
                   ev.TurnFinished(status="cancelled")])
    steps = [(e.type, e.step_name) for e in out
             if e.type in (EventType.STEP_STARTED, EventType.STEP_FINISHED)]
    assert steps == [(EventType.STEP_STARTED, "work"), (EventType.STEP_STARTED, "cancelling"),
                     (EventType.STEP_FINISHED, "cancelling"),
                     (EventType.STEP_FINISHED, "work")]
    customs = [e for e in out if e.type == EventType.CUSTOM]
    assert [(e.name, e.value) for e in customs] == [
        ("phaseflow.turn_cancelling", {"tools": ["slow"]})] * 2
    assert out[-1].type == EventType.RUN_FINISHED and out[-1].outcome.type == "cancelled"
    # a phase named "cancelling": no second step of that name (the protocol refuses it)
    run = _Run("t1", "r1", "cancelling")
    out2 = run.start({}) + run.map(ev.TurnCancelling(tools=("slow",)))
    assert [e["type"] for e in out2][-1] == "CUSTOM"
