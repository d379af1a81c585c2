"""phaseflow's durable sessions on PostgreSQL under load: sessions per second with 1, 2
and 4 worker processes, and the latency of a turn meanwhile (run by hand:
``python benchmarks/bench_throughput.py``).

The workload is ``bench_session_durable.py``'s turn (one user message; the scripted
model answers with two tool calls, then a text; fresh call ids), on phaseflow's
``PostgresStore`` (its defaults: a pool of 4, connection checks on) against one private
cluster started here (``tests/support/pgserver.py``, ``durable=True``: the server's
defaults, ``fsync`` and ``synchronous_commit`` on; set ``PHASEFLOW_PG_BIN`` to the
binaries' directory), one database.

A run with W workers: W processes (``multiprocessing``, spawned), each with its own
``Agent`` and store, share ``--sessions`` conversations of ``--turns`` turns each (every
worker its own ``sessions / W``; a worker runs ``--concurrency`` of its conversations at
a time, one after another by default). Each worker first opens its store and runs one
warm-up conversation, then all start together; measured:

* sessions and turns per second: all the sessions over the time from the common start
  to the last worker's end;
* a turn's latency (wall, ``Session.reply`` of one message), median and p95 over every
  turn of every worker;
* CPU per turn: the workers' (``time.process_time`` of each), the server's (``/proc`` of
  the postmaster and its children);
* WAL syncs and transactions per turn (``pg_stat_wal.wal_sync``,
  ``pg_stat_database.xact_commit``, read once the workers' backends are gone): under
  load the server flushes the WAL of several commits at once (group commit).

The worker counts run in the order ``--workers`` gives, then reversed, ``--repeat``
times (default 1,2,4,4,2,1), so a slow spell of the shared disk does not land on one
count only. The machine this was written on has 2 cores: 4 workers (plus the server's
backends) saturate them, so the 4-worker row measures an overloaded machine.

Flags: ``--workers 1,2,4``, ``--sessions 192`` (in all, divided among the workers),
``--turns 5`` (per session), ``--concurrency 1`` (a worker's sessions at a time),
``--repeat 1``, ``--pool-size 4`` (each worker's ``PostgresStore``).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

DB = "throughput"


async def _worker(dsn: str, w: int, run: int, sessions: int, turns: int, concurrency: int,
                  pool_size: int, ready: Any, start: Any) -> dict[str, Any]:
    from bench_session import (
        SYSTEM,
        WORKFLOW,
        ScriptProvider,
        find_order,
        lookup_customer,
        question,
    )

    from phaseflow.api import load_workflow_text
    from phaseflow.session import Agent
    from phaseflow.stores.postgres import PostgresStore

    store = PostgresStore(dsn, pool_size=pool_size)
    await store.open()
    agent = Agent(load_workflow_text(WORKFLOW), ScriptProvider(),
                  tools=[lookup_customer, find_order], store=store, system=SYSTEM)
    warm = await agent.session(f"warm-r{run}-w{w}")
    for i in range(3):
        await warm.reply(question(i))
    ready.put(w)
    start.wait()  # every worker's store is open and warm: go together
    latencies: list[float] = []
    todo = list(range(sessions))
    c0, t0 = time.process_time(), time.monotonic()

    async def lane() -> None:
        while todo:
            s = todo.pop()
            session = await agent.session(f"r{run}-w{w}-s{s}")
            for i in range(turns):
                a = time.monotonic()
                await session.reply(question(i))
                latencies.append(time.monotonic() - a)

    await asyncio.gather(*(lane() for _ in range(concurrency)))
    t1, c1 = time.monotonic(), time.process_time()
    await store.close()
    return {"start": t0, "end": t1, "cpu": c1 - c0, "latencies": latencies}


def worker(dsn: str, w: int, run: int, sessions: int, turns: int, concurrency: int,
           pool_size: int, ready: Any, start: Any, out: Any) -> None:
    """One worker process: its sessions, its measurements put on ``out``."""
    out.put(asyncio.run(_worker(dsn, w, run, sessions, turns, concurrency, pool_size,
                                ready, start)))


def run(cluster: Any, dsn: str, workers: int, run_no: int, sessions: int, turns: int,
        concurrency: int, pool_size: int) -> dict[str, float]:
    from bench_session_durable import _pg_counters, server_cpu

    ctx = mp.get_context("spawn")
    ready, out = ctx.Queue(), ctx.Queue()
    start = ctx.Event()
    share = [sessions // workers + (1 if i < sessions % workers else 0) for i in range(workers)]
    before = _pg_counters(cluster.dsn, DB)
    procs = [ctx.Process(target=worker, args=(dsn, w, run_no, share[w], turns, concurrency,
                                              pool_size, ready, start, out))
             for w in range(workers)]
    for p in procs:
        p.start()
    for _ in procs:
        ready.get(timeout=120)
    s0 = server_cpu(cluster)
    begin = time.monotonic()
    start.set()
    results = [out.get(timeout=1800) for _ in procs]
    s1 = server_cpu(cluster)
    for p in procs:
        p.join()
        if p.exitcode != 0:
            raise SystemExit(f"a worker failed ({p.exitcode})")
    after = _pg_counters(cluster.dsn, DB)
    end = max(r["end"] for r in results)
    lat = sorted(x for r in results for x in r["latencies"])
    n_turns = len(lat)
    elapsed = end - begin
    xact, wal_sync = (after[0] - before[0]), (after[1] - before[1])
    # the warm-up's 3 turns per worker are in the counters too: taken out at the rate
    # of the measured turns (they ran before the common start)
    share_measured = n_turns / (n_turns + 3 * workers)
    return {
        "workers": workers, "sessions": sessions, "turns": n_turns, "elapsed": elapsed,
        "sessions_s": sessions / elapsed, "turns_s": n_turns / elapsed,
        "p50": statistics.median(lat), "p95": statistics.quantiles(lat, n=20)[18],
        "max": lat[-1], "cpu_turn": sum(r["cpu"] for r in results) / n_turns,
        "server_turn": (s1 - s0) / n_turns,
        "wal_sync_turn": wal_sync * share_measured / n_turns,
        "xact_turn": xact * share_measured / n_turns,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--sessions", type=int, default=192, help="in all, per run")
    parser.add_argument("--turns", type=int, default=5, help="per session")
    parser.add_argument("--concurrency", type=int, default=1,
                        help="a worker's sessions at a time")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--pool-size", type=int, default=4)
    args = parser.parse_args()
    counts = [int(x) for x in args.workers.split(",")]
    order = (counts + counts[::-1]) * args.repeat

    import psycopg

    from tests.support import pgserver

    cluster = pgserver.start(durable=True)
    try:
        with psycopg.connect(cluster.dsn, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {DB}")
            version = conn.execute("SHOW server_version").fetchone()
        dsn = cluster.dsn.replace("dbname=phaseflow", f"dbname={DB}")
        print(f"PostgreSQL {version[0] if version else '?'} on port {cluster.port}; "
              f"{args.sessions} sessions of {args.turns} turns per run, concurrency "
              f"{args.concurrency} per worker, pool {args.pool_size}; order {order}",
              flush=True)
        rows = []
        for i, w in enumerate(order):
            row = run(cluster, dsn, w, i, args.sessions, args.turns, args.concurrency,
                      args.pool_size)
            rows.append(row)
            print(f"  {w} workers: {row['sessions_s']:.1f} sessions/s, {row['turns_s']:.0f} "
                  f"turns/s, turn p50 {row['p50'] * 1e3:.1f} ms p95 {row['p95'] * 1e3:.1f} ms",
                  flush=True)
    finally:
        cluster.stop()
    print("\n| workers | runs | sessions/s | turns/s | turn p50 | turn p95 | worker CPU a turn |"
          " server CPU a turn | WAL syncs a turn | transactions a turn |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for w in counts:
        mine = [r for r in rows if r["workers"] == w]

        def med(key: str, rows: list[dict[str, float]] = mine) -> float:
            return statistics.median(r[key] for r in rows)

        spread = "/".join(f"{r['sessions_s']:.1f}" for r in mine)
        print(f"| {w} | {len(mine)} | {med('sessions_s'):.1f} ({spread}) | "
              f"{med('turns_s'):.0f} | {med('p50') * 1e3:.1f} ms | {med('p95') * 1e3:.1f} ms | "
              f"{med('cpu_turn') * 1e3:.2f} ms | {med('server_turn') * 1e3:.2f} ms | "
              f"{med('wal_sync_turn'):.2f} | {med('xact_turn'):.1f} |")


if __name__ == "__main__":
    main()
