"""``GET /openapi.json``: the OpenAPI 3.1 document of every route, written as data.

A test holds it equal to the routes (every path and method of the application is here,
and nothing else), validates it with ``openapi-spec-validator``, and fuzzes the live
server from it (schemathesis): every response must match what is written here.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from phaseflow.turn.media import MEDIA_TYPES

PROBLEM = {"$ref": "#/components/schemas/Problem"}
JSON = "application/json"
SSE = "text/event-stream"


def _problem(description: str) -> dict[str, Any]:
    return {"description": description,
            "content": {"application/problem+json": {"schema": PROBLEM}}}


def _ok(schema: dict[str, Any], description: str = "OK", *,
        stream: bool = False) -> dict[str, Any]:
    content: dict[str, Any] = {JSON: {"schema": schema}}
    if stream:
        content[SSE] = {"schema": {"type": "string"}}
    return {"description": description, "content": content}


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


SESSION_ID = {"name": "session_id", "in": "path", "required": True,
              "schema": {"type": "string", "minLength": 1, "maxLength": 1024}}
IDEMPOTENCY = {"name": "Idempotency-Key", "in": "header", "required": False,
               "schema": {"type": "string", "minLength": 1, "maxLength": 255}}
PREFER = {"name": "Prefer", "in": "header", "required": False,
          "schema": {"type": "string"},
          "description": "respond-async: answer 202 at once with a Location to follow"}
COMMON = {"400": _problem("bad input, naming the field"),
          "401": _problem("no valid bearer token, or no identity (--auth)"),
          "403": _problem("a state-changing request from a foreign Origin"),
          "421": _problem("a Host the server does not answer to (DNS rebinding)"),
          "413": _problem("body over --max-body"),
          "503": _problem("stopping, or the store does not answer")}
TURN = {
    "200": _ok(_ref("TurnOutcome"), "the turn's outcome (JSON) or its events (SSE)",
               stream=True),
    "202": _ok({"oneOf": [_ref("Queued"), _ref("AcceptedTurn")]},
               "queued behind a running turn, or accepted (Prefer: respond-async)"),
    "404": _problem("unknown session or call"),
    "409": _problem("session busy (busy=reject), finished, or not awaiting this"),
    "415": _problem("not JSON"),
    "422": _problem("Idempotency-Key reused for another request"),
    **COMMON,
}


def _op(summary: str, responses: dict[str, Any], *, params: list[Any] | None = None,
        body: dict[str, Any] | None = None, secured: bool = True,
        body_required: bool = True, form: dict[str, Any] | None = None) -> dict[str, Any]:
    op: dict[str, Any] = {"summary": summary, "responses": responses}
    if params:
        op["parameters"] = params
    if body is not None:
        op["requestBody"] = {"required": body_required,
                             "content": {JSON: {"schema": body}}}
        if form is not None:
            op["requestBody"]["content"]["multipart/form-data"] = {
                "schema": form, "encoding": {"attachments": {"contentType": ", ".join(
                    sorted(MEDIA_TYPES)) + ", application/octet-stream"}}}
    if not secured:
        op["security"] = []
    return op


def _query(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema}


SCHEMAS: dict[str, Any] = {
    "Problem": {"type": "object", "required": ["type", "title", "status", "detail"],
                "properties": {"type": {"type": "string"}, "title": {"type": "string"},
                               "status": {"type": "integer"}, "detail": {"type": "string"},
                               "code": {"type": "string"}}},
    "Pending": {"type": ["object", "null"],
                "properties": {"call_id": {"type": "string"}, "name": {"type": "string"},
                               "arguments": {}, "arguments_hash": {"type": "string"},
                               "reason": {"type": "string"}}},
    "Session": {"type": "object",
                "required": ["id", "workflow", "status", "phase", "turn", "state",
                             "pending_approval", "version"],
                "properties": {"id": {"type": "string"}, "workflow": {"type": "string"},
                               "status": {"type": "string"}, "phase": {"type": "string"},
                               "path": {"type": "array", "items": {"type": "string"}},
                               "turn": {"type": "integer"}, "state": {"type": "object"},
                               "pending_approval": _ref("Pending"),
                               "version": {"type": "integer"},
                               "created_at": {"type": "number"},
                               "updated_at": {"type": "number"},
                               "next_timer_at": {"type": ["number", "null"]}}},
    "SessionPage": {"type": "object", "required": ["sessions", "next_cursor"],
                    "properties": {"sessions": {"type": "array", "items": {
                        "type": "object", "required": ["id", "workflow", "status"]}},
                                   "next_cursor": {"type": ["string", "null"]}}},
    "Event": {"type": "object", "required": ["type", "seq", "session_id", "turn", "at"],
              "properties": {"type": {"type": "string"}, "seq": {"type": "integer"},
                             "session_id": {"type": "string"},
                             "turn": {"type": "integer"}, "at": {"type": "number"}}},
    "TurnOutcome": {"type": "object",
                    "required": ["session_id", "turn", "status", "reply", "phase",
                                 "pending_approval", "errors", "events"],
                    "properties": {"session_id": {"type": "string"},
                                   "turn": {"type": "integer"},
                                   "status": {"type": "string"}, "reply": {"type": "string"},
                                   "phase": {"type": "string"},
                                   "pending_approval": _ref("Pending"),
                                   "errors": {"type": "array"},
                                   "events": {"type": "string"}}},
    "Queued": {"type": "object", "required": ["session_id", "status", "position", "events"],
               "properties": {"status": {"const": "queued"},
                              "position": {"type": "integer"}}},
    "AcceptedTurn": {"type": "object", "required": ["session_id", "status", "events"],
                     "properties": {"status": {"const": "accepted"}}},
    "Message": {"type": "object", "additionalProperties": False,
                "description": "text is required unless attachments are given",
                "properties": {"text": {"type": "string"},
                               "busy": {"enum": ["queue", "reject", "steer", "interrupt"]},
                               "attachments": {"type": "array", "maxItems": 16, "items": {
                                   "oneOf": [{"type": "string", "description": "a data: URL"},
                                             {"type": "object", "required": ["url"],
                                              "additionalProperties": False,
                                              "properties": {
                                                  "url": {"type": "string"},
                                                  "media_type": {"type": "string"}}}]}}}},
    "MessageForm": {"type": "object", "additionalProperties": False,
                    "description": "the message as a multipart/form-data form: text and "
                    "busy as fields (each at most once), each attachment a file part "
                    "(its Content-Type, or its bytes when application/octet-stream, "
                    "says its type) or a field holding a URL as in JSON; text is "
                    "required unless attachments are given",
                    "properties": {"text": {"type": "string"},
                                   "busy": {"enum": ["queue", "reject", "steer",
                                                     "interrupt"]},
                                   "attachments": {"type": "array", "maxItems": 16,
                                                   "items": {"type": "string",
                                                             "format": "binary"}}}},
    "Decision": {"type": "object", "required": ["decision"], "additionalProperties": False,
                 "properties": {"decision": {"enum": ["approve", "approve_turn",
                                                      "approve_session", "reject"]},
                                "reason": {"type": "string"}}},
    "NewSession": {"type": "object", "additionalProperties": False,
                   "properties": {"workflow": {"type": "string"},
                                  "id": {"type": "string", "minLength": 1},
                                  "state": {"type": "object"}}},
    "RunAgentInput": {"type": "object", "required": ["threadId", "runId", "messages"],
                      "properties": {"threadId": {"type": "string"},
                                     "runId": {"type": "string"},
                                     "messages": {"type": "array"}}},
}


def document(secured: bool = True) -> dict[str, Any]:
    """The document; ``secured``: the server has tokens (every operation but the health
    checks then needs a bearer token; without tokens, none does)."""
    from phaseflow import __version__

    s = "/v1/sessions/{session_id}"
    sid = [SESSION_ID]
    return {
        "openapi": "3.1.0",
        "info": {"title": "phaseflow serve", "version": __version__,
                 "description": "Guided agents over HTTP; see docs/http-api.md."},
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}] if secured else [],
        "paths": {
            "/healthz": {"get": _op("the process serves", {
                "200": _ok({"type": "object"}), "503": _problem("stopping")}, secured=False)},
            "/readyz": {"get": _op("the process and its store answer", {
                "200": _ok({"type": "object"}),
                "503": _problem("the store does not answer, or stopping")}, secured=False)},
            "/openapi.json": {"get": _op("this document", {
                "200": _ok({"type": "object"}), "401": COMMON["401"]})},
            "/v1/workflows": {"get": _op("the served workflows", {
                "200": _ok({"type": "object", "required": ["workflows"]}),
                "401": COMMON["401"]})},
            "/v1/workflows/{name}/graph": {"get": _op("the phase graph", {
                "200": _ok({"type": "object", "required": ["workflow", "format", "graph"]}),
                "404": _problem("unknown workflow"), **COMMON},
                params=[{"name": "name", "in": "path", "required": True,
                         "schema": {"type": "string"}},
                        _query("format", {"enum": ["mermaid", "dot", "json"]})])},
            "/v1/workflows/{name}/describe": {"get": _op("what the model is told in a phase", {
                "200": _ok({"type": "object", "required": [
                    "workflow", "phase", "instructions", "navigation", "notes"]}),
                "404": _problem("unknown workflow or phase"), **COMMON},
                params=[{"name": "name", "in": "path", "required": True,
                         "schema": {"type": "string"}},
                        _query("phase", {"type": "string"}),
                        _query("path", {"type": "string"}),
                        _query("state", {"type": "string"})])},
            "/v1/sessions": {
                "post": _op("create a session", {
                    "201": _ok(_ref("Session"), "created"),
                    "404": _problem("unknown workflow"),
                    "409": _problem("the id exists"), "415": _problem("not JSON"),
                    "422": _problem("state holds a key the workflow does not declare"),
                    **COMMON}, body=_ref("NewSession"), body_required=False),
                "get": _op("a page of sessions, newest first", {
                    "200": _ok(_ref("SessionPage")), **COMMON}, params=[
                    _query("workflow", {"type": "string"}),
                    _query("status", {"enum": ["idle", "running", "awaiting_approval",
                                               "finished", "failed", "cancelling"]}),
                    _query("limit", {"type": "integer", "minimum": 1, "maximum": 100}),
                    _query("cursor", {"type": "string"})])},
            s: {
                "get": _op("a session", {"200": _ok(_ref("Session")),
                                         "404": _problem("unknown session"), **COMMON},
                           params=sid),
                "delete": _op("delete a session", {
                    "204": {"description": "deleted"}, "404": _problem("unknown session"),
                    "409": _problem("a turn runs"), **COMMON}, params=sid)},
            s + "/history": {"get": _op("the exact model messages", {
                "200": _ok({"type": "object", "required": ["session_id", "messages"]}),
                "404": _problem("unknown session"), **COMMON}, params=sid)},
            s + "/outputs/{ref}": {"get": _op("a tool output that was cut for the model", {
                "200": {"description": "the output's bytes (text/plain); X-Output-Size: "
                                       "its whole size"},
                "404": _problem("unknown session or output"), **COMMON}, params=[
                SESSION_ID, {"name": "ref", "in": "path", "required": True,
                             "schema": {"type": "string"}},
                _query("offset", {"type": "integer", "minimum": 0}),
                _query("limit", {"type": "integer", "minimum": 1, "maximum": 8 * 2**20})])},
            s + "/trust": {"get": _op("what the session trusts (tools that run without "
                                      "asking)", {
                "200": _ok({"type": "object", "required": ["session_id", "trust"]}),
                "404": _problem("unknown session"), **COMMON}, params=sid)},
            s + "/trust/{tool}": {"delete": _op("take back every trust of a tool", {
                "200": _ok({"type": "object", "required": ["session_id", "trust"]}),
                "404": _problem("unknown session, or the tool is not trusted"),
                "409": _problem("a turn runs"), **COMMON}, params=[
                SESSION_ID, {"name": "tool", "in": "path", "required": True,
                             "schema": {"type": "string"}}])},
            s + "/messages": {"post": _op("a turn", {
                **TURN, "422": _problem("an attachment refused (attachment_refused: "
                                        "its reason, its field), or an Idempotency-Key "
                                        "reused for another request"),
                "415": _problem("neither JSON nor multipart/form-data")}, params=[
                SESSION_ID, IDEMPOTENCY, PREFER], body=_ref("Message"),
                form=_ref("MessageForm"))},
            s + "/events": {"get": _op("the session's events (SSE), resumable", {
                "200": _ok({"type": "array", "items": _ref("Event")},
                           "?follow=false: the stored events; otherwise an SSE stream",
                           stream=True),
                "404": _problem("unknown session"), **COMMON}, params=[
                SESSION_ID, _query("after", {"type": "integer", "minimum": 0}),
                _query("follow", {"enum": ["true", "false"]}),
                _query("limit", {"type": "integer", "minimum": 1, "maximum": 10000}),
                {"name": "Last-Event-ID", "in": "header", "required": False,
                 "schema": {"type": "string", "pattern": "^[0-9]{1,16}$"}}])},
            s + "/approvals/{call_id}": {"post": _op("decide on the pending approval", TURN,
                params=[SESSION_ID, {"name": "call_id", "in": "path", "required": True,
                                     "schema": {"type": "string"}}, IDEMPOTENCY, PREFER],
                body=_ref("Decision"))},
            s + "/cancel": {"post": _op("cancel the running turn, in whichever worker runs it", {
                "202": _ok({"type": "object", "required": ["session_id", "status"]}),
                "404": _problem("unknown session"),
                "409": _problem("no turn runs, or its worker is gone"), **COMMON},
                params=sid)},
            "/v1/ag-ui/{workflow}": {"post": _op("the AG-UI endpoint", {
                "200": {"description": "AG-UI events", "content": {SSE: {
                    "schema": {"type": "string"}}}},
                "404": _problem("unknown workflow"), "409": _problem("busy or finished"),
                "415": _problem("not JSON"), **COMMON},
                params=[{"name": "workflow", "in": "path", "required": True,
                         "schema": {"type": "string"}}], body=_ref("RunAgentInput"))},
        },
    }


async def openapi(request: Request) -> Response:
    return JSONResponse(document(bool(request.app.state.config.tokens)))
