"""The ``OTEL_*`` switch of ``phaseflow run`` and ``phaseflow sessions recover``.

The rule (``docs/observability.md``): tracing is on when ``OTEL_SDK_DISABLED`` is not
``true`` and either ``OTEL_TRACES_EXPORTER`` names an exporter (``otlp``, ``console``;
``none`` is off) or, with ``OTEL_TRACES_EXPORTER`` unset, ``OTEL_EXPORTER_OTLP_ENDPOINT``
or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set. Metrics go where
``OTEL_METRICS_EXPORTER`` says (the traces' exporter when it is unset; ``none`` is off).
The OTLP exporter is OTLP/HTTP with protobuf; another ``OTEL_EXPORTER_OTLP_PROTOCOL`` is
refused (exit 2), as is an exporter this command does not have. The exporter reads the
other variables itself (the endpoint, ``OTEL_EXPORTER_OTLP_HEADERS``, the timeout), and
the resource is ``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES`` (the service name
``phaseflow`` when neither names one). Everything is flushed when the process exits.

Nothing here is imported, and nothing of OpenTelemetry, unless a variable asks for it:
the check of the environment comes first.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from phaseflow.errors import install_hint

EXPORTERS = ("otlp", "console", "none")
PROTOCOL = "http/protobuf"


def _names(environ: Mapping[str, str], key: str) -> tuple[str, ...]:
    value = environ.get(key, "")
    return tuple(v.strip().lower() for v in value.split(",") if v.strip())


def wanted(environ: Mapping[str, str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The span exporters and metric exporters the variables ask for (empty: none);
    ``ValueError`` naming the variable for one this command does not have."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return (), ()
    traces = _names(environ, "OTEL_TRACES_EXPORTER")
    if not traces and (environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
                       or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")):
        traces = ("otlp",)
    measured = _names(environ, "OTEL_METRICS_EXPORTER") or traces
    for key, chosen in (("OTEL_TRACES_EXPORTER", traces), ("OTEL_METRICS_EXPORTER", measured)):
        unknown = [c for c in chosen if c not in EXPORTERS]
        if unknown:
            raise ValueError(f"{key}={unknown[0]!r} is not an exporter phaseflow has "
                             f"(otlp, console or none)")
    traces = tuple(t for t in traces if t != "none")
    measured = tuple(m for m in measured if m != "none")
    if "otlp" in traces + measured:
        for key in ("OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
                    "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL"):
            protocol = environ.get(key, "").strip()
            if protocol and protocol != PROTOCOL:
                raise ValueError(f"{key}={protocol!r}: phaseflow exports OTLP over HTTP "
                                 f"({PROTOCOL}) only")
    return traces, measured


def switch_on(misuse: type[Exception], environ: Mapping[str, str] = os.environ) -> bool:
    """Set up OpenTelemetry's SDK as the variables ask (see the module's docstring) and
    make every agent built afterwards traced; False when they ask for nothing. A
    variable this command cannot follow, or an SDK that is not installed, raises
    ``misuse`` (the command's exit 2)."""
    try:
        traces, measured = wanted(environ)
    except ValueError as exc:
        raise misuse(str(exc)) from None
    if not traces and not measured:
        return False
    try:
        _set_up(traces, measured, environ)
    except ImportError as exc:
        raise misuse(f"tracing is switched on by the OTEL_* variables but OpenTelemetry's "
                     f"SDK is missing: {install_hint('otel')} ({exc})") from None
    except ValueError as exc:  # a variable the SDK itself refuses (a malformed header)
        raise misuse(f"the OTEL_* variables cannot be used: {exc}") from None
    return True


def _set_up(traces: tuple[str, ...], measured: tuple[str, ...],
            environ: Mapping[str, str]) -> None:
    import atexit
    import sys

    from opentelemetry import metrics, trace
    from opentelemetry.sdk.resources import Resource

    from phaseflow.observe.switch import install

    named = environ.get("OTEL_SERVICE_NAME") or "service.name=" in environ.get(
        "OTEL_RESOURCE_ATTRIBUTES", "")
    resource = Resource.create({} if named else {"service.name": "phaseflow"})
    closers = []
    if traces:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            ConsoleSpanExporter,
            SimpleSpanProcessor,
        )

        tracer_provider = TracerProvider(resource=resource)
        if "otlp" in traces:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                OTLPSpanExporter,
            )

            tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        if "console" in traces:  # on standard error: standard output is the chat's
            tracer_provider.add_span_processor(
                SimpleSpanProcessor(ConsoleSpanExporter(out=sys.stderr)))
        trace.set_tracer_provider(tracer_provider)
        closers.append(tracer_provider.shutdown)
    if measured:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import (
            ConsoleMetricExporter,
            MetricReader,
            PeriodicExportingMetricReader,
        )

        readers: list[MetricReader] = []
        if "otlp" in measured:
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
                OTLPMetricExporter,
            )

            readers.append(PeriodicExportingMetricReader(OTLPMetricExporter()))
        if "console" in measured:
            readers.append(PeriodicExportingMetricReader(ConsoleMetricExporter(
                out=sys.stderr)))
        meter_provider = MeterProvider(resource=resource, metric_readers=readers)
        metrics.set_meter_provider(meter_provider)
        closers.append(meter_provider.shutdown)
    _quiet_sdk_logs()
    install()
    for close in closers:
        atexit.register(close)  # flushes what is still buffered


class _Once(logging.Handler):
    """The SDK's warnings (an unreachable collector is one per retry, with a long
    message) as one line on standard error, the first time only."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.told = False

    def emit(self, record: logging.LogRecord) -> None:
        if self.told:
            return
        self.told = True
        import sys

        first = record.getMessage().splitlines()[0] if record.getMessage() else ""
        print(f"phaseflow: warning: OpenTelemetry could not export: {first[:300]} (later "
              "export warnings are not shown)", file=sys.stderr)


def _quiet_sdk_logs() -> None:
    logger = logging.getLogger("opentelemetry")
    logger.addHandler(_Once())
    logger.propagate = False
