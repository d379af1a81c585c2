"""One drive of a turn, as spans: the ``invoke_agent`` span and its children.

A :class:`Drive` is what a runner reports to while it drives a turn (the
:class:`~phaseflow.observe.observer.TurnObserver` of :class:`OtelObserver`). It opens the
turn's span when the drive starts, puts a ``chat`` span around each model stream, an
``execute_tool`` span around each call, a ``phaseflow.prepare`` span around a move's
preparations and a ``phaseflow.commit`` span around each commit (a hook's span goes
under the preparation's, or the turn's), and reads each commit's events: a phase change,
an approval, a refusal, a retry becomes a span event; ``turn_finished`` (or the
``approval_requested`` that pauses the drive) ends the turn's span.

A tool's span ends when the tool returns, but its outcome (``ok``, ``error``,
``unknown``...) is decided by the session afterwards: the span is ended with the time the
tool returned once the ``tool_result`` event that says the outcome is committed.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Awaitable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry.trace import SpanKind

from phaseflow.observe import names as n
from phaseflow.observe.otel_common import ACTIVE, error_type, fail, traceparent
from phaseflow.observe.redact import redacted, redacted_text

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Link, Span

    from phaseflow.observe.observer import Encodable, Write
    from phaseflow.observe.otel_common import Owner
    from phaseflow.providers.protocol import Provider, ProviderEvent, ProviderRequest
    from phaseflow.turn.messages import ToolCall

T = TypeVar("T")

#: the conventions' finish reasons for the provider protocol's stop kinds
FINISH_REASONS = {"end_turn": "stop", "tool_use": "tool_calls", "max_tokens": "length"}
#: tool results that are a refusal (the call never ran), recorded as span events
REFUSED = frozenset({"refused", "rejected", "ignored"})
#: how a drive ends when a later drive may continue its turn
CONTINUED = frozenset({"awaiting_approval", "interrupted"})
#: providers whose conventional name is not their class's
PROVIDER_NAMES = {"OpenAIProvider": "openai", "ScriptedProvider": "phaseflow.scripted"}


def provider_name(provider: object) -> str:
    """``gen_ai.provider.name``: the provider's own ``provider_name`` when it has one."""
    own = getattr(provider, "provider_name", None)
    if isinstance(own, str) and own:
        return own
    cls = type(provider).__name__
    return PROVIDER_NAMES.get(cls, cls)


def server_attributes(provider: object) -> dict[str, Any]:
    """``server.address`` / ``server.port`` of a provider with a ``server`` URL (never
    its user name, password or query)."""
    server = getattr(provider, "server", None)
    if not isinstance(server, str) or not server:
        return {}
    try:
        parts = urlsplit(server)
        host, port = parts.hostname, parts.port
    except ValueError:
        return {}
    out: dict[str, Any] = {}
    if host:
        out[n.SERVER_ADDRESS] = host
    if port:
        out[n.SERVER_PORT] = port
    return out


def _messages(history: Sequence[Any]) -> str:
    """The conventions' ``gen_ai.input.messages`` of a request's history."""
    from phaseflow.turn.messages import message_to_json

    out = []
    for message in history:
        data = message_to_json(message)
        parts: list[dict[str, Any]] = []
        if data.get("content") not in (None, "", []):
            kind = "tool_call_response" if "call_id" in data else "text"
            part: dict[str, Any] = {"type": kind, "content": redacted_text(data["content"])}
            if "call_id" in data:
                part = {"type": kind, "id": data["call_id"], "response": part["content"]}
            parts.append(part)
        calls = data.get("tool_calls")
        for call in calls if isinstance(calls, list) else ():
            if isinstance(call, dict):
                parts.append({"type": "tool_call", "id": call.get("id"),
                              "name": call.get("name"),
                              "arguments": redacted(call.get("arguments"))})
        out.append({"role": data["role"], "parts": parts})
    return json.dumps(out, ensure_ascii=False)


class _Turn:
    """An open ``invoke_agent`` span."""

    __slots__ = ("context", "phase", "span", "started", "status", "tools", "turn")

    def __init__(self, span: Span, phase: str, turn: int | None) -> None:
        self.span = span
        self.context = trace.set_span_in_context(span)
        self.phase = phase
        self.turn = turn
        self.started = time.perf_counter()
        self.status = ""
        #: tool spans whose outcome is not committed yet: call id -> (span, its end in
        #: ns since the epoch, the seconds the call took, the tool's name)
        self.tools: dict[str, tuple[Span, int, float, str]] = {}


class Drive:
    """One drive of a session's turn (see the module's docstring)."""

    def __init__(self, owner: Owner, session_id: str, phase: str,
                 parent: Context) -> None:
        self.owner = owner
        self.session_id = session_id
        self.phase = phase
        self.parent = parent
        self.turn: _Turn | None = None
        self.trace = ""

    # --- the turn's span ------------------------------------------------------------------

    def open_turn(self, turn: int | None, links: Sequence[Link] = ()) -> None:
        owner = self.owner
        attributes: dict[str, Any] = {
            n.OPERATION_NAME: "invoke_agent", n.AGENT_NAME: owner.workflow,
            n.CONVERSATION_ID: self.session_id, n.PHASE: self.phase,
            n.CONTINUES: turn is not None}
        if turn is not None:
            attributes[n.TURN] = turn
        span = owner.tracer.start_span(f"invoke_agent {owner.workflow}", context=self.parent,
                                       kind=SpanKind.INTERNAL, attributes=attributes,
                                       links=list(links))
        self.turn = _Turn(span, self.phase, turn)
        self.trace = traceparent(self.turn.context) or ""
        owner.open[self.session_id] = self
        if turn is not None:
            owner.last[self.session_id] = (turn, span.get_span_context())

    def _numbered(self, turn: int) -> None:
        current = self.turn
        if current is not None and current.turn is None:
            current.turn = turn
            current.span.set_attribute(n.TURN, turn)
            self.owner.last[self.session_id] = (turn, current.span.get_span_context())

    def _end_turn(self, status: str) -> None:
        current = self.turn
        if current is None:
            return
        self.turn = None
        if self.owner.open.get(self.session_id) is self:
            del self.owner.open[self.session_id]
        if status not in CONTINUED:
            # nothing continues this turn: its context is not kept (a server with many
            # sessions keeps only those of turns that wait for an approval)
            self.owner.last.pop(self.session_id, None)
        for call_id in list(current.tools):
            self._tool_ended(current, call_id, "unknown")
        span = current.span
        span.set_attribute(n.TURN_STATUS, status)
        if self.phase != current.phase:
            span.set_attribute(n.PHASE, self.phase)
        if status in ("failed", "interrupted"):
            fail(span, status)
        span.end()
        self.owner.turn_duration.record(time.perf_counter() - current.started, {
            n.AGENT_NAME: self.owner.workflow, n.PHASE: self.phase, n.TURN_STATUS: status})

    def interrupted(self) -> None:
        """The drive left without ending its turn (an exception reached the host): its
        span ends now, as ``interrupted``."""
        self._end_turn("interrupted")

    def _context(self) -> Context:
        return self.turn.context if self.turn is not None else self.parent

    # --- the model ------------------------------------------------------------------------

    def stream(self, provider: Provider, request: ProviderRequest
               ) -> AsyncIterator[ProviderEvent]:
        return self._stream(provider, request)

    async def _stream(self, provider: Provider, request: ProviderRequest
                      ) -> AsyncIterator[ProviderEvent]:
        owner = self.owner
        key = (id(provider), request.model)
        known = owner.chats.get(key)
        if known is None:
            common = {n.OPERATION_NAME: "chat", n.PROVIDER_NAME: provider_name(provider),
                      n.REQUEST_MODEL: request.model, **server_attributes(provider)}
            known = owner.chats[key] = (common, {**common, n.TOKEN_TYPE: "input"},
                                        {**common, n.TOKEN_TYPE: "output"})
        common, as_input, as_output = known
        attributes: dict[str, Any] = {**common, n.CONVERSATION_ID: self.session_id,
                                      n.REQUEST_ID: request.request_id}
        if request.max_output_tokens is not None:
            attributes[n.REQUEST_MAX_TOKENS] = request.max_output_tokens
        if owner.capture:
            attributes[n.SYSTEM_INSTRUCTIONS] = json.dumps(
                [{"type": "text", "content": t} for t in (request.system, request.context) if t],
                ensure_ascii=False)
            attributes[n.INPUT_MESSAGES] = _messages(request.history)
        span = owner.tracer.start_span(f"chat {request.model}".rstrip(), context=self._context(),
                                       kind=SpanKind.CLIENT, attributes=attributes)
        started = time.perf_counter()
        usage: tuple[int, int] | None = None
        reason, error = "", ""
        text: list[str] = []
        calls: list[dict[str, Any]] = []
        inner: AsyncIterator[ProviderEvent] | None = None
        try:
            inner = provider.stream(request)
            async for item in inner:
                kind = item.kind
                if kind == "usage":
                    usage = (item.input_tokens, item.output_tokens)  # type: ignore[union-attr]
                elif kind == "end":
                    reason = FINISH_REASONS.get(item.stop, item.stop)  # type: ignore[union-attr]
                elif kind == "error":
                    status = item.status  # type: ignore[union-attr]
                    error, reason = (str(status) if status else "provider_error"), "error"
                elif owner.capture and kind == "text_delta":
                    text.append(item.text)  # type: ignore[union-attr]
                elif owner.capture and kind == "tool_call_start":
                    calls.append({"type": "tool_call", "id": item.call_id,  # type: ignore[union-attr]
                                  "name": item.name})  # type: ignore[union-attr]
                yield item
        except GeneratorExit:
            raise  # closed by the runner: after the reply's end, or cancelled (below)
        except BaseException as exc:
            error = error or error_type(exc)
            raise
        finally:
            closing = getattr(inner, "aclose", None)
            try:
                if closing is not None:
                    await closing()
            finally:
                if not reason and not error:
                    error = "cancelled"  # closed before the reply ended
                ended: dict[str, Any] = {}
                if reason:
                    ended[n.RESPONSE_FINISH_REASONS] = (reason,)
                if usage is not None:
                    ended[n.USAGE_INPUT_TOKENS], ended[n.USAGE_OUTPUT_TOKENS] = usage
                    owner.token_usage.record(usage[0], as_input)
                    owner.token_usage.record(usage[1], as_output)
                if owner.capture and (text or calls):
                    parts = ([{"type": "text", "content": "".join(text)}] if text else [])
                    ended[n.OUTPUT_MESSAGES] = json.dumps(
                        [{"role": "assistant", "parts": parts + calls,
                          "finish_reason": reason}], ensure_ascii=False)
                span.set_attributes(ended)
                measured = common
                if error:
                    fail(span, error)
                    measured = {**common, n.ERROR_TYPE: error}
                span.end()
                owner.operation_duration.record(time.perf_counter() - started, measured)

    # --- tools, boundaries, preparations ----------------------------------------------------

    def tool(self, call: ToolCall, work: Awaitable[T]) -> Awaitable[T]:
        return self._tool(call, work)

    async def _tool(self, call: ToolCall, work: Awaitable[T]) -> T:
        owner = self.owner
        attributes: dict[str, Any] = {
            n.OPERATION_NAME: "execute_tool", n.TOOL_NAME: call.name,
            n.TOOL_CALL_ID: call.id, n.TOOL_TYPE: "function",
            n.CONVERSATION_ID: self.session_id}
        if owner.capture:
            attributes[n.TOOL_CALL_ARGUMENTS] = redacted_text(call.argument_value())
        span = owner.tracer.start_span(f"execute_tool {call.name}", context=self._context(),
                                       kind=SpanKind.INTERNAL, attributes=attributes)
        started = time.perf_counter()
        try:
            value = await work
        except BaseException as exc:
            fail(span, error_type(exc))
            span.end()
            self._tool_measured(call.name, "cancelled", time.perf_counter() - started)
            raise
        current = self.turn
        if current is None:
            span.end()
        else:
            current.tools[call.id] = (span, time.time_ns(), time.perf_counter() - started,
                                      call.name)
        return value

    def _tool_measured(self, name: str, status: str, seconds: float) -> None:
        self.owner.tool_duration.record(seconds, {
            n.AGENT_NAME: self.owner.workflow, n.TOOL_NAME: name, n.TOOL_STATUS: status})

    def _tool_ended(self, current: _Turn, call_id: str, status: str,
                    content: Any = None) -> None:
        pending = current.tools.pop(call_id, None)
        if pending is None:
            return
        span, end, seconds, name = pending
        span.set_attribute(n.TOOL_STATUS, status)
        if status != "ok":
            fail(span, status)
        if self.owner.capture and content is not None:
            span.set_attribute(n.TOOL_CALL_RESULT, redacted_text(content))
        span.end(end_time=end)
        self._tool_measured(name, status, seconds)

    def boundary(self, work: Awaitable[T]) -> Awaitable[T]:
        return self._hooked(work)

    async def _hooked(self, work: Awaitable[T]) -> T:
        """A turn boundary: no span of its own (most do nothing but check the
        transitions, and its phase change is an event); the hooks its effects and
        preparations call are spans under the turn's."""
        token = ACTIVE.set(self._context())
        try:
            return await work
        finally:
            ACTIVE.reset(token)

    def prepare(self, target: str, work: Awaitable[T]) -> Awaitable[T]:
        return self._scoped("phaseflow.prepare", {n.PHASE: self.phase, n.TARGET: target},
                            work)

    async def _scoped(self, name: str, attributes: dict[str, Any], work: Awaitable[T]) -> T:
        span = self.owner.tracer.start_span(name, context=self._context(),
                                            attributes=attributes)
        token = ACTIVE.set(trace.set_span_in_context(span))
        try:
            return await work
        except BaseException as exc:
            fail(span, error_type(exc))
            raise
        finally:
            ACTIVE.reset(token)
            span.end()

    # --- commits ----------------------------------------------------------------------------

    def commit(self, events: Sequence[Encodable], write: Write[T]) -> Awaitable[T]:
        return self._commit(events, write)

    async def _commit(self, events: Sequence[Encodable], write: Write[T]) -> T:
        data = [e.to_json() for e in events]
        if self.turn is None and any(d.get("type") == "turn_started" for d in data):
            self.open_turn(None)  # the next turn of this drive (a message queued meanwhile)
        current = self.turn
        if current is None:
            return await write(data)
        if data and self.trace:
            data[0][n.TRACE_KEY] = self.trace
        span = self.owner.tracer.start_span("phaseflow.commit", context=current.context,
                                            attributes={n.EVENTS: len(data)})
        try:
            written = await write(data)
        except BaseException as exc:
            fail(span, error_type(exc))
            raise
        finally:
            span.end()
        for event in data:
            self._saw(event)
        return written

    def _saw(self, event: dict[str, Any]) -> None:
        """What a committed event says about the turn."""
        kind = event.get("type")
        if kind == "turn_started" and self.turn is None:
            self.open_turn(None)
        current = self.turn
        if current is None:
            return
        span = current.span
        capture = self.owner.capture
        if kind == "turn_started":
            self._numbered(int(event.get("turn") or 0))
            if capture:
                span.set_attribute(n.INPUT_MESSAGES, json.dumps([{"role": "user", "parts": [
                    {"type": "text", "content": redacted_text(event.get("message"))}]}],
                    ensure_ascii=False))
        elif kind == "tool_result":
            status = str(event.get("status"))
            self._tool_ended(current, str(event.get("call_id")), status, event.get("content"))
            if status in REFUSED:
                span.add_event("phaseflow.refusal", {
                    n.TOOL_NAME: str(event.get("name")), n.CALL_ID: str(event.get("call_id")),
                    n.TOOL_STATUS: status})
        elif kind == "phase_changed":
            moved = {n.PHASE: str(event.get("from_phase")),
                     n.TO_PHASE: str(event.get("to_phase")),
                     n.TRIGGER: str(event.get("trigger"))}
            span.add_event("phaseflow.phase_changed", moved)
            self.owner.transitions.add(1, {**moved, n.AGENT_NAME: self.owner.workflow,
                                           n.OUTCOME: "moved"})
            self.phase = str(event.get("to_phase"))  # (the turn's span ends with it)
        elif kind == "approval_requested":
            span.add_event("phaseflow.approval_requested", {
                n.TOOL_NAME: str(event.get("name")), n.CALL_ID: str(event.get("call_id")),
                n.REASON: str(event.get("reason"))})
            self._end_turn("awaiting_approval")  # the drive pauses here
        elif kind == "approval_resolved":
            span.add_event("phaseflow.approval_resolved", {
                n.TOOL_NAME: str(event.get("name")), n.CALL_ID: str(event.get("call_id")),
                n.DECISION: str(event.get("decision"))})
        elif kind == "retrying":
            span.add_event("phaseflow.retry", {n.ATTEMPT: int(event.get("attempt") or 0),
                                               n.DELAY: float(event.get("delay") or 0.0)})
        elif kind == "error":
            code = str(event.get("code"))
            if code.endswith("_refused"):
                span.add_event("phaseflow.refusal", {n.CODE: code})
                if code == "move_refused":
                    self.owner.transitions.add(1, {
                        n.AGENT_NAME: self.owner.workflow, n.PHASE: self.phase,
                        n.OUTCOME: "refused"})
            else:
                span.add_event("phaseflow.error", {n.CODE: code})
        elif kind == "turn_finished":
            self._finished(current, event)

    def _finished(self, current: _Turn, event: dict[str, Any]) -> None:
        status = str(event.get("status"))
        ended: dict[str, Any] = {n.USAGE_INPUT_TOKENS: int(event.get("input_tokens") or 0),
                                 n.USAGE_OUTPUT_TOKENS: int(event.get("output_tokens") or 0)}
        if self.owner.capture and event.get("reply"):
            ended[n.OUTPUT_MESSAGES] = json.dumps([{"role": "assistant", "parts": [
                {"type": "text", "content": redacted_text(event.get("reply"))}]}],
                ensure_ascii=False)
        current.span.set_attributes(ended)
        self._end_turn(status)
