"""Shared parts of the session tests: the pure core's inputs built by hand, a small
workflow written for the tests, a provider whose replies a test draws as it goes, and
tools that write down every invocation.

Everything here is real phaseflow code driven from the outside: the core is the real
``step``, the agent the real :class:`~phaseflow.session.agent.Agent` on a real
:class:`~phaseflow.stores.memory.MemoryStore`. Only the model and the host's tools are
the test's, because those are what a test must control.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from phaseflow.providers.protocol import (
    ProviderEvent,
    ProviderFailure,
    ProviderReply,
    ProviderRequest,
    StreamEnd,
    TextDelta,
    ToolCallDelta,
    ToolCallStart,
)
from phaseflow.session import events as ev
from phaseflow.session.core import step
from phaseflow.session.values import (
    Command,
    Core,
    Input,
    Limits,
    OfferedTool,
    Persist,
    PhaseView,
    Step,
)
from phaseflow.spec.loader import compile_text
from phaseflow.spec.model import Workflow
from phaseflow.tools.function import FunctionTool, ToolContext, ToolResult, tool
from phaseflow.turn.messages import AssistantMessage, History, Message, ToolResultMessage

# --- the pure core's inputs ------------------------------------------------------------

OBJECT = {"type": "object"}
Q_SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"],
            "additionalProperties": False}


def offered(name: str, *, approval: bool = False, writes: tuple[str, ...] = (),
            parameters: dict[str, Any] | None = None) -> OfferedTool:
    """One offered tool, as the runner would describe it."""
    return OfferedTool(name, f"the {name} tool", parameters or OBJECT, approval, writes)


def go_to_phase(*targets: str) -> OfferedTool:
    """The built-in move tool offering ``targets`` (the schema the view builds)."""
    return OfferedTool("go_to_phase", "move", {
        "type": "object",
        "properties": {"phase": {"type": "string", "enum": list(targets)},
                       "reason": {"type": "string"}},
        "required": ["phase"], "additionalProperties": False})


def record_tool(collect: dict[str, str]) -> OfferedTool:
    types = {"string": {"type": "string"}, "integer": {"type": "integer"}, "any": {}}
    return OfferedTool("record", "record", {
        "type": "object", "properties": {k: types.get(t, {}) for k, t in collect.items()},
        "additionalProperties": False})


def view(phase: str = "work", *tools: OfferedTool, terminal: bool = False,
         collect: dict[str, str] | None = None) -> PhaseView:
    collect = dict(collect or {})
    all_tools = (*tools, record_tool(collect)) if collect else tools
    return PhaseView(phase, terminal, all_tools, collect)


def call(call_id: str, name: str, arguments: Any = None) -> tuple[str, str, str]:
    """One call of a reply, as the runner assembles it from a stream."""
    text = arguments if isinstance(arguments, str) else json.dumps(
        {} if arguments is None else arguments)
    return (call_id, name, text)


def reply(text: str = "", *calls: tuple[str, str, str]) -> ProviderReply:
    return ProviderReply(text, tuple(calls), "tool_use" if calls else "end_turn")


@dataclass
class Trace:
    """The core driven input by input: every step kept, so a test reads what was
    committed and what was performed, in order."""

    core: Core
    limits: Limits = field(default_factory=Limits)
    steps: list[Step] = field(default_factory=list)

    def feed(self, event: Input) -> tuple[Command, ...]:
        s = step(self.core, event, self.limits)
        self.core = s.core
        self.steps.append(s)
        return s.commands

    @property
    def commands(self) -> list[Command]:
        return [c for s in self.steps for c in s.commands]

    @property
    def persisted(self) -> list[ev.Event]:
        """Every event committed so far, in commit order."""
        return [e for c in self.commands if isinstance(c, Persist) for e in c.events]

    def of_type(self, kind: type[ev.Event]) -> list[Any]:
        return [e for e in self.persisted if isinstance(e, kind)]


def answered_once(history: Iterable[Message]) -> dict[str, int]:
    """For each tool call of ``history``, how many results answer it (the rule: one)."""
    counts: dict[str, int] = {}
    for m in history:
        if isinstance(m, AssistantMessage):
            for c in m.tool_calls:
                counts.setdefault(c.id, 0)
        elif isinstance(m, ToolResultMessage):
            counts[m.call_id] = counts.get(m.call_id, 0) + 1
    return counts


def open_or_doubled(history: Iterable[Message]) -> dict[str, int]:
    """The calls of ``history`` that have no result or more than one (empty when the
    history is well formed). Each assistant message's calls are checked against the
    results that follow it, before the next assistant message."""
    bad: dict[str, int] = {}
    pending: dict[str, int] = {}

    def close() -> None:
        for cid, n in pending.items():
            if n != 1:
                bad[cid] = n
        pending.clear()

    for m in history:
        if isinstance(m, AssistantMessage):
            close()
            for c in m.tool_calls:
                pending[c.id] = 0
        elif isinstance(m, ToolResultMessage):
            if m.call_id in pending:
                pending[m.call_id] += 1
            else:
                bad[m.call_id] = bad.get(m.call_id, 0) + 1
        else:
            close()
    close()
    return bad


def history_of(messages: Sequence[Message]) -> History:
    return History(messages)


# --- the stateful test's workflow --------------------------------------------------------

DESK_YAML = """\
phaseflow: 1
name: stateful-desk
description: A small desk for the session's stateful test.
initial: intake
state:
  name: {type: string}
  topic: {type: string}
  hits: {type: integer, default: 0}
  ticket: {type: string}
  note: {type: string}
  paid: {type: boolean}
  entered_work: {type: integer}
  audit: {type: string}
tools:
  lookup:
    description: Look a topic up
    writes: [topic, hits]
    idempotent: true
    parameters:
      type: object
      properties: {q: {type: string}}
      required: [q]
      additionalProperties: false
  open_ticket:
    description: Open a ticket
    writes: [ticket]
  pay:
    description: Take the payment
    writes: [paid]
    approval: always
  add_note:
    description: Add a note
    writes: [note]
    parameters:
      type: object
      properties: {text: {type: string}}
      additionalProperties: false
  wait:
    description: Wait for something outside
phases:
  intake:
    goal: Learn the customer's name and topic.
    collect: [name]
    tools: [lookup, wait]
    transitions:
      - to: work
        trigger: model
        description: The customer is known
  work:
    goal: Open a ticket and take the payment.
    tools: [open_ticket, pay, add_note, wait]
    on_enter:
      - set: {entered_work: 1}
      - call: audit_hook
    transitions:
      - to: review
        when: state.paid == true
      - to: intake
        trigger: model
      - to: review
        trigger: model
  review:
    goal: Review the ticket.
    tools: [add_note]
    transitions:
      - to: closed
        trigger: model
        when: state.ticket
      - to: work
        trigger: model
  closed:
    goal: Say goodbye.
    terminal: true
"""

#: the keys each tool may write (the workflow's ``writes``)
DESK_WRITES: dict[str, tuple[str, ...]] = {
    "lookup": ("topic", "hits"), "open_ticket": ("ticket",), "pay": ("paid",),
    "add_note": ("note",), "wait": (),
}
#: keys the phases' effects write (``on_enter`` of work)
DESK_EFFECT_KEYS = frozenset({"entered_work", "audit"})
DESK_COLLECT: dict[str, tuple[str, ...]] = {"intake": ("name",)}
DESK_PHASES = ("intake", "work", "review", "closed")
#: the tools an interrupted turn runs again when it is resumed
DESK_IDEMPOTENT = frozenset({"lookup"})


def audit_hook(ctx: Any) -> dict[str, Any]:
    """work's ``on_enter`` call: an effect that writes a key no tool may write."""
    return {"audit": "entered"}


def desk_workflow() -> Workflow:
    return compile_text(DESK_YAML, {"audit_hook": audit_hook}, path="stateful-desk.yaml")


# --- tools that write down every invocation ------------------------------------------------


@dataclass(frozen=True)
class Invocation:
    call_id: str
    name: str
    arguments: dict[str, Any]
    phase: str
    idempotency_key: str


class Gate:
    """Where a test stops a turn on purpose: a blocking tool, a provider stream that
    hangs, a retry's sleep. ``armed``: the next of those points blocks (once); the test
    awaits ``reached`` and then cancels, or sends, and ``release()``s."""

    def __init__(self) -> None:
        self.armed = False
        self.reached = asyncio.Event()
        self._release = asyncio.Event()
        self.where = ""

    def arm(self) -> None:
        self.armed = True
        self.reached = asyncio.Event()
        self._release = asyncio.Event()
        self.where = ""

    def disarm(self) -> None:
        self.armed = False

    async def point(self, where: str) -> bool:
        """Block here if armed (then True: the gate was taken), else return False."""
        if not self.armed:
            return False
        self.armed = False
        self.where = where
        self.reached.set()
        await self._release.wait()
        return True

    def release(self) -> None:
        self._release.set()


class DeskTools:
    """The desk's tools. Each returns a mapping with a key it may write and one it may
    not (with the value ``FORGED``, or ``paid: False``: the session must write only the
    first); ``add_note`` fails for the text ``boom``; ``wait`` blocks at the gate.
    ``check(ctx)`` runs first in every tool (a test checks there what was committed
    before the tool was let run)."""

    def __init__(self, gate: Gate) -> None:
        self.gate = gate
        self.invocations: list[Invocation] = []
        self.check: Callable[[Any], Awaitable[None]] | None = None

    async def _note(self, name: str, arguments: dict[str, Any], ctx: Any) -> None:
        self.invocations.append(Invocation(ctx.call_id, name, arguments, ctx.phase,
                                           ctx.idempotency_key))
        if self.check is not None:
            await self.check(ctx)

    def mapping(self) -> dict[str, FunctionTool]:
        def make(name: str, fn: Callable[..., Any]) -> FunctionTool:
            made: FunctionTool = tool(name=name, description=f"the {name} tool",
                                      parameters={"type": "object"})(fn)
            assert made.context_parameter == "ctx"
            return made

        async def lookup(ctx: ToolContext, **arguments: Any) -> Any:
            await self._note("lookup", arguments, ctx)
            return {"topic": arguments.get("q", ""), "hits": 3, "ticket": FORGED}

        async def open_ticket(ctx: ToolContext, **arguments: Any) -> Any:
            await self._note("open_ticket", arguments, ctx)
            return {"ticket": f"T-{ctx.call_id}", "paid": False}

        async def pay(ctx: ToolContext, **arguments: Any) -> Any:
            await self._note("pay", arguments, ctx)
            return ToolResult("paid", {"paid": True, "name": FORGED})

        async def add_note(ctx: ToolContext, **arguments: Any) -> Any:
            await self._note("add_note", arguments, ctx)
            if arguments.get("text") == "boom":
                raise RuntimeError("the note service is down")
            return {"note": str(arguments.get("text", "")), "audit": FORGED}

        async def wait(ctx: ToolContext, **arguments: Any) -> Any:
            await self._note("wait", arguments, ctx)
            await self.gate.point("tool")
            return "waited"

        return {"lookup": make("lookup", lookup), "open_ticket": make("open_ticket", open_ticket),
                "pay": make("pay", pay), "add_note": make("add_note", add_note),
                "wait": make("wait", wait)}


#: the value tools return for keys they may not write
FORGED = "forged"


# --- a provider whose replies are drawn as the requests come --------------------------------

Plan = ProviderReply | ProviderFailure | Exception | str
"""What the provider does for one request: reply, fail, raise, or ``"hang"``."""


class DrawnProvider:
    """A model whose next reply is chosen by ``choose(request)`` when the request arrives
    (a test sets ``choose`` to draw from hypothesis data). ``requests`` and ``plans`` keep
    every request and what it was answered with, pairwise."""

    def __init__(self, gate: Gate) -> None:
        self.gate = gate
        self.choose: Callable[[ProviderRequest], Plan] = lambda request: ProviderReply("ok")
        self.requests: list[ProviderRequest] = []
        self.plans: list[Plan] = []
        self.compactions: list[ProviderRequest] = []

    async def stream(self, request: ProviderRequest) -> AsyncIterator[ProviderEvent]:
        if request.purpose == "compaction":  # (the session's own request: no plan)
            self.compactions.append(request)
            yield TextDelta(f"summary {len(self.compactions)}")
            yield StreamEnd()
            return
        self.requests.append(request)
        plan = self.choose(request)
        self.plans.append(plan)
        if plan == "hang":
            await self.gate.point("provider")
            plan = ProviderReply("released")
        if isinstance(plan, Exception):
            raise plan
        if isinstance(plan, ProviderFailure):
            yield plan
            return
        assert isinstance(plan, ProviderReply)
        if plan.text:
            yield TextDelta(plan.text)
        for index, (cid, name, arguments) in enumerate(plan.calls):
            yield ToolCallStart(index, cid, name)
            yield ToolCallDelta(index, arguments)
        yield StreamEnd(plan.stop)


# --- the bundled refund desk, with tools that write down every invocation -------------------

REFUND_PATH = str(Path(__file__).resolve().parents[2] / "workflows" / "refund-desk.yaml")
REFUND_PHASES = ("greet", "locate_order", "manager_approval", "refund", "done", "declined",
                 "handoff")


def refund_hooks() -> dict[str, Callable[..., Any]]:
    """The refund desk's effects: a policy with a 30-day window; the rest do nothing."""
    def fetch_refund_policy(ctx: Any, **args: Any) -> dict[str, Any]:
        return {"policy": {"name": "standard", "window_days": 30, "refund_method": "card"}}

    def noop(ctx: Any, **args: Any) -> None:
        return None

    return {"fetch_refund_policy": fetch_refund_policy, "request_manager_approval": noop,
            "record_refund_audit": noop, "notify_customer": noop, "transfer_to_human": noop}


class RefundTools(DeskTools):
    """The refund desk's catalogue, each tool writing plausible values of its ``writes``
    (so that runs get somewhere) and a ``refund_reason`` it may not write; the order
    search blocks at the gate."""

    def mapping(self) -> dict[str, FunctionTool]:
        def make(name: str, result: Callable[[dict[str, Any], Any], Any],
                 gated: bool = False) -> FunctionTool:
            async def fn(ctx: ToolContext, **arguments: Any) -> Any:
                await self._note(name, arguments, ctx)
                if gated:
                    await self.gate.point("tool")
                return result(arguments, ctx)

            made: FunctionTool = tool(name=name, description=f"the {name} tool",
                                      parameters={"type": "object"})(fn)
            return made

        def amount(arguments: dict[str, Any]) -> float:
            return 900.0 if arguments.get("order_id") == "O-big" else 120.0

        results: dict[str, tuple[Callable[[dict[str, Any], Any], Any], bool]] = {
            "crm.lookup_customer": (lambda a, c: {
                "customer_id": "C-1", "customer": {"name": "Ada", "verified": False},
                "refund_reason": FORGED}, False),
            "crm.verify_identity": (lambda a, c: ToolResult("verified", {
                "customer": {"name": "Ada", "verified": a.get("answer") != "wrong"},
                "verification_attempts": 1 if a.get("answer") == "wrong" else 0,
                "refund_reason": FORGED}), False),
            "orders.search": (lambda a, c: [{"order_id": "O-1"}, {"order_id": "O-big"}], True),
            "orders.select": (lambda a, c: {
                "order_id": str(a.get("order_id", "O-1")), "amount": amount(a),
                "order": {"status": "delivered", "days_since_delivery": 3},
                "refund_reason": FORGED}, False),
            "approvals.check_status": (lambda a, c: {"approval_status": "approved",
                                                     "refund_id": FORGED}, False),
            "payments.issue_refund": (lambda a, c: {"refund_id": f"R-{c.call_id}",
                                                    "refund_reason": FORGED}, False),
            "helpdesk.add_note": (lambda a, c: {"refund_reason": FORGED}, False),
        }
        return {name: make(name, fn, gated) for name, (fn, gated) in results.items()}
