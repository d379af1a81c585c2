"""Reading a long tool output back (run by hand: ``python benchmarks/bench_read_output.py``).

A 10 MB capture of one session, on SQLite (a file) and in memory. Measured, interleaved
and repeated (the median of ``--rounds``): ``read_output`` of 1 MB from offset 9 MB, of
1 MB from offset 0, and of 64 KiB from offset 9 MB, against reading the whole capture
(``get_capture``). A read is a byte range read as a range (SQLite's incremental blob
I/O), so its cost follows the bytes read, not where they are or how large the capture
is: the 1 MB read at 9 MB costs what the 1 MB read at 0 costs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

MB = 1_000_000


async def measure(store: Any, rounds: int) -> dict[str, float]:
    from phaseflow.session.outputs import read_output

    data = os.urandom(10 * MB)
    ref = await store.put_capture(data, session_id="bench")
    cases = {
        "1 MB at 9 MB": lambda: read_output(store, "bench", ref, 9 * MB, MB),
        "1 MB at 0": lambda: read_output(store, "bench", ref, 0, MB),
        "64 KiB at 9 MB": lambda: read_output(store, "bench", ref, 9 * MB, 65536),
        "whole (get_capture)": lambda: store.get_capture(ref),
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, read in cases.items():  # interleaved: the same conditions for each
            started = time.perf_counter()
            await read()
            times[name].append(time.perf_counter() - started)
    return {name: statistics.median(t) * 1000 for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    from phaseflow.stores import MemoryStore, SQLiteStore

    with tempfile.TemporaryDirectory() as folder:
        results = {
            "sqlite": asyncio.run(measure(SQLiteStore(Path(folder) / "b.db"), args.rounds)),
            "memory": asyncio.run(measure(MemoryStore(), args.rounds)),
        }
    print("| store | 1 MB at 9 MB (ms) | 1 MB at 0 (ms) | 64 KiB at 9 MB (ms) "
          "| whole 10 MB (ms) | at 9 MB / at 0 |")
    print("|---|---|---|---|---|---|")
    for kind, r in results.items():
        print(f"| {kind} | {r['1 MB at 9 MB']:.2f} | {r['1 MB at 0']:.2f} | "
              f"{r['64 KiB at 9 MB']:.3f} | {r['whole (get_capture)']:.2f} | "
              f"{r['1 MB at 9 MB'] / r['1 MB at 0']:.2f} |")


if __name__ == "__main__":
    main()
