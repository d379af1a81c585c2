"""The web view of ``phaseflow serve``: pages an operator opens in a browser.

``/ui/`` lists the sessions, ``/ui/sessions/{id}`` follows one (conversation, timeline,
graph, approvals), ``/ui/workflows/{name}`` shows a workflow's graph and what the model
is told per phase. The pages are hand-written HTML, CSS and JavaScript shipped in the
package (``static/``): nothing is fetched from elsewhere and nothing is built at install.
What every page shares (head, header bar, token form) is written once, in ``frame.html``;
``index.html``, ``session.html`` and ``workflow.html`` hold only each page's own content,
set into the frame when the page is first served.

The pages and their static files carry no secret, so they are served without a token;
every API call the page makes carries the token the operator typed (kept in the tab's
``sessionStorage``). A strict Content-Security-Policy keeps the page to its own origin:
no inline script, no request elsewhere.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from string import Template
from typing import NamedTuple

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

#: what every page may do: its own origin only
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'")

HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
           "Referrer-Policy": "no-referrer", "Cache-Control": "no-cache"}


class _Page(NamedTuple):
    """What sets one page apart inside the shared frame."""

    title: str
    scripts: tuple[str, ...]
    """The page's own scripts, after ``common.js`` (which every page loads)."""
    nav: str
    """The header's markup after the brand: where the page sits."""


_SESSIONS_LINK = '<a href="/ui/">Sessions</a>'

_PAGES = {
    "index.html": _Page("Sessions", ("sessions.js",), "<span>Sessions</span>"),
    "session.html": _Page("Session", ("graph.js", "session.js"), _SESSIONS_LINK),
    "workflow.html": _Page("Workflow", ("graph.js", "workflow.js"), _SESSIONS_LINK),
}


def _static(name: str) -> str:
    return resources.files(__name__).joinpath("static", name).read_text(encoding="utf-8")


@cache
def _page(name: str) -> bytes:
    """The whole page ``name``: its own content set into ``frame.html``."""
    page = _PAGES[name]
    scripts = "".join(f'<script src="/ui/static/{s}" defer></script>\n' for s in page.scripts)
    frame = Template(_static("frame.html"))
    return frame.substitute(title=page.title, scripts=scripts, nav=page.nav,
                            main=_static(name)).encode("utf-8")


def _html(name: str) -> Response:
    return Response(_page(name), media_type="text/html; charset=utf-8", headers=HEADERS)


async def sessions_page(request: Request) -> Response:
    return _html("index.html")


async def session_page(request: Request) -> Response:
    return _html("session.html")


async def workflow_page(request: Request) -> Response:
    return _html("workflow.html")


class _Static(StaticFiles):
    """The package's static files, with the pages' security headers."""

    def file_response(self, *args: object, **kwargs: object) -> Response:
        response = super().file_response(*args, **kwargs)  # type: ignore[arg-type]
        response.headers.update(HEADERS)
        return response


def ui_routes() -> list[BaseRoute]:
    """The web view's routes, to mount beside the API's."""
    from phaseflow.serve.ui.api import describe

    return [
        Route("/v1/workflows/{name}/describe", describe, methods=["GET"]),
        Mount("/ui", routes=[
            Route("/", sessions_page, methods=["GET"]),
            Route("/sessions/{session_id}", session_page, methods=["GET"]),
            Route("/workflows/{name}", workflow_page, methods=["GET"]),
            Mount("/static", _Static(packages=[("phaseflow.serve.ui", "static")])),
        ]),
    ]
