"""``OpenAIResponsesProvider``: the OpenAI Responses API through the official ``openai`` SDK.

``responses.create(stream=True)`` is read event by event: ``response.output_item.added``
opens an output item (a message, a ``function_call``, a ``reasoning`` item);
``response.output_text.delta``, ``response.function_call_arguments.delta`` and the
reasoning summary / text deltas stream its content; ``response.output_item.done`` gives
a reasoning item whole, which is kept exactly (with ``store=False``, the default, its
``encrypted_content``, asked for with ``include``) and carried with the assistant
message (:mod:`phaseflow.providers.carry`), so a reasoning model keeps its chain on the
next request; ``response.completed`` / ``response.incomplete`` end the reply.

Settings, errors and the client per event loop are the OpenAI provider's
(:mod:`phaseflow.providers.openai`): the same environment variables, the same checks,
the same failure values.

The request's ``context`` (what changes with the phase and the state) is sent as a
trailing ``developer`` message after the history's input items, so everything before it
(``instructions``, the tools, the history) is the previous request's prefix.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from phaseflow.providers.carry import carried, carried_parts, restored
from phaseflow.providers.chat_wire import names_of, plain
from phaseflow.providers.media import ALL_MEDIA, has_media, media_of, note
from phaseflow.providers.openai import (
    DEFAULT_BASE_URL,
    _client_options,
    failure_of,
)
from phaseflow.providers.protocol import (
    REPLY_SCHEMA_NAME,
    ProviderEvent,
    ProviderFailure,
    ProviderRequest,
    ReasoningDelta,
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
from phaseflow.providers.settings import check_max_tokens, check_timeout, shown_url
from phaseflow.providers.wire_names import WireNames
from phaseflow.turn.messages import (
    AssistantMessage,
    Content,
    MediaPart,
    SystemMessage,
    TextPart,
    ToolResultMessage,
    UserMessage,
)

if TYPE_CHECKING:
    from openai import AsyncOpenAI

__all__ = ["OpenAIResponsesProvider"]

#: the name a reply's carried parts are kept under
WIRE = "responses"

_RESERVED = frozenset({"model", "input", "instructions", "tools", "tool_choice", "stream",
                       "store"})


def _text(content: Content) -> str:
    if isinstance(content, str):
        return content
    return "".join(p.text if isinstance(p, TextPart) else
                   f"[attachment {p.media_type}: {p.token}]" for p in content)


def _media_item(part: MediaPart, attachments: Mapping[str, bytes]) -> dict[str, Any]:
    """A media part as an input item: an image an ``input_image`` (a ``data:`` URL of its
    bytes, or its URL), a PDF an ``input_file`` with its bytes; other media named in text."""
    media = media_of(part, attachments)
    if media is not None and media.is_image:
        return {"type": "input_image", "image_url": media.url or media.data_url,
                "detail": "auto"}
    if media is not None and media.data is not None:
        return {"type": "input_file", "filename": "attachment.pdf",
                "file_data": media.data_url}
    return {"type": "input_text", "text": note(part)}


def _user(content: Content, attachments: Mapping[str, bytes] | None = None,
          ) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for part in content:
        if isinstance(part, TextPart):
            parts.append({"type": "input_text", "text": part.text})
        else:
            parts.append(_media_item(part, attachments or {}))
    return parts


def request_input(request: ProviderRequest, names: WireNames) -> list[dict[str, Any]]:
    """The history as Responses input items (reasoning items put back where they were),
    then the request's ``context`` as a trailing ``developer`` message."""
    items: list[dict[str, Any]] = []
    for message in request.history:
        if isinstance(message, SystemMessage):
            items.append({"role": "system", "content": _text(message.content)})
        elif isinstance(message, UserMessage) and message.note:
            # the session's note (a timer's turn): a developer message
            items.append({"role": "developer", "content": _text(message.content)})
        elif isinstance(message, UserMessage):
            items.append({"role": "user",
                          "content": _user(message.content, request.attachments)})
        elif isinstance(message, AssistantMessage):
            own: list[dict[str, Any]] = []
            text = _text(message.content)
            if text:
                own.append({"role": "assistant", "content": text})
            own.extend({"type": "function_call", "call_id": c.id,
                        "name": names.to_wire(c.name), "arguments": c.arguments}
                       for c in message.tool_calls)
            items.extend(restored(own, carried_parts(message, WIRE)))
        elif isinstance(message, ToolResultMessage):
            output: str | list[dict[str, Any]] = _text(message.content)
            if has_media(message.content):  # a result with images: a list of its parts
                output = _user(message.content, request.attachments)
            items.append({"type": "function_call_output", "call_id": message.call_id,
                          "output": output})
    if request.context:
        items.append({"role": "developer", "content": request.context})
    return items


def request_tools(request: ProviderRequest, names: WireNames) -> list[dict[str, Any]]:
    return [{"type": "function", "name": names.to_wire(t.name), "description": t.description,
             "parameters": plain(t.parameters) or {"type": "object", "properties": {}},
             "strict": False}
            for t in request.tools]


class _Malformed(Exception):
    """A wire event the API does not document: the turn ends, never retried."""


@dataclass
class _Item:
    kind: str
    position: int = -1  # a call's index in the reply
    deltas: bool = False  # argument deltas came


def _get(value: Any, name: str) -> Any:
    if isinstance(value, Mapping):
        return value.get(name)
    return getattr(value, name, None)


def _dump(item: Any) -> Any:
    """An output item as the JSON the server sent (unset fields left out)."""
    to_dict = getattr(item, "to_dict", None)
    if callable(to_dict):
        return to_dict(mode="json", exclude_unset=True)
    if isinstance(item, Mapping):
        return plain(item)
    raise _Malformed("an output item that is not an object")


class _Reader:
    def __init__(self, names: WireNames, request_id: str) -> None:
        self.names = names
        self.request_id = request_id
        self.items: dict[tuple[str, object], _Item] = {}
        self.calls = 0
        self.text_seen = False
        self.reasoning: list[tuple[int, Any]] = []
        self.end_events: list[ProviderEvent] | None = None

    def _keys(self, event: Any, item_id: Any) -> list[tuple[str, object]]:
        """The keys an event names its output item by: its ``output_index``, and its
        item's id (some servers, llama.cpp's among them, send only the id)."""
        keys: list[tuple[str, object]] = []
        index = _get(event, "output_index")
        if index is not None:
            if type(index) is not int or index < 0:
                raise _Malformed(f"an output_index that is not a number: {index!r:.40}")
            keys.append(("index", index))
        if isinstance(item_id, str) and item_id:
            keys.append(("id", item_id))
        if not keys:
            raise _Malformed(f"{_get(event, 'type')} names no output item")
        return keys

    def _string(self, event: Any, name: str) -> str:
        value = _get(event, name)
        if not isinstance(value, str):
            raise _Malformed(f"{_get(event, 'type')} whose {name} is not a string")
        return value

    def event(self, event: Any) -> list[ProviderEvent]:
        kind = _get(event, "type")
        if kind == "response.output_text.delta":
            delta = self._string(event, "delta")
            self.text_seen = True
            return [TextDelta(delta)] if delta else []
        if kind == "response.function_call_arguments.delta":
            item = self._item(event, "function_call")
            delta = self._string(event, "delta")
            item.deltas = True
            return [ToolCallDelta(item.position, delta)] if delta else []
        if kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            delta = self._string(event, "delta")
            return [ReasoningDelta(delta)] if delta else []
        if kind == "response.output_item.added":
            return self._added(event)
        if kind == "response.function_call_arguments.done":
            item = self._item(event, "function_call")
            arguments = self._string(event, "arguments")
            if not item.deltas and arguments:
                item.deltas = True
                return [ToolCallDelta(item.position, arguments)]
        elif kind == "response.output_item.done":
            self._done(event)
        elif kind in ("response.completed", "response.incomplete", "response.failed"):
            self.end_events = self._end(kind, _get(event, "response"))
        elif kind == "error":
            message = _get(event, "message")
            code = _get(event, "code")
            self.end_events = [ProviderFailure(
                f"the server reported an error: {message if isinstance(message, str) else code}",
                retryable=code in ("server_error", "rate_limit_exceeded"))]
        return []

    def _item(self, event: Any, kind: str) -> _Item:
        key = self._keys(event, _get(event, "item_id"))[0]
        item = self.items.get(key)
        if item is None or item.kind != kind:
            raise _Malformed(f"{_get(event, 'type')} for output item {key[1]!r:.40}, which "
                             f"is not a {kind}")
        return item

    def _added(self, event: Any) -> list[ProviderEvent]:
        item = _get(event, "item")
        keys = self._keys(event, _get(item, "id"))
        if any(key in self.items for key in keys):
            raise _Malformed(f"output item {keys[0][1]!r:.40} added twice")
        kind = _get(item, "type")
        if kind != "function_call":
            self.items.update(dict.fromkeys(keys, _Item(str(kind))))
            return []
        call_id, name = _get(item, "call_id"), _get(item, "name")
        if not (isinstance(name, str) and name):
            raise _Malformed("a function_call without a name")
        if not isinstance(call_id, str | None):
            raise _Malformed("a function_call whose call_id is not a string")
        entry = _Item("function_call", self.calls)
        self.items.update(dict.fromkeys(keys, entry))
        self.calls += 1
        events: list[ProviderEvent] = [ToolCallStart(
            entry.position, call_id or f"call_{self.request_id}_{entry.position}",
            self.names.from_wire(name))]
        arguments = _get(item, "arguments")
        if isinstance(arguments, str) and arguments:
            entry.deltas = True
            events.append(ToolCallDelta(entry.position, arguments))
        return events

    def _done(self, event: Any) -> None:
        item = _get(event, "item")
        if _get(item, "type") != "reasoning":
            return
        position = len(self.reasoning) + self.calls + (1 if self.text_seen else 0)
        self.reasoning.append((position, _dump(item)))

    def _end(self, kind: str, response: Any) -> list[ProviderEvent]:
        if kind == "response.failed":
            error = _get(response, "error")
            message, code = _get(error, "message"), _get(error, "code")
            return [ProviderFailure(
                f"the server reported an error: {message if isinstance(message, str) else code}",
                retryable=code in ("server_error", "rate_limit_exceeded"))]
        stop = "tool_use" if self.calls else "end_turn"
        if kind == "response.incomplete":
            reason = _get(_get(response, "incomplete_details"), "reason")
            if reason == "content_filter":
                return [ProviderFailure("the server's content filter stopped the reply")]
            stop = "max_tokens"
        events: list[ProviderEvent] = [ToolCallEnd(p) for p in range(self.calls)]
        usage = _get(response, "usage")
        if usage is not None:
            count = [_get(usage, "input_tokens"), _get(usage, "output_tokens"),
                     _get(_get(usage, "input_tokens_details"), "cached_tokens")]
            numbers = [c if type(c) is int and c >= 0 else 0 for c in count]
            events.append(Usage(numbers[0], numbers[1], cached_input_tokens=numbers[2]))
        held = carried(WIRE, self.reasoning)
        if held is not None:
            events.append(held)
        events.append(StreamEnd(stop))  # type: ignore[arg-type]
        return events

    def end(self) -> list[ProviderEvent]:
        if self.end_events is None:
            return [ProviderFailure("the stream ended before the reply was complete "
                                    "(no response.completed)", retryable=True)]
        return self.end_events


class OpenAIResponsesProvider:
    """A model behind the OpenAI Responses API (the ``openai`` extra).

    ``model``, ``base_url``, ``api_key``, ``client``, ``timeout`` and ``max_tokens`` are
    :class:`~phaseflow.providers.OpenAIProvider`'s (``OPENAI_API_KEY``,
    ``OPENAI_BASE_URL``). ``store``: let the server keep the responses (default
    ``False``: nothing is kept there, and each reasoning item comes back with its
    ``encrypted_content``, which the next request carries). ``**extra`` goes into every
    request (``reasoning={"effort": "low", "summary": "auto"}``, ``extra_headers``...).
    """

    #: the media types it takes in a message or a tool's result (images and PDF)
    media_types: frozenset[str] = ALL_MEDIA

    def __init__(self, model: str | None = None, *, base_url: str | None = None,
                 api_key: str | None = None, client: AsyncOpenAI | None = None,
                 timeout: float = 120.0, max_tokens: int | None = None, store: bool = False,
                 **extra: Any) -> None:
        check_adapter("OpenAIResponsesProvider", ("openai", "openai", "openai"), model,
                      extra, _RESERVED)
        self.model = model
        self.max_tokens = check_max_tokens(max_tokens, "max_tokens")
        self.store = bool(store)
        self.extra = dict(extra)
        options: dict[str, Any] = {}
        if client is None:
            options = _client_options(base_url, api_key, check_timeout(timeout, "timeout"))
            server = options["base_url"]
            key = options["api_key"]
        else:
            server = str(getattr(client, "base_url", "") or "") or None
            key = getattr(client, "api_key", None)
        #: the server named in failures
        self.server = shown_url(server or DEFAULT_BASE_URL)
        self._secrets = hidden(key, server)
        self._base = options.get("base_url")

        def make() -> AsyncOpenAI:
            from openai import AsyncOpenAI

            return AsyncOpenAI(**options)

        async def close(c: AsyncOpenAI) -> None:
            await c.close()

        self._clients = LoopClients(make, close, client)

    def __repr__(self) -> str:  # never the key
        base = shown_url(self._base) if self._base else self._base
        return f"OpenAIResponsesProvider(model={self.model!r}, base_url={base!r})"

    def parameters(self, request: ProviderRequest, names: WireNames) -> dict[str, Any]:
        """The keyword arguments of ``responses.create`` for ``request``."""
        params: dict[str, Any] = dict(self.extra)
        params.update(model=request.model or self.model, input=request_input(request, names),
                      stream=True, store=self.store)
        if not self.store:
            include = list(params.get("include") or ())
            if "reasoning.encrypted_content" not in include:
                include.append("reasoning.encrypted_content")
            params["include"] = include
        if request.system:
            params["instructions"] = request.system
        if request.tools:
            params["tools"] = request_tools(request, names)
            params["tool_choice"] = request.tool_choice
        limit = request.max_output_tokens or self.max_tokens
        if limit is not None:
            params["max_output_tokens"] = limit
        if request.temperature is not None:
            params["temperature"] = request.temperature
        if request.reply_schema is not None:
            params["text"] = {"format": {"type": "json_schema", "name": REPLY_SCHEMA_NAME,
                                         "schema": dict(request.reply_schema)}}
        headers = dict(params.pop("extra_headers", None) or {})
        headers.setdefault("X-Client-Request-Id", request.request_id)
        params["extra_headers"] = headers
        return params

    async def stream(self, request: ProviderRequest) -> AsyncIterator[ProviderEvent]:
        async for event in self._stream(request):
            yield redacted(event, self._secrets)

    async def _stream(self, request: ProviderRequest) -> AsyncIterator[ProviderEvent]:
        if not (request.model or self.model):
            yield ProviderFailure("OpenAIResponsesProvider: no model: give one to the "
                                  "provider or the request")
            return
        try:
            names = names_of(request)
            params = self.parameters(request, names)
            events = await self._clients.get().responses.create(**params)
        except Exception as error:  # every failure is a value
            yield context_full(failure_of(error, self.server))
            return
        reader = _Reader(names, request.request_id)
        try:
            try:
                async for item in events:
                    if reader.end_events is None:  # (read to its end: the connection
                        for event in reader.event(item):  # goes back to the pool)
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
