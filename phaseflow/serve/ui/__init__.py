"""The web view of ``phaseflow serve``: pages an operator opens in a browser.

``/ui/`` lists the sessions, ``/ui/sessions/{id}`` follows one (conversation, timeline,
graph, approvals), ``/ui/workflows/{name}`` shows a workflow's graph and what the model
is told per phase. The pages are hand-written HTML, CSS and JavaScript shipped in the
package (``static/``): nothing is fetched from elsewhere and nothing is built at install.

The pages and their static files carry no secret, so they are served without a token;
every API call the page makes carries the token the operator typed (kept in the tab's
``sessionStorage``). A strict Content-Security-Policy keeps the page to its own origin:
no inline script, no request elsewhere.
"""

from __future__ import annotations

from importlib import resources

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

#: what every page may do: its own origin only
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'")

HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
           "Referrer-Policy": "no-referrer", "Cache-Control": "no-cache"}


def _page(name: str) -> bytes:
    return resources.files(__name__).joinpath("static", name).read_bytes()


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
