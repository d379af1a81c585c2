"""What a called workflow's model requests carry, by its call's ``history``."""

from __future__ import annotations

from phaseflow.session.call_history import scoped_history
from phaseflow.turn.messages import AssistantMessage, UserMessage

HISTORY = [UserMessage("I want a refund"), AssistantMessage("Your email?"),
           UserMessage("ada@example.com"), AssistantMessage("Checking."),
           UserMessage("My first pet was Rex")]


def test_since_call_sends_only_what_was_said_since_the_call_began() -> None:
    sent = scoped_history(HISTORY, "since_call", 4, "identity-check")
    assert sent == [UserMessage("My first pet was Rex")]


def test_since_call_starts_with_a_user_message_saying_where_the_conversation_is() -> None:
    sent = scoped_history(HISTORY, "since_call", 3, "identity-check")
    assert sent[0] == UserMessage("(The conversation goes on in identity-check; what was "
                                  "said before is not shown.)")
    assert sent[1:] == HISTORY[3:]


def test_summary_puts_the_last_thing_said_before_the_call_first() -> None:
    sent = scoped_history(HISTORY, "summary", 4, "identity-check")
    assert sent == [
        UserMessage("(Before this step, in short: the customer said 'ada@example.com'.) "
                    "Go on with identity-check."),
        UserMessage("My first pet was Rex"),
    ]
    # a mark beyond the history (a damaged snapshot) sends nothing old
    assert scoped_history(HISTORY, "since_call", 99, "w")[1:] == []
