"""The one seam between a session and whoever watches it: :class:`Observer`.

A runner calls its agent's observer at a few places, one line each (see
``docs/observability.md``, "For whoever edits the runner"):

- ``drive``: a drive of the turn begins (a new turn, or one continued after an
  approval, a restart or in another worker); it returns the :class:`TurnObserver` the
  rest of the drive reports to;
- ``TurnObserver.stream``: the model's stream for one request (wrapped, or returned as
  it is);
- ``TurnObserver.tool`` / ``boundary`` / ``prepare``: the awaitable of a tool call, a
  turn boundary, a target's preparations (wrapped, or returned as it is);
- ``TurnObserver.commit``: a commit's events, encoded to their JSON and handed to the
  store's write (the observer may add the turn's trace context to them, so that a turn
  continued in another process can link to the span it continues).

Everything else - phase changes, approvals, refusals, retries, the turn's end - is read
from the committed events, the session's own record of what happened.

:data:`NOOP` does nothing and costs a method call: it returns the awaitables and the
stream it is given, unchanged. :func:`phaseflow.observe.switch.observer_for` gives it
unless tracing was asked for, so that without tracing nothing of OpenTelemetry is
imported.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from phaseflow.providers.protocol import Provider, ProviderEvent, ProviderRequest
    from phaseflow.turn.messages import ToolCall

T = TypeVar("T")


class Encodable(Protocol):
    """An event as the observer sees it: what it stores (its JSON)."""

    def to_json(self) -> dict[str, Any]: ...


#: what a commit hands the store: the events' JSON, to be written
Write = Callable[[list[dict[str, Any]]], Awaitable[T]]


class TurnObserver(Protocol):
    """What one drive of a turn reports to (see the module's docstring)."""

    def stream(self, provider: Provider, request: ProviderRequest
               ) -> AsyncIterator[ProviderEvent]: ...

    def tool(self, call: ToolCall, work: Awaitable[T]) -> Awaitable[T]: ...

    def boundary(self, work: Awaitable[T]) -> Awaitable[T]: ...

    def prepare(self, target: str, work: Awaitable[T]) -> Awaitable[T]: ...

    def commit(self, events: Sequence[Encodable], write: Write[T]) -> Awaitable[T]: ...


class Observer(Protocol):
    """An agent's observer, shared by its sessions."""

    #: True when it records anything (the agent instruments its hooks then)
    traced: bool

    async def drive(self, session_id: str, turn: int, phase: str, new_turn: bool
                    ) -> TurnObserver: ...

    def carrier(self, session_id: str) -> dict[str, Any]:
        """Keys to store with a message queued for another worker: the sender's trace
        context (empty when not traced)."""
        ...

    def queued(self, session_id: str, messages: Sequence[Mapping[str, Any]]) -> None:
        """The stored messages the session's next turn answers (their carriers)."""
        ...

    def hooks(self, registry: Mapping[str, Callable[..., Any]]
              ) -> Mapping[str, Callable[..., Any]]:
        """The workflow's call registry, each hook wrapped to be observed."""
        ...


class _NoTurn:
    """The no-op turn observer: hands back what it is given."""

    __slots__ = ()

    def stream(self, provider: Provider, request: ProviderRequest
               ) -> AsyncIterator[ProviderEvent]:
        return provider.stream(request)

    def tool(self, call: ToolCall, work: Awaitable[T]) -> Awaitable[T]:
        return work

    def boundary(self, work: Awaitable[T]) -> Awaitable[T]:
        return work

    def prepare(self, target: str, work: Awaitable[T]) -> Awaitable[T]:
        return work

    def commit(self, events: Sequence[Encodable], write: Write[T]) -> Awaitable[T]:
        return write([e.to_json() for e in events])


class _NoObserver:
    """The no-op observer."""

    __slots__ = ()
    traced = False

    async def drive(self, session_id: str, turn: int, phase: str, new_turn: bool
                    ) -> TurnObserver:
        return IDLE

    def carrier(self, session_id: str) -> dict[str, Any]:
        return {}

    def queued(self, session_id: str, messages: Sequence[Mapping[str, Any]]) -> None:
        return None

    def hooks(self, registry: Mapping[str, Callable[..., Any]]
              ) -> Mapping[str, Callable[..., Any]]:
        return registry


#: the turn observer of a runner outside a drive, and of every drive when not traced
IDLE: TurnObserver = _NoTurn()
#: the observer of an agent that is not traced
NOOP: Observer = _NoObserver()

#: the W3C trace context a turn should continue (see :func:`trace_parent`)
PARENT: ContextVar[Mapping[str, str] | None] = ContextVar("phaseflow_trace_parent",
                                                          default=None)


@contextlib.contextmanager
def trace_parent(carrier: Mapping[str, str] | None) -> Iterator[None]:
    """Turns driven inside this block continue the caller's trace: ``carrier`` holds the
    W3C headers (``traceparent``, and ``tracestate`` if any), as a server received them.
    Without tracing it does nothing; a carrier that is not a valid trace context is
    ignored (the turn starts a trace of its own)."""
    token = PARENT.set(dict(carrier) if carrier else None)
    try:
        yield
    finally:
        PARENT.reset(token)
