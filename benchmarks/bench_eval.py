"""The eval harness's own cost (run by hand, not by pytest).

    python benchmarks/bench_eval.py [--conversations 100] [--concurrency 8] [--delay 0.2]
                                    [--report 10000]

1. Harness against model time: the bundled refund desk's cooperative customer
   (workflows/refund-desk.eval.yaml: 4 user turns, 9 model replies), played
   ``--conversations`` times, ``--concurrency`` at once, by the eval runner with a
   scripted model that answers each request after a fixed ``--delay`` seconds. A
   conversation's model time is 9 x delay; the target: the whole run within 1.2 x
   (conversations / concurrency) x that. Prints the wall time, the ratio, and the
   harness's CPU time per conversation (process CPU over the run: the sessions, the
   stand-ins, the store, the scoring). Once with the memory store, once with SQLite.
2. The report for ``--report`` conversations (real transcripts of the four bundled
   scenarios, copied; every tenth made to fail so the report keeps its transcript):
   scored, the funnel counted, and written as JSON, HTML, JUnit and text. Target: under
   10 s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from phaseflow.api import load_workflow  # noqa: E402
from phaseflow.evals.evalfile import load_eval_file  # noqa: E402
from phaseflow.evals.html import html_page  # noqa: E402
from phaseflow.evals.report import ScenarioRun, build_report  # noqa: E402
from phaseflow.evals.runner import EvalRun, Job, RunOptions  # noqa: E402
from phaseflow.evals.text import junit, terminal  # noqa: E402
from phaseflow.evals.users import ScriptedUser  # noqa: E402
from phaseflow.providers.protocol import ProviderEvent, ProviderRequest  # noqa: E402
from phaseflow.providers.scripted import ScriptedProvider  # noqa: E402
from phaseflow.stores.memory import MemoryStore  # noqa: E402
from phaseflow.stores.sqlite import SQLiteStore  # noqa: E402

EVAL = REPO / "workflows" / "refund-desk.eval.yaml"


class SlowModel:
    """A scripted model that answers each request after ``delay`` seconds."""

    def __init__(self, replies: list[object], delay: float) -> None:
        self.script = ScriptedProvider(replies)
        self.delay = delay

    async def stream(self, request: ProviderRequest) -> AsyncIterator[ProviderEvent]:
        await asyncio.sleep(self.delay)
        async for event in self.script.stream(request):
            yield event


def harness(conversations: int, concurrency: int, delay: float, store_kind: str) -> None:
    found = load_eval_file(str(EVAL))
    workflow = load_workflow(found.workflow_path)
    scenario = found.scenarios[0]
    replies = list(scenario.model or ())
    model_time = len(replies) * delay
    jobs = [Job(found, workflow, scenario, trial) for trial in range(1, conversations + 1)]
    with tempfile.TemporaryDirectory() as folder:
        store = (MemoryStore() if store_kind == "memory"
                 else SQLiteStore(str(Path(folder) / "s.db")))
        options = RunOptions(run_id="bench", store=store,
                             agent_provider=lambda s: SlowModel(replies, delay),
                             user=lambda s: ScriptedUser(s.user.script or ()),
                             concurrency=concurrency)
        run = EvalRun(options)
        cpu, wall = time.process_time(), time.perf_counter()
        done = asyncio.run(run.run(jobs))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        close = getattr(store, "close", None)
        if callable(close):
            close()
    assert len(done) == conversations and all(c.ended == "finished" for c in done)
    ideal = conversations / concurrency * model_time
    print(f"  {store_kind:<7} {conversations} conversations, {concurrency} at once, "
          f"model time {model_time:.2f} s each: wall {wall:.2f} s, ideal {ideal:.2f} s, "
          f"ratio {wall / ideal:.3f} (target <= 1.2); harness CPU "
          f"{cpu / conversations * 1000:.1f} ms a conversation "
          f"({cpu / (conversations * model_time) * 100:.1f}% of its model time)")


def report(count: int) -> None:
    found = load_eval_file(str(EVAL))
    workflow = load_workflow(found.workflow_path)
    jobs = [Job(found, workflow, s, 1) for s in found.scenarios]
    options = RunOptions(run_id="r", store=MemoryStore(),
                         agent_provider=lambda s: ScriptedProvider(list(s.model or ())),
                         user=lambda s: ScriptedUser(s.user.script or ()))
    samples = {c.scenario: c for c in asyncio.run(EvalRun(options).run(jobs))}
    per = count // len(found.scenarios)
    runs = []
    for scenario in found.scenarios:
        sample = samples[scenario.name]
        copies = [replace(sample, trial=t, session_id=f"{sample.session_id}-{t}",
                          ended="failed" if t % 10 == 0 else sample.ended)
                  for t in range(1, per + 1)]
        runs.append(ScenarioRun(found, workflow, scenario, copies))
    cpu = time.process_time()
    started = time.perf_counter()
    built = build_report(runs, {"run_id": "bench", "stopped": ""})
    scored = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        base = Path(folder)
        (base / "r.json").write_text(json.dumps(built, default=str))
        (base / "r.html").write_text(html_page(built))
        (base / "r.xml").write_text(junit(built))
        text = terminal(built)
        sizes = {p.suffix: p.stat().st_size for p in base.iterdir()}
    done = time.perf_counter()
    cpu = time.process_time() - cpu
    print(f"  report of {per * len(found.scenarios)} conversations: scored and counted in "
          f"{scored - started:.2f} s, written in {done - scored:.2f} s, total "
          f"{done - started:.2f} s (target < 10 s), CPU {cpu:.2f} s; "
          f"JSON {sizes['.json'] / 1e6:.1f} MB, "
          f"HTML {sizes['.html'] / 1e6:.2f} MB, JUnit {sizes['.xml'] / 1e6:.2f} MB, "
          f"{len(text.splitlines())} lines of text")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--conversations", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--delay", type=float, default=0.2)
    parser.add_argument("--report", type=int, default=10_000)
    args = parser.parse_args()
    print("1. harness against model time")
    for kind in ("memory", "sqlite"):
        harness(args.conversations, args.concurrency, args.delay, kind)
    print("2. the report")
    report(args.report)


if __name__ == "__main__":
    main()
