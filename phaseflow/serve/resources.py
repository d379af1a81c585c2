"""The resources that are not a turn: health, workflows and their graphs, sessions
(create, list, read, history, delete)."""

from __future__ import annotations

import asyncio
import uuid

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from phaseflow.errors import ConfigError
from phaseflow.serve.bodies import known_fields, object_field, read_object, text_field
from phaseflow.serve.common import (
    choice_param,
    declared_state,
    int_param,
    path_session,
    served_for,
    session_id,
    stored,
)
from phaseflow.serve.hub import Hub
from phaseflow.serve.identity import claim, owner_filter
from phaseflow.serve.problems import Problem
from phaseflow.serve.views import (
    STATUSES,
    decode_cursor,
    history_json,
    page,
    session_json,
    workflow_json,
)
from phaseflow.stores.base import SessionsPage, StoreConflict, StoreError


def hub_of(request: Request) -> Hub:
    hub: Hub = request.app.state.hub
    return hub


async def healthz(request: Request) -> Response:
    if hub_of(request).draining:
        raise Problem(503, "shutting_down", "the server is stopping",
                      headers={"Retry-After": "1"})
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> Response:
    hub = hub_of(request)
    if hub.draining:
        raise Problem(503, "shutting_down", "the server is stopping",
                      headers={"Retry-After": "1"})
    try:
        await asyncio.wait_for(hub.store.version("readyz"), timeout=5)
    except (StoreError, TimeoutError) as exc:
        raise Problem(503, "store_unavailable",
                      f"the session store does not answer: {type(exc).__name__}",
                      headers={"Retry-After": "1"}) from None
    return JSONResponse({"status": "ready"})


async def workflows(request: Request) -> Response:
    hub = hub_of(request)
    return JSONResponse({"workflows": [
        workflow_json(s.name, s.content_hash, s.agent.workflow, s.agent.tools)
        for s in hub.served.values()]})


def _served(hub: Hub, name: str) -> object:
    served = hub.served.get(name)
    if served is None:
        raise Problem(404, "workflow_not_found",
                      f"no workflow {name!r} here (served: {', '.join(hub.served)})",
                      workflow=name)
    return served


async def graph(request: Request) -> Response:
    hub = hub_of(request)
    name = request.path_params["name"]
    _served(hub, name)
    fmt = choice_param(request, "format", ("mermaid", "dot", "json")) or "mermaid"
    from phaseflow.graph import to_dot, to_mermaid

    workflow = hub.served[name].agent.workflow
    if fmt == "json":
        from phaseflow.serve.ui.describe import graph_json

        return JSONResponse({"workflow": name, "format": fmt, "graph": graph_json(workflow)})
    text = to_mermaid(workflow) if fmt == "mermaid" else to_dot(workflow)
    return JSONResponse({"workflow": name, "format": fmt, "graph": text})


async def create_session(request: Request) -> Response:
    hub = hub_of(request)
    body = await read_object(request, request.app.state.config.max_body, empty_ok=True)
    known_fields(body, ("workflow", "id", "state"))
    name = text_field(body, "workflow")
    if name is None:
        if len(hub.served) != 1:
            raise Problem(400, "missing_field", "the field 'workflow' is required (this "
                          f"server serves {', '.join(hub.served)})", field="workflow")
        name = next(iter(hub.served))
    if name not in hub.served:
        raise Problem(404, "workflow_not_found", f"no workflow {name!r} here (served: "
                      f"{', '.join(hub.served)})", field="workflow", workflow=name)
    sid = session_id(body["id"]) if "id" in body else uuid.uuid4().hex
    state = object_field(body, "state")
    if hub.draining:
        raise Problem(503, "shutting_down", "the server is stopping; retry on another "
                      "worker", headers={"Retry-After": "1"})
    served = hub.served[name]
    declared_state(served.agent.workflow, state)
    try:
        if await hub.store.version(sid):
            raise Problem(409, "session_exists", f"session {sid!r} exists", session_id=sid)
        await claim(request, hub.store, sid)  # its owner first: never stored without one
        session = await served.agent.session(sid, state=state)
        await session.save()
    except ConfigError as exc:
        raise Problem(400, "invalid_field", str(exc), field="state") from None
    except StoreConflict:
        raise Problem(409, "session_exists", f"session {sid!r} exists",
                      session_id=sid) from None
    record = await stored(hub, sid)
    from urllib.parse import quote

    return JSONResponse(session_json(record), status_code=201,
                        headers={"Location": f"/v1/sessions/{quote(sid, safe='')}"})


async def list_sessions(request: Request) -> Response:
    hub = hub_of(request)
    workflow = request.query_params.get("workflow") or None
    status = choice_param(request, "status", STATUSES)
    limit = int_param(request, "limit", 20, low=1, high=100)
    cursor = request.query_params.get("cursor") or None
    before = decode_cursor(cursor) if cursor is not None else None
    try:
        # one more than the page: whether there is a next one
        summaries = await hub.store.sessions_page(SessionsPage(
            limit + 1, before, owner=owner_filter(request), workflow=workflow,
            status=status))
    except StoreError as exc:
        raise Problem(503, "store_unavailable", f"the session store failed: {exc}",
                      headers={"Retry-After": "1"}) from None
    return JSONResponse(page(summaries, limit=limit))


async def get_session(request: Request) -> Response:
    hub = hub_of(request)
    record = await stored(hub, path_session(request))
    return JSONResponse(session_json(record))


async def get_history(request: Request) -> Response:
    hub = hub_of(request)
    sid = path_session(request)
    record = await stored(hub, sid)
    return JSONResponse({"session_id": sid, "messages": history_json(record)})


async def get_output(request: Request) -> Response:
    """A tool output of the session that was cut for the model: its bytes from
    ``?offset=`` (default 0), at most ``?limit=`` of them (default: to the end, up to
    8 MiB a response); ``X-Output-Size`` is the output's whole size."""
    from phaseflow.session.outputs import OutputNotFound, read_output

    hub = hub_of(request)
    sid = path_session(request)
    await stored(hub, sid)
    reference = request.path_params["ref"]
    offset = int_param(request, "offset", 0)
    limit = int_param(request, "limit", 8 * 2**20, low=1, high=8 * 2**20)
    try:
        data, size = await read_output(hub.store, sid, reference, offset, limit)
    except OutputNotFound as missing:
        raise Problem(404, "output_not_found", str(missing), session_id=sid) from None
    return Response(data, media_type="text/plain; charset=utf-8",
                    headers={"X-Output-Size": str(size), "X-Output-Offset": str(offset)})


async def get_trust(request: Request) -> Response:
    """What the session trusts: the tools that run without asking a human."""
    from phaseflow.session.trust import trusted

    hub = hub_of(request)
    sid = path_session(request)
    record = await stored(hub, sid)
    return JSONResponse({"session_id": sid,
                         "trust": [t.to_json() for t in trusted(record.execution)]})


async def delete_trust(request: Request) -> Response:
    """Take back every trust of ``{tool}`` (a host's grant and every approval for the
    turn or the session): one commit with a ``trust_changed`` event, in whichever worker;
    404 when nothing trusted it, 409 while a turn of the session runs."""
    from phaseflow.session.trust import RevokeRefused, revoke_stored, trusted

    hub = hub_of(request)
    sid = path_session(request)
    tool = request.path_params["tool"]
    record = await stored(hub, sid)
    served = served_for(hub, record)
    if hub.running_here(sid):
        raise Problem(409, "session_busy", f"session {sid!r} is running a turn; revoke "
                      "trust when it has ended", session_id=sid)
    try:
        outcome = await revoke_stored(hub.store, sid, tool, owner=f"serve-trust-{uuid.uuid4()}",
                                      now=served.agent.config.clock())
    except RevokeRefused as exc:
        raise Problem(409, "session_busy", str(exc), session_id=sid) from None
    if outcome is None:
        raise Problem(404, "session_not_found", f"no session {sid!r}", session_id=sid)
    after, changed = outcome
    if not changed:
        raise Problem(404, "not_trusted", f"session {sid!r} does not trust {tool!r}",
                      session_id=sid, tool=tool)
    hub.forget(sid)  # a kept object holds the trust as it was
    if hub.on_commit is not None:
        hub.on_commit(sid)  # followers in other workers read the new event
    hub.poke(sid)
    return JSONResponse({"session_id": sid,
                         "trust": [t.to_json() for t in trusted(after.execution)]})


async def delete_session(request: Request) -> Response:
    hub = hub_of(request)
    sid = path_session(request)
    record = await stored(hub, sid)
    served_for(hub, record)
    busy = Problem(409, "session_busy", f"session {sid!r} is running a turn; cancel it "
                   "first", session_id=sid)
    if hub.running_here(sid):
        raise busy
    lease = await hub.store.lease(sid)
    clock = hub.served[record.workflow].agent.config.clock
    if lease is not None and lease.expires > clock():
        raise busy
    hub.forget(sid)  # its kept object is of the session deleted: never reused
    await hub.store.delete(sid)
    return Response(status_code=204)
