"""A small, provider-neutral message model and a persistent history of messages.

The turn core must describe *exactly* what a provider was sent and what it answered,
without depending on any one provider's wire format. Four roles cover every provider we
target: ``system``, ``user``, ``assistant`` (text, optional reasoning, tool calls) and
``tool`` (one result for one call id). A session layer maps these to its provider.

Tool-call arguments are stored as canonical JSON text, not as a dict, so a call is an
immutable, hashable value and two calls with the same arguments in a different key order
are the same call (this is what ``tool_call_identity_mismatch`` compares).

:class:`History` is a persistent (structurally shared) sequence: extending it by ``k``
messages costs O(k), never a copy of the whole history, and checking that one history
extends another is O(new tail) when they share structure.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar, overload

from phaseflow.turn import inputs as i
from phaseflow.turn import jsonio as j
from phaseflow.turn.jsonio import JsonValue, Malformed
from phaseflow.turn.rejections import Rejected

__all__ = [
    "AssistantMessage",
    "Carried",
    "Content",
    "ContentPart",
    "History",
    "MediaPart",
    "Message",
    "OutcomeStatus",
    "Role",
    "SystemMessage",
    "TextPart",
    "ToolCall",
    "ToolOutcome",
    "ToolResultMessage",
    "UserMessage",
    "canonical_arguments",
    "content_from_json",
    "content_to_json",
    "message_from_json",
    "message_to_json",
]


class Role(StrEnum):
    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


@dataclass(frozen=True, slots=True)
class TextPart:
    text: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "text", i.text(self.text, "text part"))


@dataclass(frozen=True, slots=True)
class MediaPart:
    """Non-text content (an image, a file) by opaque reference: bytes never live here."""

    media_type: str
    token: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "media_type", i.text(self.media_type, "media part type"))
        object.__setattr__(self, "token", i.text(self.token, "media part token"))


ContentPart = TextPart | MediaPart
Content = str | tuple[ContentPart, ...]
"""Plain text, or an ordered tuple of parts."""


_PARTS = (TextPart, MediaPart)


def freeze_content(content: object, what: str = "content") -> Content:
    """``content`` as :data:`Content`: a string, or a tuple of parts (a list becomes one).

    Anything else (a list of strings, bytes, a number, ``None``) raises
    :class:`~phaseflow.turn.inputs.TurnInputError`.
    """
    if type(content) is str:
        return content
    if isinstance(content, tuple | list):
        for part in content:
            if type(part) not in _PARTS:
                raise i.TurnInputError(
                    f"{what} parts must be TextPart or MediaPart, not {i.describe(part)}"
                )
        return content if type(content) is tuple else tuple(content)
    if isinstance(content, str):
        return i.text(content, what)
    raise i.TurnInputError(
        f"{what} must be a string or a tuple of parts, not {i.describe(content)}"
    )


def read_content(content: object, what: str) -> Content:
    """:func:`freeze_content` with the reader signature of :func:`inputs.sequence`."""
    return freeze_content(content, what)


def read_call(value: object, what: str) -> ToolCall:
    return i.exactly(value, (ToolCall,), what)  # type: ignore[no-any-return]


def read_outcome(value: object, what: str) -> ToolOutcome:
    return i.exactly(value, (ToolOutcome,), what)  # type: ignore[no-any-return]


def read_message(value: object, what: str) -> Message:
    return i.exactly(value, _MESSAGES, what)  # type: ignore[no-any-return]


def content_to_json(content: Content) -> JsonValue:
    content = freeze_content(content)
    if isinstance(content, str):
        return content
    out: list[JsonValue] = []
    for part in content:
        if isinstance(part, TextPart):
            out.append({"type": "text", "text": part.text})
        else:
            out.append({"type": "media", "media_type": part.media_type, "token": part.token})
    return out


def content_from_json(data: object) -> Content:
    """Decode content; raises ``Malformed`` (use inside a decoder)."""
    if isinstance(data, str):
        return data
    if not isinstance(data, list):
        raise Malformed("content: expected a string or an array of parts")
    parts: list[ContentPart] = []
    for raw in data:
        part = j.obj(raw, "content part")
        kind = j.string(part, "type", "content part")
        if kind == "text":
            parts.append(TextPart(j.string(part, "text", "text part")))
        elif kind == "media":
            media_type = j.string(part, "media_type", "media part")
            parts.append(MediaPart(media_type, j.string(part, "token", "media part")))
        else:
            raise Malformed(f"content part: unknown type {kind!r}")
    return tuple(parts)


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call the model asked for. ``arguments`` is canonical JSON text."""

    id: str
    name: str
    arguments: str = "{}"

    def __post_init__(self) -> None:
        object.__setattr__(self, "id", i.text(self.id, "tool call id"))
        object.__setattr__(self, "name", i.text(self.name, "tool call name"))
        # Keep the one invariant identity comparisons rely on: ``arguments`` is the
        # canonical text. A non-canonical string (other key order, spaces) or a JSON value
        # passed directly is canonicalised; anything that is not JSON is a programming
        # error (``TurnInputError``), as in :meth:`of`.
        raw: object = self.arguments
        try:
            value = json.loads(raw) if isinstance(raw, str) else raw
            text = j.canonical_json(value)
        except (ValueError, RecursionError, Malformed) as exc:
            raise i.TurnInputError(
                f"tool call arguments are not JSON: {i.describe(exc, 120)}"
            ) from None
        if text != raw or type(raw) is not str:
            object.__setattr__(self, "arguments", text)

    @classmethod
    def of(cls, id: str, name: str, arguments: object = None) -> ToolCall:
        """Build a call from a JSON value (``None`` means ``{}``), canonicalising it.

        Raises ``PhaseflowError`` if ``arguments`` is not plain JSON: that is a
        programming error, not a domain outcome.
        """
        try:
            text = j.canonical_json({} if arguments is None else arguments)
        except Malformed as exc:
            raise i.TurnInputError(f"tool call arguments are not JSON: {exc}") from None
        return cls(id, name, text)

    def argument_value(self) -> Any:
        """A fresh, mutable copy of the arguments as a JSON value."""
        return json.loads(self.arguments)

    def to_json(self) -> dict[str, JsonValue]:
        return {"id": self.id, "name": self.name, "arguments": json.loads(self.arguments)}

    @classmethod
    def decode(cls, data: object) -> ToolCall:
        d = j.obj(data, "tool call")
        args = j.any_json(j.field(d, "arguments", "tool call"), "tool call.arguments")
        return cls(
            j.string(d, "id", "tool call"), j.string(d, "name", "tool call"), j.canonical_json(args)
        )

    @classmethod
    def from_json(cls, data: object) -> ToolCall | Rejected:
        return j.decode(data, cls.decode)


class OutcomeStatus(StrEnum):
    OK = "ok"
    ERROR = "error"
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """What one tool call produced, as the model will see it."""

    status: OutcomeStatus
    content: Content

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", i.member(OutcomeStatus, self.status, "outcome status"))
        object.__setattr__(self, "content", freeze_content(self.content, "outcome content"))

    @property
    def is_error(self) -> bool:
        """Cancelled counts as an error for the model: the call did not do its job."""
        return self.status is not OutcomeStatus.OK

    @classmethod
    def ok(cls, content: Content) -> ToolOutcome:
        return cls(OutcomeStatus.OK, content)

    @classmethod
    def error(cls, content: Content) -> ToolOutcome:
        return cls(OutcomeStatus.ERROR, content)

    @classmethod
    def cancelled(cls, content: Content = "Tool call cancelled.") -> ToolOutcome:
        return cls(OutcomeStatus.CANCELLED, content)

    def to_message(self, call_id: str) -> ToolResultMessage:
        return ToolResultMessage(call_id, self.content, self.is_error)

    def to_json(self) -> dict[str, JsonValue]:
        return {"status": self.status.value, "content": content_to_json(self.content)}

    @classmethod
    def decode(cls, data: object) -> ToolOutcome:
        d = j.obj(data, "tool outcome")
        return cls(
            j.enum(d, "status", "tool outcome", OutcomeStatus),
            content_from_json(j.field(d, "content", "tool outcome")),
        )

    @classmethod
    def from_json(cls, data: object) -> ToolOutcome | Rejected:
        return j.decode(data, cls.decode)


@dataclass(frozen=True, slots=True)
class SystemMessage:
    content: Content

    def __post_init__(self) -> None:
        object.__setattr__(self, "content", freeze_content(self.content, "system content"))

    role: ClassVar[Role] = Role.SYSTEM


@dataclass(frozen=True, slots=True)
class UserMessage:
    """A message in the user's place. ``note``: not written by the user but by the
    session (``"timer"``: a timer's turn); a provider sends it as a system note in its
    own form (a system or developer message, or ``[system] ...`` text)."""

    content: Content
    note: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "content", freeze_content(self.content, "user content"))
        object.__setattr__(self, "note", i.text(self.note, "user note"))

    role: ClassVar[Role] = Role.USER


@dataclass(frozen=True, slots=True)
class Carried:
    """What a provider needs back from one of its replies, kept exactly: Anthropic's
    thinking blocks with their signatures, the Responses API's reasoning items, Gemini's
    thought signatures. ``provider`` names the wire that made it (``anthropic``,
    ``responses``, ``gemini``): only a provider of that name sends ``data`` back, and any
    other drops it (the reply's visible text and calls are the message's own).
    ``data`` is JSON text, opaque here: stored and sent back as it is."""

    provider: str
    data: str
    #: the agent's model role whose provider made it (``""``: the default role); a
    #: request on a role with another provider object drops it (the session's rule)
    role: str = ""
    #: its kind as a provider stream event (:mod:`phaseflow.providers.protocol`)
    kind: ClassVar[str] = "carried"

    def __post_init__(self) -> None:
        object.__setattr__(self, "provider", i.text(self.provider, "carried provider"))
        object.__setattr__(self, "data", i.text(self.data, "carried data"))
        object.__setattr__(self, "role", i.text(self.role, "carried role"))

    def to_json(self) -> dict[str, JsonValue]:
        out: dict[str, JsonValue] = {"provider": self.provider, "data": self.data}
        if self.role:
            out["role"] = self.role
        return out

    @classmethod
    def decode(cls, data: object) -> Carried:
        d = j.obj(data, "carried")
        role = d.get("role", "")
        return cls(j.string(d, "provider", "carried"), j.string(d, "data", "carried"),
                   role if isinstance(role, str) else "")


def _read_carried(value: object) -> Carried | None:
    if value is None:
        return None
    return i.exactly(value, (Carried,), "carried")  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True)
class AssistantMessage:
    content: Content
    tool_calls: tuple[ToolCall, ...] = ()
    reasoning: str = ""
    #: the provider's own parts of the reply, sent back to that provider only
    carried: Carried | None = None
    #: the continuations stitched into this reply: a reply cut at the model's output
    #: limit and continued is one message of ``1 + continued`` model replies
    continued: int = 0
    role: ClassVar[Role] = Role.ASSISTANT

    def __post_init__(self) -> None:
        object.__setattr__(self, "content", freeze_content(self.content, "assistant content"))
        object.__setattr__(self, "tool_calls", i.sequence(self.tool_calls, "tool calls", read_call))
        object.__setattr__(self, "reasoning", i.text(self.reasoning, "reasoning"))
        object.__setattr__(self, "carried", _read_carried(self.carried))
        if self.continued:
            count = i.integer(self.continued, "continued")
            if count < 0:
                raise i.TurnInputError(f"continued: expected a count, got {count}")
            object.__setattr__(self, "continued", count)

    @property
    def replies(self) -> int:
        """How many model replies this message holds (a continued reply: several)."""
        return 1 + self.continued


@dataclass(frozen=True, slots=True)
class ToolResultMessage:
    call_id: str
    content: Content
    is_error: bool = False
    role: ClassVar[Role] = Role.TOOL

    def __post_init__(self) -> None:
        object.__setattr__(self, "call_id", i.text(self.call_id, "tool result call id"))
        object.__setattr__(self, "content", freeze_content(self.content, "tool result content"))
        object.__setattr__(self, "is_error", i.flag(self.is_error, "tool result is_error"))


Message = SystemMessage | UserMessage | AssistantMessage | ToolResultMessage
_MESSAGES = (SystemMessage, UserMessage, AssistantMessage, ToolResultMessage)


def message_to_json(message: Message) -> dict[str, JsonValue]:
    """A message's plain JSON (what :func:`message_from_json` reads back); anything but a
    message raises :class:`~phaseflow.turn.inputs.TurnInputError`."""
    return _message_json(read_message(message, "message"))


def _message_json(message: Message) -> dict[str, JsonValue]:
    # unchecked: ``History`` holds only messages (its constructor read each one)
    out: dict[str, JsonValue] = {
        "role": message.role.value,
        "content": content_to_json(message.content),
    }
    if isinstance(message, AssistantMessage):
        if message.tool_calls:
            out["tool_calls"] = [c.to_json() for c in message.tool_calls]
        if message.reasoning:
            out["reasoning"] = message.reasoning
        if message.carried is not None:
            out["carried"] = message.carried.to_json()
        if message.continued:
            out["continued"] = message.continued
    elif isinstance(message, ToolResultMessage):
        out["call_id"] = message.call_id
        out["is_error"] = message.is_error
    elif isinstance(message, UserMessage) and message.note:
        out["note"] = message.note
    return out


def decode_message(data: object) -> Message:
    d = j.obj(data, "message")
    role = j.enum(d, "role", "message", Role)
    content = content_from_json(j.field(d, "content", "message"))
    if role is Role.SYSTEM:
        return SystemMessage(content)
    if role is Role.USER:
        return UserMessage(content, j.opt_string(d, "note", "message") or "")
    if role is Role.ASSISTANT:
        raw_calls = d.get("tool_calls", [])
        if not isinstance(raw_calls, list):
            raise Malformed("message.tool_calls: expected an array")
        calls = tuple(ToolCall.decode(c) for c in raw_calls)
        reasoning = j.opt_string(d, "reasoning", "message") or ""
        raw_carried = d.get("carried")
        carried = None if raw_carried is None else Carried.decode(raw_carried)
        continued = j.opt_integer(d, "continued", "message") or 0
        if continued < 0:
            raise Malformed("message.continued: expected a count")
        return AssistantMessage(content, calls, reasoning, carried, continued)
    return ToolResultMessage(
        j.string(d, "call_id", "message"), content, j.boolean(d, "is_error", "message")
    )


def message_from_json(data: object) -> Message | Rejected:
    return j.decode(data, decode_message)


class History(Sequence[Message]):
    """An immutable, structurally shared sequence of messages.

    A history is a chain of nodes, each holding a tuple of messages appended at once and
    a link to the history it extended. ``extend`` is O(k) for k new messages;
    ``starts_with`` is O(length of the differing tail + nodes walked), and O(1) when the
    prefix is an ancestor node; iteration is O(n). Values never change after creation.
    """

    __slots__ = ("_flat", "_len", "_parent", "_start", "_tail")

    _parent: History | None
    _tail: tuple[Message, ...]
    _start: int
    _len: int
    #: every message as one tuple, cached on the node it was last asked of (a cache,
    #: not part of the value: moved down the chain as the history grows, so memory
    #: stays O(n) and a conversation's next request costs O(new messages) to flatten)
    _flat: tuple[Message, ...] | None

    def __init__(self, messages: Iterable[Message] = ()) -> None:
        tail = _messages(messages)
        object.__setattr__(self, "_parent", None)
        object.__setattr__(self, "_tail", tail)
        object.__setattr__(self, "_start", 0)
        object.__setattr__(self, "_len", len(tail))
        object.__setattr__(self, "_flat", tail)

    @classmethod
    def _node(cls, parent: History, tail: tuple[Message, ...]) -> History:
        node = cls.__new__(cls)
        object.__setattr__(node, "_parent", parent)
        object.__setattr__(node, "_tail", tail)
        object.__setattr__(node, "_start", parent._len)
        object.__setattr__(node, "_len", parent._len + len(tail))
        object.__setattr__(node, "_flat", None)
        return node

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("History is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("History is immutable")

    def __len__(self) -> int:
        return self._len

    def extend(self, messages: Iterable[Message]) -> History:
        """A new history: this one plus ``messages``. O(k); shares this one."""
        tail = _messages(messages)
        return History._node(self, tail) if tail else self

    def append(self, message: Message) -> History:
        return History._node(self, (read_message(message, "message"),))

    def __iter__(self) -> Iterator[Message]:
        return iter(self.to_tuple())

    def to_tuple(self) -> tuple[Message, ...]:
        """Every message, in order. When a history grows by appending and each version
        is flattened in turn (a session's requests), this walks only the nodes added
        since the last flattening and makes one C-level copy; otherwise it walks all."""
        flat = self._flat
        if flat is not None:
            return flat
        tails: list[tuple[Message, ...]] = []
        node: History | None = self
        while node is not None and node._flat is None:
            tails.append(node._tail)
            node = node._parent
        base: tuple[Message, ...] = node._flat or () if node is not None else ()
        new: list[Message] = []
        for tail in reversed(tails):
            new.extend(tail)
        flat = base + tuple(new)
        setf = object.__setattr__
        if node is not None and node._parent is not None:
            setf(node, "_flat", None)  # the cache moves down: one full copy at a time
        setf(self, "_flat", flat)
        return flat

    def last(self) -> Message | None:
        """The last message, O(1) (the newest node is this one or an empty ancestor)."""
        node: History | None = self
        while node is not None and not node._tail:
            node = node._parent
        return node._tail[-1] if node is not None else None

    @overload
    def __getitem__(self, index: int) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[Message, ...]: ...

    def __getitem__(self, index: int | slice) -> Message | tuple[Message, ...]:
        if isinstance(index, slice):
            return self.to_tuple()[index]
        if type(index) is not int:
            index = i.integer(index, "history index")
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError("history index out of range")
        node = self
        while node._start > index:
            assert node._parent is not None
            node = node._parent
        return node._tail[index - node._start]

    def take(self, count: int) -> History:
        """The first ``count`` messages, sharing structure. O(nodes walked)."""
        if type(count) is not int:
            count = i.integer(count, "count")
        if count >= self._len:
            return self
        if count <= 0:
            return History()
        node = self
        while node._start >= count:
            assert node._parent is not None
            node = node._parent
        if node._len == count:
            return node
        if node._parent is None:
            return History(node._tail[:count])
        return History._node(node._parent, node._tail[: count - node._start])

    def after(self, count: int) -> tuple[Message, ...]:
        """The messages from index ``count`` on. O(k + nodes walked) for a k-message tail."""
        if type(count) is not int:
            count = i.integer(count, "count")
        if count >= self._len:
            return ()
        chunks: list[tuple[Message, ...]] = []
        node: History | None = self
        while node is not None and node._len > count:
            lo = max(count - node._start, 0)
            chunks.append(node._tail[lo:])
            node = node._parent
        return tuple(m for chunk in reversed(chunks) for m in chunk)

    def starts_with(self, prefix: History) -> bool:
        """Whether ``prefix`` is a prefix of this history.

        Walks both node chains from the prefix's end down, comparing messages (identity
        first, then equality) until both chains reach the same node, which proves the
        rest equal without looking at it.
        """
        if type(prefix) is not History:
            raise i.TurnInputError(f"prefix must be a History, not {i.describe(prefix)}")
        n = prefix._len
        if n > self._len:
            return False
        a: History = self
        b: History = prefix
        pos = n - 1
        while pos >= 0:
            while a._start > pos:
                assert a._parent is not None
                a = a._parent
            while b._start > pos:
                assert b._parent is not None
                b = b._parent
            if a is b:
                return True
            lo = max(a._start, b._start)
            at, bt, ast, bst = a._tail, b._tail, a._start, b._start
            for k in range(pos, lo - 1, -1):
                x, y = at[k - ast], bt[k - bst]
                if x is not y and x != y:
                    return False
            pos = lo - 1
        return True

    def __eq__(self, other: object) -> bool:
        if type(other) is not History:
            return NotImplemented
        return self is other or (self._len == other._len and self.starts_with(other))

    def __hash__(self) -> int:
        return hash(self.to_tuple())

    def __repr__(self) -> str:
        return f"History({list(self)!r})"

    def to_json(self) -> list[JsonValue]:
        return [_message_json(m) for m in self]

    @classmethod
    def decode(cls, data: object) -> History:
        if not isinstance(data, list):
            raise Malformed("messages: expected an array")
        return cls(decode_message(m) for m in data)

    @classmethod
    def from_json(cls, data: object) -> History | Rejected:
        return j.decode(data, cls.decode)


def _messages(messages: Iterable[Message]) -> tuple[Message, ...]:
    """``messages`` as a tuple of messages; raises ``TurnInputError`` for anything else.

    Any iterable is read (the core itself extends histories with generators), but a
    string or a mapping is refused: iterating one would never yield messages.
    """
    listed = type(messages) is tuple or type(messages) is list
    if not listed and (
        isinstance(messages, str | bytes | dict) or not isinstance(messages, Iterable)
    ):
        raise i.TurnInputError(f"messages must be a sequence, not {i.describe(messages)}")
    tail = tuple(messages)
    for message in tail:
        if type(message) not in _MESSAGES:
            raise i.TurnInputError(f"not a message: {i.describe(message)}")
    return tail


def as_history(messages: History | Iterable[Message]) -> History:
    return messages if type(messages) is History else History(messages)


def canonical_arguments(arguments: object) -> str | None:
    """Canonical JSON text of a JSON value (``None`` means ``{}``); ``None`` if not JSON."""
    try:
        return j.canonical_json({} if arguments is None else arguments)
    except Malformed:
        return None
