"""``POST /v1/ag-ui/{workflow}``: the AG-UI protocol, so AG-UI front ends (CopilotKit,
assistant-ui and the other clients of the protocol) drive a phaseflow agent without
glue.

The body is an AG-UI ``RunAgentInput``; the answer is AG-UI events as SSE. ``threadId``
is the session id (a new session when the store has none); the last user message of
``messages`` is the turn's input (the server's own history is the truth, the rest of
``messages`` is not read); its media parts (``image``, ``document``: a ``data`` source's
base64 bytes, or an image's ``url``; the pre-1.0 ``binary`` part too) are attachments,
checked as the HTTP API checks them. A ``resume`` entry answers the approval the previous run
ended with (``interruptId`` is the call id; ``status: resolved`` with ``payload``
``{"decision": "approve"|"approve_turn"|"approve_session"|"reject", "reason"}``, the
decision ``approve`` when the payload names none; ``status: cancelled`` rejects it).

Two of phaseflow's turn events have no event of the protocol, and are ``CUSTOM`` events
(named ``phaseflow.*``): ``phaseflow.reply_continued`` (the reply was cut at the model's
output limit and the model is asked to go on: the continuation's text goes on in the same
assistant message, so a client shows one message with the stitched text) and
``phaseflow.turn_cancelling`` (the run was cancelled and waits for its tools' threads;
a ``cancelling`` step is open until the run ends).

A run for a thread whose turn runs is refused as a run (``RUN_STARTED``, then
``RUN_ERROR`` with code ``session_busy``): the request was right, the run failed.

The events are written here as plain JSON in the protocol's own (camelCase) form, as SSE
frames ended by ``\n`` (:mod:`phaseflow.serve.streams`); the tests validate each one
with the protocol's published Python models, and drive the official JavaScript client
(``@ag-ui/client``) through whole conversations.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from sse_starlette import ServerSentEvent
from starlette.requests import Request
from starlette.responses import Response

from phaseflow.errors import ConfigError
from phaseflow.machine.calls import snapshot_path
from phaseflow.serve.bodies import read_object
from phaseflow.serve.common import declared_state, session_id
from phaseflow.serve.config import ServeConfig
from phaseflow.serve.identity import thread_access
from phaseflow.serve.media import message_content
from phaseflow.serve.problems import Problem, problem_response
from phaseflow.serve.resources import hub_of
from phaseflow.serve.served import Served
from phaseflow.serve.streams import frame, guarded, pinged
from phaseflow.session import events as ev
from phaseflow.session.agent import Session
from phaseflow.stores.base import StoreConflict
from phaseflow.turn.messages import Content

DECISIONS = ("approve", "approve_turn", "approve_session", "reject")
#: the step a cancelled run is in while it waits for its tools' threads
CANCELLING = "cancelling"


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
    """Session events -> AG-UI events, for one run.

    Every run the server starts ends as the protocol's verifier wants it: the text
    message and the step that are open closed first, then ``RUN_FINISHED`` (success,
    cancelled, or an approval's interrupt) or ``RUN_ERROR``. A tool call is attached to
    the assistant message of its reply (``parentMessageId``), so a client's messages
    have the shape of the server's history: one assistant message per reply."""

    def __init__(self, thread: str, run: str, phase: str,
                 path: Sequence[str] = (), workflow: str = "") -> None:
        self.thread, self.run, self.phase, self.workflow = thread, run, phase, workflow
        #: where the conversation is, in a workflow that composes others (each workflow
        #: and its phase, outermost first)
        self.path = tuple(path)
        self.message: str | None = None
        #: the assistant message of the reply being told (its text's id, or its first
        #: call's parent); a tool's result ends it
        self.reply: str | None = None
        self.step: str | None = None
        #: the ``cancelling`` step, once the turn waits for its tools after a cancel
        self.cancelling: str | None = None
        self.count = 0
        self.errors: list[ev.ErrorEvent] = []

    def _now(self) -> int:
        return int(time.time() * 1000)

    def out(self, kind: str, **fields: Any) -> dict[str, Any]:
        return {"type": kind, "timestamp": self._now(), **fields}

    def _next_id(self) -> str:
        self.count += 1
        return f"{self.run}-m{self.count}"

    def _close_text(self) -> list[dict[str, Any]]:
        if self.message is None:
            return []
        ended, self.message = self.message, None
        return [self.out("TEXT_MESSAGE_END", messageId=ended)]

    def _close(self) -> list[dict[str, Any]]:
        """The open text message and steps, closed: what precedes a run's end."""
        out = self._close_text()
        if self.cancelling is not None:
            out.append(self.out("STEP_FINISHED", stepName=self.cancelling))
            self.cancelling = None
        if self.step is not None:
            out.append(self.out("STEP_FINISHED", stepName=self.step))
            self.step = None
        return out

    def _step_name(self) -> str:
        """The phase; inside a called or handed-off workflow, the whole path
        (``billing-desk › verify › identity-check › find``)."""
        inside = len(self.path) > 2 or (len(self.path) == 2 and self.path[0] != self.workflow)
        return " › ".join(self.path) if inside else self.phase

    def _open_step(self) -> dict[str, Any]:
        self.step = self._step_name()
        return self.out("STEP_STARTED", stepName=self.step)

    def start(self, state: Mapping[str, Any]) -> list[dict[str, Any]]:
        return [self.out("RUN_STARTED", threadId=self.thread, runId=self.run),
                self.out("STATE_SNAPSHOT", snapshot=dict(state)),
                self._open_step()]

    def error(self, message: str, code: str) -> list[dict[str, Any]]:
        """The run's end as an error (steps and text closed first)."""
        return [*self._close(), self.out("RUN_ERROR", message=message, code=code)]

    def map(self, event: ev.Event) -> list[dict[str, Any]]:
        if isinstance(event, ev.TextDeltaEvent):
            if not event.text:
                return []
            out = []
            if self.message is None:
                self.message = self.reply = self.reply or self._next_id()
                out.append(self.out("TEXT_MESSAGE_START", messageId=self.message,
                                    role="assistant"))
            out.append(self.out("TEXT_MESSAGE_CONTENT", messageId=self.message,
                                delta=event.text))
            return out
        if isinstance(event, ev.ToolCallEvent):
            out = self._close_text()
            self.reply = self.reply or self._next_id()
            return [*out,
                    self.out("TOOL_CALL_START", toolCallId=event.call_id,
                             toolCallName=event.name, parentMessageId=self.reply),
                    self.out("TOOL_CALL_ARGS", toolCallId=event.call_id,
                             delta=json.dumps(event.arguments)),
                    self.out("TOOL_CALL_END", toolCallId=event.call_id)]
        if isinstance(event, ev.ToolResultEvent):
            self.reply = None  # what the model says next is a reply of its own
            return [*self._close_text(),
                    self.out("TOOL_CALL_RESULT", messageId=f"{self.run}-r-{event.call_id}",
                             toolCallId=event.call_id, content=event.content, role="tool")]
        if isinstance(event, ev.StateChanged):
            patch = state_patch(event)
            return [self.out("STATE_DELTA", delta=patch)] if patch else []
        if isinstance(event, ev.PhaseChanged):
            self.phase = event.to_phase
            self.path = event.path or (self.workflow, event.to_phase)
            return [*self._close(), self._open_step()]
        if isinstance(event, ev.ErrorEvent):
            self.errors.append(event)
            return []
        if isinstance(event, ev.ReplyContinued):
            # the text message stays open: the continuation's text goes on in it
            return [self.out("CUSTOM", name="phaseflow.reply_continued", value={
                "messageId": self.reply, "continuation": event.continuation,
                "of": event.of, "calls": event.calls})]
        if isinstance(event, ev.TurnCancelling):
            out = [self.out("CUSTOM", name="phaseflow.turn_cancelling",
                            value={"tools": list(event.tools)})]
            if self.cancelling is None and self.step != CANCELLING:
                self.cancelling = CANCELLING
                out.append(self.out("STEP_STARTED", stepName=CANCELLING))
            return out
        if isinstance(event, ev.ApprovalRequested):
            interrupt = {"id": event.call_id, "reason": "tool_approval",
                         "message": event.reason or f"{event.name} needs approval",
                         "toolCallId": event.call_id,
                         "responseSchema": {"type": "object", "properties": {
                             "decision": {"enum": list(DECISIONS)},
                             "reason": {"type": "string"}}}}
            return [*self._close(),
                    self.out("RUN_FINISHED", threadId=self.thread, runId=self.run,
                             outcome={"type": "interrupt", "interrupts": [interrupt]})]
        if isinstance(event, ev.TurnFinished):
            return self.finish(event)
        return []

    def finish(self, event: ev.TurnFinished) -> list[dict[str, Any]]:
        if event.status == "failed":
            cause = self.errors[-1] if self.errors else None
            return self.error(cause.message if cause else "the turn failed",
                              cause.code if cause else "turn_failed")
        result: dict[str, Any] = {"reply": event.reply, "status": event.status,
                                  "phase": self.phase}
        if self._step_name() != self.phase:
            result["path"] = list(self.path)
        outcome = {"type": "cancelled"} if event.status == "cancelled" else {"type": "success"}
        return [*self._close(),
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


#: the input parts that carry media: the protocol's media parts (1.0) and ``binary``
MEDIA_PARTS = ("image", "document", "audio", "video", "binary")


def _media(part: Mapping[str, Any], field: str) -> tuple[str, str | None]:
    """An AG-UI media input part as a URL and its media type. A media part (``image``,
    ``document``, ...) with a ``source``: ``data`` (base64 ``value`` and ``mimeType``)
    becomes a ``data:`` URL, ``url`` its ``value``; a ``file`` source (a handle only
    its provider can read) is refused. The pre-1.0 ``binary`` part: ``data`` or
    ``url`` with ``mimeType``; one given only by ``id`` is refused."""
    if part.get("type") == "binary":
        source: Any = {"type": "data" if part.get("data") else "url",
                       "value": part.get("data") or part.get("url"),
                       "mimeType": part.get("mimeType")}
    else:
        source = part.get("source")
    if not isinstance(source, Mapping):
        raise Problem(400, "invalid_field", f"{field}: a media part needs its source",
                      field=field)
    kind, value, mime = source.get("type"), source.get("value"), source.get("mimeType")
    mime = mime if isinstance(mime, str) and mime else None
    if kind in ("data", "url") and isinstance(value, str) and value:
        if kind == "data":
            if mime is None:
                raise Problem(400, "invalid_field", f"{field}: inline data needs its "
                              "mimeType", field=field)
            return f"data:{mime};base64,{value}", mime
        return value, mime
    raise Problem(422, "attachment_refused", f"{field}: a media part must carry its bytes "
                  "(a data source) or an image's url; a file handle or an id names nothing "
                  "this server keeps", field=field, reason="not_found")


def _last_user_message(body: Mapping[str, Any], served: Served) -> Content:
    """The last user message with text or binary parts, as the session's content (its
    attachments checked: :func:`phaseflow.serve.media.message_content`)."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise Problem(400, "invalid_field", "messages must be a list", field="messages")
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if not isinstance(message, dict) or message.get("role") != "user":
            continue
        content = message.get("content")
        text = _text(content)
        where = f"messages[{index}].content"
        binaries = [_media(part, f"{where}[{n}]") for n, part in
                    enumerate(content if isinstance(content, list) else [])
                    if isinstance(part, Mapping) and part.get("type") in MEDIA_PARTS]
        if text or binaries:
            return message_content(text, binaries, served, where)
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
    text = None if resume is not None else _last_user_message(body, served)
    record = await hub.store.load(sid)
    await thread_access(request, hub.store, sid, exists=record is not None)
    if record is None:
        state = body.get("state") if isinstance(body.get("state"), dict) else None
        declared_state(served.agent.workflow, state)
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

    mapper = _Run(sid, run, record.phase, snapshot_path(record.machine), record.workflow)
    try:
        accepted, _ = await hub.submit(served, sid, action, busy="reject")
    except Problem as problem:
        if problem.code != "session_busy":
            raise
        return _refused(mapper, problem, config)
    await accepted.started_or_done()
    if not accepted.events and accepted.problem is not None:
        if accepted.problem.code == "session_busy":
            return _refused(mapper, accepted.problem, config)
        return problem_response(accepted.problem)

    async def frames() -> AsyncIterator[ServerSentEvent]:
        for item in mapper.start(record.state):
            yield frame(item)
        ended = False
        async for event in accepted.follow():
            for item in mapper.map(event):
                ended = ended or item["type"] in ("RUN_FINISHED", "RUN_ERROR")
                yield frame(item)
        if not ended:
            problem = accepted.problem
            for item in mapper.error(problem.detail if problem else
                                     "the run ended without a result",
                                     problem.code if problem else "run_incomplete"):
                yield frame(item)

    return pinged(guarded(frames(), config.log, sid), config.heartbeat)


def _refused(mapper: _Run, problem: Problem, config: ServeConfig) -> Response:
    """A run the session cannot take now (its turn runs): a run of its own that ends at
    once with ``RUN_ERROR`` (``code`` the problem's, ``session_busy``), as the protocol
    tells a client a run failed; nothing is stored. (An HTTP error would be a failure of
    the client's request, thrown at its caller; the request was right.)"""

    async def frames() -> AsyncIterator[ServerSentEvent]:
        yield frame(mapper.out("RUN_STARTED", threadId=mapper.thread, runId=mapper.run))
        yield frame(mapper.out(
            "RUN_ERROR", code=problem.code,
            message=f"thread {mapper.thread!r} is running a turn: this run was refused and "
                    "nothing of it stored; run it again once the turn ends"))

    return pinged(frames(), config.heartbeat)


