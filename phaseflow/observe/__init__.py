"""Seeing what each turn did: traces and metrics through the OpenTelemetry API.

The session reports what it does to an :class:`~phaseflow.observe.observer.Observer`
(a handful of calls at the places where a turn starts, asks the model, runs a tool,
crosses a phase boundary and commits). With no tracing asked for, that observer is a
no-op and nothing of OpenTelemetry is imported; with a tracer or meter provider (an
``Agent`` argument, or the ``OTEL_*`` variables read by the CLI), it is
:mod:`phaseflow.observe.otel`, which calls the OpenTelemetry API only. See
``docs/observability.md``.

This package sits below the session (it reads events as their JSON, the stored form),
so the session imports it and never the other way round.
"""

from __future__ import annotations

from phaseflow.observe.observer import trace_parent

__all__ = ["trace_parent"]
