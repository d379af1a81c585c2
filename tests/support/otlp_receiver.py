"""An OTLP/HTTP receiver on loopback: what a collector is to ``phaseflow run``.

It accepts ``POST /v1/traces`` and ``POST /v1/metrics`` (protobuf, gzip or not), decodes
them with ``opentelemetry-proto`` and keeps the spans and metric names as plain values,
so a test asserts on what actually crossed the wire.
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue


def value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return tuple(value(x) for x in v.array_value.values)
    if kind == "kvlist_value":
        return attributes(v.kvlist_value.values)
    return getattr(v, kind) if kind else None


def attributes(pairs: Any) -> dict[str, Any]:
    return {kv.key: value(kv.value) for kv in pairs if isinstance(kv, KeyValue)}


@dataclass(frozen=True)
class Span:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    attributes: dict[str, Any]
    links: tuple[tuple[str, str, dict[str, Any]], ...]
    events: tuple[tuple[str, dict[str, Any]], ...]
    status: int
    resource: dict[str, Any]


@dataclass
class Received:
    spans: list[Span] = field(default_factory=list)
    metrics: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def snapshot(self) -> list[Span]:
        with self.lock:
            return list(self.spans)

    def wait_for(self, found: Callable[[list[Span]], bool], timeout: float = 60.0
                 ) -> list[Span]:
        """The spans once ``found`` holds for them (AssertionError after ``timeout``)."""
        deadline = time.monotonic() + timeout
        while True:
            spans = self.snapshot()
            if found(spans):
                return spans
            if time.monotonic() > deadline:
                raise AssertionError(f"the receiver never got what was expected: "
                                     f"{[s.name for s in spans]}")
            time.sleep(0.05)


def _decode_traces(body: bytes, into: Received) -> bytes:
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    spans = []
    for rs in request.resource_spans:
        resource = attributes(rs.resource.attributes)
        for ss in rs.scope_spans:
            for s in ss.spans:
                spans.append(Span(
                    name=s.name, trace_id=s.trace_id.hex(), span_id=s.span_id.hex(),
                    parent_span_id=s.parent_span_id.hex(), kind=s.kind,
                    attributes=attributes(s.attributes),
                    links=tuple((link.trace_id.hex(), link.span_id.hex(),
                                 attributes(link.attributes)) for link in s.links),
                    events=tuple((e.name, attributes(e.attributes)) for e in s.events),
                    status=s.status.code, resource=resource))
    with into.lock:
        into.spans.extend(spans)
    return bytes(ExportTraceServiceResponse().SerializeToString())


def _decode_metrics(body: bytes, into: Received) -> bytes:
    request = ExportMetricsServiceRequest()
    request.ParseFromString(body)
    names = {m.name for rm in request.resource_metrics for sm in rm.scope_metrics
             for m in sm.metrics}
    with into.lock:
        into.metrics.update(names)
    return bytes(ExportMetricsServiceResponse().SerializeToString())


def _handler(into: Received) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            decode = {"/v1/traces": _decode_traces, "/v1/metrics": _decode_metrics}.get(
                self.path)
            if decode is None:
                self.send_error(404)
                return
            reply = decode(body, into)
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, format: str, *args: Any) -> None:
            return None  # quiet

    return Handler


@contextmanager
def otlp_receiver() -> Iterator[tuple[str, Received]]:
    """A running receiver: its endpoint (``http://127.0.0.1:PORT``) and what it got."""
    received = Received()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(received))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()
