"""What the steering read costs a turn that no other worker steers (run by hand:
``python benchmarks/bench_steer.py --before DIR``).

A running turn looks at the store's queue between two steps when the store's reads are
local (SQLite, memory): the messages another worker stored for it (``busy=steer``). This
measures a turn's CPU (``time.process_time``) with ``bench_session.py``'s workload (two
tool calls and a reply a turn), 60 turns after 10 of warm-up, in memory and on SQLite (a
file), for this checkout and for the checkout in ``DIR`` (the code before the change,
e.g. ``git archive <commit> | tar -x -C DIR``), alternating, each run a fresh process;
the median of ``--runs``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


async def _child(store: str, warm: int, turns: int) -> float:
    # phaseflow first, from PYTHONPATH (bench_session puts this checkout on sys.path)
    from phaseflow.api import load_workflow_text
    from phaseflow.session import Agent
    from phaseflow.stores import MemoryStore, SQLiteStore

    sys.path.insert(0, str(HERE))
    from bench_session import (  # type: ignore[import-not-found]
        SYSTEM,
        WORKFLOW,
        ScriptProvider,
        find_order,
        lookup_customer,
        question,
    )

    with tempfile.TemporaryDirectory() as tmp:
        kept = MemoryStore() if store == "memory" else SQLiteStore(Path(tmp) / "s.db")
        agent = Agent(load_workflow_text(WORKFLOW), ScriptProvider(),
                      tools=[lookup_customer, find_order], store=kept, system=SYSTEM)
        session = await agent.session("s")
        for i in range(warm):
            await session.reply(question(i))
        c0 = time.process_time()
        for i in range(warm, warm + turns):
            await session.reply(question(i))
        cpu = (time.process_time() - c0) / turns
        if os.environ.get("BENCH_STEER_WHERE"):
            import phaseflow

            print(phaseflow.__file__, file=sys.stderr)
        return cpu


def _run(tree: Path, store: str) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, __file__, "--child", store], env=env, cwd=tree,
                         capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--before", type=Path, help="a checkout of the code before")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(asyncio.run(_child(args.child, 10, 60)))
        return
    if args.before is None:
        parser.error("--before DIR is required")
    print("store    before (ms/turn)  after (ms/turn)  after/before")
    for store in ("memory", "sqlite"):
        before: list[float] = []
        after: list[float] = []
        for _ in range(args.runs):
            before.append(_run(args.before.resolve(), store))
            after.append(_run(ROOT, store))
        b, a = statistics.median(before), statistics.median(after)
        print(f"{store:8} {b * 1000:16.3f} {a * 1000:16.3f} {a / b:13.2f}")


if __name__ == "__main__":
    main()
