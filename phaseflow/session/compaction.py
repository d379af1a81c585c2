"""History compaction, as pure rules: how large a history is, where the oldest turns may
be folded, what the model sees once they are, and what a summarizing model is asked.

A long conversation outgrows the model's context. With ``Agent(max_history_tokens=N)``
the core checks, before every model request, the history that request would carry;
over the budget, the oldest turns are folded into a summary made by one model request,
and the model sees the summary followed by the recent turns. Nothing is deleted: the
session's history keeps every message (``Session.transcript``), and the fold is a
:class:`~phaseflow.session.values.Compaction` (how many messages it covers, the
summary) committed with the session, so a crash while the summary is made leaves the
previous history in force.

Rules:

- a fold ends just before a user message (where a turn begins, or a steering message
  after tool results), so a tool call is never separated from its result;
- the recent part kept is at most half the budget, so a compaction is not needed again
  at once (the summary itself is asked to fit a quarter of the budget);
- sizes are counted in characters and turned into tokens by the ratio the provider's
  usage reports (4 characters a token before the first report). Counting walks only the
  part of the history the model sees, which compaction keeps bounded: the cost per
  request stays flat however long the conversation.
"""

from __future__ import annotations

from collections.abc import Iterable

from phaseflow.session.values import Compaction
from phaseflow.turn.messages import (
    AssistantMessage,
    Content,
    History,
    Message,
    SystemMessage,
    TextPart,
    ToolResultMessage,
    UserMessage,
)

#: how the summary is introduced to the model, at the start of the history it sees
SUMMARY_HEADING = "Summary of the earlier conversation (older messages were compacted):"

#: the default instructions of the summarizing request (``Agent(compaction_prompt=)``)
DEFAULT_PROMPT = (
    "You compact a conversation between a user and an assistant that uses tools. Write "
    "a faithful, compact summary of the conversation below (and of the earlier summary, "
    "if one is given) for the assistant to continue from: what the user wants, what was "
    "decided, what the tools returned that still matters (ids, amounts, names), and what "
    "is still open. Plain prose, no preamble.")


def content_chars(content: Content) -> int:
    if isinstance(content, str):
        return len(content)
    return sum(len(p.text) if isinstance(p, TextPart) else 64 for p in content)


def message_chars(message: Message) -> int:
    """A message's size as a request carries it (text, calls and their arguments)."""
    if isinstance(message, AssistantMessage):
        return content_chars(message.content) + sum(
            len(c.name) + len(c.arguments) + 16 for c in message.tool_calls)
    return content_chars(message.content) + 8


def history_chars(messages: Iterable[Message]) -> int:
    return sum(message_chars(m) for m in messages)


def visible(history: History, compaction: Compaction | None) -> History:
    """What the model sees: the summary, then every message after the fold."""
    if compaction is None:
        return history
    return History((UserMessage(f"{SUMMARY_HEADING}\n\n{compaction.summary}"),
                    *history.after(compaction.upto)))


def fold_point(history: History, compaction: Compaction | None, keep_chars: int
               ) -> int | None:
    """Where a new fold should end (a message count of the whole history), keeping at
    most ``keep_chars`` of recent messages; None when no fold helps (the recent turn
    alone is larger: a turn is never cut)."""
    start = compaction.upto if compaction is not None else 0
    recent = history.after(start)
    kept = 0
    best: int | None = None
    for index in range(len(recent) - 1, 0, -1):
        kept += message_chars(recent[index])
        if kept > keep_chars:
            break
        if isinstance(recent[index], UserMessage):
            best = index
    if best is None:
        return None
    return start + best


def replies_in(messages: Iterable[Message]) -> int:
    return sum(m.replies for m in messages if isinstance(m, AssistantMessage))


def summary_input(previous: str, messages: Iterable[Message]) -> str:
    """The text a summarizing model is given: the earlier summary and the messages to
    fold, one line each, as ``role: text``."""
    lines: list[str] = []
    if previous:
        lines += ["Earlier summary:", previous, "", "Conversation since:"]
    for m in messages:
        if isinstance(m, UserMessage):
            lines.append(f"user: {_text(m.content)}")
        elif isinstance(m, AssistantMessage):
            calls = "; ".join(f"{c.name}({c.arguments})" for c in m.tool_calls)
            text = _text(m.content)
            lines.append("assistant: " + " ".join(p for p in (
                text, f"[calls {calls}]" if calls else "") if p))
        elif isinstance(m, ToolResultMessage):
            lines.append(f"tool result {m.call_id}: {_text(m.content)}")
        elif isinstance(m, SystemMessage):
            lines.append(f"system: {_text(m.content)}")
    return "\n".join(lines)


def _text(content: Content) -> str:
    if isinstance(content, str):
        return content
    return " ".join(p.text if isinstance(p, TextPart) else "[media]" for p in content)

