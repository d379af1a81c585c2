"""What a called workflow's model requests carry of the conversation (``history:``).

A pure rule over the history the session would send: ``full`` sends it all (the
session does not call this then); ``since_call`` only the messages since the call began;
``summary`` those, preceded by one user message that carries a summary of what came
before: the last thing the user said before the call. docs/format.md ("Calls") says the
same.

The history the session would send may be compacted: its first message is then the
summary of the first ``folded`` messages of the session's history, and the call's
start mark (an index into the session's history) is moved by the fold. A call that
began after the fold is sliced after the summary; one that began before it (the fold
reached into the call) keeps the summary, which may mention what was said before the
call: a summary cannot be cut at the call's start (docs/format.md says so).
"""

from __future__ import annotations

from collections.abc import Sequence

from phaseflow.turn.messages import AssistantMessage, Message, UserMessage

__all__ = ["scoped_history", "scoped_out_replies"]


def _text(message: Message) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return " ".join(getattr(part, "text", "") for part in content or ())


def scoped_history(history: Sequence[Message], mode: str, mark: int, workflow: str,
                   folded: int = 0) -> list[Message]:
    """The messages a request inside a call carries (see the module docstring).
    ``folded``: the session's messages the summary at ``history[0]`` stands for (0: the
    history is not compacted). A slice that would not start with a user message starts
    with one that says where the conversation is, so that every provider accepts it."""
    if folded:
        if mark < folded:  # the fold reached into the call: the summary stays
            return list(history)
        summary, history, mark = history[0], history[1:], mark - folded
    else:
        summary = None
    mark = max(0, min(mark, len(history)))
    since = list(history[mark:])
    before = [m for m in history[:mark] if isinstance(m, UserMessage)]
    lead: list[Message] = []
    if mode == "summary" and before:
        lead.append(UserMessage(f"(Before this step, in short: the customer said "
                                f"{_text(before[-1])!r}.) Go on with {workflow}."))
    elif mode == "summary" and summary is not None:  # all before the call was folded
        lead.append(summary)
    elif not since or not isinstance(since[0], UserMessage):
        lead.append(UserMessage(f"(The conversation goes on in {workflow}; what was said "
                                "before is not shown.)"))
    return lead + since


def scoped_out_replies(history: Sequence[Message], scoped: Sequence[Message]) -> int:
    """The model's replies ``history`` holds that ``scoped`` does not (a request's
    ``folded_replies`` counts them, so the replies so far are counted as without the
    scope)."""
    def replies(messages: Sequence[Message]) -> int:
        return sum(m.replies for m in messages if isinstance(m, AssistantMessage))

    return replies(history) - replies(scoped)
