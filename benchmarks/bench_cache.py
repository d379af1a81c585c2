"""What a long conversation's requests leave to a prompt cache (run by hand:
``python benchmarks/bench_cache.py [--server URL] [--turns N] [--layouts A,B]
[--per-request] [--json FILE]``).

The workload: a 40-turn conversation on a 4-phase workflow (10 turns a phase; the
phases move on by ``when`` guards on a counter). In 34 of the 40 turns the model first
calls ``log_item``, whose result writes two state keys the phase's instructions show
(so the instructions change in most turns), then answers; in the other 6 it answers at
once. Each phase offers ``log_item`` and a tool of its own, so a phase change changes
the phase's tools. The model's replies are scripted (``ScriptedProvider``); every request
the session builds is recorded.

The same conversation is run in three layouts, in one run:

* ``system``: ``Agent(context_position="system")``, one system message holding the
  host's text, the instructions and the navigation block (the layout before
  ``ProviderRequest.context``);
* ``end``: the instructions and the navigation block after the history (the default),
  the phase's tools offered (``offer_tools="phase"``, the default);
* ``end+workflow``: the same with ``offer_tools="workflow"``.

Measured, per layout:

1. **from the requests alone** (no server; the same figure the suite checks in
   ``tests/session/test_request_layout_cache.py``): each request as a chat template
   lays it out (the system text, then the tool definitions, then the messages:
   :func:`prompt_text`), and its *uncached characters*: its length minus the longest
   common prefix with the previous request;
2. **on a real server** (``--server URL``, an OpenAI-compatible server that reports
   ``usage.prompt_tokens_details.cached_tokens``, e.g. llama.cpp's ``llama-server``):
   every recorded request sent in order through the ``openai`` SDK, as
   ``OpenAIProvider`` sends it (``max_tokens=1``: the reply is not what is measured),
   its prompt tokens and cached tokens, and beside them the *template-shared prefix*:
   the tokens the request shares with the request sent before it, both laid out by the
   server's own chat template (``/apply-template``, then ``/tokenize``, llama.cpp's
   endpoints): the most a prefix cache can reuse. The layouts run one after the other
   on the same server (its cache holds the previous layout's last request when the
   next layout starts).

Reported: per request and per turn the uncached figure; for the conversation the total,
the ratio to the ``system`` layout, and the targets of the issue: the mean uncached a turn
over the last 5 turns against turns 3-5 (at most 1.5x), and the total against the
``system`` layout (at most 0.3x).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from phaseflow.api import load_workflow_text
from phaseflow.providers.chat_wire import (
    names_of,
    request_messages,
    request_tools,
)
from phaseflow.providers.protocol import ProviderRequest
from phaseflow.providers.scripted import ScriptedProvider
from phaseflow.session import Agent
from phaseflow.stores import MemoryStore

TURNS = 40
SYSTEM = "You are the service desk of a small software company. Be brief and exact."

TEMPLATE = """\
phaseflow: 1
name: service-desk
initial: intake
state:
  count: {type: integer, default: 0, description: items logged so far}
  last: {type: string, description: the last item logged}
tools:
  log_item:
    description: Log what the user reported as the next numbered item of the case.
    writes: [count, last]
    parameters:
      type: object
      properties: {n: {type: integer}, text: {type: string}}
      required: [n, text]
  find_account:
    description: Find the user's account by email address.
    parameters: {type: object, properties: {email: {type: string}}, required: [email]}
  run_check:
    description: Run a diagnostic check on the account's service.
    parameters: {type: object, properties: {check: {type: string}}, required: [check]}
  apply_fix:
    description: Apply a known fix to the account's service.
    parameters: {type: object, properties: {fix: {type: string}}, required: [fix]}
  send_summary:
    description: Email the case summary to the user.
    parameters: {type: object, properties: {to: {type: string}}, required: [to]}
phases:
  intake:
    goal: Learn what the user's problem is.
    instructions: |
      Ask what is wrong and log each thing the user reports with log_item.
      Items logged so far: {{ state.count }}; the last: {{ state.last or 'none' }}.
    tools: [log_item, find_account]
    transitions:
      - {to: diagnose, when: "state.count >= %(diagnose)d"}
  diagnose:
    goal: Find the cause.
    instructions: |
      Run checks and log each finding with log_item.
      Items logged so far: {{ state.count }}; the last: {{ state.last }}.
    tools: [log_item, run_check]
    transitions:
      - {to: resolve, when: "state.count >= %(resolve)d"}
  resolve:
    goal: Fix the problem.
    instructions: |
      Apply fixes and log each one with log_item.
      Items logged so far: {{ state.count }}; the last: {{ state.last }}.
    tools: [log_item, apply_fix]
    transitions:
      - {to: wrap_up, when: "state.count >= %(wrap_up)d"}
  wrap_up:
    goal: Close the case.
    instructions: |
      Summarize the case and log any last remark with log_item.
      Items logged so far: {{ state.count }}; the last: {{ state.last }}.
    tools: [log_item, send_summary]
    transitions:
      - {to: closed, when: "state.count >= 1000"}
  closed:
    goal: The case is closed.
    terminal: true
"""



def workflow_text(turns: int = TURNS) -> str:
    """The workflow of a ``turns``-turn conversation: each phase about a quarter of it."""
    return TEMPLATE % {"diagnose": round(turns * 0.225), "resolve": round(turns * 0.45),
                       "wrap_up": round(turns * 0.65)}


WORKFLOW = workflow_text()

LAYOUTS: dict[str, dict[str, str]] = {
    "system": {"context_position": "system"},
    "end": {"context_position": "end"},
    "end+workflow": {"context_position": "end", "offer_tools": "workflow"},
}


def log_item(n: int, text: str) -> dict[str, Any]:
    return {"count": n, "last": text[:40], "ok": True}


def find_account(email: str) -> dict[str, Any]:
    return {"account": "A-1"}


def run_check(check: str) -> dict[str, Any]:
    return {"check": check, "result": "ok"}


def apply_fix(fix: str) -> dict[str, Any]:
    return {"fix": fix, "applied": True}


def send_summary(to: str) -> dict[str, Any]:
    return {"sent": True}


TOOLS = [log_item, find_account, run_check, apply_fix, send_summary]


def logs(turn: int) -> bool:
    """Does the model log an item in this turn (34 of 40 turns)?"""
    return turn % 7 != 0


def user_text(turn: int) -> str:
    return f"Turn {turn}: the export job failed again at step {turn % 5 + 1}."


def script(turns: int = TURNS) -> list[Any]:
    replies: list[Any] = []
    count = 0
    for turn in range(1, turns + 1):
        if logs(turn):
            count += 1
            text = f"export failed, step {turn % 5 + 1}"
            replies.append({"calls": [{"log_item": {"n": count, "text": text}}]})
        replies.append(f"Noted ({turn}). What else happened?")
    return replies


@dataclass
class Recorded:
    """The requests of one conversation, each with the turn that sent it."""

    layout: str
    requests: list[tuple[int, ProviderRequest]]
    phases: list[str]


async def converse(layout: str, turns: int = TURNS) -> Recorded:
    """The 40-turn conversation (or a ``turns``-turn one) in ``layout``: every request
    the session built."""
    provider = ScriptedProvider(script(turns))
    agent = Agent(load_workflow_text(workflow_text(turns)), provider, tools=TOOLS,
                  store=MemoryStore(), system=SYSTEM, **LAYOUTS[layout])  # type: ignore[arg-type]
    session = await agent.session(f"bench-{layout}")
    sent: list[int] = []  # the turn of each request
    phases: list[str] = []
    for turn in range(1, turns + 1):
        await session.reply(user_text(turn))
        sent.extend([turn] * (len(provider.requests) - len(sent)))
        phases.append(session.phase)
    return Recorded(layout, list(zip(sent, provider.requests, strict=True)), phases)


def wire(request: ProviderRequest) -> dict[str, Any]:
    """The Chat Completions body ``OpenAIProvider`` sends for ``request`` (not streamed)."""
    names = names_of(request)
    body: dict[str, Any] = {"model": request.model or "local",
                            "messages": request_messages(request, names)}
    if request.tools:
        body["tools"] = request_tools(request, names)
        body["tool_choice"] = request.tool_choice
    return body


def prompt_text(request: ProviderRequest) -> str:
    """The request as a chat template lays it out: the first system message, the tool
    definitions, then the other messages (llama.cpp's templates put the tools in the
    system turn; Anthropic caches tools, system, messages in that order)."""
    body = wire(request)
    messages = body["messages"]
    head = messages[0] if messages and messages[0]["role"] == "system" else None
    rest = messages[1:] if head is not None else messages
    parts = [json.dumps(head, sort_keys=True) if head else "",
             json.dumps(body.get("tools", []), sort_keys=True)]
    parts.extend(json.dumps(m, sort_keys=True) for m in rest)
    return "\n".join(parts)


def common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def uncached_chars(recorded: Recorded) -> list[int]:
    """Per request: its characters minus the longest common prefix with the previous."""
    out: list[int] = []
    previous = ""
    for _, request in recorded.requests:
        text = prompt_text(request)
        out.append(len(text) - common_prefix(previous, text))
        previous = text
    return out


def per_turn(recorded: Recorded, values: list[int]) -> dict[int, int]:
    turns: dict[int, int] = {}
    for (turn, _), value in zip(recorded.requests, values, strict=True):
        turns[turn] = turns.get(turn, 0) + value
    return turns


def targets(turns: dict[int, int]) -> tuple[float, float, float]:
    """The mean a turn over turns 3-5, over the last 5, and their ratio."""
    last = max(turns)
    early = statistics.mean(turns[t] for t in (3, 4, 5))
    late = statistics.mean(turns[t] for t in range(last - 4, last + 1))
    return early, late, late / early


def phase_of(request: ProviderRequest) -> str:
    """The phase a request was sent in, as its navigation block names it."""
    found = re.search(r"Current phase: (\w+)", request.context or request.system)
    return found.group(1) if found else "?"


def _post(url: str, path: str, body: dict[str, Any]) -> Any:
    ask = urllib.request.Request(
        url.rstrip("/") + path, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(ask, timeout=600) as answer:
        return json.load(answer)


def template_tokens(url: str, body: dict[str, Any]) -> list[int]:
    """The tokens of ``body`` as the server's chat template lays it out (its
    ``/apply-template``, then ``/tokenize``): what its prompt cache compares."""
    prompt = _post(
        url,
        "/apply-template",
        {k: v for k, v in body.items() if k in ("messages", "tools", "tool_choice")},
    )
    tokens = _post(url, "/tokenize", {"content": prompt["prompt"]})["tokens"]
    return [int(t) for t in tokens]


def common_tokens(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


@dataclass
class Sent:
    """One request on the server: its prompt tokens, the tokens the server read from its
    cache, and the tokens it shares, as its template lays them out, with the request
    sent before it (the most any prefix cache can reuse)."""

    turn: int
    phase: str
    tools: int
    prompt: int
    cached: int
    shared: int

    @property
    def uncached(self) -> int:
        return self.prompt - self.cached


def on_server(recorded: Recorded, url: str, previous: list[int]) -> list[Sent]:
    """Every request of ``recorded`` sent in order to ``url`` through the ``openai`` SDK,
    as ``OpenAIProvider`` sends it; ``previous`` holds the tokens of the request the
    server saw last (updated in place)."""
    from openai import OpenAI

    client = OpenAI(base_url=url.rstrip("/") + "/v1", api_key="none", max_retries=0, timeout=3600)
    out: list[Sent] = []
    for turn, request in recorded.requests:
        body = wire(request)
        tokens = template_tokens(url, body)
        shared = common_tokens(previous, tokens)
        previous[:] = tokens
        reply = client.chat.completions.create(**body, max_tokens=1, temperature=0)
        usage = reply.usage
        assert usage is not None
        details = usage.prompt_tokens_details
        cached = (details.cached_tokens or 0) if details is not None else 0
        out.append(
            Sent(turn, phase_of(request), len(request.tools), usage.prompt_tokens, cached, shared)
        )
    return out


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load {one:.1f} {five:.1f} {fifteen:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--server",
        metavar="URL",
        help="an OpenAI-compatible server reporting cached tokens (llama.cpp's "
        "llama-server: its /apply-template and /tokenize give the "
        "template-shared prefix)",
    )
    parser.add_argument(
        "--turns",
        type=int,
        default=TURNS,
        help=f"the conversation's turns (default {TURNS}; the phases keep their shares of it)",
    )
    parser.add_argument(
        "--layouts",
        default=",".join(LAYOUTS),
        help=f"the layouts to run, in this order (default: all: {','.join(LAYOUTS)})",
    )
    parser.add_argument("--per-request", action="store_true", help="print every request")
    parser.add_argument("--json", metavar="FILE", help="write every figure as JSON")
    args = parser.parse_args()
    layouts = [name.strip() for name in args.layouts.split(",") if name.strip()]
    unknown = [name for name in layouts if name not in LAYOUTS]
    if unknown or not layouts:
        parser.error(f"--layouts: expected some of {','.join(LAYOUTS)}, got {args.layouts!r}")
    turns = args.turns
    if turns < 8:
        parser.error("--turns: at least 8 (turns 3-5 and the last 5 are compared)")
    recorded = {layout: asyncio.run(converse(layout, turns)) for layout in layouts}
    first = recorded[layouts[0]]
    print(
        f"{turns} turns, {len(first.requests)} requests; phases after each quarter: "
        f"{[first.phases[turns * q // 4 - 1] for q in (1, 2, 3, 4)]}"
    )
    report: dict[str, Any] = {"turns": turns, "layouts": {}}
    print("\nFrom the requests alone (characters as a template lays them out):")
    totals: dict[str, int] = {}
    for layout, rec in recorded.items():
        values = uncached_chars(rec)
        totals[layout] = sum(values)
        early, late, ratio = targets(per_turn(rec, values))
        full = sum(len(prompt_text(r)) for _, r in rec.requests)
        against = f"{totals[layout] / totals['system']:.2f}x system" if "system" in totals else "-"
        print(
            f"  {layout:13} uncached {totals[layout]:>8,} of {full:>9,} chars "
            f"({against}); a turn: turns 3-5 {early:,.0f}, last 5 {late:,.0f} "
            f"({ratio:.2f}x)"
        )
        report["layouts"][layout] = {
            "requests": len(rec.requests),
            "chars": full,
            "uncached_chars": totals[layout],
            "chars_turns_3_5": early,
            "chars_last_5": late,
        }
    if args.server:
        print(f"\nOn the server {args.server} ({turns} turns; tokens; {_load()}):")
        previous: list[int] = []  # what the server's single slot holds
        server_totals: dict[str, int] = {}
        for layout, rec in recorded.items():
            started, load_before = time.perf_counter(), _load()
            sent = on_server(rec, args.server, previous)
            seconds = time.perf_counter() - started
            uncached = sum(s.uncached for s in sent)
            prompt = sum(s.prompt for s in sent)
            server_totals[layout] = uncached
            early, late, ratio = targets(per_turn(rec, [s.uncached for s in sent]))
            equal = sum(s.cached == s.shared for s in sent)
            against = (
                f"{uncached / server_totals['system']:.2f}x system"
                if "system" in server_totals
                else "-"
            )
            print(
                f"  {layout:13} prompt {prompt:>7,}  cached {prompt - uncached:>7,}  "
                f"uncached {uncached:>6,} ({against}); a turn: turns 3-5 {early:,.0f}, "
                f"last 5 {late:,.0f} ({ratio:.2f}x); cached = template-shared prefix "
                f"on {equal}/{len(sent)} requests; {seconds:.0f} s "
                f"({uncached / seconds:.0f} prefilled tokens/s; {load_before}, after: "
                f"{_load()})"
            )
            entry = report["layouts"][layout]
            entry.update(
                {
                    "prompt_tokens": prompt,
                    "cached_tokens": prompt - uncached,
                    "uncached_tokens": uncached,
                    "tokens_turns_3_5": early,
                    "tokens_last_5": late,
                    "cached_is_shared": equal,
                    "seconds": seconds,
                    "load_before": load_before,
                    "load_after": _load(),
                    "per_request": [{**vars(s), "uncached": s.uncached} for s in sent],
                }
            )
            if args.per_request:
                for i, s in enumerate(sent, 1):
                    mark = "" if s.cached == s.shared else f"  (shared {s.shared})"
                    print(
                        f"    {i:>3} turn {s.turn:>2} {s.phase:9} tools {s.tools} "
                        f"prompt {s.prompt:>5} cached {s.cached:>5} "
                        f"uncached {s.uncached:>5}{mark}"
                    )
    _summary(report["layouts"])
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1), encoding="utf-8")


def _summary(layouts: dict[str, dict[str, Any]]) -> None:
    """The targets of the issue, per layout: the total against ``system`` (at most 0.3x)
    and the last 5 turns against turns 3-5 (at most 1.5x)."""
    print("\nTargets (total at most 0.3x system; last 5 turns at most 1.5x turns 3-5):")
    for unit in ("chars", "tokens"):
        base = layouts.get("system", {}).get(f"uncached_{unit}")
        for layout, entry in layouts.items():
            if f"uncached_{unit}" not in entry:
                continue
            total = entry[f"uncached_{unit}"]
            against = f"{total / base:.2f}x system" if base else "no system run"
            growth = entry[f"{unit}_last_5"] / entry[f"{unit}_turns_3_5"]
            print(f"  {unit:6} {layout:13} uncached {total:>8,} ({against}); "
                  f"last 5 / turns 3-5 {growth:.2f}x")


if __name__ == "__main__":
    main()
