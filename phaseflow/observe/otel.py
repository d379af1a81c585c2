"""The OpenTelemetry observer of an agent: its tracer, its instruments, and what links
one drive of a turn to another.

Only the OpenTelemetry *API* is called here: what the spans and measurements become (an
exporter, a sampler, nothing at all) is the host's SDK's business, or the CLI's (see
``phaseflow.cli.telemetry``). This module is imported only when tracing is on.

A turn is never one span that lasts for a whole approval: each *drive* of it (the first
one, one resumed after an approval, one a recovery runs after a crash, one run by another
worker) is an ``invoke_agent`` span of its own, and a resumed drive links to the span of
the drive it continues. That span's context must survive the process, so it is stored
where the session keeps everything else: in the first event of every commit, as the
JSON key ``trace`` (a W3C ``traceparent``). A drive that continues a turn finds it there
(or, in the process that ran the earlier drive, in memory).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.trace import Link, SpanKind

from phaseflow.observe import names as n
from phaseflow.observe.observer import PARENT, TurnObserver
from phaseflow.observe.otel_common import (
    ACTIVE,
    PROPAGATOR,
    capture_requested,
    error_type,
    fail,
    span_context,
    traceparent,
)
from phaseflow.observe.otel_turn import Drive

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, SpanContext

    from phaseflow.stores.base import Store

class OtelObserver:
    """An agent's observer (see :class:`phaseflow.observe.observer.Observer`)."""

    traced = True

    def __init__(self, workflow: str, store: Store, tracer_provider: Any = None,
                 meter_provider: Any = None) -> None:
        from phaseflow import __version__

        self.workflow = workflow
        self.store = store
        tracers = tracer_provider if tracer_provider is not None else (
            trace.get_tracer_provider())
        meters = meter_provider if meter_provider is not None else (
            metrics.get_meter_provider())
        self.tracer = tracers.get_tracer("phaseflow", __version__, schema_url=n.SCHEMA_URL)
        meter = meters.get_meter("phaseflow", __version__, schema_url=n.SCHEMA_URL)
        self.capture = capture_requested()
        self.token_usage = meter.create_histogram(
            n.TOKEN_USAGE, unit="{token}", description="Tokens used per model request",
            explicit_bucket_boundaries_advisory=list(n.TOKEN_BUCKETS))

        def duration(name: str, description: str) -> Any:
            """A histogram of durations: seconds, in the duration buckets."""
            return meter.create_histogram(
                name, unit="s", description=description,
                explicit_bucket_boundaries_advisory=list(n.DURATION_BUCKETS))

        self.operation_duration = duration(n.OPERATION_DURATION,
                                           "Duration of each model request")
        self.turn_duration = duration(n.TURN_DURATION, "Duration of each drive of a turn")
        self.tool_duration = duration(n.TOOL_DURATION, "Duration of each tool call")
        self.transitions = meter.create_counter(
            n.TRANSITIONS, unit="{transition}",
            description="Phase transitions taken (outcome moved) or refused")
        #: per session: the turn and span context of its latest drive in this process
        self.last: dict[str, tuple[int, SpanContext]] = {}
        #: per session: the contexts of the stored messages its next turn answers
        self._queued: dict[str, list[SpanContext]] = {}
        #: per session: the drive whose turn span is still open (ended by the next one)
        self.open: dict[str, Any] = {}
        self.chats: dict[tuple[int, str],
                         tuple[dict[str, Any], dict[str, Any], dict[str, Any]]] = {}

    # --- the Observer protocol ------------------------------------------------------------

    async def drive(self, session_id: str, turn: int, phase: str, new_turn: bool
                    ) -> TurnObserver:
        dangling = self.open.pop(session_id, None)
        if dangling is not None:
            dangling.interrupted()
        links = [Link(c, {n.LINK: "queued_message"})
                 for c in self._queued.pop(session_id, ())]
        if not new_turn:
            previous = await self._previous(session_id, turn)
            if previous is not None:
                links.append(Link(previous, {n.LINK: "continues"}))
        drive = Drive(self, session_id, phase, self.parent())
        drive.open_turn(None if new_turn else turn, links)
        return drive

    def carrier(self, session_id: str) -> dict[str, Any]:
        """A ``phaseflow.enqueue`` span (PRODUCER) for a message stored for another
        worker, under the sender's context; its traceparent goes with the message."""
        span = self.tracer.start_span(
            "phaseflow.enqueue", context=self.parent(), kind=SpanKind.PRODUCER,
            attributes={n.CONVERSATION_ID: session_id, n.AGENT_NAME: self.workflow})
        span.end()
        value = traceparent(trace.set_span_in_context(span))
        return {n.TRACE_KEY: value} if value else {}

    def queued(self, session_id: str, messages: Sequence[Mapping[str, Any]]) -> None:
        found = [c for c in (span_context(m.get(n.TRACE_KEY)) for m in messages)
                 if c is not None]
        if found:
            self._queued.setdefault(session_id, []).extend(found)

    def hooks(self, registry: Mapping[str, Callable[..., Any]]
              ) -> Mapping[str, Callable[..., Any]]:
        return {name: self._hook(name, fn) for name, fn in registry.items()}

    # --- helpers --------------------------------------------------------------------------

    def parent(self) -> Context:
        """Where a turn's span goes: under the carrier of ``trace_parent`` (a server's
        caller), else under whatever span is current (a host's), else a new trace."""
        carrier = PARENT.get()
        if carrier:
            ctx = PROPAGATOR.extract(dict(carrier))
            if trace.get_current_span(ctx).get_span_context().is_valid:
                return ctx
        return otel_context.get_current()

    async def _previous(self, session_id: str, turn: int) -> SpanContext | None:
        """The span context of the latest drive of ``turn``: in memory when this process
        ran it, else the ``trace`` of the latest stored event of that turn that has one
        (one read of the session's log, only for a turn continued in a new process)."""
        known = self.last.get(session_id)
        if known is not None and known[0] == turn:
            return known[1]
        try:
            stored = await self.store.events(session_id)
        except Exception:
            return None  # (the turn itself reports a store that cannot be read)
        for event in reversed(stored):
            if event.data.get("turn") == turn and n.TRACE_KEY in event.data:
                return span_context(event.data[n.TRACE_KEY])
        return None

    def _hook(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` with a ``phaseflow.hook`` span around each call made inside a turn."""
        tracer = self.tracer

        def start(ctx: Context) -> Span:
            return tracer.start_span("phaseflow.hook", context=ctx,
                                     attributes={n.HOOK: name})

        call = getattr(fn, "__call__", None)  # noqa: B004 - the bound __call__ itself
        if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(call):
            @functools.wraps(fn)
            async def traced_async(*args: Any, **kwargs: Any) -> Any:
                ctx = ACTIVE.get()
                if ctx is None:
                    return await fn(*args, **kwargs)
                span = start(ctx)
                try:
                    return await fn(*args, **kwargs)
                except BaseException as exc:
                    fail(span, error_type(exc))
                    raise
                finally:
                    span.end()
            return traced_async

        @functools.wraps(fn)
        def traced(*args: Any, **kwargs: Any) -> Any:
            ctx = ACTIVE.get()
            if ctx is None:
                return fn(*args, **kwargs)
            span = start(ctx)
            try:
                value = fn(*args, **kwargs)
            except BaseException as exc:
                fail(span, error_type(exc))
                span.end()
                raise
            if inspect.isawaitable(value):
                return _ended_after(span, value)
            span.end()
            return value
        return traced


async def _ended_after(span: Span, value: Any) -> Any:
    try:
        return await value
    except BaseException as exc:
        fail(span, error_type(exc))
        raise
    finally:
        span.end()
