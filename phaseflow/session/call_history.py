"""What a called workflow's model requests carry of the conversation (``history:``).

A pure rule over the history the session would send: ``full`` sends it all (the
session does not call this then); ``since_call`` only the messages since the call began;
``summary`` those, preceded by one user message that carries a summary of what came
before: the last thing the user said before the call. docs/format.md ("Calls") says the
same.
"""

from __future__ import annotations

from collections.abc import Sequence

from phaseflow.turn.messages import Message, UserMessage

__all__ = ["scoped_history"]


def _text(message: Message) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return " ".join(getattr(part, "text", "") for part in content or ())


def scoped_history(history: Sequence[Message], mode: str, mark: int, workflow: str
                   ) -> list[Message]:
    """The messages a request inside a call carries (see the module docstring). A slice
    that would not start with a user message starts with one that says where the
    conversation is, so that every provider accepts it."""
    mark = max(0, min(mark, len(history)))
    since = list(history[mark:])
    before = [m for m in history[:mark] if isinstance(m, UserMessage)]
    lead: list[Message] = []
    if mode == "summary" and before:
        lead.append(UserMessage(f"(Before this step, in short: the customer said "
                                f"{_text(before[-1])!r}.) Go on with {workflow}."))
    elif not since or not isinstance(since[0], UserMessage):
        lead.append(UserMessage(f"(The conversation goes on in {workflow}; what was said "
                                "before is not shown.)"))
    return lead + since
