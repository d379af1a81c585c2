"""llama.cpp's ``llama-server`` on loopback, for the provider tests that check the
adapters against a real server (it serves the Anthropic Messages API at ``/v1/messages``
and the OpenAI Responses API at ``/v1/responses``, streamed).

It runs only where ``PHASEFLOW_LLAMA_SERVER`` names its start script (``.ci/run`` sets it
when the script is there); without it the tests that need it skip, saying so. The
script prints ``llama-server ready on :PORT (pid N)``; the server is stopped by that pid
when the tests are done. ``CTX`` is small on purpose, so a long prompt meets the real
context-full error.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

#: the variable naming the start script
VARIABLE = "PHASEFLOW_LLAMA_SERVER"

#: the context the server is started with (tokens)
CONTEXT = 2048


@dataclass(frozen=True)
class LlamaServer:
    port: int
    pid: int

    @property
    def root(self) -> str:
        """The Anthropic SDK's base URL (it appends ``/v1/messages``)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def v1(self) -> str:
        """The OpenAI SDK's base URL."""
        return f"{self.root}/v1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def llama_server() -> Iterator[LlamaServer]:
    """The running server, or a skipped test when ``PHASEFLOW_LLAMA_SERVER`` is unset."""
    script = os.environ.get(VARIABLE)
    if not script:
        pytest.skip(f"{VARIABLE} is not set: the checks against llama.cpp's server skip")
    if not os.path.isfile(script):
        pytest.fail(f"{VARIABLE}={script}: no such start script")
    port = _free_port()
    env = {**os.environ, "PORT": str(port), "CTX": str(CONTEXT)}
    proc = subprocess.run(["bash", script], env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    found = re.search(r"ready on :(\d+) \(pid (\d+)\)", proc.stdout)
    if proc.returncode != 0 or found is None:
        pytest.fail(f"llama-server did not start: {proc.stderr.strip()[-500:]}")
    server = LlamaServer(int(found.group(1)), int(found.group(2)))
    try:
        yield server
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(server.pid, signal.SIGTERM)
            for _ in range(100):
                os.kill(server.pid, 0)
                time.sleep(0.05)
            os.kill(server.pid, signal.SIGKILL)


def tokens(server: LlamaServer, text: str) -> int:
    """How many tokens the server's model makes of ``text`` (its ``/tokenize``)."""
    import json
    import urllib.request

    body = json.dumps({"content": text}).encode()
    ask = urllib.request.Request(f"{server.root}/tokenize", body,
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(ask, timeout=60) as answer:
        return len(json.load(answer)["tokens"])
