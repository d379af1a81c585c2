"""What a session asks a model, and what a model answers: the ``Provider`` protocol.

A provider turns one :class:`ProviderRequest` into a stream of :class:`ProviderEvent`
values. The session never sees a vendor's wire format: adapters (the rest of
``phaseflow.providers``) translate, so the session core can be driven by a scripted
provider in tests exactly as by a real one. Failures are values too
(:class:`ProviderFailure`), so that retrying is a decision of the session, not of each
adapter. A stream becomes one :class:`ProviderReply` in
:mod:`phaseflow.providers.assembly`, and nowhere else.

This module is below the session: the session imports it, never the other way round.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from phaseflow.turn.messages import Carried, Message


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """One tool as the model is offered it: the workflow's name, a description and the
    JSON Schema of its arguments (an ``object`` schema, a plain JSON value)."""

    name: str
    description: str
    parameters: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ProviderRequest:
    """Everything one model call needs, rebuilt for every call of a turn.

    ``history`` is the exact conversation (the turn core's neutral messages, no system
    message), a read-only sequence shared with the session (never copied for a
    request); ``system`` is the stable system text (the host's text: the same for every
    request of a conversation) and ``context`` what changes with the phase and the state
    (see below). ``tool_choice`` is ``"auto"`` or ``"none"``. ``request_id`` is unique
    per call and stable across retries of that call.

    **The layout a prompt cache can reuse.** A provider sends, in this order: ``system``,
    ``tools`` (in the order given), ``history`` (append-only between requests of a
    conversation), then ``context`` **last**, after the newest history message. A
    provider cache reuses a request's prefix up to its first byte that differs, so
    everything before ``context`` is the previous request's prefix plus the new
    messages. ``context`` is never stored in the history: it is rebuilt for every
    request, and the next request has no trace of this one's. When ``context`` is empty
    nothing is added. Each provider places it in its API's own form:

    - OpenAI Chat Completions: a trailing ``system`` message after the history (or, for
      a chat template that refuses a system message that is not first, appended to the
      last user or tool message: ``OpenAIProvider(context_as="inline")``);
    - OpenAI Responses: a trailing ``developer`` message after the input items;
    - Anthropic Messages and Gemini (system text is a top-level field): a ``text`` block
      appended at the end of the last ``user`` turn (the turn holding the newest user
      text or tool results); when the history ends with an assistant turn, a new
      ``user`` turn holding only that block. A cache breakpoint, where the API has
      them, goes on the last history block before it and on the system text.

    A provider that ignores the field would hide the phase's instructions from the
    model: every provider must place it (at worst after ``system``, which loses the
    cache but not the meaning).
    With ``Agent(context_position="system")`` the session puts it into ``system`` (the
    layout before this field: one system text of host text, instructions and navigation)
    and ``context`` is empty.
    """

    model: str
    system: str
    history: Sequence[Message]
    tools: tuple[ToolSpec, ...]
    request_id: str
    tool_choice: Literal["auto", "none"] = "auto"
    max_output_tokens: int | None = None
    temperature: float | None = None
    #: ``turn``: a step of the conversation; ``compaction``: a request to summarize the
    #: oldest part of it (the history is then one user message holding that part)
    purpose: Literal["turn", "compaction"] = "turn"
    #: assistant replies folded into the summary at the start of ``history`` (0 when the
    #: history was never compacted): ``len(replies in history) + folded_replies`` is the
    #: number of replies the conversation has had
    folded_replies: int = 0
    #: what changes with the phase and the state, sent after the history (see above): the
    #: phase's rendered instructions, the navigation block, the final-phase and plan-mode
    #: notes, and (with ``offer_tools="workflow"``) which offered tools the phase allows
    context: str = ""
    #: the bytes of the attachments the history names (a media part's token, a stored
    #: attachment's reference, to its bytes), loaded by the session for this request:
    #: each provider sends them in its own API's form (:mod:`phaseflow.providers.media`)
    attachments: Mapping[str, bytes] = field(default_factory=dict)
    #: the JSON Schema (an ``object`` schema, a plain JSON value) the model's final reply
    #: in this phase must match (the phase's ``reply``), or None. Each provider sends it in
    #: its API's native form, tools still offered: Chat Completions ``response_format``
    #: (``json_schema``), Responses ``text.format``, Anthropic ``output_config.format``,
    #: Gemini ``response_json_schema`` with ``response_mime_type: application/json``
    reply_schema: Mapping[str, Any] | None = None


#: the name each provider gives a phase's reply schema where its API wants one
REPLY_SCHEMA_NAME = "reply"


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str
    kind: Literal["text_delta"] = "text_delta"


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    text: str
    kind: Literal["reasoning_delta"] = "reasoning_delta"


@dataclass(frozen=True, slots=True)
class ToolCallStart:
    """A tool call begins; ``index`` is its position in the reply (fragments that follow
    name the same index)."""

    index: int
    call_id: str
    name: str
    kind: Literal["tool_call_start"] = "tool_call_start"


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A fragment of a call's arguments (JSON text, to be concatenated)."""

    index: int
    arguments: str
    kind: Literal["tool_call_delta"] = "tool_call_delta"


@dataclass(frozen=True, slots=True)
class ToolCallEnd:
    index: int
    kind: Literal["tool_call_end"] = "tool_call_end"


@dataclass(frozen=True, slots=True)
class Usage:
    """A reply's tokens. ``input_tokens`` counts the whole prompt, of which
    ``cached_input_tokens`` were read from the server's prompt cache (Anthropic's
    ``cache_read_input_tokens``, Chat Completions' ``prompt_tokens_details.cached_tokens``
    and the Responses API's ``cached_tokens``, Gemini's
    ``cached_content_token_count``; 0 where the server says nothing)."""

    input_tokens: int = 0
    output_tokens: int = 0
    kind: Literal["usage"] = "usage"
    cached_input_tokens: int = 0


StopKind = Literal["end_turn", "tool_use", "max_tokens"]


@dataclass(frozen=True, slots=True)
class StreamEnd:
    """The reply is complete. ``stop`` is why the model stopped."""

    stop: StopKind = "end_turn"
    kind: Literal["end"] = "end"


@dataclass(frozen=True, slots=True)
class ProviderFailure:
    """The call failed. ``retryable`` for connection errors, timeouts, 429 and 5xx;
    ``retry_after`` is the server's ``Retry-After`` in seconds when it sent one.
    A failure ends the stream: nothing after it is read."""

    message: str
    retryable: bool = False
    retry_after: float | None = None
    status: int | None = None
    kind: Literal["error"] = "error"
    #: what kind of failure, when the provider knows (``CONTEXT_LENGTH_EXCEEDED``: the
    #: request is larger than the model's context; the session compacts and resends)
    code: str | None = None


#: the :attr:`ProviderFailure.code` of a request the model's context cannot hold (the
#: OpenAI API's error code; an adapter for another provider sets it for its own error)
CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"


ProviderEvent = (
    TextDelta | ReasoningDelta | ToolCallStart | ToolCallDelta | ToolCallEnd | Usage
    | StreamEnd | ProviderFailure | Carried
)
"""A :class:`~phaseflow.turn.messages.Carried` event (at most one a reply, before its
``StreamEnd``) holds what the provider needs back from this reply; the session stores it
with the assistant message, and every provider sends it back only to its own wire."""


@runtime_checkable
class Provider(Protocol):
    """A model. ``stream`` yields the events of one reply; it may also raise, which the
    session treats as a non-retryable failure (an adapter should yield
    :class:`ProviderFailure` for what it knows to be retryable)."""

    def stream(self, request: ProviderRequest) -> AsyncIterator[ProviderEvent]: ...


@dataclass(frozen=True, slots=True)
class ProviderReply:
    """A whole reply assembled from a stream: what the session core is given."""

    text: str = ""
    calls: tuple[tuple[str, str, str], ...] = ()  # (call id, name, arguments JSON text)
    stop: StopKind = "end_turn"
    reasoning: str = ""
    usage: Usage = field(default_factory=Usage)
    #: what the provider needs back from this reply (stored with the assistant message)
    carried: Carried | None = None
