"""A model whose replies are written in advance: for tests, demos and ``phaseflow test``.

The reply to a request is chosen by the request itself, never by a counter: the Nth
reply answers the request whose history already holds N-1 assistant messages. A scripted
conversation resumed in a new process (a fresh provider, a stored history) therefore
continues where it stood, and a retried request gets the same reply again.

A script is a list of replies, each one of:

- a string: a text reply;
- a mapping ``{text: TEXT, calls: [{TOOL: ARGS}, ...], reasoning: TEXT, stop: STOP}``
  (every key optional; ``ARGS`` a mapping or null; ``stop: max_tokens`` a reply cut at
  the model's output limit), the form of a conversation test's ``model:`` steps;
- a ready :class:`~phaseflow.providers.protocol.ProviderReply` (its call ids are kept);
- a scripted failure ``{error: MESSAGE, retryable: BOOL, retry_after: SECONDS,
  status: INT, code: CODE}`` (``code: context_length_exceeded``: a full context)
  (or a :class:`~phaseflow.providers.protocol.ProviderFailure`), to test how
  a session retries. A failure is not a reply: it is yielded once, by this provider
  object, to the first request that asks for the reply written after it; the retried
  request then gets that reply. (A new provider object yields it again.)

Call ids are ``call_<reply number>_<call number>`` (both from 1), unique in a
conversation and the same in every run.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from phaseflow.errors import ConfigError, PhaseflowError
from phaseflow.providers.media import ALL_MEDIA
from phaseflow.providers.protocol import (
    ProviderEvent,
    ProviderFailure,
    ProviderReply,
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
from phaseflow.turn.messages import AssistantMessage, TextPart

__all__ = ["ScriptIncomplete", "ScriptedProvider", "ScriptedReply"]


class ScriptIncomplete(PhaseflowError, AssertionError):
    """A script still has replies no request asked for (an ``AssertionError`` too, so a
    test framework reports it as a failed check)."""


@dataclass(frozen=True, slots=True)
class ScriptedReply:
    """One reply of a script, read and checked; ``failures`` come before it."""

    text: str = ""
    calls: tuple[tuple[str, str, str], ...] = ()  # (call id, name, arguments JSON text)
    reasoning: str = ""
    failures: tuple[ProviderFailure, ...] = ()
    #: why the model stopped (None: ``tool_use`` with calls, ``end_turn`` without)
    stop: StopKind | None = None


class _Bad(Exception):
    """A problem in a script entry, at ``path`` (keys and indexes inside the script)."""

    def __init__(self, message: str, path: tuple[int | str, ...]) -> None:
        super().__init__(message)
        self.message = message
        self.path = path


_REPLY_KEYS = frozenset({"text", "calls", "reasoning", "stop"})
_STOPS: tuple[StopKind, ...] = ("end_turn", "tool_use", "max_tokens")
_FAILURE_KEYS = frozenset({"error", "retryable", "retry_after", "status", "code"})


def _describe(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _string(value: object, path: tuple[int | str, ...], what: str) -> str:
    if not isinstance(value, str):
        raise _Bad(f"{what} must be a string, not {_describe(value)}", path)
    return value


def _failure(entry: Mapping[str, Any], path: tuple[int | str, ...]) -> ProviderFailure:
    unknown = sorted(set(entry) - _FAILURE_KEYS, key=str)
    if unknown:
        raise _Bad(f"unknown key {unknown[0]!r} in a scripted failure (allowed: "
                   f"{', '.join(sorted(_FAILURE_KEYS))})", (*path, str(unknown[0])))
    message = _string(entry["error"], (*path, "error"), "error")
    retryable = entry.get("retryable", False)
    if not isinstance(retryable, bool):
        raise _Bad("retryable must be true or false", (*path, "retryable"))
    retry_after = entry.get("retry_after")
    if retry_after is not None and (
        isinstance(retry_after, bool) or not isinstance(retry_after, int | float)
        or retry_after < 0
    ):
        raise _Bad("retry_after must be a number of seconds >= 0", (*path, "retry_after"))
    status = entry.get("status")
    if status is not None and (isinstance(status, bool) or not isinstance(status, int)):
        raise _Bad("status must be an integer", (*path, "status"))
    code = entry.get("code")
    if code is not None and not isinstance(code, str):
        raise _Bad("code must be a string (context_length_exceeded: the request is larger "
                   "than the model's context)", (*path, "code"))
    return ProviderFailure(
        message, retryable, None if retry_after is None else float(retry_after), status,
        code=code,
    )


def _arguments(args: object, path: tuple[int | str, ...], tool: str) -> str:
    if args is None:
        args = {}
    if not isinstance(args, Mapping):
        raise _Bad(f"the arguments of {tool!r} must be a mapping, not {_describe(args)}", path)
    try:
        return json.dumps(dict(args), sort_keys=True, separators=(",", ":"),
                          ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise _Bad(f"the arguments of {tool!r} are not plain JSON: {exc}", path) from None


Calls = tuple[tuple[str, str, str], ...]
"""(call id, name, arguments JSON text) per call, in the model's order."""


def _calls(raw: object, number: int, path: tuple[int | str, ...]) -> Calls:
    if raw is None:
        return ()
    if not isinstance(raw, Sequence) or isinstance(raw, str):
        raise _Bad(f"calls must be a list of {{TOOL: ARGS}} mappings, not {_describe(raw)}",
                   path)
    calls: list[tuple[str, str, str]] = []
    for k, call in enumerate(raw):
        where = (*path, k)
        if not isinstance(call, Mapping) or len(call) != 1:
            raise _Bad("each call must be a mapping with exactly one key, the tool's name: "
                       "{TOOL: ARGS}", where)
        ((name, args),) = call.items()
        if not isinstance(name, str) or not name:
            raise _Bad(f"a tool name must be a non-empty string, not {name!r}", where)
        calls.append((f"call_{number}_{k + 1}", name, _arguments(args, (*where, name), name)))
    return tuple(calls)


def _reply(entry: object, number: int, path: tuple[int | str, ...]) -> ScriptedReply:
    """One reply entry (not a failure) as a :class:`ScriptedReply`."""
    if isinstance(entry, str):
        return ScriptedReply(text=entry)
    if isinstance(entry, ProviderReply):
        return ScriptedReply(entry.text, tuple(entry.calls), entry.reasoning,
                             stop=entry.stop)
    if isinstance(entry, ScriptedReply):
        return ScriptedReply(entry.text, entry.calls, entry.reasoning, stop=entry.stop)
    if not isinstance(entry, Mapping):
        raise _Bad("a reply must be a string, a mapping {text, calls} or a scripted failure "
                   f"{{error: ...}}, not {_describe(entry)}", path)
    unknown = sorted((k for k in entry if k not in _REPLY_KEYS), key=str)
    if unknown:
        raise _Bad(f"unknown key {unknown[0]!r} in a reply (allowed: calls, reasoning, stop, text; "
                   "a scripted failure has 'error')", (*path, str(unknown[0])))
    text = _string(entry.get("text", ""), (*path, "text"), "text")
    reasoning = _string(entry.get("reasoning", ""), (*path, "reasoning"), "reasoning")
    calls = _calls(entry.get("calls"), number, (*path, "calls"))
    if not text and not calls:
        raise _Bad("a reply needs text or calls", path)
    stop = entry.get("stop")
    if stop is not None and stop not in _STOPS:
        raise _Bad(f"stop must be one of {', '.join(_STOPS)}, not {_describe(stop)}",
                   (*path, "stop"))
    return ScriptedReply(text, calls, reasoning, stop=stop)


def _is_failure(entry: object) -> bool:
    return isinstance(entry, ProviderFailure) or (isinstance(entry, Mapping) and "error" in entry)


def _script(
    entries: Sequence[object],
) -> tuple[tuple[ScriptedReply, ...], tuple[ProviderFailure, ...]]:
    """The replies of a script (failures attached to the reply after them), and the
    failures written after the last reply (yielded to requests beyond the script)."""
    replies, trailing, _ = _script_entries(entries)
    return replies, trailing


def _script_entries(
    entries: Sequence[object],
) -> tuple[tuple[ScriptedReply, ...], tuple[ProviderFailure, ...], tuple[int, ...]]:
    """:func:`_script`, and the index in ``entries`` of each reply."""
    if isinstance(entries, str | bytes) or not isinstance(entries, Sequence):
        raise _Bad(f"a script must be a list of replies, not {_describe(entries)}", ())
    replies: list[ScriptedReply] = []
    positions: list[int] = []
    pending: list[ProviderFailure] = []
    for index, entry in enumerate(entries):
        if isinstance(entry, ProviderFailure):
            pending.append(entry)
        elif _is_failure(entry):
            assert isinstance(entry, Mapping)
            pending.append(_failure(entry, (index,)))
        else:
            reply = _reply(entry, len(replies) + 1, (index,))
            replies.append(ScriptedReply(reply.text, reply.calls, reply.reasoning,
                                         tuple(pending), reply.stop))
            positions.append(index)
            pending = []
    return tuple(replies), tuple(pending), tuple(positions)


def _where(path: tuple[int | str, ...]) -> str:
    if not path:
        return "script"
    head = f"script entry {int(path[0]) + 1}"
    rest = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path[1:])
    return head + rest


def _pieces(text: str, parts: int = 3) -> list[str]:
    """``text`` cut into at most ``parts`` non-empty pieces, as a stream would send it."""
    if not text:
        return []
    size = max(1, -(-len(text) // parts))
    return [text[i: i + size] for i in range(0, len(text), size)]


def _tokens(text: str) -> int:
    """A rough, deterministic token count (four characters a token)."""
    return -(-len(text) // 4)


def _request_size(request: ProviderRequest) -> int:
    size = _tokens(request.system) + _tokens(request.context)
    for message in request.history:
        content = message.content
        if isinstance(content, str):
            size += _tokens(content)
        else:
            size += sum(_tokens(p.text) for p in content if isinstance(p, TextPart))
    return size


class ScriptedProvider:
    """A :class:`~phaseflow.providers.protocol.Provider` that answers from a script.

    ``requests`` holds every request received, in order (retries included), so a test
    can check which tools were offered, what the system text said and what the trailing
    block said (``request.context``: the phase's instructions and the navigation block,
    sent after the history); :meth:`told` gives both as the model reads them.
    """

    #: the media types it takes in a message or a tool's result (images and PDF)
    media_types: frozenset[str] = ALL_MEDIA

    def __init__(self, replies: Sequence[object] = ()) -> None:
        try:
            self._replies, self._trailing = _script(replies)
        except _Bad as bad:
            raise ConfigError(f"{_where(bad.path)}: {bad.message}") from None
        self.requests: list[ProviderRequest] = []
        self._failed: set[tuple[int, int]] = set()  # (reply index, failure index) yielded
        self._furthest = 0  # the highest reply number a request asked for
        #: where a call is written: (reply number, call index) -> "FILE:LINE" (from_file)
        self._where: dict[tuple[int, int], str] = {}

    def told(self, index: int = -1) -> str:
        """What request ``index`` (the last by default) told the model besides the
        history: its system text, then its trailing context block."""
        request = self.requests[index]
        return "\n\n".join(t for t in (request.system, request.context) if t)

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedProvider:
        """Read a YAML script file (a list of replies); bad input is a
        :class:`~phaseflow.errors.ConfigError` naming ``file:line``."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read the script: {exc.strerror or exc}") from None
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{path}: the script is not UTF-8 text ({exc.reason})") from None
        try:
            loader = yaml.SafeLoader(text)
            try:
                node = loader.get_single_node()
                data = loader.construct_document(node) if node is not None else None
            finally:
                loader.dispose()
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            line = f":{mark.line + 1}" if mark is not None else ""
            raise ConfigError(f"{path}{line}: invalid YAML: {exc.problem or exc}") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: invalid YAML: {exc}") from None
        if data is None:
            data = []
        try:
            replies, trailing, positions = _script_entries(data)
        except _Bad as bad:
            at = _line(node, bad.path) if node is not None else 1
            raise ConfigError(f"{path}:{at}: {_where(bad.path)}: {bad.message}") from None
        provider = cls()
        provider._replies, provider._trailing = replies, trailing
        if node is not None:
            for number, (reply, entry) in enumerate(zip(replies, positions, strict=True), 1):
                for k, call in enumerate(reply.calls):
                    written = _line(node, (entry, "calls", k, call[1]))
                    provider._where[(number, k)] = f"{path}:{written}"
        return provider

    @property
    def replies(self) -> tuple[ScriptedReply, ...]:
        return self._replies

    def unknown_tools(self, tools: Iterable[str]) -> tuple[tuple[str, str], ...]:
        """``(where, name)`` for each scripted call of a tool not in ``tools`` (the names
        a session knows: its workflow's tools and the built-ins): ``where`` is ``reply
        N``, after ``FILE:LINE: `` for a script read from a file. A session refuses
        such a call when its reply comes (which a script may mean, to test a model that
        invents a tool); a typo is better named before (``phaseflow run`` warns, with a
        "did you mean")."""
        known = set(tools)
        found: list[tuple[str, str]] = []
        for number, reply in enumerate(self._replies, 1):
            for k, (_, name, _arguments) in enumerate(reply.calls):
                if name not in known:
                    at = self._where.get((number, k))
                    found.append((f"{at}: reply {number}" if at else f"reply {number}", name))
        return tuple(found)

    def assert_complete(self) -> None:
        """Raise :class:`ScriptIncomplete` if some reply was never asked for.

        A reply counts as used once a request asked for it or for a later one (the
        history proves the earlier ones were given, in this process or a previous one).
        """
        left = len(self._replies) - self._furthest
        if left > 0:
            raise ScriptIncomplete(
                f"the script has {len(self._replies)} replies but only {self._furthest} "
                f"were asked for: {left} left unused (the next: "
                f"{_summary(self._replies[self._furthest])})"
            )

    async def stream(self, request: ProviderRequest) -> AsyncIterator[ProviderEvent]:
        self.requests.append(request)
        if request.purpose == "compaction":
            # answered here, not from the script: a compaction is the session's own
            # request, and a script says what the model says in the conversation
            summary = compaction_summary(request)
            yield TextDelta(summary)
            yield Usage(_request_size(request), _tokens(summary))
            yield StreamEnd()
            return
        # (replies folded into a compacted history's summary count: the script goes on)
        number = 1 + request.folded_replies + sum(
            m.replies for m in request.history if isinstance(m, AssistantMessage))
        self._furthest = max(self._furthest, min(number, len(self._replies)))
        if number > len(self._replies):
            for k, failure in enumerate(self._trailing):
                if (number, k) not in self._failed:
                    self._failed.add((number, k))
                    yield failure
                    return
            yield ProviderFailure(
                f"the script has {len(self._replies)} replies; request asks for reply "
                f"{number}"
            )
            return
        reply = self._replies[number - 1]
        for k, failure in enumerate(reply.failures):
            if (number, k) not in self._failed:
                self._failed.add((number, k))
                yield failure
                return
        for piece in _pieces(reply.reasoning):
            yield ReasoningDelta(piece)
        for piece in _pieces(reply.text):
            yield TextDelta(piece)
        for index, (call_id, name, arguments) in enumerate(reply.calls):
            yield ToolCallStart(index, call_id, name)
            for piece in _pieces(arguments, 2):
                yield ToolCallDelta(index, piece)
            yield ToolCallEnd(index)
        output = _tokens(reply.text) + sum(_tokens(a) for _, _, a in reply.calls)
        yield Usage(_request_size(request), output)
        yield StreamEnd(reply.stop or ("tool_use" if reply.calls else "end_turn"))


def compaction_summary(request: ProviderRequest) -> str:
    """A scripted model's summary of a compaction request: what it folds, named (the
    users' messages, clipped), and the earlier summary, clipped; at most ~700 characters
    whatever it folds, so a long scripted conversation's requests stay bounded."""
    text = "".join(
        part if isinstance(part, str) else "".join(
            p.text for p in part if isinstance(p, TextPart))
        for part in (m.content for m in request.history))
    earlier, _, since = text.partition("\nConversation since:\n")
    if not since:
        earlier, since = "", text
    lines = since.splitlines()
    said = [line[len("user: "):] for line in lines if line.startswith("user: ")]
    replies = sum(line.startswith("assistant: ") for line in lines)
    results = sum(line.startswith("tool result ") for line in lines)
    shown = "; ".join(s if len(s) <= 40 else s[:37] + "..." for s in said[-6:])
    head = (f"Folded {len(said)} user message(s), {replies} reply(ies) and {results} tool "
            f"result(s); the user said: {shown or 'nothing'}.")
    before = earlier.removeprefix("Earlier summary:\n").strip()
    if before:
        head = f"Before that: {before[:300]}{'...' if len(before) > 300 else ''} " + head
    return head


def _summary(reply: ScriptedReply) -> str:
    if reply.calls:
        return "calls " + ", ".join(name for _, name, _ in reply.calls)
    text = reply.text if len(reply.text) <= 40 else reply.text[:37] + "..."
    return f"text {text!r}"


def _line(node: yaml.Node, path: tuple[int | str, ...]) -> int:
    """The 1-based line of the deepest node of ``path`` found under ``node``."""
    for step in path:
        child: yaml.Node | None = None
        if isinstance(node, yaml.SequenceNode) and isinstance(step, int):
            if 0 <= step < len(node.value):
                child = node.value[step]
        elif isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.value == str(step):
                    # a key that is itself the problem (unknown key, tool name): its line
                    child = value if not isinstance(value, yaml.ScalarNode) else key
                    break
        if child is None:
            break
        node = child
    return int(node.start_mark.line) + 1
