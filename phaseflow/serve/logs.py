"""One log line per request and per turn, as text or as JSON (``--log-format json``, for
a log shipper), on standard error.

What a line holds is chosen here, never the request: method, path (never the query, the
headers or the body), status, duration, and the session id and turn. So no token, API
key or DSN password can reach a line. Control characters in a path or an id are escaped.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime
from typing import Any, TextIO


def _clean(value: object) -> str:
    text = str(value)
    if text.isprintable() and " " not in text:
        return text
    return json.dumps(text)


class Log:
    """The server's log: ``fmt`` is ``text`` or ``json``."""

    def __init__(self, fmt: str = "text", out: TextIO | None = None) -> None:
        self.fmt = fmt
        self.out = out if out is not None else sys.stderr

    def line(self, kind: str, message: str = "", **fields: Any) -> None:
        now = time.time()
        stamp = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        shown = {k: v for k, v in fields.items() if v is not None and v != ""}
        if self.fmt == "json":
            text = json.dumps({"at": stamp, "kind": kind, **({"message": message}
                                                              if message else {}), **shown},
                              default=str)
        else:
            parts = [stamp, kind]
            if message:
                parts.append(message)
            parts.extend(f"{k}={_clean(v)}" for k, v in shown.items())
            text = " ".join(parts)
        try:
            self.out.write(text + "\n")
            self.out.flush()
        except (OSError, ValueError):
            pass  # a closed standard error must not fail a request

    def request(self, method: str, path: str, status: int, seconds: float,
                session: str | None = None) -> None:
        self.line("request", method=method, path=path, status=status,
                  ms=round(seconds * 1000, 1), session=session)

    def turn(self, session: str, turn: int, status: str, seconds: float, workflow: str,
             ) -> None:
        self.line("turn", session=session, turn=turn, status=status, workflow=workflow,
                  ms=round(seconds * 1000, 1))
