"""Shared by the provider tests: build a request, drain a stream, assemble a reply."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from phaseflow.providers.assembly import ReplyAssembler
from phaseflow.providers.protocol import (
    Provider,
    ProviderEvent,
    ProviderFailure,
    ProviderReply,
    ProviderRequest,
    StreamEnd,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolSpec,
)
from phaseflow.turn.messages import Message

OBJECT = {"type": "object", "properties": {}}


def request(*history: Message, tools: Sequence[str | ToolSpec] = (), system: str = "Be brief.",
            request_id: str = "req-1", **options: Any) -> ProviderRequest:
    specs = tuple(t if isinstance(t, ToolSpec) else ToolSpec(t, f"the {t} tool", OBJECT)
                  for t in tools)
    return ProviderRequest(options.pop("model", ""), system, tuple(history), specs,
                           request_id, **options)


def collect(provider: Provider, req: ProviderRequest) -> list[ProviderEvent]:
    """Every event of one reply (closing the provider's clients, if it has any, in the
    same event loop)."""
    async def run() -> list[ProviderEvent]:
        try:
            return [e async for e in provider.stream(req)]
        finally:
            close = getattr(provider, "aclose", None)
            if close is not None:
                await close()
    return asyncio.run(run())


def assemble(events: Sequence[ProviderEvent]) -> ProviderReply | ProviderFailure:
    """The reply a stream describes, assembled as the session assembles it
    (:class:`ReplyAssembler`, which checks every event), after checking the protocol's
    order more strictly than the session needs: a failure ends the stream; every call
    starts once, in order, ends once, and gets fragments only in between; the stream ends
    with exactly one ``StreamEnd``, last."""
    assembler = ReplyAssembler()
    started: set[int] = set()
    ended: set[int] = set()
    for n, event in enumerate(events):
        last = n == len(events) - 1
        if isinstance(event, ToolCallStart):
            assert event.index not in started, "a call starts once"
            assert event.index == len(started), "calls are numbered in order"
            started.add(event.index)
        elif isinstance(event, ToolCallDelta | ToolCallEnd):
            assert event.index in started and event.index not in ended
            if isinstance(event, ToolCallEnd):
                ended.add(event.index)
        elif isinstance(event, StreamEnd):
            assert ended == started, "every call ended"
        outcome = assembler.add(event)
        if isinstance(outcome, ProviderFailure):
            assert outcome is event, outcome.message  # not the assembler's: a malformed event
            assert last, "a failure ends the stream"
            return outcome
        if outcome == "end":
            assert last, "StreamEnd is last"
            return assembler.reply()
    raise AssertionError("the stream ended without StreamEnd or a failure")
