"""The server's processes: uvicorn with a graceful stop, and the supervisor of
``--workers N``.

The graceful stop (SIGTERM or SIGINT): uvicorn keeps serving while the hub drains, so a
client that sends a message meanwhile is answered 503 with ``Retry-After`` (not a reset
connection); the health checks answer 503 so a load balancer stops sending; open event
streams are closed (their clients reconnect to another worker); running turns get the
grace period, then are cancelled and settled; then uvicorn stops. A second signal
cancels the running turns at once.

``--workers N``: the supervisor binds the socket once and starts N ``phaseflow serve``
processes on it (in sessions of their own, so a terminal's Ctrl-C reaches only the
supervisor, which forwards SIGTERM to each); a worker that dies is started again. A
worker whose supervisor is gone stops by itself.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from types import FrameType
from typing import Any

import uvicorn

from phaseflow.serve.config import ServeConfig


def uvicorn_config(app: Any) -> uvicorn.Config:
    return uvicorn.Config(app, log_config=None, access_log=False, lifespan="on",
                          server_header=False, timeout_graceful_shutdown=5,
                          timeout_keep_alive=5, log_level="warning",
                          http=problem_protocol())


def invalid_request() -> bytes:
    """The whole answer to a request that is not valid HTTP (uvicorn's parser refused
    it before the application saw it): problem+json, as every error the server sends,
    and the connection closed."""
    from phaseflow.serve.problems import MEDIA_TYPE, Problem

    body = json.dumps(Problem(
        400, "invalid_http_request", "the request is not valid HTTP/1.1 (a bad request "
        "line, or a header holding a control character such as a stray CR); nothing of "
        "it was read").to_json()).encode()
    head = (f"HTTP/1.1 400 Bad Request\r\ncontent-type: {MEDIA_TYPE}\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n")
    return head.encode("ascii") + body


def problem_protocol() -> type[asyncio.Protocol]:
    """uvicorn's own HTTP protocol (the one ``http="auto"`` picks), its answer to a
    request it cannot parse (by default a plain-text ``Invalid HTTP request received.``)
    replaced by :func:`invalid_request`."""
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    def send_400_response(self: Any, msg: str) -> None:
        self.transport.write(invalid_request())
        self.transport.close()

    return type("ProblemHTTPProtocol", (AutoHTTPProtocol,),
                {"send_400_response": send_400_response})


class GracefulServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, app: Any, serve: ServeConfig, *,
                 supervised: bool = False) -> None:
        super().__init__(config)
        #: a worker of ``--workers N``: it stops when its supervisor is gone
        self.supervised = supervised
        self.hub = app.hub
        self.serve_config = serve
        self._signals = 0
        self._drain: asyncio.Task[None] | None = None
        self._parent = os.getppid()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self._signals += 1
        if self._signals > 1:
            for session_id in list(self.hub.live_sessions()):
                self.hub.cancel(session_id)

    async def on_tick(self, counter: int) -> bool:
        stop = await super().on_tick(counter)
        if self.supervised and not self._signals and os.getppid() != self._parent:
            self._signals = 1  # the supervisor is gone: stop as if told to
        if self._signals and self._drain is None:
            log = self.serve_config.log
            log.line("stop", "stopping: new turns refused, running turns get "
                     f"{self.serve_config.grace:g} s")
            self._drain = asyncio.get_running_loop().create_task(
                self.hub.drain(self.serve_config.grace))
        if self._drain is not None and self._drain.done():
            self.serve_config.log.line("stop", "stopped")
            return True
        return stop


def supervise(sock: socket.socket, workers: int) -> int:
    """Run ``workers`` servers on ``sock`` until a stop signal; their worst exit
    status."""
    argv = [sys.executable, "-m", "phaseflow.cli.main", *sys.argv[1:], "--fd",
            str(sock.fileno())]
    stopping = False

    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(argv, pass_fds=(sock.fileno(),), start_new_session=True)

    children = [start() for _ in range(workers)]

    def forward(sig: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    while True:
        alive = [c for c in children if c.poll() is None]
        if not alive and stopping:
            break
        for index, child in enumerate(children):
            code = child.poll()
            if code is not None and not stopping:
                print(f"phaseflow serve: worker {child.pid} exited ({code}); starting "
                      "another", file=sys.stderr, flush=True)
                children[index] = start()
        time.sleep(0.1)
    # a worker still starting when the stop came ends by the signal itself: stopped as
    # asked, not failed
    codes = [c.returncode for c in children]
    return max(0 if code == -signal.SIGTERM else code if code >= 0 else 1 for code in codes)
