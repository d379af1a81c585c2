"""Who may call: bearer tokens, compared in constant time.

Tokens come from ``--token-file`` (one a line; blank lines and ``#`` comments ignored) or
the ``PHASEFLOW_TOKENS`` environment variable (separated by commas or white space). A
request needs ``Authorization: Bearer <token>`` matching one of them, except
``/healthz`` and ``/readyz`` (a load balancer's probes carry no secret) and the web
view's pages and static files under ``/ui/`` (they hold no data: the page's own API
calls carry the token). A token is never
logged: the request log has the method, path and status only.
"""

from __future__ import annotations

import hmac
import re

from starlette.types import ASGIApp, Receive, Scope, Send

from phaseflow.serve.problems import Problem, problem_response

#: paths anyone may call
OPEN_PATHS = frozenset({"/healthz", "/readyz"})

_SPLIT = re.compile(r"[\s,]+")


def tokens_from_file_text(text: str) -> tuple[str, ...]:
    """The tokens of a token file: one a line, ``#`` starts a comment."""
    out = []
    for line in text.splitlines():
        token = line.split("#", 1)[0].strip()
        if token:
            out.append(token)
    return tuple(out)


def tokens_from_env(value: str) -> tuple[str, ...]:
    return tuple(t for t in _SPLIT.split(value.strip()) if t)


def token_problem(token: str) -> str | None:
    """Why ``token`` cannot be a bearer token (RFC 6750's characters, at least 16 of
    them), or ``None``."""
    if len(token) < 16:
        return "a token has at least 16 characters"
    if not re.fullmatch(r"[A-Za-z0-9\-._~+/]+=*", token):
        return "a token is made of letters, digits and -._~+/ (then = padding)"
    return None


def authorized(header: str | None, tokens: tuple[bytes, ...]) -> bool:
    """Whether the ``Authorization`` header carries one of ``tokens``. Every token is
    compared, with :func:`hmac.compare_digest`, so the time taken says nothing about
    which token came close."""
    if header is None:
        return False
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer":
        return False
    candidate = given.strip().encode("utf-8", "replace")
    found = False
    for token in tokens:
        found |= hmac.compare_digest(candidate, token)
    return found


class BearerAuth:
    """ASGI middleware: 401 problem with ``WWW-Authenticate: Bearer`` for a request
    without a valid token (no tokens configured: everyone may call)."""

    def __init__(self, app: ASGIApp, tokens: tuple[str, ...]) -> None:
        self.app = app
        self.tokens = tuple(t.encode("utf-8") for t in tokens)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"] if scope["type"] == "http" else ""
        if (scope["type"] != "http" or not self.tokens or path in OPEN_PATHS
                or path == "/ui" or path.startswith("/ui/")):
            await self.app(scope, receive, send)
            return
        header = None
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                header = value.decode("latin-1")
                break
        if authorized(header, self.tokens):
            await self.app(scope, receive, send)
            return
        problem = Problem(401, "unauthorized",
                          "a valid bearer token is required (Authorization: Bearer TOKEN)",
                          headers={"WWW-Authenticate": 'Bearer realm="phaseflow"'})
        await problem_response(problem)(scope, receive, send)
