"""What the OpenTelemetry observer's modules share: the propagator, the span a hook's
span goes under, how a failure is recorded, and the ``traceparent`` a stored event keeps.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Protocol

from opentelemetry import trace
from opentelemetry.trace import StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from phaseflow.observe import names as n

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.metrics import Counter, Histogram
    from opentelemetry.trace import Span, SpanContext, Tracer

PROPAGATOR = TraceContextTextMapPropagator()

#: the span a hook's span is a child of: set while a boundary or a preparation runs
ACTIVE: ContextVar[Context | None] = ContextVar("phaseflow_active_span", default=None)


def capture_requested(environ: Mapping[str, str] = os.environ) -> bool:
    """``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` asks for contents
    (``true``, any case; anything else does not)."""
    return environ.get(n.CAPTURE_ENV, "").strip().lower() == "true"


def traceparent(ctx: Context) -> str | None:
    """The W3C ``traceparent`` of the span current in ``ctx`` (None when none is)."""
    carrier: dict[str, str] = {}
    PROPAGATOR.inject(carrier, context=ctx)
    return carrier.get("traceparent")


def span_context(value: object) -> SpanContext | None:
    """The span context a stored ``traceparent`` names; None for anything else."""
    if not isinstance(value, str):
        return None
    ctx = PROPAGATOR.extract({"traceparent": value})
    found = trace.get_current_span(ctx).get_span_context()
    return found if found.is_valid else None


def fail(span: Span, error_type: str) -> None:
    span.set_attribute(n.ERROR_TYPE, error_type)
    span.set_status(StatusCode.ERROR)


def error_type(exc: BaseException) -> str:
    return "cancelled" if type(exc).__name__ == "CancelledError" else type(exc).__qualname__



class Owner(Protocol):
    """What a drive uses of its agent's observer."""

    workflow: str
    tracer: Tracer
    capture: bool
    token_usage: Histogram
    operation_duration: Histogram
    turn_duration: Histogram
    tool_duration: Histogram
    transitions: Counter
    last: dict[str, tuple[int, SpanContext]]
    open: dict[str, Any]
    #: per (provider, model): a chat's attributes, and with each token type
    chats: dict[tuple[int, str], tuple[dict[str, Any], dict[str, Any], dict[str, Any]]]
