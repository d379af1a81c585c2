"""A real OpenAI-compatible HTTP server on loopback, scripted per test.

It speaks ``POST /v1/chat/completions`` with ``stream: true`` as Server-Sent Events
(``data: {...}`` lines, then ``data: [DONE]``), over HTTP/1.1 with chunked transfer, as
vLLM, llama.cpp's server or the hosted API do. Each request takes the next scripted
response from a queue:

- a list of chunk dicts (or :class:`Stream`): streamed, then ``[DONE]``;
- :class:`Fail`: an HTTP error with an OpenAI-style JSON body and optional headers
  (``Retry-After``);
- :class:`Drop`: some chunks, then the socket is closed mid-body (no ``[DONE]``, no final
  chunk of the chunked encoding);
- :class:`Garbage`: some chunks, then a ``data:`` line that is not JSON;
- :class:`Stall`: some chunks, then nothing until released (for cancellation).

Every request is recorded (``server.requests``: path, headers, JSON body) so a test can
check the translated messages and tools. Use it as a context manager or through the
``fake_openai`` fixture (``tests/conftest.py``)::

    from tests.support.fake_openai_server import FakeOpenAIServer, reply

    with FakeOpenAIServer() as server:
        server.push(reply({"calls": [{"crm.lookup_customer": {"email": "ada@example.com"}}]}),
                    reply("Thanks, Ada."))
        provider = OpenAIProvider("test-model", base_url=server.base_url)
        ...
        assert server.requests[0].body["messages"][0]["role"] == "system"
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
from typing import Any

from phaseflow.providers.wire_names import readable_wire_name

__all__ = [
    "Drop",
    "Fail",
    "FakeOpenAIServer",
    "Garbage",
    "Recorded",
    "Stall",
    "Stream",
    "chunk",
    "reply",
    "text_reply",
    "tool_call",
    "tool_calls_reply",
    "usage_chunk",
]

Chunk = dict[str, Any]


@dataclass(frozen=True)
class Stream:
    chunks: Sequence[Chunk]


@dataclass(frozen=True)
class Fail:
    status: int
    message: str = "scripted failure"
    headers: Mapping[str, str] = field(default_factory=dict)
    type: str = "server_error"
    #: the error's ``code`` (``context_length_exceeded``: the request is too long)
    code: str | None = None


@dataclass(frozen=True)
class Drop:
    """Stream ``chunks``, then close the connection without ending the body."""

    chunks: Sequence[Chunk] = ()


@dataclass(frozen=True)
class Garbage:
    """Stream ``chunks``, then ``data: RAW`` (not JSON), then ``[DONE]``."""

    chunks: Sequence[Chunk] = ()
    raw: str = '{"choices": [{"delta": {"content": "unterminated'


@dataclass(frozen=True)
class Stall:
    """Stream ``chunks``, then send nothing more until the server stops (or
    :meth:`FakeOpenAIServer.release` is called, which ends the stream with ``chunks_after``
    and ``[DONE]``): a model that is still thinking, for cancellation tests."""

    chunks: Sequence[Chunk] = ()
    chunks_after: Sequence[Chunk] = ()


Response = Sequence[Chunk] | Stream | Fail | Drop | Garbage | Stall


@dataclass(frozen=True)
class Recorded:
    path: str
    headers: dict[str, str]
    body: Any


# -- chunk builders ----------------------------------------------------------------------

def chunk(delta: Mapping[str, Any] | None = None, finish: str | None = None,
          index: int = 0) -> Chunk:
    """One ``chat.completion.chunk`` with a single choice."""
    return {
        "id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0,
        "model": "fake-model",
        "choices": [{"index": index, "delta": dict(delta or {}), "finish_reason": finish}],
    }


def usage_chunk(prompt: int, completion: int, cached: int | None = None) -> Chunk:
    """The last chunk of ``include_usage``: no choices, only usage (with ``cached``, the
    ``prompt_tokens_details.cached_tokens`` of a server with a prompt cache)."""
    usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion,
                             "total_tokens": prompt + completion}
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return {
        "id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0,
        "model": "fake-model", "choices": [], "usage": usage,
    }


def tool_call(index: int, arguments: str = "", *, id: str | None = None,
              name: str | None = None) -> dict[str, Any]:
    """One tool-call fragment of a delta (``id`` and ``name`` in the first only)."""
    fragment: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
    if id is not None:
        fragment["id"] = id
        fragment["type"] = "function"
    if name is not None:
        fragment["function"]["name"] = name
    return fragment


def text_reply(text: str, parts: int = 3, usage: tuple[int, int] | None = (11, 7),
               finish: str = "stop") -> list[Chunk]:
    """A text reply streamed in ``parts`` pieces, a finish chunk and a usage chunk."""
    size = max(1, -(-len(text) // parts))
    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({"content": text[i: i + size]}) for i in range(0, len(text), size)]
    chunks.append(chunk({}, finish))
    if usage is not None:
        chunks.append(usage_chunk(*usage))
    return chunks


def tool_calls_reply(*calls: tuple[str, str, str], split: int = 5,
                     usage: tuple[int, int] | None = (20, 9)) -> list[Chunk]:
    """Calls ``(id, wire name, arguments)`` streamed as fragments: the arguments cut every
    ``split`` characters (mid-JSON), the calls' fragments interleaved by index."""
    chunks = [chunk({"role": "assistant", "content": None})]
    pieces = [[a[i: i + split] for i in range(0, len(a), split)] or [""] for _, _, a in calls]
    for k, (call_id, name, _) in enumerate(calls):
        chunks.append(chunk({"tool_calls": [tool_call(k, pieces[k][0], id=call_id,
                                                      name=name)]}))
    longest = max((len(p) for p in pieces), default=0)
    for j in range(1, longest):
        for k, p in enumerate(pieces):
            if j < len(p):
                chunks.append(chunk({"tool_calls": [tool_call(k, p[j])]}))
    chunks.append(chunk({}, "tool_calls"))
    if usage is not None:
        chunks.append(usage_chunk(*usage))
    return chunks


def reply(entry: str | Mapping[str, Any], *, split: int = 5,
          usage: tuple[int, int] | None = (20, 9)) -> list[Chunk]:
    """A reply in the scripted form (``"text"`` or ``{text: ..., calls: [{TOOL: ARGS}]}``,
    as a conversation test's ``model:`` step) as chunks. Workflow names are sent in their
    readable wire form (``crm.lookup_customer`` -> ``crm__lookup_customer``), which is what
    the adapter offers unless two names collide; call ids are ``call_<n>``."""
    if isinstance(entry, str):
        return text_reply(entry, usage=usage)
    text = str(entry.get("text") or "")
    calls = [
        (f"call_{k + 1}", readable_wire_name(name),
         json.dumps(args or {}, sort_keys=True, separators=(",", ":")))
        for k, call in enumerate(entry.get("calls") or ())
        for name, args in call.items()
    ]
    if not calls:
        return text_reply(text, usage=usage)
    chunks = tool_calls_reply(*calls, split=split, usage=usage)
    if text:
        chunks.insert(1, chunk({"content": text}))
    return chunks


# -- the server --------------------------------------------------------------------------

class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet in tests
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = raw.decode("utf-8", "replace")
        self.server.owner.requests.append(
            Recorded(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
        )
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._error(Fail(404, f"no route {self.path}", type="invalid_request_error"))
            return
        if not isinstance(body, dict) or body.get("stream") is not True:
            self._error(Fail(400, "the fake server speaks only stream=true",
                             type="invalid_request_error"))
            return
        response = self.server.owner.next_response()
        if response is None:
            self._error(Fail(400, "fake server: no scripted response left",
                             type="invalid_request_error"))
        elif isinstance(response, Fail):
            self._error(response)
        elif isinstance(response, Drop):
            self._stream(response.chunks, end=False)
            self._drop()
        elif isinstance(response, Stall):
            self._stream(response.chunks, end=False)
            self.server.owner.stalled.set()
            self.server.owner.released.wait()
            self._stream_more(response.chunks_after)
        elif isinstance(response, Garbage):
            self._stream(response.chunks, end=False)
            self._event(response.raw)
            self._event("[DONE]")
            self._finish()
        else:
            chunks = response.chunks if isinstance(response, Stream) else response
            self._stream(chunks, end=True)

    def _error(self, fail: Fail) -> None:
        data = json.dumps({"error": {"message": fail.message, "type": fail.type,
                                     "param": None, "code": fail.code}}).encode()
        self.send_response(fail.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in fail.headers.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _stream(self, chunks: Sequence[Chunk], *, end: bool) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for c in chunks:
            self._event(json.dumps(c))
        if end:
            self._event("[DONE]")
            self._finish()

    def _stream_more(self, chunks: Sequence[Chunk]) -> None:
        for c in chunks:
            self._event(json.dumps(c))
        self._event("[DONE]")
        self._finish()

    def _event(self, data: str) -> None:
        payload = f"data: {data}\n\n".encode()
        self.wfile.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
        self.wfile.flush()

    def _finish(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _drop(self) -> None:
        self.close_connection = True
        with contextlib.suppress(OSError):  # the client may have gone already
            self.connection.shutdown(socket.SHUT_RDWR)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: FakeOpenAIServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that goes away mid-stream (a test closing its stream early) is part
        of the script, not a server error worth a traceback."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class FakeOpenAIServer:
    """The server, on ``127.0.0.1`` and a free port, in a background thread."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self._responses: deque[Response] = deque()
        self._lock = threading.Lock()
        #: set when a :class:`Stall` response has sent its first chunks
        self.stalled = threading.Event()
        #: set by :meth:`release` or :meth:`stop`: stalled responses go on
        self.released = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        """What ``base_url=`` takes (``http://127.0.0.1:PORT/v1``)."""
        assert self._server is not None, "the server is not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def push(self, *responses: Response) -> None:
        """Queue responses, answered in order, one per request."""
        with self._lock:
            self._responses.extend(responses)

    def next_response(self) -> Response | None:
        with self._lock:
            return self._responses.popleft() if self._responses else None

    @property
    def pending(self) -> int:
        """Responses not yet asked for."""
        with self._lock:
            return len(self._responses)

    def start(self) -> FakeOpenAIServer:
        server = _Server(("127.0.0.1", 0), _Handler)
        server.owner = self
        self._server = server
        # a short poll interval: ``stop`` waits for the serving loop to notice
        self._thread = threading.Thread(target=server.serve_forever, args=(0.02,),
                                        daemon=True, name="fake-openai-server")
        self._thread.start()
        return self

    def release(self) -> None:
        """Let every stalled response finish."""
        self.released.set()

    def stop(self) -> None:
        self.released.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.stop()
