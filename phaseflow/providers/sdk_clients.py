"""What every adapter over an official SDK shares: one SDK client per event loop, and
its secrets taken out of every failure it yields.

An HTTP connection pool belongs to one event loop, and a host's synchronous calls may
each run a new one: :class:`LoopClients` makes the client of the running loop when it is
first asked for, and drops the clients of loops already closed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from importlib.util import find_spec
from typing import Any, Generic, TypeVar

from phaseflow.errors import ConfigError, install_hint
from phaseflow.providers.protocol import CONTEXT_LENGTH_EXCEEDED, ProviderEvent, ProviderFailure
from phaseflow.providers.settings import PLACEHOLDER_KEY, redact, url_secrets

__all__ = ["CONTEXT_FULL", "LoopClients", "check_adapter", "context_full", "hidden", "redacted"]

#: how a failure says the prompt no longer fits the model's context window (a request
#: the server refused as too long: retrying it as it is cannot help)
CONTEXT_FULL = "the prompt is too long for the model's context window"

#: how servers say it: Anthropic ("prompt is too long"), Gemini ("exceeds the maximum
#: number of tokens"), llama.cpp ("exceeds the available context size"), OpenAI
#: ("maximum context length", code context_length_exceeded)
_CONTEXT_FULL_SAYINGS = ("prompt is too long", "exceeds the maximum number of tokens",
                         "exceeds the available context size", "maximum context length",
                         "context_length_exceeded")

C = TypeVar("C")


class LoopClients(Generic[C]):
    """The SDK client of the running event loop (``make`` builds one, ``close`` closes
    it); a client given by the host is used as it is and never closed here."""

    def __init__(self, make: Callable[[], C], close: Callable[[C], Awaitable[object]],
                 given: C | None = None) -> None:
        self._make = make
        self._close = close
        self.given = given
        self._clients: dict[int, tuple[asyncio.AbstractEventLoop, C]] = {}

    def get(self) -> C:
        if self.given is not None:
            return self.given
        loop = asyncio.get_running_loop()
        held = self._clients.get(id(loop))
        if held is not None and held[0] is loop:
            return held[1]
        self._clients = {k: v for k, v in self._clients.items() if not v[0].is_closed()}
        client = self._make()
        self._clients[id(loop)] = (loop, client)
        return client

    async def aclose(self) -> None:
        """Close the client made for the running loop (the clients of loops already
        closed are dropped: their connections went with their loop)."""
        loop = asyncio.get_running_loop()
        held = self._clients.pop(id(loop), None)
        self._clients = {k: v for k, v in self._clients.items() if not v[0].is_closed()}
        if held is not None and held[0] is loop:
            await self._close(held[1])


def context_full(failure: ProviderFailure) -> ProviderFailure:
    """``failure`` said as :data:`CONTEXT_FULL` (and never retried) when it is a server's
    refusal of a prompt too long for the model (an HTTP 400 or 413 saying so)."""
    if failure.message.startswith(CONTEXT_FULL):
        return replace(failure, code=CONTEXT_LENGTH_EXCEEDED)
    if failure.status not in (400, 413):
        return failure
    lowered = failure.message.lower()
    if not any(saying in lowered for saying in _CONTEXT_FULL_SAYINGS):
        return failure
    detail = failure.message.removeprefix(f"the server answered {failure.status}: ")
    return replace(failure, message=f"{CONTEXT_FULL}: {detail}", retryable=False,
                   retry_after=None, code=CONTEXT_LENGTH_EXCEEDED)


def redacted(event: ProviderEvent, secrets: tuple[str, ...]) -> ProviderEvent:
    """``event`` with ``secrets`` taken out of its message when it is a failure."""
    if not isinstance(event, ProviderFailure):
        return event
    message = redact(event.message, secrets)
    return event if message == event.message else replace(event, message=message)


def check_adapter(adapter: str, sdk: tuple[str, str, str], model: object,
                  extra: Mapping[str, Any], reserved: frozenset[str]) -> None:
    """What every SDK provider checks when it is built, in one place: its SDK is
    installed (``sdk``: its module, its package's name, phaseflow's extra that installs
    it), ``model`` is a non-empty string or ``None``, and no ``**extra`` parameter names
    one the adapter sets itself."""
    module, package, extra_name = sdk
    try:
        found = find_spec(module) is not None
    except ModuleNotFoundError:  # a dotted name whose parent package is missing
        found = False
    if not found:
        raise ConfigError(f"{adapter} needs the {package} SDK: " + install_hint(extra_name))
    if model is not None and (not isinstance(model, str) or not model):
        raise ConfigError(f"{adapter}: model must be a non-empty string")
    clash = sorted(reserved & set(extra))
    if clash:
        raise ConfigError(f"{adapter}: {clash[0]!r} is set by the adapter, not by an extra "
                          "parameter")


def hidden(key: object, server: str | None) -> tuple[str, ...]:
    """The secrets a provider takes out of every message it shows: its key (unless it is
    the placeholder sent to a local server that needs none) and those in its URL."""
    given = key if isinstance(key, str) else None
    return tuple(s for s in (given, *url_secrets(server)) if s and s != PLACEHOLDER_KEY)
