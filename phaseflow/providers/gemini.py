"""``GeminiProvider``: Gemini through the official ``google-genai`` SDK.

``models.generate_content_stream`` (the API's ``streamGenerateContent`` as Server-Sent
Events) is read chunk by chunk: text parts stream as text, ``thought`` parts as
reasoning, and each ``function_call`` part arrives whole (name and arguments) and becomes
a call. A thought signature (``thought_signature``, on a call's part, on the reply's text
or on a thought) is kept exactly, with the part it came on, and carried with the assistant
message (:mod:`phaseflow.providers.carry`): the API wants it back on the next request.
The SDK's automatic function calling and its retries are off: the session runs the
tools and decides on retries.

The request's ``context`` (what changes with the phase and the state) goes last, after
the history: a ``text`` part at the end of the last ``user`` turn (after its function
responses), or, when the history ends with the model's turn or is empty, a ``user`` turn
of its own; ``system_instruction`` holds only the stable system text.

A finish reason of ``MAX_TOKENS`` is a reply cut short; ``SAFETY``, ``RECITATION`` and
the other blocking reasons are failures that are not retried; a chunk the SDK cannot
read ends the turn with a failure that is not retried. Errors map as the OpenAI
provider's do (429 and 5xx retryable, the connection failure naming the server).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

from phaseflow.errors import ConfigError
from phaseflow.providers.carry import carried, carried_parts, restored
from phaseflow.providers.chat_wire import names_of, plain
from phaseflow.providers.media import ALL_MEDIA, has_media, media_of, note
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
    from google.genai import Client

__all__ = ["GeminiProvider"]

#: the name a reply's carried parts are kept under
WIRE = "gemini"

#: the server the SDK talks to when no base URL is given
DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com"

_STOPS: dict[str, StopKind] = {"STOP": "end_turn", "MAX_TOKENS": "max_tokens",
                               "FINISH_REASON_UNSPECIFIED": "end_turn", "OTHER": "end_turn"}

_RESERVED = frozenset({"model", "contents", "system_instruction", "tools", "tool_config"})


def _text(content: Content) -> str:
    if isinstance(content, str):
        return content
    return "".join(p.text if isinstance(p, TextPart) else
                   f"[attachment {p.media_type}: {p.token}]" for p in content)


def _media_part(part: MediaPart, attachments: Mapping[str, bytes]) -> dict[str, Any]:
    """A media part as a part: bytes as ``inline_data``, a URL as ``file_data``; other
    media named in text."""
    media = media_of(part, attachments)
    if media is not None and media.data is not None:
        return {"inline_data": {"mime_type": media.media_type, "data": media.data}}
    if media is not None and media.url is not None:
        return {"file_data": {"file_uri": media.url, "mime_type": media.media_type}}
    return {"text": note(part)}


def _user(content: Content, attachments: Mapping[str, bytes] | None = None,
          ) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"text": content}]
    parts: list[dict[str, Any]] = []
    for part in content:
        if isinstance(part, TextPart):
            parts.append({"text": part.text})
        else:
            parts.append(_media_part(part, attachments or {}))
    return parts or [{"text": ""}]


def _replaces(part: Any) -> bool:
    """A carried part that stands for a rebuilt one (a signed call or text), not a
    thought inserted beside them."""
    return not getattr(part, "thought", False)


def _carried_parts(message: AssistantMessage) -> list[tuple[int, Any]]:
    from google.genai import types

    out: list[tuple[int, Any]] = []
    for position, part in carried_parts(message, WIRE):
        with contextlib.suppress(ValueError):  # a part the SDK cannot read is dropped
            out.append((position, types.Part.model_validate_json(json.dumps(part))))
    return out


def _call_id(part: Any) -> str | None:
    """The id a ``function_call`` part sends (a rebuilt part's, or a carried part's)."""
    call = part.get("function_call") if isinstance(part, dict) else getattr(
        part, "function_call", None)
    if call is None:
        return None
    value = call.get("id") if isinstance(call, dict) else getattr(call, "id", None)
    return value if isinstance(value, str) and value else None


def request_contents(request: ProviderRequest, names: WireNames) -> list[dict[str, Any]]:
    """The history as ``contents``. A function response names its call's function, and
    its id when the call went with one: a call is sent as the model made it (carried,
    with its id and signature) or, when nothing of it was carried (the model gave it no
    id: the session named it), without an id. The request's ``context`` ends the last
    ``user`` turn as a text part (a ``user`` turn of its own after the model's turn)."""
    contents: list[dict[str, Any]] = []
    called: dict[str, tuple[str, str | None]] = {}

    def add(role: str, parts: list[Any]) -> None:
        if contents and contents[-1]["role"] == role:
            contents[-1]["parts"].extend(parts)
        else:
            contents.append({"role": role, "parts": parts})

    for message in request.history:
        if isinstance(message, SystemMessage) or (isinstance(message, UserMessage)
                                                  and message.note):
            # (the session's note of a timer's turn too: system text in the user's turn)
            add("user", [{"text": f"[system] {_text(message.content)}"}])
        elif isinstance(message, UserMessage):
            add("user", _user(message.content, request.attachments))
        elif isinstance(message, AssistantMessage):
            own: list[Any] = []
            text = _text(message.content)
            if text:
                own.append({"text": text})
            for call in message.tool_calls:
                own.append({"function_call": {"name": names.to_wire(call.name),
                                              "args": call.argument_value()}})
            parts = restored(own, _carried_parts(message), _replaces)
            sent = [p for p in parts if (p.get("function_call") if isinstance(p, dict)
                                         else getattr(p, "function_call", None)) is not None]
            for call, part in zip(message.tool_calls, sent, strict=False):
                called[call.id] = (names.to_wire(call.name), _call_id(part))
            add("model", parts or [{"text": ""}])
        elif isinstance(message, ToolResultMessage):
            key = "error" if message.is_error else "result"
            name, sent_id = called.get(message.call_id, ("tool", None))
            response: dict[str, Any] = {"name": name,
                                        "response": {key: _text(message.content)}}
            if sent_id is not None:
                response["id"] = sent_id
            add("user", [{"function_response": response}])
            if has_media(message.content):  # a result's images follow its response
                add("user", [_media_part(p, request.attachments) for p in message.content
                             if isinstance(p, MediaPart)])
    if request.context:
        part = {"text": request.context}
        if contents and contents[-1]["role"] == "user":
            contents[-1] = {**contents[-1], "parts": [*contents[-1]["parts"], part]}
        else:
            contents.append({"role": "user", "parts": [part]})
    return contents


class _Malformed(Exception):
    """A chunk the API does not document: the turn ends, never retried."""


def _dump(part: Any) -> Any:
    return part.model_dump(mode="json", exclude_none=True)


class _Reader:
    def __init__(self, names: WireNames, request_id: str) -> None:
        self.names = names
        self.request_id = request_id
        self.calls = 0
        self.parts = 0  # the reply's parts as rebuilt: the text part, calls, thoughts
        self.text: list[str] = []
        self.text_at = -1
        self.text_signature: Any = None
        self.kept: list[tuple[int, Any]] = []
        self.finish: str | None = None
        self.usage: Usage | None = None

    def chunk(self, chunk: Any) -> list[ProviderEvent]:
        usage = getattr(chunk, "usage_metadata", None)
        if usage is not None:
            numbers = [getattr(usage, n, None) for n in (
                "prompt_token_count", "candidates_token_count", "thoughts_token_count",
                "cached_content_token_count")]
            prompt, out, thoughts, cached = (n if type(n) is int and n >= 0 else 0
                                             for n in numbers)
            self.usage = Usage(prompt, out + thoughts, cached_input_tokens=cached)
        candidates = getattr(chunk, "candidates", None) or ()
        if not candidates:
            return []
        candidate = candidates[0]
        events: list[ProviderEvent] = []
        content = getattr(candidate, "content", None)
        for part in getattr(content, "parts", None) or ():
            events.extend(self._part(part))
        finish = getattr(candidate, "finish_reason", None)
        if finish is not None:
            self.finish = str(getattr(finish, "value", finish))
        return events

    def _part(self, part: Any) -> list[ProviderEvent]:
        signature = getattr(part, "thought_signature", None)
        call = getattr(part, "function_call", None)
        text = getattr(part, "text", None)
        if text is not None and not isinstance(text, str):
            raise _Malformed("a part whose text is not a string")
        if getattr(part, "thought", None):
            if signature is not None:
                self.kept.append((self.parts, _dump(part)))
                self.parts += 1
            return [ReasoningDelta(text)] if text else []
        if call is not None:
            name = getattr(call, "name", None)
            args = getattr(call, "args", None)
            if not (isinstance(name, str) and name):
                raise _Malformed("a function_call without a name")
            if args is not None and not isinstance(args, Mapping):
                raise _Malformed("a function_call whose args are not an object")
            position = self.calls
            self.calls += 1
            call_id = getattr(call, "id", None)
            if signature is not None or call_id:  # sent back as it came
                self.kept.append((self.parts, _dump(part)))
            self.parts += 1
            call_id = call_id if isinstance(call_id, str) and call_id else (
                f"call_{self.request_id}_{position}")
            return [ToolCallStart(position, call_id, self.names.from_wire(name)),
                    ToolCallDelta(position, json.dumps(plain(args or {}), ensure_ascii=False,
                                                       separators=(",", ":")))]
        if text is not None or signature is not None:
            if self.text_at < 0:
                self.text_at = self.parts
                self.parts += 1
            if signature is not None:
                self.text_signature = signature
            if text:
                self.text.append(text)
                return [TextDelta(text)]
        return []

    def end(self) -> list[ProviderEvent]:
        if self.finish is None:
            return [ProviderFailure("the stream ended before the reply was complete "
                                    "(no finish reason)", retryable=True)]
        if self.finish not in _STOPS:
            return [ProviderFailure(f"the server stopped the reply: {self.finish}")]
        events: list[ProviderEvent] = [ToolCallEnd(p) for p in range(self.calls)]
        if self.usage is not None:
            events.append(self.usage)
        kept = list(self.kept)
        if self.text_signature is not None:
            from google.genai import types

            signed = types.Part(text="".join(self.text), thought_signature=self.text_signature)
            kept.append((self.text_at, _dump(signed)))
        held = carried(WIRE, kept)
        if held is not None:
            events.append(held)
        stop = _STOPS[self.finish]
        events.append(StreamEnd("tool_use" if self.calls and stop == "end_turn" else stop))
        return events


def _transport_errors() -> tuple[tuple[type[BaseException], ...],
                                  tuple[type[BaseException], ...]]:
    """The timeout and transport exceptions of the HTTP clients the SDK may use (httpx,
    or its fork httpx2 under another namespace, whichever is installed)."""
    import importlib

    timeouts: list[type[BaseException]] = []
    transports: list[type[BaseException]] = []
    for name in ("httpx", "httpx2"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        timeouts.append(module.TimeoutException)
        transports.append(module.TransportError)
    return tuple(timeouts), tuple(transports)


def failure_of(error: BaseException, server: str) -> ProviderFailure:
    """A ``google-genai`` SDK (or transport) exception as a failure value."""
    import pydantic
    from google.genai import errors

    at = f" at {shown_url(server)}"
    if isinstance(error, errors.APIError):
        status = error.code if type(error.code) is int else 0
        message = str(error.message or error.status or error)
        retryable = status in (408, 429) or status >= 500
        headers = getattr(getattr(error, "response", None), "headers", None)
        return context_full(ProviderFailure(
            f"the server answered {status}: {message}", retryable=retryable,
            retry_after=retry_after(headers) if retryable and isinstance(
                headers, Mapping) else None, status=status or None))
    timeouts, transports = _transport_errors()
    if isinstance(error, timeouts):
        return ProviderFailure(f"the request to the model server{at} timed out",
                               retryable=True)
    if isinstance(error, transports):
        return ProviderFailure(f"the connection to the model server{at} failed: {error}",
                               retryable=True)
    if isinstance(error, errors.UnknownApiResponseError):
        return ProviderFailure(f"the server sent a malformed stream chunk: {error}")
    if isinstance(error, json.JSONDecodeError | pydantic.ValidationError):
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        return ProviderFailure(f"the server sent a malformed stream chunk: {first}")
    return ProviderFailure(
        f"the model call failed: {type(error).__name__}: {error}".rstrip(": "))


class GeminiProvider:
    """Gemini through the Gemini API (the ``gemini`` extra: ``google-genai``).

    - ``model``: the model asked for when the request names none.
    - ``api_key``: defaults to the SDK's environment variables (``GEMINI_API_KEY``, or
      ``GOOGLE_API_KEY``, which the SDK prefers); ``base_url``: another server
      (a gateway, a local test server). A key is needed unless a base URL is given.
    - ``client``: a ready ``google.genai.Client``, used as it is.
    - ``timeout``: seconds for one request (default 120); ``max_tokens``: the limit sent
      when the request sets none.
    - ``**extra``: fields of ``GenerateContentConfig`` for every request
      (``thinking_config={"include_thoughts": True}``, ``top_p``, ``safety_settings``...).
    """

    #: the media types it takes in a message or a tool's result (images and PDF)
    media_types: frozenset[str] = ALL_MEDIA

    def __init__(self, model: str | None = None, *, base_url: str | None = None,
                 api_key: str | None = None, client: Client | None = None,
                 timeout: float = 120.0, max_tokens: int | None = None,
                 **extra: Any) -> None:
        check_adapter("GeminiProvider", ("google.genai", "google-genai", "gemini"), model,
                      extra, _RESERVED)
        self.model = model
        self.max_tokens = check_max_tokens(max_tokens, "max_tokens")
        self.extra = dict(extra)
        options: dict[str, Any] = {}
        if client is None:
            if base_url is not None:
                check_base_url(base_url, "base_url")
            key = api_key
            if key:
                check_header(key, "api_key")
            else:
                key = (_setting(None, "api_key", "GOOGLE_API_KEY", check_header)
                       or _setting(None, "api_key", "GEMINI_API_KEY", check_header))
            if key is None and base_url is None:
                raise ConfigError("GeminiProvider needs an API key: pass api_key= or set "
                                  "GEMINI_API_KEY (a server given by base_url= needs none)")
            seconds = check_timeout(timeout, "timeout")
            options = {"api_key": key or PLACEHOLDER_KEY, "http_options": {
                "base_url": base_url, "timeout": int(seconds * 1000),
                "retry_options": {"attempts": 1}}}
            server = base_url
        else:
            server = None
            key = getattr(getattr(client, "_api_client", None), "api_key", None)
        #: the server named in failures
        self.server = shown_url(server or DEFAULT_BASE_URL)
        self._secrets = hidden(key, server)
        self._base = server

        def make() -> Client:
            from google.genai import Client

            return Client(**options)

        async def close(c: Client) -> None:
            await c.aio.aclose()

        self._clients = LoopClients(make, close, client)

    def __repr__(self) -> str:  # never the key
        base = shown_url(self._base) if self._base else self._base
        return f"GeminiProvider(model={self.model!r}, base_url={base!r})"

    def parameters(self, request: ProviderRequest, names: WireNames) -> dict[str, Any]:
        """The keyword arguments of ``generate_content_stream`` for ``request``."""
        config: dict[str, Any] = dict(self.extra)
        config["automatic_function_calling"] = {"disable": True}
        if request.system:
            config["system_instruction"] = request.system
        if request.tools:
            from google.genai import types

            config["tools"] = [types.Tool(function_declarations=[
                types.FunctionDeclaration(
                    name=names.to_wire(t.name), description=t.description,
                    parameters_json_schema=plain(t.parameters) or {"type": "object",
                                                                   "properties": {}})
                for t in request.tools])]
            config["tool_config"] = {"function_calling_config": {
                "mode": "AUTO" if request.tool_choice == "auto" else "NONE"}}
        limit = request.max_output_tokens or self.max_tokens
        if limit is not None:
            config["max_output_tokens"] = limit
        if request.temperature is not None:
            config["temperature"] = request.temperature
        if request.reply_schema is not None:
            config["response_mime_type"] = "application/json"
            config["response_json_schema"] = dict(request.reply_schema)
        return {"model": request.model or self.model,
                "contents": request_contents(request, names), "config": config}

    async def stream(self, request: ProviderRequest) -> AsyncIterator[ProviderEvent]:
        async for event in self._stream(request):
            yield redacted(event, self._secrets)

    async def _stream(self, request: ProviderRequest) -> AsyncIterator[ProviderEvent]:
        if not (request.model or self.model):
            yield ProviderFailure("GeminiProvider: no model: give one to the provider or "
                                  "the request")
            return
        try:
            names = names_of(request)
            params = self.parameters(request, names)
            chunks = await self._clients.get().aio.models.generate_content_stream(**params)
        except Exception as error:  # every failure is a value
            yield failure_of(error, self.server)
            return
        reader = _Reader(names, request.request_id)
        try:
            try:
                async for chunk in chunks:
                    for event in reader.chunk(chunk):
                        yield event
                for event in reader.end():
                    yield event
            except _Malformed as problem:
                yield ProviderFailure(f"the server sent a malformed stream chunk: {problem}")
            except (TypeError, KeyError, IndexError, AttributeError) as error:
                # the SDK reading a chunk shaped unlike the API's (a list where an object
                # belongs): the server's fault, as a malformed chunk is
                yield ProviderFailure("the server sent a malformed stream chunk: "
                                      f"{type(error).__name__}: {error}")
            except Exception as error:
                yield failure_of(error, self.server)
        finally:
            with contextlib.suppress(Exception):
                await chunks.aclose()  # type: ignore[attr-defined]

    async def aclose(self) -> None:
        """Close the SDK client made for the running event loop."""
        await self._clients.aclose()
