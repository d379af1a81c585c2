"""A user's prompts as the turn's one message and as text: several queued prompts joined
into the next turn's user message, a message's text as events show it, and the record of
messages a finished session left unanswered. Pure."""

from __future__ import annotations

from typing import Any

from phaseflow.session import events as ev
from phaseflow.turn.messages import Content, TextPart


def joined_content(contents: tuple[Content, ...]) -> Content:
    """Several queued prompts as the one user message of the next turn, in order."""
    if len(contents) == 1:
        return contents[0]
    if all(isinstance(c, str) for c in contents):
        return "\n\n".join(c for c in contents if isinstance(c, str))
    parts: list[Any] = []
    for c in contents:
        parts.extend((TextPart(c),) if isinstance(c, str) else c)
    return tuple(parts)


def plain_text(content: Content) -> str:
    """A message's text parts, joined (what events and the unanswered record show); an
    attachment is named by its type (``[image/png]``)."""
    if isinstance(content, str):
        return content
    return "".join(p.text if isinstance(p, TextPart) else f"[{p.media_type}]"
                   for p in content)


def unanswered(contents: tuple[Content, ...], turn: int) -> ev.ErrorEvent:
    """The record of messages queued for a session that finished before it could answer
    them: nothing a user sent is dropped without a trace (``sessions show`` prints it)."""
    dropped = "; ".join(plain_text(c)[:80] for c in contents)
    return ev.ErrorEvent(code="session_finished", turn=turn, message=(
        f"the session finished with {len(contents)} queued message(s) unanswered: "
        f"{dropped}"))
