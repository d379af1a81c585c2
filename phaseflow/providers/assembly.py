"""One model reply, assembled from a provider's stream, with every event checked.

A provider is host code: whatever it yields reaches the session through here and nowhere
else. Each event is checked against the documented protocol (its class, and the type of
every field) as it arrives, so a provider that yields ``TextDelta(123)``, a call id that
is not a string, tool-call indexes of two kinds or a ``ProviderFailure`` with a message
of ``None`` ends the turn with one non-retryable failure that says what was wrong - never
a hang (the assembly failing after the stream ended) and never an exception out of
``send``. A malformed event is the provider's fault: retrying cannot mend it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from phaseflow.providers.protocol import (
    ProviderFailure,
    ProviderReply,
    ReasoningDelta,
    StopKind,
    StreamEnd,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    Usage,
)
from phaseflow.turn.messages import Carried

_STOPS: tuple[StopKind, ...] = ("end_turn", "tool_use", "max_tokens")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _kind(value: object) -> str:
    return "None" if value is None else type(value).__name__


def _text_problem(owner: str, field_: str, value: object) -> str | None:
    if isinstance(value, str):
        return None
    return f"{owner}.{field_} is {_kind(value)}, not str"


def _index_problem(owner: str, value: object) -> str | None:
    if _is_int(value) and 0 <= value < 2**31:  # type: ignore[operator]
        return None
    return f"{owner}.index must be an int from 0, not {value!r:.40}"


def _count_problem(field_: str, value: object) -> str | None:
    if _is_int(value) and 0 <= value < 2**63:  # type: ignore[operator]
        return None
    return f"Usage.{field_} must be a non-negative int, not {value!r:.40}"


def failure_problem(item: ProviderFailure) -> str | None:
    """What is wrong with a failure a provider yielded, or ``None``."""
    if not isinstance(item.message, str):
        return f"ProviderFailure.message is {_kind(item.message)}, not str"
    if not isinstance(item.retryable, bool):
        return f"ProviderFailure.retryable is {_kind(item.retryable)}, not bool"
    after = item.retry_after
    if after is not None and not (
            isinstance(after, int | float) and not isinstance(after, bool)
            and math.isfinite(after) and after >= 0):
        return f"ProviderFailure.retry_after must be seconds (a number >= 0), not {after!r:.40}"
    if item.status is not None and not _is_int(item.status):
        return f"ProviderFailure.status is {_kind(item.status)}, not int"
    return None


def carried_problem(item: Carried) -> str | None:
    """What is wrong with a :class:`Carried` event, or ``None``: its data must be JSON
    text (it is stored as it is, and read back by the provider that made it)."""
    problem = (_text_problem("Carried", "provider", item.provider)
               or _text_problem("Carried", "data", item.data))
    if problem is not None:
        return problem
    try:
        json.loads(item.data)
    except ValueError:
        return "Carried.data is not JSON text"
    return None


def event_problem(item: object) -> str | None:
    """What is wrong with one event of a provider's stream, or ``None``."""
    if isinstance(item, TextDelta | ReasoningDelta):
        return _text_problem(type(item).__name__, "text", item.text)
    if isinstance(item, ToolCallStart):
        return (_index_problem("ToolCallStart", item.index)
                or _text_problem("ToolCallStart", "call_id", item.call_id)
                or _text_problem("ToolCallStart", "name", item.name))
    if isinstance(item, ToolCallDelta):
        return (_index_problem("ToolCallDelta", item.index)
                or _text_problem("ToolCallDelta", "arguments", item.arguments))
    if isinstance(item, ToolCallEnd):
        return _index_problem("ToolCallEnd", item.index)
    if isinstance(item, Usage):
        return (_count_problem("input_tokens", item.input_tokens)
                or _count_problem("output_tokens", item.output_tokens)
                or _count_problem("cached_input_tokens", item.cached_input_tokens))
    if isinstance(item, StreamEnd):
        return None if item.stop in _STOPS else (
            f"StreamEnd.stop must be one of {', '.join(_STOPS)}, not {item.stop!r:.40}")
    if isinstance(item, ProviderFailure):
        return failure_problem(item)
    if isinstance(item, Carried):
        return carried_problem(item)
    return f"{_kind(item)} is not a provider stream event"


def invalid(problem: str) -> ProviderFailure:
    """The failure a malformed stream ends with: the provider's fault, never retried."""
    return ProviderFailure(f"the provider broke its protocol: {problem}", retryable=False)


@dataclass(slots=True)
class ReplyAssembler:
    """Feed it a stream's events in order; it answers what each means for the turn.

    ``add(event)`` returns the event to pass on at once (a checked ``TextDelta``), a
    ``ProviderFailure`` that ends the stream (the provider's own, or the one its malformed
    event makes), the string ``"end"`` when a ``StreamEnd`` closed the reply, or ``None``.
    ``reply()`` is the whole reply once the stream ended (or simply stopped).
    """

    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    calls: dict[int, list[str]] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)
    stop: StopKind = "end_turn"
    carried: Carried | None = None
    #: a StreamEnd closed the reply
    ended: bool = False

    def add(self, item: Any) -> TextDelta | ProviderFailure | str | None:
        problem = event_problem(item)
        if problem is not None:
            return invalid(problem)
        if isinstance(item, TextDelta):
            self.text.append(item.text)
            return item
        if isinstance(item, ToolCallStart):
            if item.index in self.calls:
                return invalid(f"a second ToolCallStart for index {item.index}")
            self.calls[item.index] = [item.call_id, item.name, ""]
        elif isinstance(item, ToolCallDelta):
            call = self.calls.get(item.index)
            if call is None:
                return invalid(f"a ToolCallDelta for index {item.index} before its "
                               f"ToolCallStart")
            call[2] += item.arguments
        elif isinstance(item, Usage):
            self.usage = item
        elif isinstance(item, StreamEnd):
            self.stop = item.stop
            self.ended = True
            return "end"
        elif isinstance(item, ProviderFailure):
            return item
        elif isinstance(item, ReasoningDelta):
            self.reasoning.append(item.text)
        elif isinstance(item, Carried):
            if self.carried is not None:
                return invalid("a second Carried event in one reply")
            self.carried = item
        return None

    def reply(self) -> ProviderReply | ProviderFailure:
        """The whole reply, or the failure of a stream that stopped without its
        ``StreamEnd`` (a reply cut off mid-stream is not a reply: its calls never run)."""
        if not self.ended:
            return invalid("the stream stopped without a StreamEnd")
        return self._assembled()

    def _assembled(self) -> ProviderReply:
        ordered = tuple((c[0], c[1], c[2] or "{}") for _, c in sorted(self.calls.items()))
        return ProviderReply("".join(self.text), ordered, self.stop, "".join(self.reasoning),
                             self.usage, self.carried)
