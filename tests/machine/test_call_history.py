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


SUMMARY = UserMessage("Summary of the earlier conversation: a refund, for ada@example.com.")


def test_a_compacted_history_is_scoped_from_where_the_call_began() -> None:
    """The summary stands for the session's first ``folded`` messages: the call's mark
    (an index into the session's history) is found after it."""
    compacted = [SUMMARY, *HISTORY[2:]]  # the first 2 messages folded
    assert scoped_history(compacted, "since_call", 4, "w", folded=2) == [
        UserMessage("My first pet was Rex")]
    assert scoped_history(compacted, "summary", 4, "w", folded=2)[0] == UserMessage(
        "(Before this step, in short: the customer said 'ada@example.com'.) Go on with w.")
    # everything before the call folded: since_call shows none of it, summary the summary
    folded_all = [SUMMARY, HISTORY[4]]
    assert scoped_history(folded_all, "since_call", 4, "w", folded=4) == [HISTORY[4]]
    assert scoped_history(folded_all, "summary", 4, "w", folded=4) == [SUMMARY, HISTORY[4]]


def test_a_fold_that_reached_into_the_call_keeps_its_summary() -> None:
    """A known limitation: the summary is one text, and may tell of what was said before
    the call; it is kept first, with every message after the fold."""
    compacted = [SUMMARY, HISTORY[4]]
    assert scoped_history(compacted, "since_call", 2, "w", folded=4) == compacted
    assert scoped_history(compacted, "summary", 2, "w", folded=4) == compacted
