"""Durable turns per second with several sessions at once in one process, on one
``SQLiteStore`` (WAL, ``synchronous=FULL``): what SQLite's group commit buys (run by
hand: ``python benchmarks/bench_sqlite_concurrency.py``).

The workload is the session benchmark's turn (one user message; the scripted model
answers with two tool calls, then a text). ``--sessions`` conversations run at once as
asyncio tasks of one event loop, each ``--turns`` turns, on one store file; measured: the
turns per second over the whole run, and how many transactions SQLite committed per
turn (a trace of the store's connection counts its ``COMMIT`` statements: with group
commit, several sessions' commits share one). ``--repeat`` runs alternate the session
counts so a slow spell of the shared disk does not land on one count only.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_session as b

from phaseflow.api import load_workflow_text
from phaseflow.session import Agent
from phaseflow.stores.sqlite import SQLiteStore


async def run(sessions: int, turns: int, folder: Path) -> tuple[float, float]:
    """Turns per second and transactions per turn, ``sessions`` conversations at once."""
    store = SQLiteStore(folder / f"s{sessions}-{time.monotonic_ns()}.db")
    agent = Agent(load_workflow_text(b.WORKFLOW), b.ScriptProvider(),
                  tools=[b.lookup_customer, b.find_order], store=store, system=b.SYSTEM)
    opened = [await agent.session(f"c{k}") for k in range(sessions)]
    await opened[0].reply(b.question(0))  # warm: the file, the schema, the caches
    commits = 0

    def count(statement: str) -> None:
        nonlocal commits
        if statement.startswith("COMMIT"):
            commits += 1

    store._connection().set_trace_callback(count)

    async def talk(session: object, k: int) -> None:
        for i in range(turns):
            await session.reply(b.question(k * 1000 + i))  # type: ignore[attr-defined]

    started = time.perf_counter()
    await asyncio.gather(*(talk(s, k) for k, s in enumerate(opened)))
    elapsed = time.perf_counter() - started
    store.close()
    done = sessions * turns
    return done / elapsed, commits / done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", default="1,8,32")
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    counts = [int(c) for c in args.sessions.split(",")]
    results: dict[int, list[tuple[float, float]]] = {c: [] for c in counts}
    with tempfile.TemporaryDirectory() as folder:
        for r in range(args.repeat):
            for c in counts if r % 2 == 0 else reversed(counts):
                results[c].append(asyncio.run(run(c, args.turns, Path(folder))))
    print("| sessions at once | turns/s | SQLite transactions a turn |")
    print("|---|---|---|")
    for c in counts:
        rates = " / ".join(f"{t:.0f}" for t, _ in results[c])
        txs = " / ".join(f"{x:.2f}" for _, x in results[c])
        print(f"| {c} | {rates} | {txs} |")


if __name__ == "__main__":
    main()
