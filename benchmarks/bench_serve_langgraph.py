"""A served turn: ``phaseflow serve`` on SQLite against LangGraph's own server
(``langgraph dev``, in memory), in the same run (by hand:
``python benchmarks/bench_serve_langgraph.py``).

LangGraph's server is not a dependency of phaseflow, and its ``inmem`` extra brings
``uvloop`` and ``httptools``, which uvicorn picks up on its own, so install it in a
virtual environment of its own that sees the rest of the packages and name its
``langgraph`` command (``--langgraph``, default: the one on ``PATH``)::

    python -m venv --system-site-packages /tmp/lg-venv
    /tmp/lg-venv/bin/pip install 'langgraph-cli[inmem]'
    python benchmarks/bench_serve_langgraph.py --langgraph /tmp/lg-venv/bin/langgraph

The workload is the session benchmark's (``bench_session.py``): every turn one user
message; the scripted model answers with two tool calls (``lookup_customer``,
``find_order``), then with a text. The servers (``--only``), each a real process on
127.0.0.1:

* ``lg``: ``langgraph dev --no-browser --port P`` as shipped (in memory, its reloader on,
  one job per worker), serving ``benchmarks/langgraph_app/graph.py``: the session
  benchmark's LangGraph graph (``bench_session.langgraph_graph``, the async model node)
  with the server's own checkpointer; a turn is ``POST /threads/{id}/runs/wait`` with the
  user message (the thread made by ``POST /threads``), answered with the thread's state;
* ``lg-patched``: the same with the run queue's poll patched (``langgraph_app/wake.py``:
  the queue's idle 0.5 s sleep ends when a run is created; ``BENCH_LANGGRAPH_WAKE=1``);
* ``lg-jobs10`` (optional): ``lg`` with ``--n-jobs-per-worker 10``;
* ``phaseflow``: ``phaseflow serve``'s application and uvicorn server on an
  ``SQLiteStore`` (WAL, ``synchronous=FULL``, its default) in a temporary folder
  (``bench_serve.py --serve``, the benchmark's scripted provider); a turn is ``POST
  /v1/sessions/{id}/messages`` (the session made by ``POST /v1/sessions``), answered
  with the turn's outcome;
* ``phaseflow-normal``: the same at ``synchronous=NORMAL`` (no sync per commit), to show
  the disk's share;
* ``phaseflow-uvloop`` (optional): ``phaseflow`` run by the ``langgraph`` command's
  interpreter, where uvicorn finds uvloop and httptools as LangGraph's server does.

The client is httpx in this process, the same code for every server. Measured per server,
in rounds (each round starts every server afresh, in a rotated order, and stops it after):

* a lone client's turn, p50 and p95, over ``--sessions`` fresh sessions of 20 turns
  (after a warm-up session of 3 turns);
* the server's CPU time per turn over those turns: user + system time of the server's
  process and its descendants (``/proc/PID/stat``);
* turns per second with 8 sessions talking at once (8 client threads, each a fresh
  session of 20 turns), and with ``--wide`` (32); the server's CPU per turn over the
  8-session run;
* the disk's fsync time in the temporary folder, at the start and at the end (phaseflow
  at FULL waits for 4 syncs a turn).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE)]

import bench_serve  # noqa: E402 - its server (``--serve``) and its percentile
import bench_session as workload  # noqa: E402 - the session benchmark's workload

TURNS = 20
APP = HERE / "langgraph_app"


# --- the servers ----------------------------------------------------------------------


def tree_cpu(pid: int) -> float:
    """User + system seconds of ``pid`` and every live descendant (``langgraph dev``'s
    reloader runs the server in a child process)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(entry.name)] = int(fields[1])
    family = {pid}
    grew = True
    while grew:
        grew = False
        for child, parent in parents.items():
            if parent in family and child not in family:
                family.add(child)
                grew = True
    total = 0.0
    for member in family:
        with contextlib.suppress(OSError):  # a process that ended meanwhile
            total += bench_serve._cpu(member)
    return total


@dataclass
class Server:
    """A running server and the two calls of the client protocol it speaks."""

    name: str
    base: str
    process: subprocess.Popen[bytes]
    open_session: Callable[[Any], str]
    turn: Callable[[Any, str, int], None]

    def stop(self) -> None:
        """SIGTERM to the server's process group (it was started in a new session), then
        SIGKILL if it has not exited within 30 s."""
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(30)
        except ProcessLookupError:
            pass


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_ok(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    import httpx

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the server exited ({process.returncode}); see {log}:\n"
                             + log.read_text()[-3000:])
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"the server did not answer {url} within 120 s; see {log}")


def start_langgraph(folder: Path, command: str, *, wake: bool, jobs: int | None) -> Server:
    """``langgraph dev`` in ``folder`` (its working directory: the server writes its
    ``.langgraph_api`` snapshots there), with the graph of ``langgraph_app`` named by
    absolute path, its output in ``folder/server.log``."""
    config = json.loads((APP / "langgraph.json").read_text())
    config["dependencies"] = [str(APP)]
    config["graphs"] = {name: str(APP / spec.removeprefix("./"))
                        for name, spec in config["graphs"].items()}
    work = folder / "langgraph"
    work.mkdir()
    (work / "langgraph.json").write_text(json.dumps(config))
    port = _free_port()
    argv = [command, "dev", "--no-browser", "--port", str(port)]
    if jobs is not None:
        argv += ["--n-jobs-per-worker", str(jobs)]
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LANGSMITH_", "LANGCHAIN_"))}
    env.update(LANGGRAPH_NO_VERSION_CHECK="true", PYTHONPATH=str(ROOT),
               BENCH_LANGGRAPH_WAKE="1" if wake else "0")
    log = folder / "server.log"
    with log.open("wb") as out:
        process = subprocess.Popen(argv, cwd=work, env=env, stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    _wait_ok(base + "/ok", process, log)
    assistant = next(iter(config["graphs"]))

    def open_session(client: Any) -> str:
        response = client.post("/threads", json={})
        response.raise_for_status()
        return str(response.json()["thread_id"])

    def turn(client: Any, thread: str, i: int) -> None:
        body = {"assistant_id": assistant,
                "input": {"messages": [{"role": "user", "content": workload.question(i)}]}}
        out = client.post(f"/threads/{thread}/runs/wait", json=body).json()
        reply = out["messages"][-1]
        assert reply["type"] == "ai" and reply["content"] == workload.ANSWER, reply

    name = "langgraph dev" + (", poll patched" if wake else "") + (
        f", --n-jobs-per-worker {jobs}" if jobs is not None else "")
    return Server(name, base, process, open_session, turn)


def start_phaseflow(folder: Path, *, synchronous: str = "FULL",
                    python: str = sys.executable) -> Server:
    """``phaseflow serve``'s application on an SQLite store in ``folder``
    (``bench_serve.py --serve``; at another ``synchronous`` this script's ``--serve``,
    which is the same with the store's setting changed), run by ``python``, in a session
    of its own."""
    port_file = folder / "port"
    log = folder / "server.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    store = str(folder / "served.db")
    if synchronous == "FULL":
        argv = [python, str(HERE / "bench_serve.py"), "--serve", str(port_file), store]
    else:
        argv = [python, __file__, "--serve", str(port_file), store, synchronous]
    with log.open("wb") as out:
        process = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    deadline = time.monotonic() + 60
    while not port_file.exists() or not port_file.read_text():
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"phaseflow's server did not start; see {log}:\n"
                             + log.read_text()[-3000:])
        time.sleep(0.05)
    base = f"http://127.0.0.1:{port_file.read_text()}"

    def open_session(client: Any) -> str:
        sid = uuid.uuid4().hex
        client.post("/v1/sessions", json={"id": sid}).raise_for_status()
        return sid

    def turn(client: Any, sid: str, i: int) -> None:
        out = client.post(f"/v1/sessions/{sid}/messages",
                          json={"text": workload.question(i)}).json()
        assert out["status"] == "completed" and out["reply"] == workload.ANSWER, out

    name = f"phaseflow serve, SQLite {synchronous}"
    if python != sys.executable:
        name += ", uvloop + httptools"
    return Server(name, base, process, open_session, turn)


def serve(port_file: str, store: str, synchronous: str) -> None:
    """The server process of ``phaseflow-normal``: ``bench_serve.serve`` with every
    ``SQLiteStore`` it makes opened at ``synchronous``."""
    from phaseflow.stores import sqlite

    class Store(sqlite.SQLiteStore):
        def __init__(self, path: str, **kwargs: Any) -> None:
            super().__init__(path, synchronous=synchronous, **kwargs)

    setattr(sqlite, "SQLiteStore", Store)  # noqa: B010 - read by bench_serve._agents
    bench_serve.serve(port_file, store)


def langgraph_python(command: str) -> str:
    """The interpreter of the ``langgraph`` script (its ``#!`` line)."""
    with open(command, "rb") as script:
        first = script.readline().decode().strip()
    return first[2:].split()[0] if first.startswith("#!") else sys.executable


def fsync_ms(folder: Path, n: int = 20) -> float:
    """The disk's sync time here: p50 of ``n`` fsyncs of a 4 KiB append."""
    path = folder / "fsync-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    times = []
    try:
        for _ in range(n):
            os.write(fd, b"x" * 4096)
            started = time.perf_counter()
            os.fsync(fd)
            times.append(time.perf_counter() - started)
    finally:
        os.close(fd)
        path.unlink()
    return statistics.median(times) * 1e3


# --- the client -----------------------------------------------------------------------


def lone(server: Server, sessions: int, turns: int = TURNS) -> tuple[list[float], float]:
    """Turn latencies of one client over ``sessions`` fresh sessions of ``turns`` turns,
    and the server's CPU seconds per turn over them."""
    import httpx

    times: list[float] = []
    with httpx.Client(base_url=server.base, timeout=120) as client:
        cpu0 = tree_cpu(server.process.pid)
        for _ in range(sessions):
            sid = server.open_session(client)
            for i in range(turns):
                started = time.perf_counter()
                server.turn(client, sid, i)
                times.append(time.perf_counter() - started)
        cpu = (tree_cpu(server.process.pid) - cpu0) / len(times)
    return times, cpu


def concurrent(server: Server, clients: int) -> tuple[float, float, float]:
    """Turns per second with ``clients`` sessions talking at once (a thread and a fresh
    session each, 20 turns), and the server's and the client's (this process's) CPU
    seconds per turn over the run: both share the machine's cores."""
    import httpx

    failures: list[BaseException] = []

    def talk() -> None:
        try:
            with httpx.Client(base_url=server.base, timeout=300) as client:
                sid = server.open_session(client)
                for i in range(TURNS):
                    server.turn(client, sid, i)
        except BaseException as exc:  # reported after the join
            failures.append(exc)

    threads = [threading.Thread(target=talk) for _ in range(clients)]
    cpu0, mine0 = tree_cpu(server.process.pid), time.process_time()
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    cpu, mine = tree_cpu(server.process.pid) - cpu0, time.process_time() - mine0
    if failures:
        raise SystemExit(f"{server.name}, {clients} sessions: {failures[0]!r}")
    turns = clients * TURNS
    return turns / elapsed, cpu / turns, mine / turns


# --- the run --------------------------------------------------------------------------


@dataclass
class Figures:
    """One server's figures over every round."""

    times: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    rate8: list[float] = field(default_factory=list)
    cpu8: list[float] = field(default_factory=list)
    client8: list[float] = field(default_factory=list)
    rate32: list[float] = field(default_factory=list)


VARIANTS: dict[str, Callable[[Path, str], Server]] = {
    "lg": lambda folder, cmd: start_langgraph(folder, cmd, wake=False, jobs=None),
    "lg-jobs10": lambda folder, cmd: start_langgraph(folder, cmd, wake=False, jobs=10),
    "lg-patched": lambda folder, cmd: start_langgraph(folder, cmd, wake=True, jobs=None),
    "phaseflow": lambda folder, cmd: start_phaseflow(folder),
    "phaseflow-normal": lambda folder, cmd: start_phaseflow(folder, synchronous="NORMAL"),
    "phaseflow-uvloop": lambda folder, cmd: start_phaseflow(folder,
                                                           python=langgraph_python(cmd)),
}


#: the servers of a run without ``--only`` (the others cost more time and are optional)
DEFAULT = ("lg", "lg-patched", "phaseflow", "phaseflow-normal")


def measure(key: str, command: str, sessions: int, wide: int, into: dict[str, Figures],
            names: dict[str, str]) -> None:
    """One round of one server: started in a temporary folder of its own (its store, its
    snapshots, its log), warmed up, measured, stopped, so no server runs while another
    is measured and none carries a previous round's state."""
    with tempfile.TemporaryDirectory(prefix=f"bench-{key}-") as tmp:
        server = VARIANTS[key](Path(tmp), command)
        names[key] = server.name
        try:
            lone(server, 1, 3)  # warm-up: imports, first-call caches
            figures = into[key]
            times, cpu = lone(server, sessions)
            figures.times += times
            figures.cpu.append(cpu)
            rate, cpu8, client8 = concurrent(server, 8)
            figures.rate8.append(rate)
            figures.cpu8.append(cpu8)
            figures.client8.append(client8)
            if wide:
                figures.rate32.append(concurrent(server, wide)[0])
        finally:
            server.stop()
    print(f"  {names[key]}: p50 {bench_serve._pct(times, 0.5) * 1e3:.1f} ms, "
          f"CPU {cpu * 1e3:.2f} ms/turn, 8 sessions {rate:.0f} turns/s", flush=True)


def versions(command: str) -> str:
    """The LangGraph packages of the interpreter behind ``command``, and whether that
    interpreter has uvloop and httptools (uvicorn uses them when present)."""
    python = langgraph_python(command)
    code = ("import importlib.metadata as m, importlib.util as u\n"
            "names = ['langgraph', 'langgraph-api', 'langgraph-cli', "
            "'langgraph-runtime-inmem', 'langchain-core', 'uvicorn']\n"
            "out = [f'{n} {m.version(n)}' for n in names]\n"
            "out += [f'{n}: ' + ('yes' if u.find_spec(n) else 'no') "
            "for n in ('uvloop', 'httptools')]\n"
            "print(', '.join(out))")
    found = subprocess.run([python, "-c", code], capture_output=True, text=True)
    return found.stdout.strip() or found.stderr.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--langgraph", default=shutil.which("langgraph"),
                        help="the `langgraph` command (default: the one on PATH)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sessions", type=int, default=1,
                        help="a lone client's sessions of 20 turns per round (default 1)")
    parser.add_argument("--wide", type=int, default=32,
                        help="the larger concurrency measured (0: none; default 32)")
    parser.add_argument("--only", default=",".join(DEFAULT),
                        help=f"the servers, among {', '.join(VARIANTS)} "
                             f"(default: {','.join(DEFAULT)})")
    parser.add_argument("--serve", nargs=3, metavar=("PORT_FILE", "STORE", "SYNC"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(*args.serve)
        return
    keys = [k for k in args.only.split(",") if k]
    unknown = [k for k in keys if k not in VARIANTS]
    if unknown:
        parser.error(f"unknown servers: {', '.join(unknown)}")
    if any(k.startswith("lg") or k.endswith("uvloop") for k in keys) and not args.langgraph:
        parser.error("no `langgraph` command: pip install 'langgraph-cli[inmem]' "
                     "and pass --langgraph")
    command = str(Path(args.langgraph).resolve()) if args.langgraph else ""
    figures = {k: Figures() for k in keys}
    names: dict[str, str] = {}
    started = time.time()
    disk = Path(tempfile.gettempdir())
    print(f"load average at the start: {os.getloadavg()}; an fsync here: "
          f"{fsync_ms(disk):.2f} ms (p50)", flush=True)
    for r in range(args.rounds):
        order = keys[r % len(keys):] + keys[:r % len(keys)]
        print(f"round {r + 1}/{args.rounds}", flush=True)
        for key in order:
            measure(key, command, args.sessions, args.wide, figures, names)
    print(f"load average at the end: {os.getloadavg()}; an fsync here: "
          f"{fsync_ms(disk):.2f} ms (p50); {time.time() - started:.0f} s")
    if command:
        print(f"LangGraph: {versions(command)}")
    print(f"\n{args.rounds} rounds; lone client: {args.sessions} x {TURNS} turns a round "
          "(percentiles over every round's turns); CPU: the server's process tree; "
          "turns/s and CPU: median of the rounds")
    wide = f" {args.wide} sessions turns/s |" if args.wide else ""
    print(f"| server | lone p50 ms | lone p95 ms | CPU ms/turn (lone) | 8 sessions "
          f"turns/s | CPU ms/turn (8) | client CPU ms/turn (8) |{wide}")
    print("|---|---|---|---|---|---|---|" + ("---|" if args.wide else ""))
    for key in keys:
        f = figures[key]
        row = (f"| {names[key]} | {bench_serve._pct(f.times, 0.5) * 1e3:.1f} | "
               f"{bench_serve._pct(f.times, 0.95) * 1e3:.1f} | "
               f"{statistics.median(f.cpu) * 1e3:.2f} | "
               f"{statistics.median(f.rate8):.0f} ({', '.join(f'{x:.0f}' for x in f.rate8)})"
               f" | {statistics.median(f.cpu8) * 1e3:.2f} | "
               f"{statistics.median(f.client8) * 1e3:.2f} |")
        if args.wide:
            row += f" {statistics.median(f.rate32):.0f} |"
        print(row)
    if "phaseflow" in figures:
        ours = statistics.median(figures["phaseflow"].rate8)
        for key in keys:
            if key.startswith("lg"):
                theirs = statistics.median(figures[key].rate8)
                print(f"phaseflow / {names[key]}, turns/s at 8 sessions: "
                      f"{ours / theirs:.2f}x (target >= 3x)")


if __name__ == "__main__":
    main()
