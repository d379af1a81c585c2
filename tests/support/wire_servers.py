"""Loopback HTTP servers for the Anthropic Messages API, the OpenAI Responses API and the
Gemini API, scripted per test, speaking each API's documented streaming wire format.

One server class, three wires (``WireServer("anthropic" | "responses" | "gemini")``):

- ``anthropic``: ``POST /v1/messages`` with ``stream: true``, answered with named
  Server-Sent Events (``event: content_block_delta`` / ``data: {...}``);
- ``responses``: ``POST /v1/responses`` with ``stream: true``, named events
  (``event: response.output_text.delta``), ending with ``response.completed``;
- ``gemini``: ``POST /v1beta/models/MODEL:streamGenerateContent?alt=sse`` (or ``/v1/``,
  the SDK's version with a base URL of its own), ``data:``
  lines of ``GenerateContentResponse`` chunks (camelCase, as the API sends them).

Each request takes the next scripted response: a list of events (``(name, data)``
pairs; ``data`` a dict sent as JSON, or a string sent as it is, malformed on purpose),
:class:`Fail` (an HTTP error with the API's error body and headers) or :class:`Drop`
(some events, then the connection closed mid-body). Requests are recorded
(``server.requests``: path, headers, JSON body). The event builders of each wire are in
``tests/support/wire_scripts.py``; the SDK that reads them is always the real one.
"""

from __future__ import annotations

import contextlib
import json
import socket
import sys
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Literal

__all__ = ["Drop", "Event", "Fail", "Recorded", "WireServer"]

Api = Literal["anthropic", "responses", "gemini"]

#: one Server-Sent Event: its name (``None``: a bare ``data:`` line) and its data
Event = tuple[str | None, Mapping[str, Any] | str]


@dataclass(frozen=True)
class Fail:
    status: int
    message: str = "scripted failure"
    headers: Mapping[str, str] = field(default_factory=dict)
    type: str = "api_error"


@dataclass(frozen=True)
class Drop:
    """Send ``events``, then close the connection without ending the body."""

    events: Sequence[Event] = ()


Response = Sequence[Event] | Fail | Drop


@dataclass(frozen=True)
class Recorded:
    path: str
    headers: dict[str, str]
    body: Any


_PATHS: dict[str, str] = {"anthropic": "/v1/messages", "responses": "/v1/responses"}


def _error_body(api: Api, fail: Fail) -> dict[str, Any]:
    if api == "anthropic":
        return {"type": "error", "error": {"type": fail.type, "message": fail.message}}
    if api == "gemini":
        return {"error": {"code": fail.status, "message": fail.message,
                          "status": fail.type.upper()}}
    return {"error": {"message": fail.message, "type": fail.type, "param": None,
                      "code": None}}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        owner = self.server.owner
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = raw.decode("utf-8", "replace")
        owner.requests.append(
            Recorded(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
        if not owner.route(self.path):
            self._error(Fail(404, f"no route {self.path}", type="not_found_error"))
            return
        response = owner.next_response()
        if response is None:
            self._error(Fail(400, "loopback server: no scripted response left",
                             type="invalid_request_error"))
        elif isinstance(response, Fail):
            self._error(response)
        elif isinstance(response, Drop):
            self._stream(response.events)
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
        else:
            self._stream(response)
            self._write(b"")  # the chunked body's end

    def _error(self, fail: Fail) -> None:
        data = json.dumps(_error_body(self.server.owner.api, fail)).encode()
        self.send_response(fail.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in fail.headers.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _stream(self, events: Sequence[Event]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for name, data in events:
            text = data if isinstance(data, str) else json.dumps(data)
            head = f"event: {name}\n" if name is not None else ""
            self._write(f"{head}data: {text}\n\n".encode())

    def _write(self, payload: bytes) -> None:
        self.wfile.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
        self.wfile.flush()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: WireServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class WireServer:
    """One API's server on ``127.0.0.1`` and a free port, in a background thread."""

    def __init__(self, api: Api) -> None:
        self.api: Api = api
        self.requests: list[Recorded] = []
        self._responses: deque[Response] = deque()
        self._lock = threading.Lock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def route(self, path: str) -> bool:
        bare = path.split("?", 1)[0]
        if self.api == "gemini":
            return bare.startswith(("/v1beta/models/", "/v1/models/")) and bare.endswith(
                ":streamGenerateContent")
        return bare.rstrip("/") == _PATHS[self.api]

    @property
    def base_url(self) -> str:
        """What the SDK's ``base_url`` takes (the Responses API's ends with ``/v1``)."""
        assert self._server is not None, "the server is not started"
        root = f"http://127.0.0.1:{self._server.server_address[1]}"
        return f"{root}/v1" if self.api == "responses" else root

    def push(self, *responses: Response) -> None:
        with self._lock:
            self._responses.extend(responses)

    def next_response(self) -> Response | None:
        with self._lock:
            return self._responses.popleft() if self._responses else None

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._responses)

    def start(self) -> WireServer:
        server = _Server(("127.0.0.1", 0), _Handler)
        server.owner = self
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, args=(0.02,),
                                        daemon=True, name=f"loopback-{self.api}")
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> WireServer:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.stop()
