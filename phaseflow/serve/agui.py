"""``POST /v1/ag-ui/{workflow}``: the AG-UI protocol, so AG-UI front ends (CopilotKit,
assistant-ui and the other clients of the protocol) drive a phaseflow agent without
glue.

The body is an AG-UI ``RunAgentInput``; the answer is AG-UI events as SSE. ``threadId``
is the session id (a new session when the store has none); the last user message of
``messages`` is the turn's input (the server's own history is the truth, the rest of
``messages`` is not read). A ``resume`` entry answers the approval the previous run
ended with (``interruptId`` is the call id; ``status: resolved`` with ``payload``
``{"decision": "approve"|"approve_turn"|"approve_session"|"reject", "reason"}``, the
decision ``approve`` when the payload names none; ``status: cancelled`` rejects it).

The events are written here as plain JSON in the protocol's own (camelCase) form; the
tests validate each one with the protocol's published Python models.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.requests import Request
from starlette.responses import Response

from phaseflow.errors import ConfigError
from phaseflow.serve.bodies import read_object
from phaseflow.serve.common import session_id
from phaseflow.serve.identity import thread_access
from phaseflow.serve.problems import Problem, problem_response
from phaseflow.serve.resources import hub_of
from phaseflow.serve.streams import guarded
from phaseflow.session import events as ev
from phaseflow.session.agent import Session
from phaseflow.stores.base import StoreConflict

DECISIONS = ("approve", "approve_turn", "approve_session", "reject")


def _pointer(key: str) -> str:
    return "/" + key.replace("~", "~0").replace("/", "~1")


def state_patch(event: ev.StateChanged) -> list[dict[str, Any]]:
    """The RFC 6902 patch of a state change (an absent key is ``None``)."""
    ops: list[dict[str, Any]] = []
    for key in event.keys:
        old, new = event.old.get(key), event.new.get(key)
        if new is None and old is not None:
            ops.append({"op": "remove", "path": _pointer(key)})
        elif new is not None and old is None:
            ops.append({"op": "add", "path": _pointer(key), "value": new})
        elif new is not None:
            ops.append({"op": "replace", "path": _pointer(key), "value": new})
    return ops


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content
                       if isinstance(p, Mapping) and p.get("type") == "text")
    return ""


class _Run:
    """Session events -> AG-UI events, for one run."""

    def __init__(self, thread: str, run: str, phase: str) -> None:
        self.thread, self.run, self.phase = thread, run, phase
        self.message: str | None = None
        self.count = 0
        self.errors: list[ev.ErrorEvent] = []

    def _now(self) -> int:
        return int(time.time() * 1000)

    def out(self, kind: str, **fields: Any) -> dict[str, Any]:
        return {"type": kind, "timestamp": self._now(), **fields}

    def _close_text(self) -> list[dict[str, Any]]:
        if self.message is None:
            return []
        ended, self.message = self.message, None
        return [self.out("TEXT_MESSAGE_END", messageId=ended)]

    def start(self, state: Mapping[str, Any]) -> list[dict[str, Any]]:
        return [self.out("RUN_STARTED", threadId=self.thread, runId=self.run),
                self.out("STATE_SNAPSHOT", snapshot=dict(state)),
                self.out("STEP_STARTED", stepName=self.phase)]

    def map(self, event: ev.Event) -> list[dict[str, Any]]:
        if isinstance(event, ev.TextDeltaEvent):
            if not event.text:
                return []
            out = []
            if self.message is None:
                self.count += 1
                self.message = f"{self.run}-m{self.count}"
                out.append(self.out("TEXT_MESSAGE_START", messageId=self.message,
                                    role="assistant"))
            out.append(self.out("TEXT_MESSAGE_CONTENT", messageId=self.message,
                                delta=event.text))
            return out
        if isinstance(event, ev.ToolCallEvent):
            return [*self._close_text(),
                    self.out("TOOL_CALL_START", toolCallId=event.call_id,
                             toolCallName=event.name),
                    self.out("TOOL_CALL_ARGS", toolCallId=event.call_id,
                             delta=json.dumps(event.arguments)),
                    self.out("TOOL_CALL_END", toolCallId=event.call_id)]
        if isinstance(event, ev.ToolResultEvent):
            return [self.out("TOOL_CALL_RESULT", messageId=f"{self.run}-r-{event.call_id}",
                             toolCallId=event.call_id, content=event.content, role="tool")]
        if isinstance(event, ev.StateChanged):
            patch = state_patch(event)
            return [self.out("STATE_DELTA", delta=patch)] if patch else []
        if isinstance(event, ev.PhaseChanged):
            self.phase = event.to_phase
            return [self.out("STEP_FINISHED", stepName=event.from_phase),
                    self.out("STEP_STARTED", stepName=event.to_phase)]
        if isinstance(event, ev.ErrorEvent):
            self.errors.append(event)
            return []
        if isinstance(event, ev.ApprovalRequested):
            interrupt = {"id": event.call_id, "reason": "tool_approval",
                         "message": event.reason or f"{event.name} needs approval",
                         "toolCallId": event.call_id,
                         "responseSchema": {"type": "object", "properties": {
                             "decision": {"enum": list(DECISIONS)},
                             "reason": {"type": "string"}}}}
            return [*self._close_text(),
                    self.out("RUN_FINISHED", threadId=self.thread, runId=self.run,
                             outcome={"type": "interrupt", "interrupts": [interrupt]})]
        if isinstance(event, ev.TurnFinished):
            return [*self._close_text(), *self.finish(event)]
        return []

    def finish(self, event: ev.TurnFinished) -> list[dict[str, Any]]:
        if event.status == "failed":
            cause = self.errors[-1] if self.errors else None
            return [self.out("RUN_ERROR", message=cause.message if cause else "the turn failed",
                             code=cause.code if cause else "turn_failed")]
        result = {"reply": event.reply, "status": event.status, "phase": self.phase}
        outcome = {"type": "cancelled"} if event.status == "cancelled" else {"type": "success"}
        return [self.out("STEP_FINISHED", stepName=self.phase),
                self.out("RUN_FINISHED", threadId=self.thread, runId=self.run,
                         result=result, outcome=outcome)]


def _field(body: Mapping[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value:
        raise Problem(400, "invalid_field", f"the field {name!r} must be a non-empty string",
                      field=name)
    return value


def _resume(body: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """(call id, decision, reason) of the run's resume entry, if it has one."""
    entries = body.get("resume")
    if entries is None or entries == []:
        return None
    if not isinstance(entries, list) or len(entries) != 1 or not isinstance(entries[0], dict):
        raise Problem(400, "invalid_field", "resume holds one entry: {interruptId, status, "
                      "payload}", field="resume")
    entry = entries[0]
    call = _field(entry, "interruptId")
    status = entry.get("status")
    raw = entry.get("payload")
    payload: dict[str, Any] = raw if isinstance(raw, dict) else {}
    reason = payload.get("reason", "")
    if not isinstance(reason, str):
        raise Problem(400, "invalid_field", "payload.reason must be a string", field="resume")
    if status == "cancelled":
        return call, "reject", reason or "cancelled by the user"
    if status != "resolved":
        raise Problem(400, "invalid_field", "resume status is resolved or cancelled",
                      field="resume")
    decision = payload.get("decision", "approve")
    if decision not in DECISIONS:
        raise Problem(400, "invalid_field", f"payload.decision is one of "
                      f"{', '.join(DECISIONS)}", field="resume")
    return call, str(decision), reason


def _last_user_text(body: Mapping[str, Any]) -> str:
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise Problem(400, "invalid_field", "messages must be a list", field="messages")
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            text = _text(message.get("content"))
            if text:
                return text
    raise Problem(400, "invalid_field", "messages hold no user message with text",
                  field="messages")


async def run_agent(request: Request) -> Response:
    hub = hub_of(request)
    config = request.app.state.config
    name = request.path_params["workflow"]
    served = hub.served.get(name)
    if served is None:
        raise Problem(404, "workflow_not_found", f"no workflow {name!r} here", workflow=name)
    body = await read_object(request, config.max_body)
    sid = session_id(_field(body, "threadId"), "threadId")
    run = _field(body, "runId")
    resume = _resume(body)
    text = None if resume is not None else _last_user_text(body)
    record = await hub.store.load(sid)
    await thread_access(request, hub.store, sid, exists=record is not None)
    if record is None:
        state = body.get("state") if isinstance(body.get("state"), dict) else None
        try:
            new = await served.agent.session(sid, state=state or None)
            await new.save()
        except ConfigError as exc:
            raise Problem(400, "invalid_field", str(exc), field="state") from None
        except StoreConflict:
            pass  # created by a run of the same thread meanwhile
        record = await hub.store.load(sid)
    assert record is not None
    if record.workflow != name:
        raise Problem(409, "session_unusable", f"thread {sid!r} belongs to workflow "
                      f"{record.workflow!r}", session_id=sid)

    async def action(session: Session) -> AsyncIterator[ev.Event]:
        if resume is not None:
            async for event in session.resolve(resume[0], resume[1], reason=resume[2]):
                yield event
        else:
            assert text is not None
            async for event in session.send(text):
                yield event

    accepted, _ = await hub.submit(served, sid, action, busy="reject")
    await accepted.started_or_done()
    if not accepted.events and accepted.problem is not None:
        return problem_response(accepted.problem)
    mapper = _Run(sid, run, record.phase)

    async def frames() -> AsyncIterator[ServerSentEvent]:
        for item in mapper.start(record.state):
            yield _frame(item)
        ended = False
        async for event in accepted.follow():
            for item in mapper.map(event):
                ended = ended or item["type"] in ("RUN_FINISHED", "RUN_ERROR")
                yield _frame(item)
        if not ended:
            problem = accepted.problem
            yield _frame(mapper.out("RUN_ERROR", message=problem.detail if problem else
                                    "the run ended without a result",
                                    code=problem.code if problem else "run_incomplete"))

    return EventSourceResponse(guarded(frames(), config.log, sid), ping=config.heartbeat)


def _frame(item: Mapping[str, Any]) -> ServerSentEvent:
    return ServerSentEvent(data=json.dumps(item, ensure_ascii=False, separators=(",", ":")))


