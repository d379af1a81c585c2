"""History compaction over a long conversation (run by hand:
``python benchmarks/bench_compaction.py``).

The session benchmark's workload (``bench_session.py``: two tool calls and a reply a
turn, a scripted model that costs O(1) a request) for 2,000 turns, with
``Agent(max_history_tokens=4000)``. The model reports usage as 4 characters a token of
the request it got (so the session's ratio is the documented estimate) and answers a
compaction request with a short summary of its own. Measured per window of 200 turns:
CPU per turn (``time.process_time``), the largest history a turn request carried (in
those tokens), the compactions made, and on SQLite (WAL, FULL) the file's size: flat CPU,
bounded requests and a store that grows linearly are what compaction promises.
``--turns``, ``--budget``, ``--window`` change the run; ``--store memory|sqlite|both``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_session import (
    ANSWER,
    SYSTEM,
    WORKFLOW,
    ScriptProvider,
    find_order,
    lookup_customer,
    question,
)


def chars(request: Any) -> tuple[int, int]:
    """(the request's characters as a provider counts its input: system, tools and
    history; the history's alone)."""
    from phaseflow.session.compaction import history_chars

    history = history_chars(request.history)
    tools = sum(len(t.name) + len(t.description) + len(str(t.parameters))
                for t in request.tools)
    return len(request.system) + tools + history, history


class CountingProvider(ScriptProvider):
    """The scripted model, with usage as 4 characters a token of each request, and a
    short summary for a compaction request."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0
        self.compactions = 0

    async def stream(self, request: Any) -> AsyncIterator[Any]:
        from phaseflow.providers.protocol import StreamEnd, TextDelta, Usage

        if request.purpose == "compaction":
            self.compactions += 1
            text = (f"The customer (Ada, {len(request.history[0].content)} characters of "
                    "conversation) keeps asking where order O-9 is; it shipped Monday.")
            yield TextDelta(text)
            yield Usage(chars(request)[0] // 4, len(text) // 4)
            yield StreamEnd("end_turn")
            return
        size, history = chars(request)
        self.largest = max(self.largest, history // 4)
        async for item in super().stream(request):
            yield Usage(size // 4, 20) if type(item).__name__ == "Usage" else item


async def run(store_kind: str, turns: int, budget: int, window: int) -> list[dict[str, Any]]:
    from phaseflow.api import load_workflow_text
    from phaseflow.session import Agent
    from phaseflow.stores import MemoryStore, SQLiteStore

    folder = tempfile.mkdtemp(prefix="pf-compaction-")
    path = os.path.join(folder, "s.db")
    store: Any = MemoryStore() if store_kind == "memory" else SQLiteStore(path)
    provider = CountingProvider()
    agent = Agent(load_workflow_text(WORKFLOW), provider, tools=[lookup_customer, find_order],
                  store=store, system=SYSTEM, max_history_tokens=budget)
    session = await agent.session("long")
    rows: list[dict[str, Any]] = []
    for start in range(0, turns, window):
        provider.largest = 0
        before = provider.compactions
        cpu = time.process_time()
        for i in range(start, start + window):
            reply = await session.reply(question(i))
            if reply != ANSWER:
                raise SystemExit(f"unexpected reply {reply!r}")
        cpu = time.process_time() - cpu
        rows.append({
            "turns": f"{start + 1}-{start + window}",
            "cpu_ms": 1000 * cpu / window,
            "largest": provider.largest,
            "compactions": provider.compactions - before,
            "bytes": os.path.getsize(path) + (os.path.getsize(path + "-wal")
                                              if os.path.exists(path + "-wal") else 0)
            if store_kind == "sqlite" else 0,
            "transcript": len(session.transcript),
            "history": len(session.history),
        })
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--budget", type=int, default=4000)
    parser.add_argument("--window", type=int, default=200)
    parser.add_argument("--store", choices=("memory", "sqlite", "both"), default="both")
    args = parser.parse_args()
    kinds = ("memory", "sqlite") if args.store == "both" else (args.store,)
    for kind in kinds:
        rows = asyncio.run(run(kind, args.turns, args.budget, args.window))
        print(f"\n{kind}, budget {args.budget} tokens, {args.turns} turns")
        print("| turns | CPU ms/turn | largest history (tokens) | compactions | messages kept"
              " / shown | store bytes |")
        print("|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['turns']} | {r['cpu_ms']:.2f} | {r['largest']} | {r['compactions']} "
                  f"| {r['transcript']} / {r['history']} | {r['bytes'] or '-'} |")


if __name__ == "__main__":
    main()
