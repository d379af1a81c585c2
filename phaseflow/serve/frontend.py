"""``--app DIR``: a front end of the host's own (an HTML page and its ES modules, e.g.
the AG-UI chat page of ``examples/agui-chat/``), served at ``/app/`` on the server's
origin, so the page calls the API with no CORS and passes the ``Origin`` check.

The files are public, as the web view's are (a page holds no data: its API calls carry
the token, when the server has tokens); they are served before the bearer-token check,
behind the ``Host`` check. ``index.html`` answers a folder; symbolic links are followed
(a ``node_modules`` linked in from elsewhere)."""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.routing import Mount, Router
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from phaseflow.serve.problems import Problem, problem_response

#: where the front end's files are served
PREFIX = "/app"


class FrontEnd:
    """ASGI middleware: ``/app`` and below from ``directory``, the rest to ``app``."""

    def __init__(self, app: ASGIApp, directory: str) -> None:
        self.app = app
        self.files = Router(routes=[Mount(PREFIX, app=StaticFiles(
            directory=directory, html=True, follow_symlink=True))])

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"] if scope["type"] == "http" else ""
        if path == PREFIX or path.startswith(PREFIX + "/"):
            try:
                await self.files(scope, receive, send)
            except HTTPException as exc:  # no such file, a method files do not take
                await problem_response(_problem(exc))(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _problem(exc: HTTPException) -> Problem:
    if exc.status_code == 404:
        return Problem(404, "not_found", "no such file")
    if exc.status_code == 405:
        return Problem(405, "method_not_allowed", "the files take GET and HEAD",
                       headers={"Allow": "GET, HEAD"})
    return Problem(exc.status_code, "http_error", str(exc.detail))
