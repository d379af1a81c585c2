"""Where a turn's span goes: under a server's caller (``trace_parent``), under a host's
current span, and linked to the sender of a message another worker queued."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from opentelemetry.trace import SpanKind

from phaseflow import Agent, MemoryStore, ScriptedProvider
from phaseflow.observe import trace_parent
from tests.support.otlp_memory import Traced

WORKFLOW = """\
phaseflow: 1
name: inbox
initial: talk
tools:
  wait:
    description: Wait for something
phases:
  talk:
    goal: Talk.
    tools: [wait]
"""

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN_ID = "00f067aa0ba902b7"


def make(tmp_path: Path, traced: Traced, script: list[Any], tools: Any = None,
         **options: Any) -> Agent:
    (tmp_path / "inbox.yaml").write_text(WORKFLOW, encoding="utf-8")
    return Agent(tmp_path / "inbox.yaml", ScriptedProvider(script),
                 tools=tools or {"wait": lambda: "waited"}, **options, **traced.providers)


def test_a_turn_continues_the_caller_s_traceparent(tmp_path: Path, traced: Traced) -> None:
    session = make(tmp_path, traced, ["Hi.", "Again."]).session_sync("c-1")
    with trace_parent({"traceparent": f"00-{TRACE_ID}-{SPAN_ID}-01"}):
        session.reply_sync("hello")
    (turn,) = traced.named("invoke_agent")
    assert f"{turn.context.trace_id:032x}" == TRACE_ID
    assert turn.parent is not None and f"{turn.parent.span_id:016x}" == SPAN_ID
    # a carrier that is not a trace context is ignored: a trace of its own
    with trace_parent({"traceparent": "00-not-a-trace-01"}):
        session.reply_sync("again")
    assert traced.named("invoke_agent")[-1].parent is None


def test_a_turn_goes_under_the_host_s_current_span(tmp_path: Path, traced: Traced) -> None:
    session = make(tmp_path, traced, ["Hi."]).session_sync("c-2")
    tracer = traced.tracer_provider.get_tracer("host")
    with tracer.start_as_current_span("handle request") as host:
        session.reply_sync("hello")
    (turn,) = traced.named("invoke_agent")
    assert turn.parent is not None
    assert turn.parent.span_id == host.get_span_context().span_id


def test_a_message_queued_for_another_worker_links_its_turn_to_the_sender(
        tmp_path: Path, traced: Traced) -> None:
    async def scenario() -> None:
        release = asyncio.Event()
        started = asyncio.Event()

        async def wait() -> str:
            started.set()
            await release.wait()
            return "waited"

        store = MemoryStore()
        script: list[Any] = [{"calls": [{"wait": {}}]}, "Done waiting.", "Got it."]
        holder = make(tmp_path, traced, script, tools={"wait": wait}, store=store)
        other = make(tmp_path, traced, script, tools={"wait": wait}, store=store)
        first = await holder.session("q-1")
        running = asyncio.ensure_future(first.reply("start"))
        await started.wait()
        tracer = traced.tracer_provider.get_tracer("sender")
        with tracer.start_as_current_span("sender request"):
            queued = await (await other.session("q-1")).reply("and this too")
        assert queued.status == "queued"
        release.set()
        assert await running == "Done waiting."

    asyncio.run(scenario())
    (enqueue,) = traced.named("phaseflow.enqueue")
    (sender,) = traced.named("sender request")
    assert enqueue.kind is SpanKind.PRODUCER
    assert enqueue.parent is not None and enqueue.parent.span_id == sender.context.span_id
    first, second = traced.named("invoke_agent")
    assert [s.attributes["phaseflow.turn"] for s in (first, second)] == [1, 2]  # type: ignore[index]
    assert not first.links
    assert [(link.context.span_id, dict(link.attributes or {})) for link in second.links] == [
        (enqueue.context.span_id, {"phaseflow.link": "queued_message"})]
