"""What an idle open events stream costs the server (run by hand:
``python benchmarks/bench_serve_idle.py``).

``phaseflow serve`` on the bundled refund desk and an SQLite file, one session, then N
clients (default 20) each holding ``GET /v1/sessions/{id}/events`` open with nothing
happening: the server process's CPU (user + system, from ``/proc``) over ``--seconds``
without streams and with them. An idle stream wakes for its heartbeat (every 15 s) and
reads the store every ``--poll`` seconds for events other processes wrote (nothing
announces those on SQLite, nor a commit by a process that is not a server on
PostgreSQL).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx

from tests.support.serve_server import REFUND_DESK, start


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--poll", default="0.5")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp())
    server = start([*REFUND_DESK, "--store", str(folder / "s.db"), "--poll", args.poll],
                   folder / "log")
    pid = server.process.pid
    try:
        with httpx.Client(base_url=server.base, timeout=30) as client:
            client.post("/v1/sessions", json={"workflow": "refund-desk", "id": "idle"})
        before = _cpu(pid)
        time.sleep(args.seconds)
        quiet = _cpu(pid) - before

        def follow() -> None:
            with httpx.Client(base_url=server.base, timeout=None) as client, client.stream(
                    "GET", "/v1/sessions/idle/events",
                    headers={"Accept": "text/event-stream"}) as response:
                for _ in response.iter_raw():
                    pass

        for _ in range(args.streams):
            threading.Thread(target=follow, daemon=True).start()
        time.sleep(2)
        before = _cpu(pid)
        time.sleep(args.seconds)
        held = _cpu(pid) - before
    finally:
        server.process.terminate()
    per = (held - quiet) / args.streams / args.seconds * 1000
    print(f"server CPU over {args.seconds:g} s: no stream {quiet * 1000:.0f} ms, "
          f"{args.streams} idle streams {held * 1000:.0f} ms: {per:.2f} ms a second a "
          f"stream (--poll {args.poll})")


if __name__ == "__main__":
    main()
