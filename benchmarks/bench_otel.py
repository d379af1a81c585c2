"""What tracing costs a turn (run by hand: ``python benchmarks/bench_otel.py``).

The workload is ``bench_session.py``'s (an in-memory session: a user message, the model
calls two tools, then answers; ``MemoryStore``; the O(1) scripted provider), in three
set-ups:

* **no observer**: phaseflow as it was before the observer existed: the commit before
  ``phaseflow/observe`` was added (``git archive`` of it into a temporary folder), so the
  runner has none of the observer's call sites;
* **off**: this tree, tracing off (the default: the no-op observer);
* **on**: this tree, an ``Agent`` given the OpenTelemetry SDK's ``TracerProvider`` with a
  ``SimpleSpanProcessor`` into an ``InMemorySpanExporter`` (cleared every 50 turns, so
  memory stays flat) and a ``MeterProvider`` with an ``InMemoryMetricReader``: every
  span, event and measurement is made, none leaves the process;
* **on, batch**: the same with a ``BatchSpanProcessor`` (what ``phaseflow run`` uses
  with its exporter): a span's end queues it, a thread of the SDK exports (its CPU time
  counts).

Each measurement is a fresh process (``--worker MODE``) that opens a session, runs
``--warm`` turns, then times ``--turns`` turns (``--store sqlite``: the sessions in a
SQLite file instead of ``MemoryStore``, for the share of a durable turn): CPU time
(``time.process_time``, every thread) and wall time per turn; then it counts the Python
function calls of 50 more turns (cProfile, not timed): a figure the load of the machine
does not move. The set-ups
run once per round, the order rotated every round, for ``--rounds`` rounds; the figures
are medians over the rounds, and the spread (min-max) is shown.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import pstats
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
MODES = ("no observer", "off", "on", "on, batch")


async def _worker(mode: str, root: str, turns: int, warm: int, store_kind: str
                  ) -> dict[str, float]:
    sys.path.insert(0, root)
    import phaseflow  # from ``root`` (before bench_session puts this tree on the path)

    assert Path(phaseflow.__file__).resolve().is_relative_to(Path(root).resolve())
    sys.path.insert(1, str(HERE))
    from bench_session import (  # type: ignore[import-not-found]
        ANSWER,
        SYSTEM,
        WORKFLOW,
        ScriptProvider,
        find_order,
        lookup_customer,
        question,
    )

    from phaseflow.api import load_workflow_text
    from phaseflow.session import Agent
    from phaseflow.stores import MemoryStore, SQLiteStore

    options: dict[str, Any] = {}
    exporter: Any = None
    if mode.startswith("on"):
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter,
        )

        exporter = InMemorySpanExporter()
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(
            BatchSpanProcessor(exporter) if mode == "on, batch" else SimpleSpanProcessor(exporter))
        options = {"tracer_provider": tracer_provider,
                   "meter_provider": MeterProvider(metric_readers=[InMemoryMetricReader()])}
    agent = Agent(load_workflow_text(WORKFLOW), ScriptProvider(),
                  tools=[lookup_customer, find_order], system=SYSTEM,
                  store=MemoryStore() if store_kind == "memory" else SQLiteStore(
                      Path(tempfile.mkdtemp()) / "sessions.db"),
                  **options)
    session = await agent.session("bench")
    for i in range(warm):
        await session.reply(question(i))
    if mode == "on, batch":
        options["tracer_provider"].force_flush()
    spans = len(exporter.get_finished_spans()) if exporter is not None else 0
    gc.collect()
    cpu, wall = time.process_time(), time.perf_counter()
    for i in range(warm, warm + turns):
        if await session.reply(question(i)) != ANSWER:
            raise SystemExit("unexpected reply")
        if exporter is not None and i % 50 == 0:
            exporter.clear()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    # then the Python function calls of 50 more turns, counted (not timed): what the
    # observer adds, free of the machine's noise
    profiler = cProfile.Profile()
    profiler.enable()
    for i in range(warm + turns, warm + turns + 50):
        await session.reply(question(i))
    profiler.disable()
    calls = pstats.Stats(profiler).total_calls  # type: ignore[attr-defined]
    return {"cpu_ms": cpu / turns * 1000, "wall_ms": wall / turns * 1000,
            "spans_per_turn": spans / warm if warm else 0.0, "calls_per_turn": calls / 50}


def _base_tree(into: Path) -> tuple[str, str]:
    """The commit before ``phaseflow/observe`` was added, extracted into ``into``."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()

    added = git("log", "--diff-filter=A", "--format=%H", "--",
                "phaseflow/observe/observer.py").splitlines()
    if not added:
        raise SystemExit("phaseflow/observe/observer.py is not committed: no base to run")
    base = git("rev-parse", f"{added[-1]}^")
    archive = subprocess.run(["git", "archive", base, "phaseflow"], cwd=ROOT,
                             capture_output=True, check=True).stdout
    archive_path = into / "base.tar"
    archive_path.write_bytes(archive)
    with tarfile.open(archive_path) as tar:
        tar.extractall(into, filter="data")
    return str(into), base[:10]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--warm", type=int, default=30)
    parser.add_argument("--store", choices=("memory", "sqlite"), default="memory",
                        help="the sessions' store (sqlite: a file in a temporary folder)")
    parser.add_argument("--worker", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(asyncio.run(_worker(args.worker, args.root, args.turns,
                                             args.warm, args.store))))
        return
    with tempfile.TemporaryDirectory() as tmp:
        base_root, base = _base_tree(Path(tmp))
        roots = {"no observer": base_root, "off": str(ROOT), "on": str(ROOT),
                 "on, batch": str(ROOT)}
        results: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
        for r in range(args.rounds):
            order = MODES[r % len(MODES):] + MODES[:r % len(MODES)]
            for mode in order:
                proc = subprocess.run(
                    [sys.executable, __file__, "--worker", mode, "--root", roots[mode],
                     "--turns", str(args.turns), "--warm", str(args.warm),
                     "--store", args.store],
                    capture_output=True, text=True, check=False, cwd=tmp)
                if proc.returncode != 0:
                    raise SystemExit(f"{mode}: {proc.stderr}")
                results[mode].append(json.loads(proc.stdout))
    print(f"{args.rounds} rounds x {args.turns} turns (after {args.warm}), {args.store} "
          f"store, no observer = commit {base}; medians (min-max)")
    floor = statistics.median(r["cpu_ms"] for r in results["no observer"])
    calls_floor = statistics.median(r["calls_per_turn"] for r in results["no observer"])
    print(f"{'set-up':<12} {'CPU ms/turn':>22} {'vs none':>8} {'wall ms/turn':>22} "
          f"{'calls/turn':>10} {'vs none':>8}")
    for mode in MODES:
        cpu = [r["cpu_ms"] for r in results[mode]]
        wall = [r["wall_ms"] for r in results[mode]]
        med = statistics.median(cpu)
        calls = statistics.median(r["calls_per_turn"] for r in results[mode])
        print(f"{mode:<12} {med:>8.3f} ({min(cpu):.3f}-{max(cpu):.3f})"
              f" {(med / floor - 1) * 100:>+7.1f}%"
              f" {statistics.median(wall):>8.3f} ({min(wall):.3f}-{max(wall):.3f})"
              f" {calls:>10.0f} {(calls / calls_floor - 1) * 100:>+7.1f}%")
    spans = statistics.median(r["spans_per_turn"] for r in results["on"])
    print(f"spans a turn when on: {spans:.1f}")


if __name__ == "__main__":
    main()
