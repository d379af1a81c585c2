"""DNS rebinding: a server on this machine answers only requests addressed to it.

A web page the operator visits can make its own name resolve to 127.0.0.1, then call
the server from the operator's browser as if it were the page's own origin: read every
conversation, approve pending calls. Two checks stop it, before anything else runs:

- ``Host`` must name the server: a loopback name (``localhost``, ``*.localhost``,
  ``127.0.0.1`` and the rest of 127/8, ``::1``), the address it is bound to, or a name
  it was told to answer to (``--allowed-host``, ``ServeConfig.allowed_hosts``; ``*``:
  any). Bound to every interface (``0.0.0.0``, ``::``), any IP address is one (an
  address in ``Host`` is not a rebinding: no name was resolved). Otherwise
  ``421 host_not_allowed``.
- A state-changing request (any method but ``GET``, ``HEAD``, ``OPTIONS``) whose
  ``Origin`` is foreign is refused with ``403 origin_not_allowed``: the page's origin
  must be the server's own (the web view's, a front end it serves) or one whose host
  passes the ``Host`` check (a front end of this machine on another port). A request
  without ``Origin`` (curl, a backend) is not a browser's cross-origin request.

Both answers are problem+json, as every error of the server.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from phaseflow.serve.problems import Problem, problem_response

#: the names of this machine every server answers to
LOOPBACK = ("localhost", "127.0.0.1", "::1")
#: the methods that change nothing (an ``Origin`` is not checked for them)
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: addresses that mean "every interface": bound to one, any IP address is the server's
WILDCARDS = frozenset({"0.0.0.0", "::"})


def host_name(value: str) -> str | None:
    """The name of a ``Host`` header (or of an origin's authority): no port, no
    brackets, lower case, no trailing dot; ``None`` when it is not one."""
    text = value.strip().lower()
    if not text or any(c in text for c in "/@?#\\ \t"):
        return None
    if text.startswith("["):
        end = text.find("]")
        rest = text[end + 1:]
        if end < 0 or (rest and not (rest.startswith(":") and rest[1:].isdigit())):
            return None
        return text[1:end] or None
    name, _, port = text.partition(":")
    if port and not port.isdigit():
        return None
    return name.rstrip(".") or None


def _ip(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        return None


class Hosts:
    """The names a server answers to."""

    def __init__(self, allowed: Iterable[str]) -> None:
        names = {n.strip().lower() if _ip(n.strip()) or n.strip() == "*" else host_name(n)
                 for n in (*LOOPBACK, *allowed)}
        names.discard(None)
        self.any_name = "*" in names
        self.any_ip = bool(names & WILDCARDS)
        self.names = frozenset(str(n) for n in names) - {"*"} - WILDCARDS

    def answers(self, name: str | None) -> bool:
        if name is None:
            return False
        if self.any_name or name in self.names or name.endswith(".localhost"):
            return True
        ip = _ip(name)
        return ip is not None and (ip.is_loopback or self.any_ip)

    def same_site(self, origin: str, host: str) -> bool:
        """Whether a request's ``Origin`` is the server's own (its authority the
        request's ``Host``) or a front end on a name the server answers to."""
        try:
            parts = urlsplit(origin.strip())
        except ValueError:
            return False
        if parts.scheme not in ("http", "https") or not parts.netloc:
            return False
        return parts.netloc.lower() == host.strip().lower() or self.answers(
            host_name(parts.netloc))


class HostGuard:
    """ASGI middleware: the ``Host`` and ``Origin`` checks of :mod:`this module
    <phaseflow.serve.hosts>` on every HTTP request."""

    def __init__(self, app: ASGIApp, allowed: Iterable[str]) -> None:
        self.app = app
        self.hosts = Hosts(allowed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        host = origin = None
        for key, value in scope["headers"]:
            if key == b"host":
                host = value.decode("latin-1")
            elif key == b"origin":
                origin = value.decode("latin-1")
        if host is None:  # HTTP/1.0 or an ASGI caller: the address the request reached
            server = scope.get("server")
            host = str(server[0]) if server else ""
        problem = None
        if not self.hosts.answers(host_name(host)):
            problem = Problem(421, "host_not_allowed", f"this server does not answer to "
                              f"{host!r}; start it with --allowed-host NAME to add a name "
                              "(see docs/serve.md)")
        elif (origin is not None and scope["method"] not in SAFE_METHODS
              and not self.hosts.same_site(origin, host)):
            problem = Problem(403, "origin_not_allowed", f"a page of {origin!r} may not "
                              "change anything here (only the server's own pages, and "
                              "those of names it answers to, may)")
        if problem is None:
            await self.app(scope, receive, send)
            return
        await problem_response(problem)(scope, receive, send)
