"""The resources of a turn: a message, an approval's decision, a cancellation, and the
session's events stream.

A message or a decision is accepted into a server-owned task (:mod:`phaseflow.serve.hub`)
and answered, by the request's ``Accept`` and ``Prefer`` headers, as the turn's events
(SSE), as its outcome (JSON) or at once (202 and a ``Location`` to follow).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from phaseflow.observe.observer import trace_parent
from phaseflow.serve.bodies import known_fields, media_type, read_form, read_object, text_field
from phaseflow.serve.common import int_param, path_session, served_for, stored
from phaseflow.serve.hub import Hub
from phaseflow.serve.media import Attachment, Upload, message_content
from phaseflow.serve.multipart import Part
from phaseflow.serve.problems import Problem, problem_response
from phaseflow.serve.resources import hub_of
from phaseflow.serve.streams import TurnStream, guarded, pinged, session_stream
from phaseflow.serve.turns import Accepted, events_url
from phaseflow.serve.views import event_json
from phaseflow.session import events as ev
from phaseflow.session.agent import Session
from phaseflow.session.driver import BUSY_MODES
from phaseflow.turn.messages import Content

#: what ``busy`` may be (see docs/http-api.md): the session's double-texting modes
BUSY = BUSY_MODES
DECISIONS = ("approve", "approve_turn", "approve_session", "reject")


def _idempotency_key(request: Request) -> str | None:
    key = request.headers.get("idempotency-key")
    if key is None:
        return None
    if not 1 <= len(key) <= 255 or not key.isascii() or not key.isprintable():
        raise Problem(400, "invalid_header", "Idempotency-Key must be 1 to 255 printable "
                      "ASCII characters", field="Idempotency-Key")
    return key


def _fingerprint(request: Request, body: dict[str, Any], key: str | None) -> str:
    """What a repeat with the same ``Idempotency-Key`` must match; nothing to compute
    for a request without one (the common case: it is never compared)."""
    if key is None:
        return ""
    text = json.dumps([request.url.path, body], sort_keys=True, ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _wants_stream(request: Request) -> bool:
    return "text/event-stream" in request.headers.get("accept", "")


def _wants_async(request: Request) -> bool:
    prefer = request.headers.get("prefer", "")
    return any(p.strip().lower() == "respond-async" for p in prefer.split(","))


async def _claim(hub: Hub, sid: str, key: str | None, fingerprint: str
                 ) -> Response | None:
    """Claim ``key`` in the store when this worker does not remember it: ``None``
    when claimed (or no key), else the answer to a retry of a request another worker
    (or an earlier life of this one) accepted: ``202`` and where its events are, with
    ``Idempotent-Replayed: true``; ``422`` when the key was used for another request."""
    if key is None or hub.remembered(sid, key) is not None:
        return None
    held = await hub.claim(sid, key, fingerprint)
    if held is None:
        return None
    if held != fingerprint:
        raise Problem(422, "idempotency_key_reused", "this Idempotency-Key was used for "
                      "another request on this session", session_id=sid)
    url = events_url(sid, 0)
    return JSONResponse({"session_id": sid, "status": "accepted", "events": url},
                        status_code=202, headers={"Idempotent-Replayed": "true",
                                                  "Location": url})


async def _last_seq(hub: Hub, sid: str) -> int:
    events = await hub.store.events(sid, 0)
    return events[-1].seq if events else 0


async def answer(request: Request, accepted: Accepted, repeat: bool) -> Response:
    """The response to an accepted message or decision (or to its repeat)."""
    hub = hub_of(request)
    await accepted.started_or_done()
    sid = accepted.session_id
    headers = {"Idempotent-Replayed": "true"} if repeat else {}
    if not accepted.events:
        if accepted.problem is not None:
            return problem_response(accepted.problem)
        position = accepted.queued if accepted.queued is not None else 0
        url = events_url(sid, await _last_seq(hub, sid))
        return JSONResponse({"session_id": sid, "status": "queued", "position": position,
                             "events": url}, status_code=202,
                            headers={**headers, "Location": url})
    if _wants_async(request):
        url = events_url(sid, max(accepted.first_seq() - 1, 0))
        return JSONResponse({"session_id": sid, "status": "accepted", "events": url},
                            status_code=202, headers={**headers, "Location": url,
                                                      "Preference-Applied": "respond-async"})
    if _wants_stream(request):
        config = request.app.state.config
        return TurnStream(accepted, config.heartbeat, config.log, headers)
    await accepted.until_turn_end()
    outcome = accepted.outcome()
    if accepted.problem is not None:
        outcome["problem"] = accepted.problem.to_json()
    return JSONResponse(outcome, headers=headers)


def _trace_headers(request: Request) -> dict[str, str]:
    """The caller's W3C trace context (``traceparent``, ``tracestate``), if it sent one."""
    return {k: v for k, v in request.headers.items() if k in ("traceparent", "tracestate")}


def _send(text: Content, busy: Any) -> Callable[[Session], AsyncIterator[ev.Event]]:
    def action(session: Session) -> AsyncIterator[ev.Event]:
        return session.send(text, busy=busy)
    return action


def _attachments(body: dict[str, Any]) -> list[tuple[str, str | None]]:
    """The ``attachments`` field: each a URL string (a ``data:`` URL, or an image's
    ``https:`` URL) or ``{"url": ..., "media_type": ...}``."""
    raw = body.get("attachments", [])
    if not isinstance(raw, list):
        raise Problem(400, "invalid_field", "the field 'attachments' must be an array",
                      field="attachments")
    out: list[tuple[str, str | None]] = []
    for index, item in enumerate(raw):
        where = f"attachments[{index}]"
        if isinstance(item, dict):
            known_fields(item, ("url", "media_type"))
            url = text_field(item, "url", required=True)
            media_type = text_field(item, "media_type")
        else:
            url, media_type = item, None
        if not isinstance(url, str) or not url:
            raise Problem(400, "invalid_field", f"{where} must be a URL string or an "
                          "object with url", field=where)
        out.append((url, media_type))
    return out


#: the fields of a message
MESSAGE_FIELDS = ("text", "busy", "attachments")


def _form_message(parts: tuple[Part, ...]
                  ) -> tuple[dict[str, Any], list[Attachment]]:
    """A ``multipart/form-data`` message: its ``text`` and ``busy`` fields (each at most
    once, UTF-8) as a body the JSON one would be, and its ``attachments`` (file parts,
    or fields holding a URL as in JSON). A file part with no name and no bytes is a
    browser's "no file chosen" and is left out. The body's ``attachments`` hold each
    upload's digest, for an ``Idempotency-Key``'s fingerprint."""
    body: dict[str, Any] = {}
    attachments: list[Attachment] = []
    named: list[str] = []
    for part in parts:
        if part.name not in MESSAGE_FIELDS:
            known_fields({part.name: None}, MESSAGE_FIELDS)
        if part.name == "attachments":
            if part.is_file and not part.filename and not part.data:
                continue
            where = f"attachments[{len(attachments)}]"
            if part.is_file:
                attachments.append(Upload(part.data, part.media_type))
                named.append(hashlib.sha256(part.data).hexdigest())
                continue
            url = _field_text(part, where)
            attachments.append((url, None))
            named.append(url)
            continue
        if part.is_file:
            raise Problem(400, "invalid_field", f"the field {part.name!r} must be a text "
                          "field, not a file", field=part.name)
        if part.name in body:
            raise Problem(400, "invalid_field", f"the field {part.name!r} is given twice",
                          field=part.name)
        body[part.name] = _field_text(part, part.name)
    if named:
        body["attachments"] = named
    return body, attachments


def _field_text(part: Part, field: str) -> str:
    try:
        return part.data.decode("utf-8")
    except UnicodeDecodeError:
        raise Problem(400, "invalid_field", f"the field {field!r} is not UTF-8 text",
                      field=field) from None


async def _message_body(request: Request, limit: int
                        ) -> tuple[dict[str, Any], list[Attachment]]:
    """A message's fields and attachments, from a JSON body or a form."""
    kind = media_type(request)
    if kind == "multipart/form-data":
        return _form_message(await read_form(request, limit))
    if kind and kind != "application/json" and not kind.endswith("+json"):
        raise Problem(415, "unsupported_media_type", f"the body is {kind}; send "
                      "application/json or multipart/form-data")
    body = await read_object(request, limit)
    known_fields(body, MESSAGE_FIELDS)
    return body, list(_attachments(body))


async def post_message(request: Request) -> Response:
    hub = hub_of(request)
    config = request.app.state.config
    sid = path_session(request)
    key = _idempotency_key(request)
    body, attachments = await _message_body(request, config.max_body)
    text = text_field(body, "text", required=not attachments, default="",
                      max_chars=config.max_text)
    busy = text_field(body, "busy", default="queue", choices=BUSY)
    assert text is not None and busy is not None
    fingerprint = _fingerprint(request, body, key)
    replayed = await _claim(hub, sid, key, fingerprint)
    if replayed is not None:
        return replayed
    try:
        return await _post_message(request, hub, sid, key, fingerprint, text, busy,
                                   attachments)
    except BaseException:
        if key is not None and hub.remembered(sid, key) is None:
            await hub.unclaim(sid, key, fingerprint)  # refused: nothing stored
        raise


async def _post_message(request: Request, hub: Hub, sid: str, key: str | None,
                        fingerprint: str, text: str, busy: str,
                        attachments: list[Attachment]) -> Response:
    if busy == "interrupt" and hub.running_here(sid):
        # the turn running here stops at once (its tools cancelled, as cancel() stops
        # them); the interrupting message then takes the turn over (Session.send)
        hub.cancel(sid)
    repeat_of = hub.remembered(sid, key) if key is not None else None
    if repeat_of is None and len(hub.served) == 1:
        # one workflow: a cheap look at whether the session exists is enough (opening
        # it reads it once; a finished one is refused by the Session as it opens); a
        # session kept open here is looked at as its object is checked (hub.submit)
        served = next(iter(hub.served.values()))
        if not hub.running_here(sid) and not hub.kept(sid) and not await \
                hub.store.version(sid):
            raise Problem(404, "session_not_found", f"no session {sid!r}", session_id=sid)
    elif repeat_of is None:
        record = await stored(hub, sid)
        served = served_for(hub, record)
        if record.status == "finished" and not hub.running_here(sid):
            raise Problem(409, "session_finished", f"session {sid!r} has finished (phase "
                          f"{record.phase!r} is terminal); it takes no more messages",
                          session_id=sid)
    else:
        served = next(iter(hub.served.values()))  # not used: the repeat is answered
    content = message_content(text, attachments, served) if repeat_of is None else text
    with trace_parent(_trace_headers(request)):  # the turn continues the caller's trace
        accepted, repeat = await hub.submit(served, sid, _send(content, busy),
                                            busy=busy, key=key, fingerprint=fingerprint,
                                            claimed=key is not None and repeat_of is None)
    return await answer(request, accepted, repeat)


async def post_approval(request: Request) -> Response:
    hub = hub_of(request)
    config = request.app.state.config
    sid = path_session(request)
    call_id = request.path_params["call_id"]
    key = _idempotency_key(request)
    body = await read_object(request, config.max_body)
    known_fields(body, ("decision", "reason"))
    decision = text_field(body, "decision", required=True, choices=DECISIONS)
    reason = text_field(body, "reason", default="", max_chars=config.max_text) or ""
    assert decision is not None
    fingerprint = _fingerprint(request, body, key)
    replayed = await _claim(hub, sid, key, fingerprint)
    if replayed is not None:
        return replayed
    try:
        return await _post_approval(request, hub, sid, key, fingerprint, call_id,
                                    decision, reason)
    except BaseException:
        if key is not None and hub.remembered(sid, key) is None:
            await hub.unclaim(sid, key, fingerprint)  # refused: nothing stored
        raise


async def _post_approval(request: Request, hub: Hub, sid: str, key: str | None,
                         fingerprint: str, call_id: str, decision: str,
                         reason: str) -> Response:
    repeat_of = hub.remembered(sid, key) if key is not None else None
    record = await stored(hub, sid)
    served = served_for(hub, record)
    if repeat_of is None:
        pending = record.execution.pending_approval
        if record.status != "awaiting_approval" or pending is None:
            raise Problem(409, "no_pending_approval",
                          f"session {sid!r} waits for no approval (status "
                          f"{record.status})", session_id=sid)
        if pending.call.id != call_id:
            raise Problem(404, "call_not_found", f"session {sid!r} waits for a decision on "
                          f"call {pending.call.id!r}, not {call_id!r}", session_id=sid,
                          call_id=call_id)

    def action(session: Session) -> AsyncIterator[ev.Event]:
        return session.resolve(call_id, decision, reason=reason)

    accepted, repeat = await hub.submit(served, sid, action, key=key,
                                        fingerprint=fingerprint,
                                        claimed=key is not None and repeat_of is None)
    return await answer(request, accepted, repeat)


async def post_cancel(request: Request) -> Response:
    hub = hub_of(request)
    sid = path_session(request)
    record = await stored(hub, sid)
    served = served_for(hub, record)
    if hub.cancel(sid):
        return JSONResponse({"session_id": sid, "status": "cancelling"}, status_code=202)
    if record.status == "awaiting_approval":
        async def action(session: Session) -> AsyncIterator[ev.Event]:
            for event in await session.cancel_pending():
                yield event

        await hub.submit(served, sid, action)
        return JSONResponse({"session_id": sid, "status": "cancelling"}, status_code=202)
    if record.status == "running":
        lease = await hub.store.lease(sid)
        clock = served.agent.config.clock
        if lease is not None and lease.expires > clock():
            # another worker runs the turn: the cancel is carried to it
            await hub.cancel_elsewhere(sid)
            return JSONResponse({"session_id": sid, "status": "cancelling"},
                                status_code=202)
        raise Problem(409, "turn_elsewhere", f"session {sid!r}'s turn was left by a "
                      "worker that is gone (its lease expired); a sweep (serve --sweep) "
                      "or `phaseflow sessions recover` finishes it", session_id=sid)
    raise Problem(409, "no_running_turn", f"session {sid!r} runs no turn (status "
                  f"{record.status})", session_id=sid)


def _position(request: Request) -> int:
    header = request.headers.get("last-event-id")
    if header is not None and header.strip():
        text = header.strip()
        if not text.isdigit() or len(text) > 16:
            raise Problem(400, "invalid_header", "Last-Event-ID must be an event's seq (a "
                          f"non-negative integer), not {header!r}", field="Last-Event-ID")
        return int(text)
    return int_param(request, "after", 0)


async def get_events(request: Request) -> Response:
    hub = hub_of(request)
    sid = path_session(request)
    after = _position(request)
    follow = request.query_params.get("follow", "true")
    if follow not in ("true", "false"):
        raise Problem(400, "invalid_parameter", "?follow= is true or false", field="follow")
    if not hub.running_here(sid) and not await hub.store.version(sid):
        raise Problem(404, "session_not_found", f"no session {sid!r}", session_id=sid)
    if follow == "false":
        limit = int_param(request, "limit", 1000, low=1, high=10_000)
        events = await hub.store.events(sid, after)
        return JSONResponse([event_json(e) for e in events[:limit]])
    config = request.app.state.config
    return pinged(guarded(session_stream(hub, sid, after, config.poll), config.log, sid),
                  config.heartbeat)
