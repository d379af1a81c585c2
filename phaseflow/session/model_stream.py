"""A model's reply stream, read: a turn's request into the queue the runner reads it
from (:func:`pump_stream`), and a compaction request into a summary
(:func:`summarize`). Every event is checked as it comes (``ReplyAssembler``); a provider
that raises is a failure named by its message, never a traceback."""

from __future__ import annotations

import asyncio
from typing import Any

from phaseflow.expr.describe import describe_exception
from phaseflow.observe.observer import TurnObserver
from phaseflow.providers.assembly import ReplyAssembler
from phaseflow.providers.protocol import Provider, ProviderFailure, ProviderRequest, TextDelta
from phaseflow.session import events as ev
from phaseflow.session.compaction import summary_input
from phaseflow.session.runner_config import RunnerConfig
from phaseflow.session.values import Compact, Compacted
from phaseflow.turn.messages import UserMessage


async def pump_stream(request: ProviderRequest, queue: asyncio.Queue[Any],
                      provider: Provider, obs: TurnObserver) -> None:
    """Read the stream into ``queue``: text deltas as they come, then the whole reply
    or the failure. Every event is checked as it comes (``ReplyAssembler``); a
    provider that raises, or yields what the protocol does not allow, is a
    non-retryable failure. Whatever happens, the queue gets its last item, so the
    turn reading it never waits for ever; only the host's cancellation (and an
    interpreter exit) leaves here as an exception."""
    assembler = ReplyAssembler()
    last: Any = None
    try:
        # closed as soon as the reply ends: a `break` would leave the provider's
        # stream to be finalised later by the loop, perhaps after it closed
        stream = obs.stream(provider, request)
        try:
            async for item in stream:
                outcome = assembler.add(item)
                if isinstance(outcome, TextDelta):
                    await queue.put(ev.TextDeltaEvent(text=outcome.text))
                elif isinstance(outcome, ProviderFailure):
                    last = outcome
                    break
                elif outcome == "end":
                    break
        finally:
            closing = getattr(stream, "aclose", None)
            if closing is not None:
                await closing()
    except asyncio.CancelledError:
        raise
    except BaseException as exc:  # a provider that raises: its message, not a traceback
        if last is None:
            last = ProviderFailure(describe_exception(exc), retryable=False)
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            queue.put_nowait(last)
            raise  # the process is stopping: the turn ends, the process decides
    queue.put_nowait(last if last is not None else assembler.reply())


async def summarize(command: Compact, config: RunnerConfig, obs: TurnObserver) -> Compacted:
    """One compaction request: the folded messages (and the earlier summary) as one
    user message, the agent's compaction prompt as the system text, no tools. Its
    text is the summary; a failure or an empty text leaves the history as it was."""
    provider = config.compaction_provider or config.provider
    request = ProviderRequest(
        model=config.model_of(provider), system=config.compaction_prompt,
        history=(UserMessage(summary_input(command.previous, command.messages)),),
        tools=(), request_id=command.request_id, tool_choice="none",
        max_output_tokens=command.max_tokens, purpose="compaction")
    assembler = ReplyAssembler()
    try:
        stream = obs.stream(provider, request)
        try:
            async for item in stream:
                outcome = assembler.add(item)
                if isinstance(outcome, ProviderFailure):
                    return Compacted(command.request_id, None, outcome.message)
                if outcome == "end":
                    break
        finally:
            closing = getattr(stream, "aclose", None)
            if closing is not None:
                await closing()
        reply = assembler.reply()
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # a provider that raises: its message, never a traceback
        return Compacted(command.request_id, None, describe_exception(exc))
    if isinstance(reply, ProviderFailure):
        return Compacted(command.request_id, None, reply.message)
    if not reply.text.strip():
        return Compacted(command.request_id, None, "the summary was empty")
    return Compacted(command.request_id, reply.text.strip())
