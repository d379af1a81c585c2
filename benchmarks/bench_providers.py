"""CPU of the provider adapters, in one run: the OpenAI provider (Chat Completions) and
the Responses, Anthropic and Gemini providers, each through its official SDK against a
loopback server of its wire (run by hand: ``python benchmarks/bench_providers.py``).

The servers run in a child process (``--serve``), so what is measured
(``time.process_time`` of this process) is the client: the SDK reading the stream and the
adapter turning it into provider events (and, for a turn, the session around them).

* **per streamed event**: one reply of ``DELTAS`` text deltas (one SSE event each),
  drained from ``provider.stream``; the reply's CPU divided by ``DELTAS``;
* **per 2-tool turn**: a session turn (in-memory store) whose first reply asks for two
  tool calls and whose second answers in text: two requests, two tools run.

And ``import phaseflow`` with no extra: the SDK modules it loads (none) and its time.

With ``PHASEFLOW_LLAMA_SERVER`` naming llama.cpp's start script (see
``tests/support/llama_server.py``): a 20-turn conversation through ``AnthropicProvider``
against its ``/v1/messages``, and how much of each turn's input the server read from its
prompt cache (``cache_read_input_tokens``, as ``turn_finished.cached_input_tokens``).
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DELTAS = 400
TEXT = "word " * DELTAS
ROUNDS = 5
EVENTS_PER_ROUND = 4
TURNS_PER_ROUND = 8
WIRES = ("openai", "responses", "anthropic", "gemini")


def _scripts() -> dict[str, tuple[Any, Any, Any]]:
    """Per wire: the long text reply, the two-call reply, the closing text reply."""
    from tests.support import fake_openai_server as chat
    from tests.support.wire_scripts import anthropic_reply, gemini_reply, responses_reply

    calls = [("c1", "lookup", '{"q": "ada"}'), ("c2", "lookup", '{"q": "bob"}')]
    return {
        "openai": (chat.text_reply(TEXT, parts=DELTAS), chat.tool_calls_reply(*calls),
                   chat.text_reply("Both found.")),
        "responses": (responses_reply(TEXT, split=5), responses_reply("", calls),
                      responses_reply("Both found.")),
        "anthropic": (anthropic_reply(TEXT, split=5), anthropic_reply("", calls),
                      anthropic_reply("Both found.")),
        "gemini": (gemini_reply(TEXT, split=5), gemini_reply("", [(n, a) for _, n, a in calls]),
                   gemini_reply("Both found.")),
    }


def serve() -> None:
    """The child: a server per wire and workload, answering the same scripts over and
    over; prints their base URLs as JSON, serves until its stdin closes."""
    from tests.support.fake_openai_server import FakeOpenAIServer
    from tests.support.wire_servers import WireServer

    scripts = _scripts()
    urls: dict[str, str] = {}
    servers: list[Any] = []
    repeat = 100_000
    for wire in WIRES:
        long_reply, two_calls, closing = scripts[wire]
        for workload in ("events", "turns"):
            server = (FakeOpenAIServer() if wire == "openai" else WireServer(wire)).start()
            if workload == "events":
                server.push(*([long_reply] * repeat))
            else:
                server.push(*([two_calls, closing] * repeat))
            servers.append(server)
            urls[f"{wire}/{workload}"] = server.base_url
    print(json.dumps(urls), flush=True)
    sys.stdin.read()
    for server in servers:
        server.stop()


def _provider(wire: str, url: str) -> Any:
    from phaseflow.providers import (
        AnthropicProvider,
        GeminiProvider,
        OpenAIProvider,
        OpenAIResponsesProvider,
    )

    make: dict[str, Callable[..., Any]] = {
        "openai": OpenAIProvider, "responses": OpenAIResponsesProvider,
        "anthropic": AnthropicProvider, "gemini": GeminiProvider}
    return make[wire]("bench-model", base_url=url, api_key="k-bench")


def _cpu_per_event(wire: str, url: str) -> float:
    from phaseflow.providers.protocol import ProviderRequest, TextDelta
    from phaseflow.turn.messages import UserMessage

    provider = _provider(wire, url)
    request = ProviderRequest("", "Be brief.", (UserMessage("talk"),), (), "r1")

    async def one() -> int:
        return sum(1 for e in [e async for e in provider.stream(request)]
                   if isinstance(e, TextDelta))

    async def rounds() -> list[float]:
        await one()  # warm: the SDK imported, the connection open
        out = []
        for _ in range(ROUNDS):
            start = time.process_time()
            deltas = 0
            for _ in range(EVENTS_PER_ROUND):
                deltas += await one()
            out.append((time.process_time() - start) / deltas)
        await provider.aclose()
        return out

    return min(asyncio.run(rounds()))


def _cpu_per_turn(wire: str, url: str) -> float:
    import phaseflow
    from phaseflow.session import Agent
    from phaseflow.tools import tool

    @tool
    def lookup(q: str) -> str:
        """Look someone up."""
        return f"{q}: found"

    workflow = phaseflow.load_workflow_text(
        "phaseflow: 1\nname: bench\ninitial: find\nphases:\n  find:\n    goal: Find.\n"
        "    tools: [lookup]\n")
    provider = _provider(wire, url)

    async def rounds() -> list[float]:
        agent = Agent(workflow, provider, tools=[lookup])
        n = 0

        async def turn() -> None:
            nonlocal n
            n += 1
            session = await agent.session(f"s{n}")
            reply = await session.reply("find ada and bob")
            assert reply == "Both found.", reply

        await turn()
        out = []
        for _ in range(ROUNDS):
            start = time.process_time()
            for _ in range(TURNS_PER_ROUND):
                await turn()
            out.append((time.process_time() - start) / TURNS_PER_ROUND)
        await provider.aclose()
        return out

    return min(asyncio.run(rounds()))


def _import_phaseflow() -> tuple[float, list[str]]:
    probe = ("import time; t = time.perf_counter(); import phaseflow; "
             "d = time.perf_counter() - t; import sys, json; "
             "print(json.dumps([d, sorted(m for m in sys.modules if m.split('.')[0] in "
             "('anthropic', 'openai', 'google', 'httpx', 'httpx2'))]))")
    times, loaded = [], []
    for _ in range(7):
        out = subprocess.run([sys.executable, "-X", "frozen_modules=on", "-c", probe],
                             cwd=ROOT, capture_output=True, text=True, check=True).stdout
        seconds, loaded = json.loads(out)
        times.append(seconds)
    return statistics.median(times), loaded


def _cache_over_a_conversation(turns: int = 20) -> list[tuple[int, int]]:
    """(input tokens, of which read from the cache) of each turn of a conversation
    against llama.cpp's server, or nothing when it is not there."""
    if not os.environ.get("PHASEFLOW_LLAMA_SERVER"):
        return []
    import phaseflow
    from phaseflow.providers import AnthropicProvider
    from phaseflow.session import Agent
    from tests.support.llama_server import llama_server

    workflow = phaseflow.load_workflow_text(
        "phaseflow: 1\nname: chat\ninitial: talk\nphases:\n  talk:\n    goal: Chat about "
        "colours, one short sentence a reply.\n")
    out: list[tuple[int, int]] = []
    with llama_server() as server:
        provider = AnthropicProvider("smollm", base_url=server.root, max_tokens=12)

        async def conversation() -> None:
            agent = Agent(workflow, provider, system="You are a terse assistant. " * 10)
            session = await agent.session("c")
            for n in range(turns):
                async for event in session.send(f"Tell me about colour number {n}."):
                    if event.type == "turn_finished":
                        out.append((event.input_tokens,  # type: ignore[attr-defined]
                                    event.cached_input_tokens))  # type: ignore[attr-defined]
            await provider.aclose()

        asyncio.run(conversation())
    return out


def main() -> None:
    if "--serve" in sys.argv:
        serve()
        return
    child = subprocess.Popen([sys.executable, __file__, "--serve"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert child.stdout is not None
        urls = json.loads(child.stdout.readline())
        rows = []
        for wire in WIRES:
            per_event = _cpu_per_event(wire, urls[f"{wire}/events"])
            per_turn = _cpu_per_turn(wire, urls[f"{wire}/turns"])
            rows.append((wire, per_event, per_turn))
    finally:
        if child.stdin is not None:
            child.stdin.close()
        child.wait(timeout=30)
    base_event, base_turn = rows[0][1], rows[0][2]
    print(f"CPU of this process, best of {ROUNDS} rounds ({DELTAS} deltas a reply; "
          f"{TURNS_PER_ROUND} turns a round)")
    print(f"{'provider':<10} {'per event':>10} {'vs openai':>10} {'per 2-tool turn':>16} "
          f"{'vs openai':>10}")
    for wire, per_event, per_turn in rows:
        print(f"{wire:<10} {per_event * 1e6:>8.1f}µs {per_event / base_event:>9.2f}x "
              f"{per_turn * 1e3:>14.2f}ms {per_turn / base_turn:>9.2f}x")
    seconds, loaded = _import_phaseflow()
    print(f"import phaseflow: {seconds * 1e3:.1f} ms (median of 7); SDK modules loaded: "
          f"{loaded or 'none'}")
    turns = _cache_over_a_conversation()
    if turns:
        later = [cached / total for total, cached in turns[1:]]
        print(f"a {len(turns)}-turn conversation through AnthropicProvider against "
              f"llama.cpp's server: turn 1 read {turns[0][1]} of {turns[0][0]} input tokens "
              f"from the cache; turns 2-{len(turns)}: {min(later):.0%} to {max(later):.0%} "
              f"(median {statistics.median(later):.0%})")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
