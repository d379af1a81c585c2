"""The cache figure of benchmarks/bench_cache.py computed from the requests alone (no
server): over a 40-turn, 4-phase conversation whose state changes in most turns, the
characters each request adds after the longest common prefix with the previous one."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_cache


def _figures(layout: str) -> tuple[int, float]:
    recorded = asyncio.run(bench_cache.converse(layout))
    uncached = bench_cache.uncached_chars(recorded)
    _, _, ratio = bench_cache.targets(bench_cache.per_turn(recorded, uncached))
    return sum(uncached), ratio


def test_the_uncached_part_of_a_request_stays_flat_as_the_conversation_grows() -> None:
    before, before_growth = _figures("system")
    after, growth = _figures("end")
    every, every_growth = _figures("end+workflow")
    # one system message rewritten at every state change: the whole history again
    assert before_growth > 4
    # the targets of the issue: the last 5 turns at most 1.5x turns 3-5, and the whole
    # conversation at most 0.3x of the single-system-message layout
    assert growth <= 1.5 and every_growth <= 1.5
    assert after <= 0.3 * before
    assert every <= after  # no tool definitions re-sent at the phase changes
