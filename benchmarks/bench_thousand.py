"""A thousand conversations on one worker, each waiting seconds on its model (run by hand:
``python benchmarks/bench_thousand.py --conversations 1000``).

The model is a loopback OpenAI-compatible server written here (uvicorn + starlette, in a
process of its own): every ``POST /v1/chat/completions`` streams a reply of ``--chunks``
text chunks spread over ``--seconds`` (2 s), the first one at once. ``phaseflow serve``
(``--workers 1``, an SQLite file, or ``--pg`` a private PostgreSQL cluster with
``--workers 2``; ``--store-pool N`` sizes each worker's PostgreSQL pool) serves a
one-phase workflow without tools through ``--provider openai`` on it. After one
warm-up turn (the first imports the SDK), N clients (``httpx``, one connection each)
each create a session; the turns are sent with ``Accept: text/event-stream`` and their
events read:

* burst (the default): all N at once, ``--rounds`` times (each round once the previous
  one has ended);
* ``--steady SECONDS``: each conversation sends its next message a think time after its
  previous turn ended (``--think 5,15``: uniform between 5 and 15 s; the first after a
  random part of it), for SECONDS; the turns still running then are waited for.

Reported:

* the latency the server adds to a turn: the client's time from sending the message to
  ``turn_finished``, minus the model's ``--seconds`` (p50, p99);
* the latency it adds to the first streamed token: the client's time to the first
  ``text_delta`` (the model sends its first chunk at once);
* CPU per turn: the server processes' user + system CPU (``/proc``) over the turns,
  divided by the turns (and, to see where the machine's cores went, the CPU the model
  server and this process's clients used meanwhile);
* memory: the server's resident memory (RSS, all its processes) once the sessions are
  made (after the warm-up turn), the most while turns wait on the model (the growth per
  open conversation), and 2 s after the last turn ended, every session kept by the
  worker (the growth per idle kept session over the server's after the warm-up turn);
* open files: the most the server's processes held at once (sampled every 0.25 s);
* errors, by kind (where it breaks first); and the machine's load average.

``BENCH_THOUSAND_PROFILE=FILE`` runs the server (one worker) under cProfile, written to
FILE when it stops (``python -m pstats FILE``); or attach ``py-spy record --pid PID``
to the worker, whose pid is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx

from tests.support import serve_server
from tests.support.serve_server import start

WORKFLOW = """\
phaseflow: 1
name: waiting-desk
initial: talk
state:
  closed: {type: boolean, default: false}
phases:
  talk:
    goal: Answer the user.
    instructions: Answer in one sentence.
    transitions:
      - {to: done, when: "state.closed"}
  done:
    goal: Goodbye.
    terminal: true
"""

MODEL_SERVER = textwrap.dedent('''
    import asyncio, json, sys, time
    import uvicorn
    from starlette.applications import Starlette
    from starlette.responses import StreamingResponse
    from starlette.routing import Route

    SECONDS, CHUNKS = float(sys.argv[2]), int(sys.argv[3])

    def chunk(delta, finish=None):
        return "data: " + json.dumps({"id": "c", "object": "chat.completion.chunk",
            "created": 0, "model": "slow", "choices": [{"index": 0, "delta": delta,
            "finish_reason": finish}]}) + "\\n\\n"

    async def completions(request):
        await request.body()
        async def body():
            yield chunk({"role": "assistant", "content": "Word0 "})
            for i in range(1, CHUNKS):
                await asyncio.sleep(SECONDS / (CHUNKS - 1))
                yield chunk({"content": f"word{i} "})
            yield chunk({}, "stop")
            yield "data: [DONE]\\n\\n"
        return StreamingResponse(body(), media_type="text/event-stream")

    app = Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning",
                backlog=4096, timeout_keep_alive=60)
''')


def _pids(root: int) -> list[int]:
    """``root`` and its descendants (a serve with workers is several processes)."""
    out = [root]
    for pid in out:
        try:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            continue
        out.extend(int(c) for c in children)
    return out


def _cpu(root: int) -> float:
    total = 0.0
    for pid in _pids(root):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def _rss(root: int) -> int:
    total = 0
    for pid in _pids(root):
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            continue
    return total


def _fds(root: int) -> int:
    total = 0
    for pid in _pids(root):
        try:
            total += len(os.listdir(f"/proc/{pid}/fd"))
        except OSError:
            continue
    return total


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def _kind(error: str) -> str:
    """An error's kind: an HTTP status and problem code, or the exception's name."""
    return error.split(":", 1)[0] if not error.startswith("HTTP") else error


async def _turn(client: httpx.AsyncClient, sid: str, errors: list[str]
                ) -> tuple[float, float] | None:
    """(seconds to the first text delta, seconds to turn_finished), or None on error."""
    t0 = time.perf_counter()
    first: float | None = None
    try:
        async with client.stream("POST", f"/v1/sessions/{sid}/messages",
                                 json={"text": "Hello"},
                                 headers={"Accept": "text/event-stream"}) as response:
            if response.status_code != 200:
                body = await response.aread()
                try:
                    code = json.loads(body).get("code", "")
                except ValueError:
                    code = body[:60].decode(errors="replace")
                errors.append(f"HTTP {response.status_code} {code}")
                return None
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                event = json.loads(line[5:])
                kind = event.get("type")
                if kind == "text_delta" and first is None:
                    first = time.perf_counter() - t0
                if kind == "error":
                    errors.append(f"turn error: {event.get('code', event.get('message'))}")
                if kind == "turn_finished":
                    if event.get("status") != "completed":
                        errors.append(f"turn {event.get('status')}")
                        return None
                    done = time.perf_counter() - t0
                    return (first if first is not None else done), done
    except Exception as exc:  # where it breaks: named, counted
        errors.append(f"{type(exc).__name__}: {exc}"[:200])
        return None
    errors.append("the stream ended without turn_finished")
    return None


class _Sampler:
    """The server's open files and resident memory, sampled every 0.25 s: the most."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.fds = 0
        self.rss = 0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            self.fds = max(self.fds, _fds(self.pid))
            self.rss = max(self.rss, _rss(self.pid))
            await asyncio.sleep(0.25)

    def __enter__(self) -> _Sampler:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()


async def _sessions(client: httpx.AsyncClient, n: int, errors: list[str]) -> list[str]:
    ids: list[str] = []
    for made in range(0, n, 50):  # the sessions, 50 at a time
        batch = [client.post("/v1/sessions", json={}) for _ in range(min(50, n - made))]
        for response in await asyncio.gather(*batch, return_exceptions=True):
            if isinstance(response, BaseException) or response.status_code != 201:
                errors.append(f"create: {response}"[:200])
            else:
                ids.append(response.json()["id"])
    return ids


async def _run(base: str, n: int, seconds: float, serve_pid: int, model_pid: int, *,
               rounds: int, steady: float, think: tuple[float, float]) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=n + 10, max_keepalive_connections=n + 10)
    errors: list[str] = []
    results: list[tuple[float, float] | None] = []
    async with httpx.AsyncClient(base_url=base, timeout=300, limits=limits) as client:
        # a warm-up turn: the first one imports the SDK and opens its client
        warm = await client.post("/v1/sessions", json={})
        await _turn(client, warm.json()["id"], errors)
        await asyncio.sleep(1)
        rss_warm = _rss(serve_pid)
        ids = await _sessions(client, n, errors)
        await asyncio.sleep(1)
        rss_before, cpu_before = _rss(serve_pid), _cpu(serve_pid)
        model_before, client_before = _cpu(model_pid), time.process_time()
        load_before = os.getloadavg()
        t0 = time.perf_counter()
        with _Sampler(serve_pid) as sampler:
            if steady:
                until = t0 + steady
                rng = random.Random(7)

                async def converse(sid: str) -> None:
                    await asyncio.sleep(rng.uniform(0, think[1]))
                    while time.perf_counter() < until:
                        results.append(await _turn(client, sid, errors))
                        await asyncio.sleep(rng.uniform(*think))

                await asyncio.gather(*(converse(sid) for sid in ids))
            else:
                for _ in range(rounds):
                    results += await asyncio.gather(*(_turn(client, sid, errors)
                                                      for sid in ids))
        wall = time.perf_counter() - t0
        cpu = _cpu(serve_pid) - cpu_before
        model_cpu = _cpu(model_pid) - model_before
        client_cpu = time.process_time() - client_before
        load_after = os.getloadavg()
        await asyncio.sleep(2)
        rss_idle = _rss(serve_pid)
    done = [r for r in results if r is not None]
    return {"sessions": len(ids), "turns": len(done), "errors": errors, "wall": wall,
            "first": [f for f, _ in done], "total": [t - seconds for _, t in done],
            "cpu": cpu, "model_cpu": model_cpu, "client_cpu": client_cpu,
            "rss_before": rss_before, "rss_open": sampler.rss,
            "rss_idle": rss_idle, "rss_warm": rss_warm, "fds_open": sampler.fds,
            "load": (load_before[0], load_after[0])}


def _report(label: str, n: int, r: dict[str, Any], rss_empty: int) -> None:
    print(f"\n{label}: {n} conversations, {r['sessions']} sessions made, {r['turns']} turns "
          f"completed in {r['wall']:.1f} s ({r['turns'] / max(r['wall'], 1e-9):.1f} a "
          f"second); load average {r['load'][0]:.1f} at the start, {r['load'][1]:.1f} at "
          "the end")
    if r["total"]:
        print(f"  added to a turn: p50 {_pct(r['total'], 50) * 1000:.0f} ms, "
              f"p99 {_pct(r['total'], 99) * 1000:.0f} ms")
        print(f"  first token: p50 {_pct(r['first'], 50) * 1000:.1f} ms, "
              f"p99 {_pct(r['first'], 99) * 1000:.1f} ms")
        print(f"  CPU per turn: {r['cpu'] / max(1, r['turns']) * 1000:.2f} ms "
              f"({r['cpu']:.1f} s over {r['wall']:.0f} s; meanwhile the model server used "
              f"{r['model_cpu']:.1f} s and the clients {r['client_cpu']:.1f} s)")
    print(f"  memory: empty {rss_empty / 1e6:.1f} MB, after the warm-up turn "
          f"{r['rss_warm'] / 1e6:.1f} MB, {r['sessions']} sessions made "
          f"{r['rss_before'] / 1e6:.1f} MB, turns open (most) {r['rss_open'] / 1e6:.1f} MB "
          f"({(r['rss_open'] - r['rss_before']) / max(1, r['sessions']) / 1e3:.1f} KB per "
          f"open conversation), after {r['rss_idle'] / 1e6:.1f} MB "
          f"({(r['rss_idle'] - r['rss_warm']) / max(1, r['sessions']) / 1e3:.1f} KB per idle "
          f"kept session)")
    print(f"  open files (most): {r['fds_open']}")
    counted: dict[str, int] = {}
    for e in r["errors"]:
        counted[_kind(e)] = counted.get(_kind(e), 0) + 1
    for kind, count in sorted(counted.items(), key=lambda kv: -kv[1])[:8]:
        example = next(e for e in r["errors"] if _kind(e) == kind)
        print(f"  error x{count}: {kind} (e.g. {example[:120]})")
    if not r["errors"]:
        print("  no error")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--chunks", type=int, default=20)
    parser.add_argument("--pg", action="store_true",
                        help="PostgreSQL (PHASEFLOW_PG_BIN) with --workers 2 instead of SQLite")
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--store-pool", type=int, default=None,
                        help="each worker's PostgreSQL pool (serve --store-pool)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="burst: how many times all N send a turn at once")
    parser.add_argument("--steady", type=float, default=0.0, metavar="SECONDS",
                        help="steady mode: each conversation sends its next message a "
                        "think time after its turn, for SECONDS")
    parser.add_argument("--think", default="5,15", metavar="LOW,HIGH",
                        help="steady mode: the think time, uniform in seconds")
    parser.add_argument("--dir", default=None,
                        help="where the SQLite file goes (e.g. /dev/shm: no disk sync)")
    args = parser.parse_args()
    profile = os.environ.get("BENCH_THOUSAND_PROFILE")
    if profile:  # where the server's CPU goes: cProfile over it, written when it stops
        serve_server.PHASEFLOW = (sys.executable, "-m", "cProfile", "-o", profile,
                                  "-m", "phaseflow.cli.main")
    folder = Path(tempfile.mkdtemp(prefix="bench-thousand-", dir=args.dir))
    (folder / "wf.yaml").write_text(WORKFLOW)
    (folder / "model.py").write_text(MODEL_SERVER)
    port = _free_port()
    model = subprocess.Popen([sys.executable, str(folder / "model.py"), str(port),
                              str(args.seconds), str(args.chunks)])
    cluster = None
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json={}, timeout=5)
                break
            except httpx.HTTPError:
                time.sleep(0.2)
        env = dict(os.environ, OPENAI_API_KEY="none")
        if args.pg:
            from tests.support import pgserver

            cluster = pgserver.start()
            store, workers = cluster.dsn, args.workers or 2
        else:
            store, workers = str(folder / "sessions.db"), args.workers or 1
        pool = [] if args.store_pool is None else ["--store-pool", str(args.store_pool)]
        server = start([str(folder / "wf.yaml"), "--store", str(store), "--provider", "openai",
                        "--base-url", f"http://127.0.0.1:{port}/v1", "--model", "slow",
                        "--workers", str(workers), *pool], folder / "server.log", env=env,
                       timeout=120)
        try:
            time.sleep(1)
            rss_empty = _rss(server.process.pid)
            base = server.base
            print(f"serve: pid {server.process.pid} (workers: "
                  f"{_pids(server.process.pid)[1:] or 'itself'})", flush=True)
            low, high = (float(x) for x in args.think.split(","))
            result = asyncio.run(_run(base, args.conversations, args.seconds,
                                      server.process.pid, model.pid, rounds=args.rounds,
                                      steady=args.steady, think=(low, high)))
            mode = (f"steady {args.steady:g} s, think {args.think} s" if args.steady
                    else f"burst x{args.rounds}")
            label = (f"{'PostgreSQL' if args.pg else 'SQLite'}, {workers} worker(s)"
                     f"{'' if args.store_pool is None else f', pool {args.store_pool}'}, "
                     f"{mode}")
            _report(label, args.conversations, result, rss_empty)
        finally:
            server.process.terminate()
            server.process.wait(30)
    finally:
        model.terminate()
        model.wait(10)
        if cluster is not None:
            cluster.stop()


if __name__ == "__main__":
    main()
