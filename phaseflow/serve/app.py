"""The ASGI application of ``phaseflow serve``: the routes, problem+json for every error,
bearer tokens, a log line per request, the hub's lifecycle.

:func:`create_app` is what the command runs under uvicorn, and what a host that mounts
phaseflow in its own ASGI server calls.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any
from urllib.parse import unquote

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from phaseflow.serve import resources as r
from phaseflow.serve import turn_routes as t
from phaseflow.serve.auth import BearerAuth
from phaseflow.serve.config import ServeConfig
from phaseflow.serve.hosts import HostGuard
from phaseflow.serve.hub import Hub
from phaseflow.serve.logs import Log
from phaseflow.serve.problems import Problem, internal_problem, problem_response

S = "/v1/sessions/{session_id}"


def routes() -> list[BaseRoute]:
    from phaseflow.serve.identity import owned
    from phaseflow.serve.openapi import openapi

    return [
        Route("/healthz", r.healthz, methods=["GET"]),
        Route("/readyz", r.readyz, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"]),
        Route("/v1/workflows", r.workflows, methods=["GET"]),
        Route("/v1/workflows/{name}/graph", r.graph, methods=["GET"]),
        Route("/v1/sessions", r.create_session, methods=["POST"]),
        Route("/v1/sessions", r.list_sessions, methods=["GET"]),
        Route(S, owned(r.get_session), methods=["GET"]),
        Route(S, owned(r.delete_session), methods=["DELETE"]),
        Route(S + "/history", owned(r.get_history), methods=["GET"]),
        Route(S + "/outputs/{ref}", owned(r.get_output), methods=["GET"]),
        Route(S + "/trust", owned(r.get_trust), methods=["GET"]),
        Route(S + "/trust/{tool}", owned(r.delete_trust), methods=["DELETE"]),
        Route(S + "/messages", owned(t.post_message), methods=["POST"]),
        Route(S + "/events", owned(t.get_events), methods=["GET"]),
        Route(S + "/approvals/{call_id}", owned(t.post_approval), methods=["POST"]),
        Route(S + "/cancel", owned(t.post_cancel), methods=["POST"]),
        *_agui_routes(),
        *_ui_routes(),
    ]


def _agui_routes() -> list[Route]:
    from phaseflow.serve.agui import run_agent

    return [Route("/v1/ag-ui/{workflow}", run_agent, methods=["POST"])]


def _ui_routes() -> list[BaseRoute]:
    from phaseflow.serve.ui import ui_routes

    return ui_routes()


async def _problem(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, Problem)
    return problem_response(exc)


async def _http(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    headers = dict(exc.headers or {})
    if exc.status_code == 405:  # every method of the path, not those of one route
        allowed = {m for route in request.app.routes if isinstance(route, Route)
                   and route.matches(request.scope)[0] is not Match.NONE
                   for m in (route.methods or ())}
        headers["Allow"] = ", ".join(sorted(allowed))
    codes = {404: "not_found", 405: "method_not_allowed"}
    problem = Problem(exc.status_code, codes.get(exc.status_code, "http_error"),
                      str(exc.detail) if exc.status_code not in (404, 405) else
                      ("no such resource" if exc.status_code == 404 else
                       f"{request.method} is not allowed here"),
                      headers=headers)
    return problem_response(problem)


async def _crash(request: Request, exc: Exception) -> Response:
    log: Log = request.app.state.config.log
    log.line("error", "a request failed inside the server", method=request.method,
             path=request.url.path, error=type(exc).__name__)
    return problem_response(internal_problem())


class RequestLog:
    """One line per request, when its response is over (a stream: when it ends)."""

    def __init__(self, app: ASGIApp, log: Log) -> None:
        self.app = app
        self.log = log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.monotonic()
        status = 0

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            path = scope["path"]
            session = None
            if path.startswith("/v1/sessions/"):
                session = unquote(path.split("/")[3])
            self.log.request(scope["method"], path, status or 499,
                             time.monotonic() - started, session)


def create_app(config: ServeConfig) -> _Outer:
    """The server's ASGI application for ``config``."""
    hub = Hub(config.served, config.log, kept=config.kept_sessions, poll=config.poll)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[dict[str, Any]]:
        sweeper = None
        notifier = None
        if config.notify_dsn:
            from phaseflow.serve.notify import Notifier

            notifier = Notifier(hub, config.notify_dsn)
            notifier.start()
        if config.sweep > 0:
            import asyncio

            from phaseflow.serve.sweep import sweep_forever

            sweeper = asyncio.get_running_loop().create_task(sweep_forever(hub, config.sweep))
        timers = None
        if config.timers > 0:
            import asyncio

            from phaseflow.serve.timers import timers_forever

            timers = asyncio.get_running_loop().create_task(timers_forever(hub, config.timers))
        try:
            yield {}
        finally:
            if sweeper is not None:
                sweeper.cancel()
            if timers is not None:
                timers.cancel()
            if not hub.draining:
                await hub.drain(config.grace)
            if notifier is not None:
                await notifier.stop()

    app = Starlette(
        routes=routes(),
        exception_handlers={Problem: _problem, HTTPException: _http, Exception: _crash},
        lifespan=lifespan,
    )
    app.state.hub = hub
    app.state.config = config
    inner: ASGIApp = app
    if config.auth is not None:
        from phaseflow.serve.identity import IdentityAuth, check_hook

        inner = IdentityAuth(app, check_hook(config.auth, "ServeConfig(auth=...)"),
                             config.log)
    wrapped: ASGIApp = BearerAuth(inner, config.tokens)
    if config.app_dir is not None:  # public files, as the web view's: before the tokens
        from phaseflow.serve.frontend import FrontEnd

        wrapped = FrontEnd(wrapped, config.app_dir)
    wrapped = HostGuard(wrapped, config.allowed_hosts)  # before any other (DNS rebinding)
    wrapped = RequestLog(wrapped, config.log)
    outer = _Outer(wrapped, app)
    return outer


class _Outer:
    """The outermost layer: the Starlette app's ``state`` reachable from outside (the
    command's graceful stop reaches the hub through it)."""

    def __init__(self, app: ASGIApp, inner: Starlette) -> None:
        self.app = app
        self.inner = inner

    @property
    def hub(self) -> Hub:
        hub: Hub = self.inner.state.hub
        return hub

    def lifespan(self) -> AbstractAsyncContextManager[Any]:
        """The application's start and stop (the sweep, the notifications, the graceful
        drain of running turns), for a host that mounts it in its own ASGI application:
        entered in the host's lifespan (a mounted application's own is not run)."""
        return self.inner.router.lifespan_context(self.inner)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)

