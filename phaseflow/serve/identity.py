"""Who may see which conversation: a host's hook turns each request into an
:class:`Identity` (its own JWT, cookie or API-key check), and a session belongs to the
identity that created it.

``serve --auth MODULE:ATTR`` / ``ServeConfig(auth=...)`` names the hook: a function (or
coroutine function) of the Starlette ``Request`` that returns an :class:`Identity`, or
``None`` to refuse the request (``401`` problem+json). It reads what a request carries
before its body (headers, cookies, the query, ``request.scope``: a host that mounts
phaseflow behind its own authentication middleware finds its user there); it must not
read the body. It runs for every request but the load balancer's probes
(``/healthz``, ``/readyz``) and the web view's pages and static files (they hold no
data; the page's own API calls go through the hook).

With a hook, a session made by ``POST /v1/sessions`` or by a new AG-UI thread is owned
by the identity that made it (kept with the session in the store), and every route of a
session (read, history, events, messages, approvals, cancel, delete, AG-UI runs) answers
``404 session_not_found`` for a session of another identity: the same answer as for an
id that does not exist, so no id leaks. ``GET /v1/sessions`` lists the caller's own. An
identity with ``operator=True`` sees and may act on every session. Without a hook,
nothing here runs: no session has an owner and every caller sees all of them.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from phaseflow.errors import ConfigError
from phaseflow.serve.auth import OPEN_PATHS
from phaseflow.serve.common import path_session
from phaseflow.serve.logs import Log
from phaseflow.serve.problems import Problem, internal_problem, problem_response
from phaseflow.stores.base import Store, StoreError

#: where the request's identity is kept in its ASGI scope
SCOPE_KEY = "phaseflow.identity"


@dataclass(frozen=True, slots=True)
class Identity:
    """Who is calling: ``name`` owns the sessions it creates (any non-empty string the
    host chooses: a user id, a tenant and user); ``operator``: sees every session."""

    name: str
    operator: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"an Identity's name is a non-empty string, not {self.name!r}")


#: the host's hook: the request's identity, or ``None`` to refuse it
AuthHook = Callable[[Request], "Identity | Awaitable[Identity | None] | None"]


def check_hook(hook: Any, where: str) -> AuthHook:
    """``hook`` when it can be called with a request; :class:`ConfigError` otherwise (a
    bad configuration, refused at start)."""
    if not callable(hook):
        raise ConfigError(f"{where}: the auth hook must be a function of the request "
                          f"returning an Identity or None, not {type(hook).__name__}")
    try:
        inspect.signature(hook).bind(None)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: the auth hook is called with one argument, the "
                          "request; this one cannot be") from None
    checked: AuthHook = hook
    return checked


class IdentityAuth:
    """ASGI middleware: the hook's :class:`Identity` kept in the request's scope, or a
    ``401`` problem (``WWW-Authenticate``) when the hook returns ``None``. A hook that
    raises or returns anything else is a bug of the host: ``500``, logged by type."""

    def __init__(self, app: ASGIApp, hook: AuthHook, log: Log) -> None:
        self.app = app
        self.hook = hook
        self.log = log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"] if scope["type"] == "http" else ""
        if (scope["type"] != "http" or path in OPEN_PATHS or path == "/ui"
                or path.startswith("/ui/")):
            await self.app(scope, receive, send)
            return
        try:
            found: Any = self.hook(Request(scope))
            if inspect.isawaitable(found):
                found = await found
        except Exception as exc:
            self.log.line("error", "the auth hook failed", path=path,
                          error=type(exc).__name__)
            await problem_response(internal_problem())(scope, receive, send)
            return
        if found is None:
            problem = Problem(401, "unauthorized", "this request carries no identity the "
                              "server accepts", headers={"WWW-Authenticate":
                                                         'Bearer realm="phaseflow"'})
            await problem_response(problem)(scope, receive, send)
            return
        if not isinstance(found, Identity):
            self.log.line("error", "the auth hook returned no Identity", path=path,
                          returned=type(found).__name__)
            await problem_response(internal_problem())(scope, receive, send)
            return
        scope[SCOPE_KEY] = found
        await self.app(scope, receive, send)


def identity_of(request: Request) -> Identity | None:
    """The caller's identity; ``None`` when the server has no auth hook."""
    found = request.scope.get(SCOPE_KEY)
    return found if isinstance(found, Identity) else None


def owner_filter(request: Request) -> str | None:
    """Whose sessions the caller may list: its own, or everyone's (``None``) for an
    operator or a server without a hook."""
    identity = identity_of(request)
    return None if identity is None or identity.operator else identity.name


def not_found(session_id: str) -> Problem:
    """What a session the caller may not see answers: what a missing one does."""
    return Problem(404, "session_not_found", f"no session {session_id!r}",
                   session_id=session_id)


def _unavailable(exc: StoreError) -> Problem:
    return Problem(503, "store_unavailable", f"the session store failed: {exc}",
                   headers={"Retry-After": "1"})


async def may_see(request: Request, store: Store, session_id: str) -> None:
    """Nothing when the caller may see the session (no hook, an operator, its owner);
    else ``404 session_not_found``, as for a session that does not exist."""
    who = owner_filter(request)
    if who is None:
        return
    try:
        owner = await store.owner(session_id)
    except StoreError as exc:
        raise _unavailable(exc) from None
    if owner != who:
        raise not_found(session_id)


async def claim(request: Request, store: Store, session_id: str) -> None:
    """Make the caller the owner of a session it is about to create (before it is
    created: a session is never stored without its owner). ``404`` when another
    identity owns that id (an operator may use any)."""
    identity = identity_of(request)
    if identity is None:
        return
    try:
        owner = await store.claim_owner(session_id, identity.name)
    except StoreError as exc:
        raise _unavailable(exc) from None
    if owner != identity.name and not identity.operator:
        raise not_found(session_id)


def owned(endpoint: Callable[[Request], Awaitable[Response]]
          ) -> Callable[[Request], Awaitable[Response]]:
    """``endpoint`` (a route of ``/v1/sessions/{session_id}``) after :func:`may_see`:
    the one place every session route is limited to the caller's sessions."""
    async def guarded(request: Request) -> Response:
        if SCOPE_KEY in request.scope:  # a server without a hook: nothing to look at
            hub = request.app.state.hub
            await may_see(request, hub.store, path_session(request))
        return await endpoint(request)
    guarded.__name__ = getattr(endpoint, "__name__", "guarded")
    guarded.__doc__ = endpoint.__doc__
    return guarded


async def thread_access(request: Request, store: Store, session_id: str, *,
                        exists: bool) -> None:
    """An AG-UI run of thread ``session_id``: a thread that ``exists`` is the caller's
    (:func:`may_see`), a new one becomes the caller's (:func:`claim`)."""
    if SCOPE_KEY not in request.scope:
        return
    if exists:
        await may_see(request, store, session_id)
    else:
        await claim(request, store, session_id)
