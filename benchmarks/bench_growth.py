"""How a phaseflow turn's cost grows with the conversation, out to 4,000 turns
(run by hand: ``python benchmarks/bench_growth.py``).

One conversation of ``bench_session.py``'s workload (a message, two tool calls, a text
reply; ``MemoryStore``), phaseflow alone: the peers' turns grow 3-20x by 500 turns
already (``bench_session.py``), so taking them to 4,000 would measure nothing new and
take hours. At each history length the CPU time (``time.process_time``) of ``--block``
consecutive turns is taken ``--blocks`` times, back to back; the figure is the median
block's CPU per turn, and the growth is each figure against the first. The garbage
collector stays on, as in a host's process.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_session import PhaseflowConversation, question


async def measure(points: list[int], block: int, blocks: int) -> list[tuple[int, float]]:
    conv = await PhaseflowConversation.open("growth")
    done = 0
    out: list[tuple[int, float]] = []
    for point in points:
        while done < point:
            await conv.turn(question(done))
            done += 1
        per_turn: list[float] = []
        for _ in range(blocks):
            start = time.process_time()
            for _ in range(block):
                await conv.turn(question(done))
                done += 1
            per_turn.append((time.process_time() - start) / block)
        out.append((point, statistics.median(per_turn)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--points", default="20,500,1000,2000,4000",
                        help="history lengths (turns) to measure at, ascending")
    parser.add_argument("--block", type=int, default=10, help="turns per timed block")
    parser.add_argument("--blocks", type=int, default=5, help="timed blocks per point")
    args = parser.parse_args()
    points = sorted(int(p) for p in args.points.split(","))
    figures = asyncio.run(measure(points, args.block, args.blocks))
    first = figures[0][1]
    print("| history (turns) | CPU per turn | growth |")
    print("|---|---|---|")
    for point, cpu in figures:
        print(f"| {point:,} | {cpu * 1e3:.3f} ms | {cpu / first:.2f} |")


if __name__ == "__main__":
    main()
