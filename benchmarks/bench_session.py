"""A guided session's cost per turn against LangGraph and the OpenAI Agents SDK
(run by hand: ``python benchmarks/bench_session.py``).

The peers are not dependencies of phaseflow; install them into the environment that runs
this script (a missing peer is skipped with a message)::

    pip install -e '.[dev]'
    pip install langgraph langchain-core openai-agents

The workload, the same for every framework, all in memory: a conversation whose every
turn is one user message; the scripted model answers the turn's first request with two
tool calls (``lookup_customer(email)``, ``find_order(customer_id)``: plain synchronous
functions returning small dicts) and the second with a text; the call ids are fresh every
turn. The model decides by the last message of the request (a user message: the calls;
a tool result: the text), so it costs O(1) whatever the history.

* **plain Python**: the loop written by hand (a list of dict messages, the arguments and
  results through ``json``), the floor;
* **phaseflow**: ``Agent`` on a two-phase workflow declaring both tools (the second phase
  terminal, behind a ``when`` that stays false), ``MemoryStore``, ``await
  session.reply(text)``. The provider is a minimal ``Provider`` defined here that yields
  the kinds of events ``ScriptedProvider`` yields (per call: start, arguments, end; the
  text; usage; end), each text in one piece; ``ScriptedProvider`` is not used because it
  picks its reply by counting the assistant messages of the history and sizes every
  request, O(history) per request, which would be measured as the session's cost after
  500 turns (and it would need a script of 1,040 replies);
* **LangGraph**: ``StateGraph(MessagesState)`` with a model node and ``ToolNode``, the
  edge ``tools_condition``; the model a ``BaseChatModel`` subclass returning
  ``AIMessage``s with ``tool_calls`` (tools bound with ``bind_tools``, as a real model
  is). With ``InMemorySaver`` (the graph keeps the thread; one message in per turn) and
  without a checkpointer (the host passes the whole history back every turn); each both
  with ``invoke`` and ``ainvoke``;
* **Agents SDK**: ``Runner.run`` of an ``Agent`` with two ``function_tool``s and a custom
  ``Model`` returning the scripted ``ModelResponse``s, tracing disabled; the history is
  carried by ``result.to_input_list()``.

Measured: CPU time (``time.process_time``: every thread of the process) and wall time per
turn, (1) over a fresh 20-turn conversation, (2) over 20 turns of a conversation that
already has 500 turns (each round continues the same conversation: with 5 rounds, turns
501-600). Rounds are interleaved (every framework once per round, the order rotated);
figures are medians of the rounds; ratios are against the fastest peer of the same run.
Then (3) the import time of ``phaseflow.session`` + ``phaseflow.providers.openai`` against
``agents`` (and ``langgraph``), each a fresh ``python -c "import ..."`` (whole process
wall time and CPU time, interleaved, median). ``--profile`` (or ``--only-profile``)
prints phaseflow's per-turn profile (cProfile on CPU time, top functions by cumulative and
by own time, per turn) over 20 turns at the start and after 500 turns.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import itertools
import json
import pstats
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

EMAIL = "ada@example.com"
CUSTOMER = "C-1042"
ANSWER = "Your order O-9 was shipped on Monday; it should arrive on Thursday."
SYSTEM = "You are a support agent for an online shop."


def lookup_customer(email: str) -> dict[str, Any]:
    """Find a customer by email address."""
    return {"customer_id": CUSTOMER, "name": "Ada", "email": email}


def find_order(customer_id: str) -> dict[str, Any]:
    """Find the customer's latest order."""
    return {"order_id": "O-9", "status": "shipped", "customer_id": customer_id}


ARGS_1 = json.dumps({"email": EMAIL})
ARGS_2 = json.dumps({"customer_id": CUSTOMER})


def question(i: int) -> str:
    return f"Where is my order? (message {i})"


class Conversation:
    """One framework's conversation: ``turn(text)`` runs one turn (async: every framework
    is driven from one event loop, the sync ones called from it)."""

    name = ""

    async def turn(self, text: str) -> None:
        raise NotImplementedError


# --- plain Python -------------------------------------------------------------------------


class PlainConversation(Conversation):
    """The loop by hand: what any agent loop must do at least."""

    name = "plain Python"

    def __init__(self) -> None:
        self.history: list[dict[str, Any]] = []
        self.ids = itertools.count(1)
        self.tools: dict[str, Callable[..., Any]] = {
            "lookup_customer": lookup_customer, "find_order": find_order}

    async def model(self, history: list[dict[str, Any]]) -> dict[str, Any]:
        if history[-1]["role"] == "user":
            n = next(self.ids)
            return {"role": "assistant", "content": "", "tool_calls": [
                {"id": f"call_{n}_1", "name": "lookup_customer", "arguments": ARGS_1},
                {"id": f"call_{n}_2", "name": "find_order", "arguments": ARGS_2}]}
        return {"role": "assistant", "content": ANSWER, "tool_calls": []}

    async def turn(self, text: str) -> None:
        history = self.history
        history.append({"role": "user", "content": text})
        while True:
            reply = await self.model(history)
            history.append(reply)
            if not reply["tool_calls"]:
                return
            for call in reply["tool_calls"]:
                out = self.tools[call["name"]](**json.loads(call["arguments"]))
                history.append({"role": "tool", "call_id": call["id"],
                                "content": json.dumps(out)})


# --- phaseflow ----------------------------------------------------------------------------

WORKFLOW = """\
phaseflow: 1
name: order-desk
initial: help
state:
  closed: {type: boolean}
tools:
  lookup_customer:
    description: Find a customer by email address.
    parameters:
      type: object
      properties: {email: {type: string}}
      required: [email]
  find_order:
    description: Find the customer's latest order.
    parameters:
      type: object
      properties: {customer_id: {type: string}}
      required: [customer_id]
phases:
  help:
    goal: Tell the customer where their order is.
    instructions: Look the customer up by email, then find their order.
    tools: [lookup_customer, find_order]
    transitions:
      - to: done
        when: state.closed
  done:
    goal: Say goodbye.
    terminal: true
"""


class ScriptProvider:
    """The scripted model as a phaseflow ``Provider``: O(1) per request (it reads the
    request's last message), fresh call ids every turn, the events ``ScriptedProvider``
    yields for the same replies (usage included)."""

    def __init__(self) -> None:
        self.ids = itertools.count(1)

    async def stream(self, request: Any) -> AsyncIterator[Any]:
        from phaseflow.providers.protocol import (
            StreamEnd,
            TextDelta,
            ToolCallDelta,
            ToolCallEnd,
            ToolCallStart,
            Usage,
        )
        from phaseflow.turn.messages import UserMessage

        if isinstance(request.history[-1], UserMessage):
            n = next(self.ids)
            yield ToolCallStart(0, f"call_{n}_1", "lookup_customer")
            yield ToolCallDelta(0, ARGS_1)
            yield ToolCallEnd(0)
            yield ToolCallStart(1, f"call_{n}_2", "find_order")
            yield ToolCallDelta(1, ARGS_2)
            yield ToolCallEnd(1)
            yield Usage(100, 20)
            yield StreamEnd("tool_use")
        else:
            yield TextDelta(ANSWER)
            yield Usage(150, 15)
            yield StreamEnd("end_turn")


class PhaseflowConversation(Conversation):
    name = "phaseflow"

    def __init__(self, session: Any) -> None:
        self.session = session

    @classmethod
    async def open(cls, sid: str) -> PhaseflowConversation:
        from phaseflow.api import load_workflow_text
        from phaseflow.session import Agent
        from phaseflow.stores import MemoryStore

        agent = Agent(load_workflow_text(WORKFLOW), ScriptProvider(),
                      tools=[lookup_customer, find_order], store=MemoryStore(),
                      system=SYSTEM)
        return cls(await agent.session(sid))

    async def turn(self, text: str) -> None:
        reply = await self.session.reply(text)
        if reply != ANSWER:
            raise SystemExit(f"phaseflow: unexpected reply {reply!r}")


# --- LangGraph ----------------------------------------------------------------------------


def langgraph_graph(checkpointer: Any, use_async: bool) -> Any:
    """The workload's graph compiled with ``checkpointer`` (``None``: none): a model node
    (sync or async) and ``ToolNode``, the edge ``tools_condition``. Also used by
    ``bench_session_durable.py`` with the durable savers."""
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.tools import tool as lc_tool
    from langchain_core.utils.function_calling import convert_to_openai_tool
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    ids = itertools.count(1)

    class ScriptedChatModel(BaseChatModel):
        """Tool calls after a human message, the text after tool results."""

        @property
        def _llm_type(self) -> str:
            return "scripted"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

        def _generate(self, messages: list[BaseMessage], stop: Any = None,
                      run_manager: Any = None, **kwargs: Any) -> ChatResult:
            if isinstance(messages[-1], HumanMessage):
                n = next(ids)
                message = AIMessage(content="", tool_calls=[
                    {"id": f"call_{n}_1", "name": "lookup_customer", "args": {"email": EMAIL},
                     "type": "tool_call"},
                    {"id": f"call_{n}_2", "name": "find_order",
                     "args": {"customer_id": CUSTOMER}, "type": "tool_call"}])
            else:
                message = AIMessage(content=ANSWER)
            return ChatResult(generations=[ChatGeneration(message=message)])

    tools = [lc_tool(lookup_customer), lc_tool(find_order)]
    model = ScriptedChatModel().bind_tools(tools)
    system = SystemMessage(SYSTEM)

    def call_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke([system, *state["messages"]])]}

    async def acall_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke([system, *state["messages"]])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", acall_model if use_async else call_model)
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=checkpointer)


def langgraph_factory(saver: bool, use_async: bool) -> Callable[[], Conversation]:
    from langchain_core.messages import HumanMessage
    from langgraph.checkpoint.memory import InMemorySaver

    def build() -> Any:
        return langgraph_graph(InMemorySaver() if saver else None, use_async)

    name = ("LangGraph + InMemorySaver" if saver else "LangGraph, no checkpointer") + (
        " (ainvoke)" if use_async else " (invoke)")

    class LangGraphConversation(Conversation):
        def __init__(self) -> None:
            self.name = name
            self.app = build()
            self.config = {"configurable": {"thread_id": "t1"}}
            self.history: list[Any] = []

        async def turn(self, text: str) -> None:
            message = HumanMessage(text)
            if saver:
                state_in: dict[str, Any] = {"messages": [message]}
                config: Any = self.config
            else:
                state_in = {"messages": [*self.history, message]}
                config = None
            if use_async:
                out = await self.app.ainvoke(state_in, config)
            else:
                out = self.app.invoke(state_in, config)
            if not saver:
                self.history = out["messages"]
            if out["messages"][-1].content != ANSWER:
                raise SystemExit(f"{name}: unexpected reply {out['messages'][-1]!r}")

    return LangGraphConversation


# --- the OpenAI Agents SDK ----------------------------------------------------------------


def agents_agent() -> tuple[Any, Any]:
    """The workload's Agents SDK ``Agent`` (a scripted ``Model``, two ``function_tool``s)
    and a ``RunConfig`` with tracing disabled (also used by ``bench_session_durable.py``)."""
    from agents import (
        Agent,
        Model,
        ModelResponse,
        RunConfig,
        Usage,
        function_tool,
        set_tracing_disabled,
    )
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    set_tracing_disabled(True)
    ids = itertools.count(1)

    class ScriptedModel(Model):
        async def get_response(self, system_instructions: Any, input: Any,
                               model_settings: Any, tools: Any, output_schema: Any,
                               handoffs: Any, tracing: Any, *, previous_response_id: Any = None,
                               conversation_id: Any = None, prompt: Any = None
                               ) -> ModelResponse:
            last = input[-1] if isinstance(input, list) else {"role": "user"}
            if last.get("role") == "user":
                n = next(ids)
                output: list[Any] = [
                    ResponseFunctionToolCall(type="function_call", id=f"fc_{n}_1",
                                             call_id=f"call_{n}_1", name="lookup_customer",
                                             arguments=ARGS_1, status="completed"),
                    ResponseFunctionToolCall(type="function_call", id=f"fc_{n}_2",
                                             call_id=f"call_{n}_2", name="find_order",
                                             arguments=ARGS_2, status="completed")]
            else:
                output = [ResponseOutputMessage(
                    id=f"msg_{next(ids)}", type="message", role="assistant",
                    status="completed", content=[ResponseOutputText(
                        type="output_text", text=ANSWER, annotations=[])])]
            return ModelResponse(output=output, usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    agent = Agent(name="support", instructions=SYSTEM, model=ScriptedModel(),
                  tools=[function_tool(lookup_customer), function_tool(find_order)])
    return agent, RunConfig(tracing_disabled=True)


def agents_factory() -> Callable[[], Conversation]:
    from agents import Runner

    agent, run_config = agents_agent()

    class AgentsConversation(Conversation):
        name = "Agents SDK (Runner.run)"

        def __init__(self) -> None:
            self.items: list[Any] = []

        async def turn(self, text: str) -> None:
            result = await Runner.run(agent, [*self.items, {"role": "user", "content": text}],
                                      run_config=run_config)
            if result.final_output != ANSWER:
                raise SystemExit(f"Agents SDK: unexpected reply {result.final_output!r}")
            self.items = result.to_input_list()

    return AgentsConversation


# --- measuring ----------------------------------------------------------------------------


@dataclass
class Entry:
    name: str
    peer: bool
    make: Callable[[], Awaitable[Conversation]]


def entries() -> list[Entry]:
    out: list[Entry] = []

    async def plain() -> Conversation:
        return PlainConversation()

    out.append(Entry("plain Python", False, plain))
    counter = itertools.count(1)

    async def phaseflow() -> Conversation:
        return await PhaseflowConversation.open(f"s{next(counter)}")

    out.append(Entry("phaseflow", False, phaseflow))

    def wrap(factory: Callable[[], Conversation]) -> Callable[[], Awaitable[Conversation]]:
        async def make() -> Conversation:
            return factory()
        return make

    try:
        for saver in (False, True):
            for use_async in (False, True):
                f = langgraph_factory(saver, use_async)
                out.append(Entry(f().name, True, wrap(f)))
    except ImportError as exc:
        print(f"skipping LangGraph: {exc} (pip install langgraph langchain-core)")
    try:
        a = agents_factory()
        out.append(Entry(a().name, True, wrap(a)))
    except ImportError as exc:
        print(f"skipping the Agents SDK: {exc} (pip install openai-agents)")
    return out


async def timed(conv: Conversation, first: int, n: int) -> tuple[float, float]:
    """CPU and wall seconds per turn over turns ``first .. first + n - 1``."""
    gc.collect()
    c0, w0 = time.process_time(), time.perf_counter()
    for i in range(first, first + n):
        await conv.turn(question(i))
    return (time.process_time() - c0) / n, (time.perf_counter() - w0) / n


async def run_all(rounds: int, turns: int, long: int) -> None:
    es = entries()
    short: dict[str, list[tuple[float, float]]] = {e.name: [] for e in es}
    later: dict[str, list[tuple[float, float]]] = {e.name: [] for e in es}
    # warm-up: one conversation of a few turns each (first-call caches, imports)
    for e in es:
        conv = await e.make()
        await timed(conv, 0, 3)
    print(f"{len(es)} variants; {rounds} rounds of {turns} turns on a fresh conversation ...",
          flush=True)
    for r in range(rounds):
        order = es[r % len(es):] + es[: r % len(es)]
        for e in order:
            conv = await e.make()
            short[e.name].append(await timed(conv, 0, turns))
    print(f"building a {long}-turn conversation each ...", flush=True)
    long_convs: dict[str, Conversation] = {}
    for e in es:
        conv = await e.make()
        t0 = time.perf_counter()
        for i in range(long):
            await conv.turn(question(i))
        long_convs[e.name] = conv
        print(f"  {e.name}: {time.perf_counter() - t0:.1f} s", flush=True)
    print(f"{rounds} rounds of {turns} more turns ...", flush=True)
    for r in range(rounds):
        order = es[r % len(es):] + es[: r % len(es)]
        for e in order:
            first = long + r * turns
            later[e.name].append(await timed(long_convs[e.name], first, turns))

    def med(xs: list[tuple[float, float]], k: int) -> float:
        return statistics.median(x[k] for x in xs)

    peers = [e for e in es if e.peer]
    fastest_short = min((med(short[e.name], 0) for e in peers), default=None)
    fastest_long = min((med(later[e.name], 0) for e in peers), default=None)
    print()
    print(f"CPU and wall time per turn (median of {rounds} interleaved rounds); ratio: CPU "
          f"against the fastest peer of the same column; growth: after / at {turns}")
    print(f"| framework | {turns} turns: CPU | wall | ratio | after {long}: CPU | wall | "
          "ratio | growth |")
    print("|---|---|---|---|---|---|---|---|")
    for e in es:
        c1, w1 = med(short[e.name], 0), med(short[e.name], 1)
        c2, w2 = med(later[e.name], 0), med(later[e.name], 1)
        r1 = f"{c1 / fastest_short:.3f}" if fastest_short else "-"
        r2 = f"{c2 / fastest_long:.3f}" if fastest_long else "-"
        print(f"| {e.name} | {c1 * 1e3:.3f} ms | {w1 * 1e3:.3f} ms | {r1} | "
              f"{c2 * 1e3:.3f} ms | {w2 * 1e3:.3f} ms | {r2} | {c2 / c1:.2f} |")
    if fastest_short:
        pf1 = med(short["phaseflow"], 0)
        pf2 = med(later["phaseflow"], 0)
        print(f"\nphaseflow / fastest peer at {turns} turns: {pf1 / fastest_short:.3f} "
              f"(target <= 0.1); per turn after {long} / at {turns}: {pf2 / pf1:.2f} "
              "(target <= 1.2)")


# --- import time --------------------------------------------------------------------------

IMPORTS = {
    "python -c pass": "pass",
    "phaseflow.session + phaseflow.providers.openai":
        "import phaseflow.session, phaseflow.providers.openai",
    "phaseflow.session": "import phaseflow.session",
    "agents (Agents SDK)": "import agents",
    "langgraph (StateGraph, ToolNode)":
        "import langgraph.graph, langgraph.prebuilt",
}


def import_times(runs: int) -> None:
    """Each import in a fresh process: wall time of the whole process, and its CPU time
    (user + sys, from ``getrusage``), interleaved, median of ``runs``."""
    root = str(Path(__file__).resolve().parent.parent)
    available = {}
    for label, code in IMPORTS.items():
        ok = subprocess.run([sys.executable, "-c", code], cwd=root,
                            capture_output=True).returncode == 0
        if ok:
            available[label] = code
        else:
            print(f"skipping import of {label}: not installed")
    wall: dict[str, list[float]] = {k: [] for k in available}
    cpu: dict[str, list[float]] = {k: [] for k in available}
    for _ in range(runs):
        for label, code in available.items():
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], cwd=root, check=True)
            wall[label].append(time.perf_counter() - t0)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu[label].append(after.ru_utime + after.ru_stime
                              - before.ru_utime - before.ru_stime)
    print(f"\nimport: a fresh `python -c`, median of {runs} interleaved runs")
    print("| import | wall | CPU | wall ratio to agents |")
    print("|---|---|---|---|")
    key = "agents (Agents SDK)"
    base = statistics.median(wall[key]) if key in wall else None
    for label in available:
        m = statistics.median(wall[label])
        ratio = f"{m / base:.2f}" if base else "-"
        print(f"| {label} | {m * 1e3:.0f} ms | {statistics.median(cpu[label]) * 1e3:.0f} ms "
              f"| {ratio} |")


# --- profile ------------------------------------------------------------------------------


async def profile(turns: int, long: int, top: int) -> None:
    """phaseflow's own per-turn cost, by function, per turn (cProfile inflates small
    calls, about 2.5x here: read it for where the time goes, not for the total). The
    event loop's and this script's frames are left out of the tables."""
    for history in (0, long):
        conv = await PhaseflowConversation.open(f"profile{history}")
        for i in range(history):
            await conv.turn(question(i))
        for i in range(3):
            await conv.turn(question(history + i))
        prof = cProfile.Profile(time.process_time)  # CPU: preemption is not counted
        gc.collect()
        prof.enable()
        for i in range(turns):
            await conv.turn(question(history + 3 + i))
        prof.disable()
        stats = pstats.Stats(prof)
        rows = _rows(stats, turns)
        total = stats.total_tt / turns  # type: ignore[attr-defined]
        for index, label in ((3, "cumulative"), (2, "own time")):
            print(f"\n=== phaseflow after {history + 3} turns of history: top {top} by "
                  f"{label}, per turn (profiled total {total * 1e6:.0f} us a turn) ===")
            print("| calls | own us | cumulative us | function |")
            print("|---|---|---|---|")
            for calls, name, own, cum in sorted(rows, key=lambda r: -float(r[index]))[:top]:
                print(f"| {calls:g} | {own:.1f} | {cum:.1f} | `{name}` |")


_SKIP = ("asyncio/base_events.py", "asyncio/events.py", "bench_session.py")


def _rows(stats: pstats.Stats, turns: int) -> list[tuple[float, str, float, float]]:
    """(calls, name, own us, cumulative us) per turn, without the driver's frames."""
    root = str(Path(__file__).resolve().parent.parent) + "/"
    out = []
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    for (filename, line, function), (_, calls, own, cum, _callers) in raw.items():
        if any(s in filename for s in _SKIP) or function == "<method 'run' of " \
                "'_contextvars.Context' objects>":
            continue
        if filename.startswith(root):
            where = filename[len(root):]
        elif "site-packages/" in filename:
            where = filename.split("site-packages/", 1)[1]
        elif "/lib/python3" in filename:
            where = filename.split("/lib/", 1)[1]
        else:
            where = filename
        name = f"{where}:{line}({function})" if where != "~" else function
        out.append((calls / turns, name, own / turns * 1e6, cum / turns * 1e6))
    return out


# --- a turn inside a callee three levels deep ---------------------------------------------


def _callers(folder: Path) -> str:
    """``l0`` calls ``l1`` calls ``l2`` calls the order desk (each from its initial phase):
    the path of the turn is ``l0 › enter › l1 › enter › l2 › enter › order-desk › help``."""
    (folder / "order-desk.yaml").write_text(WORKFLOW, encoding="utf-8")
    for level, callee, end in ((2, "order-desk", "done"), (1, "l2", "out"), (0, "l1", "out")):
        (folder / f"l{level}.yaml").write_text(f"""\
phaseflow: 1
name: l{level}
initial: enter
uses: {{inner: {callee}.yaml}}
phases:
  enter:
    goal: Level {level}.
    call: inner
    transitions:
      - to: out
        when: returned == '{end}'
  out:
    goal: Out.
    terminal: true
""", encoding="utf-8")
    return str(folder / "l0.yaml")


async def _composed_session(path: str | None, sid: str) -> Any:
    from phaseflow.api import load_workflow, load_workflow_text
    from phaseflow.session import Agent
    from phaseflow.stores import MemoryStore

    workflow = load_workflow(path) if path else load_workflow_text(WORKFLOW)
    agent = Agent(workflow, ScriptProvider(), tools=[lookup_customer, find_order],
                  store=MemoryStore(), system=SYSTEM)
    session = await agent.session(sid)
    return PhaseflowConversation(session)


async def composed(rounds: int, turns: int, warm: int) -> None:
    """CPU per turn of the same turn at the top (the order desk) and three calls deep
    (``l0`` -> ``l1`` -> ``l2`` -> the order desk), rounds interleaved, medians."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        deep_path = _callers(Path(folder))
        cpu: dict[str, list[float]] = {"top": [], "deep": []}
        for r in range(rounds):
            order = [("top", None), ("deep", deep_path)]
            for name, path in order if r % 2 == 0 else order[::-1]:
                conv = await _composed_session(path, f"{name}-{r}")
                for i in range(warm):
                    await conv.turn(question(i))
                if name == "deep":
                    depth = len(conv.session.path) // 2 - 1
                    if depth != 3:
                        raise SystemExit(f"not three calls deep: {conv.session.path}")
                cpu[name].append((await timed(conv, warm, turns))[0])
        top, deep = statistics.median(cpu["top"]), statistics.median(cpu["deep"])
        print(f"turn at the top:          {top * 1000:.3f} ms CPU")
        print(f"turn three calls deep:    {deep * 1000:.3f} ms CPU")
        print(f"deep / top:               {deep / top:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--long", type=int, default=500, help="history before the 2nd run")
    parser.add_argument("--import-runs", type=int, default=9)
    parser.add_argument("--profile", action="store_true", help="print phaseflow's profile")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--skip-imports", action="store_true")
    parser.add_argument("--only-profile", action="store_true")
    parser.add_argument("--composed", action="store_true",
                        help="only: a turn three calls deep against the same at the top")
    args = parser.parse_args()
    if args.composed:
        asyncio.run(composed(args.rounds, args.turns, 10))
        return
    if not args.only_profile:
        asyncio.run(run_all(args.rounds, args.turns, args.long))
        if not args.skip_imports:
            import_times(args.import_runs)
    if args.profile or args.only_profile:
        asyncio.run(profile(args.turns, args.long, args.top))


if __name__ == "__main__":
    main()
