"""``AnthropicProvider``: Claude through the official ``anthropic`` SDK's Messages API.

The request is streamed (``messages.create(stream=True)``) and read event by event:
``content_block_start`` opens a text, thinking or ``tool_use`` block; its
``content_block_delta`` events (``text_delta``, ``thinking_delta``, ``signature_delta``,
``input_json_delta``) become text, reasoning and argument fragments; ``message_delta``
says why the model stopped; ``message_stop`` ends the reply. Every thinking block (its
text and signature, or a ``redacted_thinking`` block's data) is kept exactly and carried
with the assistant message (:mod:`phaseflow.providers.carry`): the API refuses a
tool-use turn whose thinking block is missing or altered.

Stop reasons: ``end_turn`` and ``stop_sequence`` end the turn; ``tool_use`` asks for the
calls; ``max_tokens`` and ``model_context_window_exceeded`` are a reply cut short
(``max_tokens``), as is ``pause_turn`` (the server paused a long turn: the reply is
incomplete); ``refusal`` is a failure that is not retried.

Errors are values, as :mod:`phaseflow.providers.openai` makes them: 429, 529 (overloaded)
and other 5xx are retryable with the server's ``retry-after``; a prompt the model cannot
take (HTTP 400 "prompt is too long") is the failure
:func:`~phaseflow.providers.sdk_clients.context_full` names; a wire
event that is not what the API documents ends the turn with a failure that is not
retried. The SDK's own retries are off.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from phaseflow.errors import ConfigError
from phaseflow.providers.anthropic_wire import (
    WIRE,
    dumps,
    request_messages,
    request_system,
    request_tools,
)
from phaseflow.providers.carry import carried
from phaseflow.providers.chat_wire import names_of
from phaseflow.providers.media import ALL_MEDIA
from phaseflow.providers.openai import _setting, retry_after
from phaseflow.providers.protocol import (
    ProviderEvent,
    ProviderFailure,
    ProviderRequest,
    ReasoningDelta,
    StopKind,
    StreamEnd,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    Usage,
)
from phaseflow.providers.sdk_clients import (
    LoopClients,
    check_adapter,
    context_full,
    hidden,
    redacted,
)
from phaseflow.providers.settings import (
    PLACEHOLDER_KEY,
    check_base_url,
    check_header,
    check_max_tokens,
    check_timeout,
    shown_url,
)
from phaseflow.providers.wire_names import WireNames

if TYPE_CHECKING:
    from anthropic import AsyncAnthropic

__all__ = ["AnthropicProvider"]

#: the server the SDK talks to when no base URL is given
DEFAULT_BASE_URL = "https://api.anthropic.com"

#: the Messages API needs a limit on every request: this one when none is given
DEFAULT_MAX_TOKENS = 4096

_STOPS: dict[str, StopKind] = {
    "end_turn": "end_turn",
    "stop_sequence": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "model_context_window_exceeded": "max_tokens",
    "pause_turn": "max_tokens",
}

_RESERVED = frozenset({"model", "messages", "system", "tools", "tool_choice", "stream",
                       "max_tokens"})


def _server_message(error: Any) -> str:
    """The server's own message: ``{"type": "error", "error": {"message": ...}}``."""
    body = getattr(error, "body", None)
    if isinstance(body, Mapping):
        inner = body.get("error")
        if isinstance(inner, Mapping) and isinstance(inner.get("message"), str):
            return str(inner["message"])
        if isinstance(body.get("message"), str):
            return str(body["message"])
    return str(getattr(error, "message", None) or error)


def failure_of(error: BaseException, server: str) -> ProviderFailure:
    """An ``anthropic`` SDK (or transport) exception as a failure value."""
    import anthropic

    at = f" at {shown_url(server)}"
    if isinstance(error, anthropic.APIStatusError):
        status = error.status_code
        retryable = status in (408, 429) or status >= 500
        return context_full(ProviderFailure(
            f"the server answered {status}: {_server_message(error)}", retryable=retryable,
            retry_after=retry_after(error.response.headers) if retryable else None,
            status=status))
    if isinstance(error, anthropic.APITimeoutError):
        return ProviderFailure(f"the request to the model server{at} timed out",
                               retryable=True)
    if isinstance(error, anthropic.APIConnectionError):
        cause = error.__cause__
        detail = f": {cause}" if cause is not None and str(cause) else ""
        return ProviderFailure(f"the connection to the model server{at} failed{detail}",
                               retryable=True)
    if isinstance(error, anthropic.APIError):
        return ProviderFailure(f"the server reported an error: {_server_message(error)}")
    if isinstance(error, json.JSONDecodeError):
        return ProviderFailure(f"the server sent a malformed stream event: {error}")
    return ProviderFailure(
        f"the model call failed: {type(error).__name__}: {error}".rstrip(": "))


def _count(value: object) -> int:
    return value if type(value) is int and value >= 0 else 0


class _Malformed(Exception):
    """A wire event the API does not document: the turn ends, never retried."""


@dataclass
class _Block:
    kind: str  # text, thinking, redacted_thinking, tool_use, other
    position: int = -1  # a call's index in the reply
    parts: list[str] = field(default_factory=list)  # thinking text
    signature: list[str] = field(default_factory=list)
    data: str = ""  # a redacted thinking block's
    got_input: bool = False


class _Reader:
    """Turns one reply's stream events into provider events."""

    def __init__(self, names: WireNames) -> None:
        self.names = names
        self.blocks: dict[int, _Block] = {}
        self.calls = 0
        self.text_seen = False
        self.thinking: list[tuple[int, _Block]] = []
        self.stop: str | None = None
        self.stopped = False
        self.input = self.cache_read = self.cache_write = self.output = 0

    def event(self, item: Any) -> list[ProviderEvent]:
        kind = getattr(item, "type", None)
        if kind == "content_block_delta":
            return self._delta(item)
        if kind == "content_block_start":
            return self._start(item)
        if kind == "message_start":
            self._usage(getattr(getattr(item, "message", None), "usage", None))
        elif kind == "message_delta":
            stop = getattr(getattr(item, "delta", None), "stop_reason", None)
            if stop is not None:
                if not isinstance(stop, str):
                    raise _Malformed(f"a stop_reason that is not a string: {stop!r:.40}")
                self.stop = stop
            self._usage(getattr(item, "usage", None))
        elif kind == "message_stop":
            self.stopped = True
        elif kind == "content_block_stop":
            self._block(item)
        return []

    def _usage(self, usage: Any) -> None:
        if usage is None:
            return
        for name, attr in (("input", "input_tokens"), ("output", "output_tokens"),
                           ("cache_read", "cache_read_input_tokens"),
                           ("cache_write", "cache_creation_input_tokens")):
            value = getattr(usage, attr, None)
            if value is not None:
                setattr(self, name, _count(value))

    def _index(self, item: Any) -> int:
        index = getattr(item, "index", None)
        if type(index) is not int or index < 0:
            raise _Malformed(f"a content block index that is not a number: {index!r:.40}")
        return index

    def _block(self, item: Any) -> _Block:
        index = self._index(item)
        block = self.blocks.get(index)
        if block is None:
            raise _Malformed(f"an event for content block {index}, which never started")
        return block

    def _start(self, item: Any) -> list[ProviderEvent]:
        index = self._index(item)
        if index in self.blocks:
            raise _Malformed(f"content block {index} started twice")
        content = getattr(item, "content_block", None)
        kind = getattr(content, "type", None)
        if kind == "text":
            block = self.blocks[index] = _Block("text")
            text = getattr(content, "text", "")
            self.text_seen = True
            if not isinstance(text, str):
                raise _Malformed("a text block whose text is not a string")
            return [TextDelta(text)] if text else []
        if kind == "tool_use":
            call_id, name = getattr(content, "id", None), getattr(content, "name", None)
            if not (isinstance(call_id, str) and call_id and isinstance(name, str) and name):
                raise _Malformed("a tool_use block without an id or a name")
            block = self.blocks[index] = _Block("tool_use", self.calls)
            self.calls += 1
            events: list[ProviderEvent] = [
                ToolCallStart(block.position, call_id, self.names.from_wire(name))]
            given = getattr(content, "input", None)
            if isinstance(given, Mapping) and given:  # a server that sends it whole
                block.got_input = True
                events.append(ToolCallDelta(block.position, dumps(dict(given))))
            return events
        if kind in ("thinking", "redacted_thinking"):
            block = self.blocks[index] = _Block(str(kind))
            if kind == "redacted_thinking":
                data = getattr(content, "data", None)
                if not isinstance(data, str):
                    raise _Malformed("a redacted_thinking block without its data")
                block.data = data
            else:
                for attr, into in (("thinking", block.parts), ("signature", block.signature)):
                    value = getattr(content, attr, None) or ""
                    if not isinstance(value, str):
                        raise _Malformed(f"a thinking block whose {attr} is not a string")
                    if value:
                        into.append(value)
            position = len(self.thinking) + self.calls + (1 if self.text_seen else 0)
            self.thinking.append((position, block))
            return [ReasoningDelta("".join(block.parts))] if block.parts else []
        self.blocks[index] = _Block("other")  # a block kind this adapter does not use
        return []

    def _delta(self, item: Any) -> list[ProviderEvent]:
        block = self._block(item)
        delta = getattr(item, "delta", None)
        kind = getattr(delta, "type", None)
        wants = {"text_delta": ("text", "text"), "thinking_delta": ("thinking", "thinking"),
                 "signature_delta": ("thinking", "signature"),
                 "input_json_delta": ("tool_use", "partial_json")}.get(str(kind))
        if wants is None:
            return []  # a delta kind this adapter does not use (citations...)
        if block.kind != wants[0]:
            raise _Malformed(f"a {kind} for a {block.kind} block")
        value = getattr(delta, wants[1], None)
        if not isinstance(value, str):
            raise _Malformed(f"a {kind} whose {wants[1]} is not a string")
        if kind == "text_delta":
            return [TextDelta(value)] if value else []
        if kind == "thinking_delta":
            block.parts.append(value)
            return [ReasoningDelta(value)] if value else []
        if kind == "signature_delta":
            block.signature.append(value)
            return []
        if block.got_input and value:
            raise _Malformed("input_json_delta after a tool_use given whole")
        return [ToolCallDelta(block.position, value)] if value else []

    def end(self) -> list[ProviderEvent]:
        if not self.stopped:
            return [ProviderFailure("the stream ended before the reply was complete "
                                    "(no message_stop)", retryable=True)]
        if self.stop == "refusal":
            return [ProviderFailure("the model refused to answer (stop_reason refusal)")]
        if self.stop is None:
            raise _Malformed("message_stop without a stop_reason")
        events: list[ProviderEvent] = [ToolCallEnd(p) for p in range(self.calls)]
        events.append(Usage(self.input + self.cache_read + self.cache_write, self.output,
                            cached_input_tokens=self.cache_read))
        parts = [(position, self._thinking_json(block)) for position, block in self.thinking]
        held = carried(WIRE, parts)
        if held is not None:
            events.append(held)
        stop = _STOPS.get(self.stop, "end_turn")
        if self.calls and stop == "end_turn":
            stop = "tool_use"
        events.append(StreamEnd(stop))
        return events

    @staticmethod
    def _thinking_json(block: _Block) -> dict[str, str]:
        if block.kind == "redacted_thinking":
            return {"type": "redacted_thinking", "data": block.data}
        return {"type": "thinking", "thinking": "".join(block.parts),
                "signature": "".join(block.signature)}


class AnthropicProvider:
    """Claude through the Messages API (the ``anthropic`` extra).

    - ``model``: the model asked for when the request names none.
    - ``base_url``, ``api_key``: default to the SDK's environment variables
      (``ANTHROPIC_BASE_URL``, ``ANTHROPIC_API_KEY``); a key is needed unless a base URL
      (a local server) is given. Checked here, as :class:`OpenAIProvider` checks them.
    - ``client``: a ready ``AsyncAnthropic``, used as it is.
    - ``timeout``: seconds for one request (default 120).
    - ``max_tokens``: the limit sent when the request sets none (default 4096: the API
      needs one).
    - ``cache``: mark prompt-cache breakpoints (default on): after the tools and system
      text, and after the history (before the phase's block, ``ProviderRequest.context``,
      which ends the last user turn), so each request reads the last one's prefix from
      the cache (the reply's ``Usage.cached_input_tokens``).
    - ``**extra``: goes into every request (``thinking={"type": "enabled",
      "budget_tokens": N}``, ``top_k``, ``metadata``, ``extra_headers``...).
    """

    #: the media types it takes in a message or a tool's result (images and PDF)
    media_types: frozenset[str] = ALL_MEDIA

    def __init__(self, model: str | None = None, *, base_url: str | None = None,
                 api_key: str | None = None, client: AsyncAnthropic | None = None,
                 timeout: float = 120.0, max_tokens: int | None = None, cache: bool = True,
                 **extra: Any) -> None:
        check_adapter("AnthropicProvider", ("anthropic", "anthropic", "anthropic"), model,
                      extra, _RESERVED)
        self.model = model
        self.max_tokens = check_max_tokens(max_tokens, "max_tokens") or DEFAULT_MAX_TOKENS
        self.cache = bool(cache)
        self.extra = dict(extra)
        options: dict[str, Any] = {}
        if client is None:
            base = _setting(base_url, "base_url", "ANTHROPIC_BASE_URL", check_base_url)
            key = _setting(api_key, "api_key", "ANTHROPIC_API_KEY", check_header)
            if key is None and base is None:
                raise ConfigError("AnthropicProvider needs an API key: pass api_key= or set "
                                  "ANTHROPIC_API_KEY (a local server given by base_url= or "
                                  "ANTHROPIC_BASE_URL needs none)")
            options = {"api_key": key or PLACEHOLDER_KEY, "base_url": base,
                       "timeout": check_timeout(timeout, "timeout"), "max_retries": 0}
            server = base
        else:
            server = str(getattr(client, "base_url", "") or "") or None
            key = getattr(client, "api_key", None)
        #: the server named in failures
        self.server = shown_url(server or DEFAULT_BASE_URL)
        self._secrets = hidden(key, server)
        self._base = options.get("base_url")

        def make() -> AsyncAnthropic:
            from anthropic import AsyncAnthropic

            return AsyncAnthropic(**options)

        async def close(c: AsyncAnthropic) -> None:
            await c.close()

        self._clients = LoopClients(make, close, client)

    def __repr__(self) -> str:  # never the key
        base = shown_url(self._base) if self._base else self._base
        return f"AnthropicProvider(model={self.model!r}, base_url={base!r})"

    def parameters(self, request: ProviderRequest, names: WireNames) -> dict[str, Any]:
        """The keyword arguments of ``messages.create`` for ``request``."""
        params: dict[str, Any] = dict(self.extra)
        params.update(model=request.model or self.model,
                      messages=request_messages(request, names, cache=self.cache),
                      max_tokens=request.max_output_tokens or self.max_tokens, stream=True)
        system = request_system(request, cache=self.cache)
        if system:
            params["system"] = system
        if request.tools:
            params["tools"] = request_tools(request, names, cache=self.cache)
            params["tool_choice"] = {"type": request.tool_choice}
        if request.temperature is not None:
            params["temperature"] = request.temperature
        if request.reply_schema is not None:
            params["output_config"] = {"format": {"type": "json_schema",
                                                  "schema": dict(request.reply_schema)}}
        return params

    async def stream(self, request: ProviderRequest) -> AsyncIterator[ProviderEvent]:
        async for event in self._stream(request):
            yield redacted(event, self._secrets)

    async def _stream(self, request: ProviderRequest) -> AsyncIterator[ProviderEvent]:
        if not (request.model or self.model):
            yield ProviderFailure("AnthropicProvider: no model: give one to the provider "
                                  "or the request")
            return
        try:
            names = names_of(request)
            params = self.parameters(request, names)
            events = await self._clients.get().messages.create(**params)
        except Exception as error:  # every failure is a value
            yield failure_of(error, self.server)
            return
        reader = _Reader(names)
        try:
            try:
                async for item in events:
                    for event in reader.event(item):
                        yield event
                for event in reader.end():
                    yield event
            except _Malformed as problem:
                yield ProviderFailure(f"the server sent a malformed stream event: {problem}")
            except Exception as error:
                yield failure_of(error, self.server)
        finally:
            with contextlib.suppress(Exception):
                await events.close()

    async def aclose(self) -> None:
        """Close the SDK client made for the running event loop."""
        await self._clients.aclose()

