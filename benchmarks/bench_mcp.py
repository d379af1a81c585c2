"""An MCP tool call through phaseflow against the same call with the ``mcp`` client directly.

The server is the test suite's (tests/support/mcp_server.py, written with the official
``mcp`` package), over stdio (a subprocess) and over Streamable HTTP on loopback (a
separate process). Per transport, three ways to make the same call (``lookup`` with an
email; the server answers with text and structured content):

* ``direct``: ``mcp.Client.call_tool`` on the caller's own loop - the floor;
* ``hub``: phaseflow's connection (``McpHub.call``): the call handed to the hub's loop,
  where the server's connection task lives, and the result handed back;
* ``tool``: what a session does per call - the catalogue tool's argument check against
  the server's schema, ``FunctionTool.invoke``, the result made the model's text (and
  its writes).

Rounds alternate the three so that machine noise spreads over all of them; the figures
are the median (and 95th percentile) of every call's wall time, and the process's CPU
time per call (all its threads; the best round), which other processes' load moves much
less than wall time. Run:

    python benchmarks/bench_mcp.py [--calls N] [--rounds R]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mcp import Client, StdioServerParameters  # noqa: E402

from phaseflow.mcp.config import read_servers  # noqa: E402
from phaseflow.mcp.hub import McpHub  # noqa: E402
from phaseflow.mcp.tools import mcp_tools  # noqa: E402
from phaseflow.spec.loader import compile_text  # noqa: E402
from phaseflow.tools.function import ToolContext  # noqa: E402
from tests.support.mcp_servers import SERVER, http_server  # noqa: E402

WORKFLOW = """\
phaseflow: 1
name: bench
initial: work
state:
  customer_id: {type: string}
tools:
  demo.lookup: {writes: [customer_id]}
phases:
  work: {goal: Work., terminal: true}
"""
ARGUMENTS = {"email": "ada@example.com"}


async def _timed(call: Callable[[], Awaitable[Any]], calls: int, into: list[float],
                 cpu: list[float] | None = None) -> None:
    """``calls`` calls one after the other: each one's wall time into ``into``, and the
    process's CPU time per call (every thread: the hub's too) into ``cpu``."""
    cpu_started = time.process_time()
    for _ in range(calls):
        started = time.perf_counter()
        await call()
        into.append(time.perf_counter() - started)
    if cpu is not None:
        cpu.append((time.process_time() - cpu_started) / calls)


async def _measure(target: Any, servers: dict[str, Any], calls: int, rounds: int
                   ) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    times: dict[str, list[float]] = {"direct": [], "hub": [], "tool": []}
    cpu: dict[str, list[float]] = {"direct": [], "hub": [], "tool": []}
    hub = McpHub(read_servers(servers))
    try:
        workflow = compile_text(WORKFLOW)
        tool = mcp_tools(workflow, hub)["demo.lookup"]
        ctx = ToolContext("bench", "call-1", "work")

        async def through_tool() -> Any:
            problem = tool.validate(ARGUMENTS)
            assert problem is None, problem
            return await tool.invoke(ARGUMENTS, ctx)

        async with Client(target) as client:
            async def direct() -> Any:
                return await client.call_tool("lookup", ARGUMENTS)

            async def via_hub() -> Any:
                return await hub.call("demo", "lookup", ARGUMENTS)

            for call in (direct, via_hub, through_tool):  # warm up
                await _timed(call, 20, [])
            for _ in range(rounds):
                await _timed(direct, calls, times["direct"], cpu["direct"])
                await _timed(via_hub, calls, times["hub"], cpu["hub"])
                await _timed(through_tool, calls, times["tool"], cpu["tool"])
    finally:
        hub.close()
    return times, cpu


def _row(transport: str, times: dict[str, list[float]], cpu: dict[str, list[float]]
         ) -> list[str]:
    lines = []
    floor = statistics.median(times["direct"])
    cpu_floor = min(cpu["direct"])
    for name, values in times.items():
        values = sorted(values)
        median = statistics.median(values)
        p95 = values[int(len(values) * 0.95)]
        extra = "" if name == "direct" else f"{(median - floor) * 1e6:+.0f}"
        used = min(cpu[name])  # the least noisy round
        cpu_extra = "" if name == "direct" else f"{(used - cpu_floor) * 1e6:+.0f}"
        lines.append(f"{transport:<6} {name:<7} {median * 1e6:>8.0f} {p95 * 1e6:>8.0f} "
                     f"{extra:>8} {used * 1e6:>8.0f} {cpu_extra:>8}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="calls per round and way")
    parser.add_argument("--rounds", type=int, default=5, help="rounds (alternating the ways)")
    args = parser.parse_args()
    results: dict[str, tuple[dict[str, list[float]], dict[str, list[float]]]] = {}
    stdio = {"mcpServers": {"demo": {"command": sys.executable, "args": [SERVER, "stdio"]}}}
    results["stdio"] = asyncio.run(_measure(
        StdioServerParameters(command=sys.executable, args=[SERVER, "stdio"]), stdio,
        args.calls, args.rounds))
    with http_server("http") as (url, _process):
        results["http"] = asyncio.run(_measure(
            url, {"mcpServers": {"demo": {"url": url}}}, args.calls, args.rounds))
    print(f"{args.rounds} rounds x {args.calls} calls per way; microseconds per call: wall "
          "time (median, 95th percentile, median over direct) and the process's CPU time "
          "(best round, over direct)")
    print(f"{'via':<6} {'way':<7} {'median':>8} {'p95':>8} {'+wall':>8} {'cpu':>8} "
          f"{'+cpu':>8}")
    for transport, (times, cpu) in results.items():
        print("\n".join(_row(transport, times, cpu)))
    print(json.dumps({t: {w: [statistics.median(v) * 1e6, min(c[w]) * 1e6]
                          for w, v in times.items()}
                      for t, (times, c) in results.items()}))


if __name__ == "__main__":
    main()
