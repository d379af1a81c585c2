"""A served turn's cost: ``phaseflow serve`` over HTTP (JSON and SSE) against the same
turn in process (run by hand: ``python benchmarks/bench_serve.py``).

The workload is the session benchmark's (``bench_session.py``): every turn one user
message; the scripted model answers the first request with two tool calls
(``lookup_customer``, ``find_order``) and the second with a text. The server is a real
process on 127.0.0.1 (this script started again with ``--serve``: the same ``create_app``
and uvicorn server as ``phaseflow serve``, with the benchmark's O(1) scripted provider,
which ``--provider`` cannot name), on an SQLite store in a temporary folder; the client
is httpx on the same machine.

Measured, each over fresh sessions of 20 turns:

* latency per turn, p50 and p95: in process (``await session.reply(text)`` on an
  ``SQLiteStore``), over HTTP with ``Accept: application/json`` (one request, the
  outcome), and over SSE (the events until ``turn_finished``);
* CPU time per turn: the in-process turns' (this process, its store threads included),
  and the server's for a JSON turn and for an SSE turn (user + system of the server
  process, from ``/proc/PID/stat``): the difference is what serving adds;
* throughput: turns per second with 8 and with 32 sessions talking at once (a client
  thread each, JSON).

``BENCH_SERVE_PROFILE=FILE`` runs the server under cProfile (written to FILE when it
stops; read it with ``python -m pstats FILE``): where a served turn's CPU goes.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE)]

import bench_session as workload  # noqa: E402 - the session benchmark's workload

TURNS = 20


def _agents(store_path: str) -> Any:
    from phaseflow.api import load_workflow_text
    from phaseflow.session import Agent
    from phaseflow.session.workers import new_worker_id
    from phaseflow.stores.sqlite import SQLiteStore

    store = SQLiteStore(store_path)
    workflow = load_workflow_text(workload.WORKFLOW)
    provider = workload.ScriptProvider()

    def make(busy: str) -> Any:
        return Agent(workflow, provider, tools=[workload.lookup_customer, workload.find_order],
                     store=store, system=workload.SYSTEM, worker=new_worker_id(),
                     busy=busy)  # type: ignore[arg-type]

    return workflow, make


def serve(port_file: str, store_path: str) -> None:
    """The server process: ``phaseflow serve``'s app and server, the benchmark's model."""
    import socket

    from phaseflow.serve.app import create_app
    from phaseflow.serve.config import ServeConfig
    from phaseflow.serve.hub import Served
    from phaseflow.serve.logs import Log
    from phaseflow.serve.process import GracefulServer, uvicorn_config
    from phaseflow.session.agent_setup import workflow_hash

    workflow, make = _agents(store_path)
    agent = make("queue")
    served = {workflow.name: Served(workflow.name, agent, make, workflow_hash(workflow))}
    log = Log("text", open(os.environ.get("BENCH_SERVE_LOG", os.devnull), "w"))  # noqa: SIM115
    config = ServeConfig(served=served, log=log, grace=5)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    Path(port_file).write_text(str(sock.getsockname()[1]))
    app = create_app(config)
    server = GracefulServer(uvicorn_config(app), app, config)
    profile = os.environ.get("BENCH_SERVE_PROFILE")
    if not profile:
        asyncio.run(server.serve(sockets=[sock]))
        return
    # where the server's CPU goes (``BENCH_SERVE_PROFILE=out.prof``): cProfile over the
    # whole server process, written when it stops; read with ``python -m pstats``
    import cProfile

    profiler = cProfile.Profile()
    profiler.enable()
    try:
        asyncio.run(server.serve(sockets=[sock]))
    finally:
        profiler.disable()
        profiler.dump_stats(profile)


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def in_process(folder: Path, sessions: int) -> list[float]:
    _, make = _agents(str(folder / "inproc.db"))
    agent = make("queue")
    times: list[float] = []

    async def run() -> None:
        for _ in range(sessions):
            session = await agent.session(uuid.uuid4().hex)
            for i in range(TURNS):
                started = time.perf_counter()
                reply = await session.reply(workload.question(i))
                times.append(time.perf_counter() - started)
                assert reply == workload.ANSWER

    asyncio.run(run())
    return times


async def _asgi(app: Any, method: str, path: str, body: dict[str, Any] | None = None,
                accept: str = "application/json") -> bytes:
    """One request through the ASGI application itself: no socket, no HTTP parser."""
    import json

    raw = json.dumps(body).encode() if body is not None else b""
    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.4"},
             "http_version": "1.1", "method": method, "scheme": "http", "path": path,
             "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "headers": [(b"content-type", b"application/json"), (b"accept", accept.encode()),
                         (b"content-length", str(len(raw)).encode())],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}
    asked = False
    out: list[bytes] = []

    async def receive() -> dict[str, Any]:
        nonlocal asked
        if not asked:
            asked = True
            return {"type": "http.request", "body": raw, "more_body": False}
        await asyncio.Event().wait()  # the client never leaves
        raise AssertionError

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            out.append(message.get("body", b""))

    await app(scope, receive, send)
    return b"".join(out)


def through_app(folder: Path, sessions: int) -> dict[str, tuple[list[float], float]]:
    """The same turns in one process three ways, session by session in turn (so that a
    change of the machine's load falls on all three alike): ``session.reply``, and
    through the server's ASGI application as JSON and as SSE (``phaseflow serve``'s own
    HTTP layer, without uvicorn and the sockets); each one's latencies and CPU a turn."""
    from phaseflow.serve.app import create_app
    from phaseflow.serve.config import ServeConfig
    from phaseflow.serve.hub import Served
    from phaseflow.serve.logs import Log
    from phaseflow.session.agent_setup import workflow_hash

    workflow, make = _agents(str(folder / "app.db"))
    agent = make("queue")
    served = {workflow.name: Served(workflow.name, agent, make, workflow_hash(workflow))}
    log = Log("text", open(os.devnull, "w"))  # noqa: SIM115
    app = create_app(ServeConfig(served=served, log=log))
    times: dict[str, list[float]] = {"reply": [], "json": [], "sse": []}
    cpu = dict.fromkeys(times, 0.0)

    async def one(way: str) -> None:
        sid = uuid.uuid4().hex
        session = None
        if way == "reply":
            session = await agent.session(sid)
        else:
            await _asgi(app, "POST", "/v1/sessions", {"id": sid})
        for i in range(TURNS):
            text = workload.question(i)
            started, cpu0 = time.perf_counter(), time.process_time()
            if session is not None:
                assert await session.reply(text) == workload.ANSWER
            else:
                accept = "text/event-stream" if way == "sse" else "application/json"
                body = await _asgi(app, "POST", f"/v1/sessions/{sid}/messages",
                                   {"text": text}, accept)
                assert b"turn_finished" in body or workload.ANSWER.encode() in body
            times[way].append(time.perf_counter() - started)
            cpu[way] += time.process_time() - cpu0

    async def run() -> None:
        for way in times:  # warm up
            await one(way)
        for values in times.values():
            values.clear()
        for key in cpu:
            cpu[key] = 0.0
        for _ in range(sessions):
            for way in times:
                await one(way)

    asyncio.run(run())
    return {way: (values, cpu[way] / len(values)) for way, values in times.items()}


def over_http(base: str, sessions: int, stream: bool) -> list[float]:
    import httpx

    times: list[float] = []
    with httpx.Client(base_url=base, timeout=60) as client:
        for _ in range(sessions):
            sid = uuid.uuid4().hex
            client.post("/v1/sessions", json={"id": sid})
            url = f"/v1/sessions/{sid}/messages"
            for i in range(TURNS):
                body = {"text": workload.question(i)}
                started = time.perf_counter()
                if stream:
                    with client.stream("POST", url, json=body,
                                       headers={"Accept": "text/event-stream"}) as r:
                        for line in r.iter_lines():
                            if '"turn_finished"' in line:
                                break
                else:
                    out = client.post(url, json=body).json()
                    assert out["reply"] == workload.ANSWER, out
                times.append(time.perf_counter() - started)
    return times


def throughput(base: str, clients: int, turns: int) -> float:
    import httpx

    def talk() -> None:
        with httpx.Client(base_url=base, timeout=120) as client:
            sid = uuid.uuid4().hex
            client.post("/v1/sessions", json={"id": sid})
            for i in range(turns):
                out = client.post(f"/v1/sessions/{sid}/messages",
                                  json={"text": workload.question(i)}).json()
                assert out["status"] == "completed", out

    threads = [threading.Thread(target=talk) for _ in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return clients * turns / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", nargs=2, metavar=("PORT_FILE", "STORE"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--sessions", type=int, default=10,
                        help="sessions of 20 turns per measurement (default 10)")
    parser.add_argument("--app-only", action="store_true",
                        help="only the ASGI application in this process against "
                             "session.reply (what phaseflow's HTTP layer adds, no sockets)")
    args = parser.parse_args()
    if args.serve:
        serve(*args.serve)
        return
    if args.app_only:
        with tempfile.TemporaryDirectory() as tmp:
            ways = through_app(Path(tmp), args.sessions)
        print(f"{args.sessions} sessions x {TURNS} turns each, one process, SQLite; "
              f"load average {os.getloadavg()[0]:.1f}")
        print(f"{'':26}{'p50 ms':>9}{'p95 ms':>9}{'CPU ms':>9}")
        for way, name in (("reply", "session.reply"), ("json", "ASGI app, JSON"),
                          ("sse", "ASGI app, SSE")):
            values, spent = ways[way]
            print(f"{name:26}{_pct(values, 0.5) * 1000:9.2f}{_pct(values, 0.95) * 1000:9.2f}"
                  f"{spent * 1000:9.2f}")
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        port_file = folder / "port"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
        # uvicorn parses HTTP with httptools when it can import it, else with h11
        parser = "h11" if subprocess.run([sys.executable, "-c", "import httptools"],
                                         env=env, capture_output=True).returncode else \
            "httptools"
        server = subprocess.Popen([sys.executable, __file__, "--serve", str(port_file),
                                   str(folder / "served.db")], env=env)
        try:
            while not port_file.exists() or not port_file.read_text():
                time.sleep(0.05)
            base = f"http://127.0.0.1:{port_file.read_text()}"
            over_http(base, 1, False)  # warm up
            over_http(base, 1, True)
            cpu0 = time.process_time()
            local = in_process(folder, args.sessions)
            local_cpu = (time.process_time() - cpu0) / len(local)
            cpu0 = _cpu(server.pid)
            as_json = over_http(base, args.sessions, False)
            json_cpu = (_cpu(server.pid) - cpu0) / len(as_json)
            cpu0 = _cpu(server.pid)
            as_sse = over_http(base, args.sessions, True)
            sse_cpu = (_cpu(server.pid) - cpu0) / len(as_sse)
            rates = {n: throughput(base, n, TURNS) for n in (8, 32)}
        finally:
            server.terminate()
            server.wait(60)
    print(f"{args.sessions} sessions x {TURNS} turns each; SQLite; server on 127.0.0.1 "
          f"(HTTP parser: {parser}); load average {os.getloadavg()[0]:.1f}")
    print(f"{'':22}{'p50 ms':>9}{'p95 ms':>9}{'mean ms':>9}")
    for name, values in (("in process", local), ("HTTP, JSON", as_json),
                         ("HTTP, SSE", as_sse)):
        print(f"{name:22}{_pct(values, 0.5) * 1000:9.2f}{_pct(values, 0.95) * 1000:9.2f}"
              f"{statistics.mean(values) * 1000:9.2f}")
    print(f"CPU per turn: in process {local_cpu * 1000:.2f} ms, server for a JSON turn "
          f"{json_cpu * 1000:.2f} ms, for an SSE turn {sse_cpu * 1000:.2f} ms")
    for n, rate in rates.items():
        print(f"throughput, {n} sessions at once (JSON): {rate:.0f} turns/s")


if __name__ == "__main__":
    main()
