"""Errors as RFC 9457 problem details (``application/problem+json``), never an HTML page
or a traceback.

A handler that meets bad input raises :class:`Problem` (the one exception of the HTTP
layer: a client's misuse); the application turns it into a response with
:func:`problem_response`. ``type`` is a stable URI per kind of problem
(``https://phaseflow.dev/problems/<code>``, documented in ``docs/http-api.md``), ``code``
the same word alone, so a client can switch on it.
"""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse

from phaseflow.errors import PhaseflowError

#: where problem types are documented (the URI names them; it need not resolve)
TYPE_BASE = "https://phaseflow.dev/problems/"

#: the title of each status a problem may have
TITLES = {
    400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
    405: "Method Not Allowed", 406: "Not Acceptable", 409: "Conflict",
    411: "Length Required", 413: "Content Too Large", 415: "Unsupported Media Type",
    421: "Misdirected Request",
    422: "Unprocessable Content", 500: "Internal Server Error", 503: "Service Unavailable",
}

MEDIA_TYPE = "application/problem+json"


class Problem(PhaseflowError):
    """A request the server refuses: ``status``, a stable ``code`` and a ``detail`` a
    person can act on; ``extra`` names what is at fault (``field``, ``session_id``,
    ``call_id``, ...); ``headers`` go with the response (``Retry-After``,
    ``WWW-Authenticate``)."""

    def __init__(self, status: int, code: str, detail: str, *,
                 headers: dict[str, str] | None = None, **extra: Any) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail
        self.extra = extra
        self.headers = headers or {}

    def to_json(self) -> dict[str, Any]:
        return {"type": TYPE_BASE + self.code, "title": TITLES.get(self.status, "Error"),
                "status": self.status, "detail": self.detail, "code": self.code,
                **self.extra}


def problem_response(problem: Problem) -> JSONResponse:
    return JSONResponse(problem.to_json(), status_code=problem.status,
                        headers=problem.headers, media_type=MEDIA_TYPE)


def internal_problem() -> Problem:
    """What a client sees of a bug in the server: no traceback, no internals (the log
    line has the exception's type)."""
    return Problem(500, "internal_error", "the server failed to answer this request; the "
                   "error is logged")
