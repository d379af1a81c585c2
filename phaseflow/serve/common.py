"""What every resource reads the same way: the session id in the path, the stored
session, query parameters, the served workflow of a session."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from starlette.requests import Request

from phaseflow.serve.hub import Hub
from phaseflow.serve.problems import Problem
from phaseflow.serve.served import Served
from phaseflow.stores.base import InvalidSessionId, SessionRecord, StoreError, check_session_id


def session_id(value: object, field: str = "id") -> str:
    """A valid session id (every store's rule, and one that a URL path can carry: no
    ``/``, no control character); 400 naming it otherwise."""
    try:
        sid = check_session_id(value)
    except InvalidSessionId as exc:
        raise Problem(400, "invalid_session_id", str(exc), field=field) from None
    if "/" in sid or not sid.isprintable():
        raise Problem(400, "invalid_session_id",
                      f"session id {sid!r} holds '/' or a control character", field=field)
    return sid


def path_session(request: Request) -> str:
    return session_id(request.path_params["session_id"], "session_id")


async def stored(hub: Hub, sid: str) -> SessionRecord:
    """The stored session; 404 when there is none."""
    try:
        record = await hub.store.load(sid)
    except StoreError as exc:
        raise Problem(503, "store_unavailable", f"the session store failed: {exc}",
                      headers={"Retry-After": "1"}) from None
    if record is None:
        raise Problem(404, "session_not_found", f"no session {sid!r}", session_id=sid)
    return record


def served_for(hub: Hub, record: SessionRecord) -> Served:
    served = hub.served.get(record.workflow)
    if served is None:
        raise Problem(409, "workflow_not_served",
                      f"session {record.session_id!r} belongs to workflow "
                      f"{record.workflow!r}, which this server does not serve",
                      session_id=record.session_id, workflow=record.workflow)
    return served


def int_param(request: Request, name: str, default: int, *, low: int = 0,
              high: int = 2**53) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = low - 1
    if not low <= value <= high or not raw.strip().lstrip("-").isdigit():
        raise Problem(400, "invalid_parameter",
                      f"?{name}= must be an integer from {low} to {high}, not {raw!r}",
                      field=name)
    return value


def choice_param(request: Request, name: str, choices: tuple[str, ...]) -> str | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    if raw not in choices:
        raise Problem(400, "invalid_parameter",
                      f"?{name}= must be one of {', '.join(choices)}, not {raw!r}",
                      field=name)
    return raw


def declared_state(workflow: Any, state: Mapping[str, Any] | None) -> None:
    """A new session's first ``state`` holds only keys its workflow declares: ``422
    undeclared_state_key`` naming the first other one (a declared key of the wrong type
    is the session's own refusal: ``400 invalid_field``)."""
    declared = workflow.state or {}
    for key in state or {}:
        if key not in declared:
            names = ", ".join(sorted(declared)) or "none"
            raise Problem(422, "undeclared_state_key",
                          f"state key {key!r} is not declared by workflow "
                          f"{workflow.name!r} (declared: {names})", field="state", key=key)
