"""Shared by the provider tests: build a request, drain a stream, assemble a reply."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from phaseflow.session.provider import (
    Provider,
    ProviderEvent,
    ProviderFailure,
    ProviderReply,
    ProviderRequest,
    ReasoningDelta,
    StreamEnd,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolSpec,
    Usage,
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
    """The reply a stream describes, checking the protocol as a session relies on it:
    a failure ends the stream; every call starts once, ends once, and gets fragments only
    in between; the stream ends with exactly one ``StreamEnd``, last."""
    text, reasoning = [], []
    calls: dict[int, list[str]] = {}
    ended: set[int] = set()
    usage = Usage()
    for n, event in enumerate(events):
        if isinstance(event, ProviderFailure):
            assert n == len(events) - 1, "a failure ends the stream"
            return event
        if isinstance(event, TextDelta):
            text.append(event.text)
        elif isinstance(event, ReasoningDelta):
            reasoning.append(event.text)
        elif isinstance(event, ToolCallStart):
            assert event.index not in calls, "a call starts once"
            assert event.index == len(calls), "calls are numbered in order"
            calls[event.index] = [event.call_id, event.name, ""]
        elif isinstance(event, ToolCallDelta):
            assert event.index in calls and event.index not in ended
            calls[event.index][2] += event.arguments
        elif isinstance(event, ToolCallEnd):
            assert event.index in calls and event.index not in ended
            ended.add(event.index)
        elif isinstance(event, Usage):
            usage = event
        elif isinstance(event, StreamEnd):
            assert n == len(events) - 1, "StreamEnd is last"
            assert ended == set(calls), "every call ended"
            return ProviderReply(
                "".join(text), tuple((c[0], c[1], c[2]) for _, c in sorted(calls.items())),
                event.stop, "".join(reasoning), usage,
            )
    raise AssertionError("the stream ended without StreamEnd or a failure")
