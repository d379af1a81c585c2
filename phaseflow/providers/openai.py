"""``OpenAIProvider``: any OpenAI-compatible server, through the official ``openai`` SDK.

Chat Completions with ``stream=True``: the adapter translates the turn core's history to
Chat Completions messages, offers the tools as function tools under wire names (see
:mod:`phaseflow.providers.wire_names`), and turns the chunk stream back into provider
events, with workflow names. Tool calls arrive in fragments keyed by index (the id and the
name usually in the first); arguments are passed on as they come.

The SDK's own retries are off (``max_retries=0``): retrying is the session's decision, so
every failure is a :class:`~phaseflow.providers.protocol.ProviderFailure` value saying
whether a retry may help. Nothing raises out of :meth:`OpenAIProvider.stream`.

Settings are checked when the provider is built (:mod:`phaseflow.providers.settings`): a
key that cannot be a header or a base URL without a scheme is a ``ConfigError`` naming
the setting, never a failure retried at every request. A failure's message names the
server (without credentials) and never holds the key: it is redacted at this boundary.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, replace
from email.utils import parsedate_to_datetime
from importlib.util import find_spec
from typing import TYPE_CHECKING, Any, Literal

from phaseflow.errors import ConfigError, install_hint
from phaseflow.providers.chat_wire import ContextAs, names_of, request_messages, request_tools
from phaseflow.providers.media import ALL_MEDIA
from phaseflow.providers.protocol import (
    CONTEXT_LENGTH_EXCEEDED,
    REPLY_SCHEMA_NAME,
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
from phaseflow.providers.settings import (
    PLACEHOLDER_KEY,
    check_base_url,
    check_header,
    check_max_tokens,
    check_timeout,
    redact,
    shown_url,
    url_secrets,
)
from phaseflow.providers.wire_names import WireNames

if TYPE_CHECKING:
    from openai import AsyncOpenAI

__all__ = ["OpenAIProvider"]

#: A local server (vLLM, llama.cpp, Ollama) needs no key, but the SDK insists on one.

#: the server the SDK talks to when no base URL is given
DEFAULT_BASE_URL = "https://api.openai.com/v1"

#: the SDK's environment variables that become headers (besides the key), checked too
_HEADER_VARIABLES = ("OPENAI_ORG_ID", "OPENAI_PROJECT_ID")

_STOPS: dict[str, StopKind] = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
}


def retry_after(headers: Mapping[str, str] | None) -> float | None:
    """The server's ``Retry-After`` (or ``retry-after-ms``) in seconds, if it sent one."""
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return max(float(ms) / 1000, 0.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)


def _server_message(error: Any) -> str:
    """The server's own message from an SDK error (``body`` is the ``error`` object)."""
    body = getattr(error, "body", None)
    if isinstance(body, Mapping) and isinstance(body.get("message"), str) and body["message"]:
        return str(body["message"])
    if isinstance(body, str) and body.strip():
        return body.strip()[:500]
    return str(getattr(error, "message", None) or error)


#: how OpenAI-compatible servers that send no error code say the context is full
#: (vLLM: "maximum context length is 512 tokens"; llama.cpp: "exceeds the available
#: context size")
_CONTEXT_FULL = re.compile(r"context (length|size|window)", re.IGNORECASE)


def _context_full(error: Any, status: int, message: str) -> bool:
    """The request is larger than the model's context: the API's error code
    ``context_length_exceeded``, or a 400 whose message says so."""
    code = getattr(error, "code", None)
    if code == CONTEXT_LENGTH_EXCEEDED:
        return True
    return status == 400 and bool(_CONTEXT_FULL.search(message))


def failure_of(error: BaseException, server: str | None = None) -> ProviderFailure:
    """An SDK (or transport) exception as a failure value; ``server``: the base URL to
    name in a connection failure or a timeout (shown without credentials)."""
    import openai

    at = f" at {shown_url(server)}" if server else ""
    if isinstance(error, openai.APIStatusError):
        status = error.status_code
        retryable = status in (408, 429) or status >= 500
        message = _server_message(error)
        return ProviderFailure(
            f"the server answered {status}: {message}",
            retryable=retryable,
            retry_after=retry_after(error.response.headers) if retryable else None,
            status=status,
            code=CONTEXT_LENGTH_EXCEEDED if _context_full(error, status, message) else None,
        )
    if isinstance(error, openai.APITimeoutError):
        return ProviderFailure(f"the request to the model server{at} timed out",
                               retryable=True)
    if isinstance(error, openai.APIConnectionError):
        cause = error.__cause__
        detail = f": {cause}" if cause is not None and str(cause) else ""
        return ProviderFailure(
            f"the connection to the model server{at} failed{detail}", retryable=True
        )
    if isinstance(error, openai.APIError):  # an error event inside the stream
        return ProviderFailure(f"the server reported an error: {_server_message(error)}")
    if isinstance(error, json.JSONDecodeError):
        return ProviderFailure(f"the server sent a malformed stream chunk: {error}")
    return ProviderFailure(
        f"the model call failed: {type(error).__name__}: {error}".rstrip(": ")
    )


@dataclass
class _Call:
    """A tool call being assembled from fragments."""

    position: int | None = None  # its index in the reply once started
    call_id: str = ""
    name: str = ""
    pending: str = ""  # arguments received before the name


def _field(value: Any, key: str) -> Any:
    """``value[key]`` when ``value`` is a JSON object, else ``None``."""
    return value.get(key) if isinstance(value, dict) else None


def _items(value: Any) -> list[Any]:
    """``value`` when it is a JSON array, else no items."""
    return value if isinstance(value, list) else []


def _count(value: Any) -> int:
    """A token count the server sent: a whole number, else 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def usage_of(usage: dict[str, Any]) -> Usage:
    """A Chat Completions ``usage`` object as a :class:`Usage`: ``prompt_tokens``,
    ``completion_tokens``, and of the prompt the tokens read from the server's cache
    (``prompt_tokens_details.cached_tokens``: OpenAI's cached input, llama.cpp's reused
    prefix; 0 where the server says nothing)."""
    details = _field(usage, "prompt_tokens_details")
    return Usage(_count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens")),
                 cached_input_tokens=_count(_field(details, "cached_tokens")))


class _Reader:
    """Turns chunks into events: one object per reply, so fragments can be keyed."""

    def __init__(self, names: WireNames, request_id: str) -> None:
        self.names = names
        self.request_id = request_id
        self.calls: dict[int, _Call] = {}
        self.started: list[int] = []  # server indexes, in the order calls started
        self.finish: str | None = None
        self.usage: Usage | None = None

    def chunk(self, chunk: Any) -> list[ProviderEvent]:
        """The events of one decoded ``data:`` object (plain JSON: anything the server
        sent, so every field is checked for its type)."""
        events: list[ProviderEvent] = []
        usage = _field(chunk, "usage")
        if isinstance(usage, dict):
            self.usage = usage_of(usage)
        for choice in _items(_field(chunk, "choices")):
            if _field(choice, "index") not in (0, None):
                continue  # only the first choice is the reply (n is never set above 1)
            delta = _field(choice, "delta")
            if isinstance(delta, dict):
                events.extend(self._delta(delta))
            finish = _field(choice, "finish_reason")
            if finish:
                self.finish = str(finish)
        return events

    def _delta(self, delta: dict[str, Any]) -> list[ProviderEvent]:
        events: list[ProviderEvent] = []
        for field in ("reasoning_content", "reasoning"):  # vLLM, llama.cpp, DeepSeek, ...
            reasoning = delta.get(field)
            if isinstance(reasoning, str) and reasoning:
                events.append(ReasoningDelta(reasoning))
                break
        content = delta.get("content")
        if isinstance(content, str) and content:
            events.append(TextDelta(content))
        for fragment in _items(delta.get("tool_calls")):
            events.extend(self._fragment(fragment))
        return events

    def _fragment(self, fragment: Any) -> list[ProviderEvent]:
        index = _field(fragment, "index")
        if not isinstance(index, int):
            index = len(self.calls)
        call = self.calls.setdefault(index, _Call())
        given_id = _field(fragment, "id")
        if given_id:
            call.call_id = call.call_id or str(given_id)
        function = _field(fragment, "function")
        name = _field(function, "name")
        if name:
            call.name = call.name or str(name)
        arguments = _field(function, "arguments") or ""
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments)
        events: list[ProviderEvent] = []
        if call.position is None:
            call.pending += arguments
            if not call.name:
                return events
            call.position = len(self.started)
            self.started.append(index)
            call_id = call.call_id or f"call_{self.request_id}_{call.position}"
            events.append(ToolCallStart(call.position, call_id, self.names.from_wire(call.name)))
            if call.pending:
                events.append(ToolCallDelta(call.position, call.pending))
            call.pending = ""
        elif arguments:
            events.append(ToolCallDelta(call.position, arguments))
        return events

    def end(self) -> list[ProviderEvent]:
        """The closing events, or a failure when the reply is incomplete."""
        if self.finish is None:
            return [ProviderFailure(
                "the stream ended before the reply was complete (no finish reason)",
                retryable=True,
            )]
        if self.finish == "content_filter":
            return [ProviderFailure("the server's content filter stopped the reply")]
        nameless = [i for i, c in self.calls.items() if c.position is None]
        if nameless:
            return [ProviderFailure(
                f"the server sent a tool call without a name (index {nameless[0]})"
            )]
        events: list[ProviderEvent] = [ToolCallEnd(p) for p in range(len(self.started))]
        if self.usage is not None:
            events.append(self.usage)
        stop = _STOPS.get(self.finish, "end_turn")
        if self.started and stop == "end_turn":
            stop = "tool_use"  # some servers say "stop" after tool calls
        events.append(StreamEnd(stop))
        return events


class OpenAIProvider:
    """A model behind an OpenAI-compatible Chat Completions endpoint.

    - ``model``: the model asked for when the request names none (a request's non-empty
      ``model`` wins).
    - ``base_url``, ``api_key``: default to the SDK's environment variables
      (``OPENAI_BASE_URL``, ``OPENAI_API_KEY``); with a base URL and no key, a
      placeholder key is sent, so local servers work. Checked here: a key must be one
      word of visible ASCII (a trailing line break is refused, not stripped), a base URL
      ``http(s)://HOST...``; a :class:`ConfigError` names the setting, never the key.
    - ``client``: a ready ``AsyncOpenAI``, used as it is (its own retry setting, key
      and URL apply; its key is still redacted from failures).
    - ``timeout``: seconds for one request (default 120).
    - ``max_tokens``: the most tokens a reply may have, sent when the request sets no
      limit of its own (``ProviderRequest.max_output_tokens`` wins); ``None`` (default):
      the server's own limit. A reply cut there ends with stop ``max_tokens``.
    - ``max_tokens_field``: the request field the limit goes in:
      ``"max_completion_tokens"`` (default, the hosted API's) or ``"max_tokens"`` (for
      servers that do not know the former).
    - ``include_usage``: ask for token counts (``stream_options``); ``False`` for
      servers that reject it.
    - ``context_as``: where the phase's instructions and navigation block
      (``ProviderRequest.context``) go, after the history: ``"system"`` (default) a
      trailing system message; ``"inline"`` appended to the last user or tool message,
      for a chat template that refuses a system message that is not the first.
    - ``**extra``: goes into every request (``top_p``, ``seed``, ``reasoning_effort``,
      ``extra_body``, ``extra_headers``...); what the adapter sets itself (``model``,
      ``messages``, ``tools``, ``tool_choice``, ``stream``, ``stream_options``) cannot
      be given.
    """

    #: the media types it takes in a message or a tool's result (images and PDF)
    media_types: frozenset[str] = ALL_MEDIA

    def __init__(
        self,
        model: str | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        client: AsyncOpenAI | None = None,
        timeout: float = 120.0,
        max_tokens: int | None = None,
        include_usage: bool = True,
        max_tokens_field: Literal["max_completion_tokens", "max_tokens"] = "max_completion_tokens",
        context_as: ContextAs = "system",
        **extra: Any,
    ) -> None:
        if find_spec("openai") is None:
            raise ConfigError("OpenAIProvider needs the openai SDK: " + install_hint("openai"))
        if model is not None and (not isinstance(model, str) or not model):
            raise ConfigError("OpenAIProvider: model must be a non-empty string")
        reserved = {"model", "messages", "tools", "tool_choice", "stream", "stream_options"}
        clash = sorted(reserved & set(extra))
        if clash:
            raise ConfigError(f"OpenAIProvider: {clash[0]!r} is set by the adapter, not by "
                              "an extra parameter")
        if max_tokens_field not in ("max_completion_tokens", "max_tokens"):
            raise ConfigError("max_tokens_field: expected 'max_completion_tokens' or "
                              f"'max_tokens', got {max_tokens_field!r}")
        if context_as not in ("system", "inline"):
            raise ConfigError(f"context_as: expected 'system' or 'inline', got {context_as!r}")
        self.context_as: ContextAs = context_as
        self.model = model
        #: the limit sent when a request has none (see the class docstring)
        self.max_tokens = check_max_tokens(max_tokens, "max_tokens")
        self.include_usage = include_usage
        self.max_tokens_field = max_tokens_field
        self.extra = dict(extra)
        self._given = client
        self._clients: dict[int, tuple[asyncio.AbstractEventLoop, AsyncOpenAI]] = {}
        self._options: dict[str, Any] = {}
        if client is None:
            self._options = _client_options(base_url, api_key,
                                            check_timeout(timeout, "timeout"))
            server = self._options["base_url"]
        else:
            given_key = getattr(client, "api_key", None)
            self._options = {"api_key": given_key if isinstance(given_key, str) else None}
            server = str(getattr(client, "base_url", "") or "") or None
        #: the server named in failures
        self.server = shown_url(server or DEFAULT_BASE_URL)
        self._secrets = tuple(s for s in (self._options.get("api_key"), *url_secrets(server))
                              if s and s != PLACEHOLDER_KEY)

    def __repr__(self) -> str:  # never the key
        base = self._options.get("base_url") if self._given is None else "<given client>"
        shown = shown_url(base) if base else base
        return f"OpenAIProvider(model={self.model!r}, base_url={shown!r})"

    def redact(self, text: str) -> str:
        """``text`` without this provider's secrets (the key, a password or query in the
        base URL): every failure leaving :meth:`stream` goes through it."""
        return redact(text, self._secrets)

    def _failure(self, failure: ProviderFailure) -> ProviderFailure:
        message = self.redact(failure.message)
        return failure if message == failure.message else replace(failure, message=message)

    def _client(self) -> AsyncOpenAI:
        """The SDK client of the running event loop: an HTTP connection pool belongs to
        one loop, and a host's synchronous calls may each run a new one."""
        if self._given is not None:
            return self._given
        loop = asyncio.get_running_loop()
        held = self._clients.get(id(loop))
        if held is not None and held[0] is loop:
            return held[1]
        from openai import AsyncOpenAI

        self._clients = {k: v for k, v in self._clients.items() if not v[0].is_closed()}
        client = AsyncOpenAI(**self._options)
        self._clients[id(loop)] = (loop, client)
        return client

    def parameters(self, request: ProviderRequest, names: WireNames) -> dict[str, Any]:
        """The keyword arguments of ``chat.completions.create`` for ``request``."""
        params: dict[str, Any] = dict(self.extra)
        params.update(
            model=request.model or self.model,
            messages=request_messages(request, names, self.context_as),
            stream=True,
        )
        if self.include_usage:
            params["stream_options"] = {"include_usage": True}
        if request.tools:
            params["tools"] = request_tools(request, names)
            params["tool_choice"] = request.tool_choice
        limit = (request.max_output_tokens if request.max_output_tokens is not None
                 else self.max_tokens)
        if limit is not None:
            params[self.max_tokens_field] = limit
        if request.temperature is not None:
            params["temperature"] = request.temperature
        if request.reply_schema is not None:
            params["response_format"] = {"type": "json_schema", "json_schema": {
                "name": REPLY_SCHEMA_NAME, "schema": dict(request.reply_schema)}}
        headers = dict(params.pop("extra_headers", None) or {})
        # OpenAI's header for a caller's own id; other servers ignore it
        headers.setdefault("X-Client-Request-Id", request.request_id)
        params["extra_headers"] = headers
        return params

    async def stream(self, request: ProviderRequest) -> AsyncIterator[ProviderEvent]:
        async for event in self._stream(request):
            yield self._failure(event) if isinstance(event, ProviderFailure) else event

    async def _stream(self, request: ProviderRequest) -> AsyncIterator[ProviderEvent]:
        if not (request.model or self.model):
            yield ProviderFailure("OpenAIProvider: no model: give one to the provider or "
                                  "the request")
            return
        try:
            names = names_of(request)
            params = self.parameters(request, names)
            client = self._client()
            # the SDK's transport, auth, retries and status errors, but the body posted
            # as prepared and the stream read here (see _post)
            response = await _post(client, params)
        except Exception as error:  # every failure is a value (module docstring)
            yield failure_of(error, self.server)
            return
        reader = _Reader(names, request.request_id)
        try:
            try:
                async for chunk in _chunks(response.http_response):
                    if isinstance(chunk, ProviderFailure):
                        yield chunk
                        return
                    for event in reader.chunk(chunk):
                        yield event
            except Exception as error:
                yield failure_of(_transport_error(error, response.http_response), self.server)
                return
            for event in reader.end():
                yield event
        finally:
            # closing a broken stream may fail again; there is nothing to add then
            with contextlib.suppress(Exception):
                await response.close()

    async def aclose(self) -> None:
        """Close the SDK client this provider made for the running event loop (never a
        client it was given); the clients of loops already closed are dropped, since
        their connections went with their loop."""
        loop = asyncio.get_running_loop()
        held = self._clients.pop(id(loop), None)
        self._clients = {k: v for k, v in self._clients.items() if not v[0].is_closed()}
        if held is not None and held[0] is loop:
            await held[1].close()


#: the keyword arguments of ``chat.completions.create`` that are request options, not
#: members of the body, and the option each becomes
_OPTIONS = {"extra_body": "extra_json", "extra_query": "params", "timeout": "timeout"}


async def _post(client: AsyncOpenAI, params: dict[str, Any]) -> Any:
    """``chat.completions.create(**params)`` as a streamed raw response (what
    ``with_streaming_response.create`` gives), posted through the client's own ``post``:
    the same transport, authentication, retries and status errors, but the body sent as
    :meth:`OpenAIProvider.parameters` made it. ``create`` first walks the whole body
    against the API's typed dictionaries (``_async_transform_recursive``), which changes
    nothing in a body of plain JSON values and cost about a third of a served turn's CPU
    (docs/benchmarks.md, A thousand conversations on one worker)."""
    from openai import AsyncStream
    from openai.types.chat import ChatCompletion, ChatCompletionChunk

    body = dict(params)
    # the header ``with_streaming_response`` sets: the response comes back unread
    headers = {**(body.pop("extra_headers", None) or {}), "X-Stainless-Raw-Response": "stream"}
    options: dict[str, Any] = {"headers": headers, "security": {"bearer_auth": True}}
    for argument, option in _OPTIONS.items():
        if argument in body:
            value = body.pop(argument)
            if value is not None:
                options[option] = value
    # (``options``: the SDK's RequestOptions, a TypedDict, built from the arguments)
    return await client.post(  # type: ignore[call-overload]
        "/chat/completions", cast_to=ChatCompletion, body=body, options=options,
        stream=True, stream_cls=AsyncStream[ChatCompletionChunk])


async def _chunks(http: Any) -> AsyncIterator[Any]:
    """The decoded ``data:`` objects of a server-sent event stream, up to ``[DONE]`` (the
    rest of the body read, so the connection can be reused), or a failure: an ``error``
    object in the stream (as the SDK reads one), or data that is not JSON."""
    data: list[str] = []
    done = False
    async for line in http.aiter_lines():
        if done:
            continue
        if line.startswith("data:"):
            data.append(line[6:] if line.startswith("data: ") else line[5:])
            continue
        if line or not data:
            continue  # a comment, an "event:"/"id:" field, or a blank line between events
        text = "\n".join(data)
        data = []
        if text.startswith("[DONE]"):
            done = True
            continue
        yield _decoded(text, http)
    if data and not done:
        text = "\n".join(data)
        if not text.startswith("[DONE]"):
            yield _decoded(text, http)


def _decoded(text: str, http: Any) -> Any:
    """One event's data: its JSON, or a failure value (an ``error`` object or bad JSON)."""
    import openai

    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        return failure_of(error)
    if isinstance(value, dict) and value.get("error"):
        error_body = value["error"]
        message = error_body.get("message") if isinstance(error_body, dict) else None
        if not message or not isinstance(message, str):
            message = "An error occurred during streaming"
        return failure_of(openai.APIError(message, http.request, body=error_body))
    return value


def _transport_error(error: Exception, http: Any) -> Exception:
    """A transport exception raised while the stream is read, as the SDK's own error (a
    timeout, a failed connection), so that it is named as one; anything else as it is."""
    import openai

    try:  # the SDK's own list of its HTTP library's exceptions
        from openai._httpx2 import request_exceptions, timeout_exceptions
        timeouts: tuple[type[Exception], ...] = timeout_exceptions()
        failures: tuple[type[Exception], ...] = request_exceptions()
    except ImportError:  # pragma: no cover - an SDK built on httpx
        import httpx

        timeouts, failures = (httpx.TimeoutException,), (httpx.RequestError,)
    if isinstance(error, timeouts):
        wrapped: Exception = openai.APITimeoutError(request=http.request)
    elif isinstance(error, failures):
        wrapped = openai.APIConnectionError(request=http.request)
    else:
        return error
    wrapped.__cause__ = error
    return wrapped


def _setting(given: str | None, argument: str, variable: str,
             check: Callable[[str, str], object]) -> str | None:
    """``given``, else environment ``variable`` (an empty one is unset, as the SDK reads
    it), checked under the name it came from so the error points at what to fix."""
    if given:
        check(given, argument)
        return given
    value = os.environ.get(variable) or None
    if value is not None:
        check(value, variable)
    return value


def _client_options(base_url: str | None, api_key: str | None, timeout: float
                    ) -> dict[str, Any]:
    """The ``AsyncOpenAI`` arguments of the given settings and the SDK's environment
    variables, each checked (a :class:`ConfigError` names the one that cannot work)."""
    base = _setting(base_url, "base_url", "OPENAI_BASE_URL", check_base_url)
    key = _setting(api_key, "api_key", "OPENAI_API_KEY", check_header)
    for variable in _HEADER_VARIABLES:
        value = os.environ.get(variable)
        if value:
            check_header(value, variable)
    if key is None:
        if base is None:
            raise ConfigError(
                "OpenAIProvider needs an API key: pass api_key= or set "
                "OPENAI_API_KEY (a local server given by base_url= or "
                "OPENAI_BASE_URL needs none)"
            )
        key = PLACEHOLDER_KEY
    return {"api_key": key, "base_url": base, "timeout": timeout, "max_retries": 0}
