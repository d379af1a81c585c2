"""Images and files in a conversation through the public API: ``Session.attach`` keeps
one once by digest, ``send`` takes it (or a ``data:`` URL) and the provider receives its
bytes; a tool returns one with ``ToolResult(attachments=...)``; what cannot be sent is
refused (a value from ``attach``, ``AttachmentRefused`` from ``send``), and nothing of a
refused message is kept."""

from __future__ import annotations

import base64
from typing import Any

import pytest

import phaseflow
from phaseflow import Attachment, ToolResult
from phaseflow.providers import ScriptedProvider
from phaseflow.session import Agent
from phaseflow.session import events as ev
from phaseflow.session.attachments import AttachmentRefused
from phaseflow.stores import MemoryStore, SQLiteStore
from phaseflow.stores.base import Store, capture_owner
from phaseflow.tools import tool
from phaseflow.turn.media import MAX_ATTACHMENT_BYTES, MediaRefused
from phaseflow.turn.messages import MediaPart, TextPart, ToolResultMessage, UserMessage

WORKFLOW = """\
phaseflow: 1
name: photos
initial: look
tools:
  chart.draw: {}
phases:
  look:
    goal: Look at photos.
    tools: [chart.draw]
"""

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(64))
CHART = b"\x89PNG\r\n\x1a\n" + b"bars" * 20
PDF = b"%PDF-1.7\n%%EOF\n"
drawn: list[int] = []


@tool(name="chart.draw")
def draw() -> ToolResult:
    """Draw the chart."""
    drawn.append(1)
    return ToolResult("the chart", attachments=[Attachment(CHART)])


@tool(name="chart.draw")
def draw_svg() -> ToolResult:
    """Draw the chart as SVG."""
    return ToolResult("the chart", attachments=[Attachment(b"<svg/>", "image/svg+xml")])


def agent(script: list[Any], store: Store | None = None, tools: Any = (draw,)) -> Agent:
    return Agent(phaseflow.load_workflow_text(WORKFLOW), ScriptedProvider(script),
                 tools=list(tools), store=store or MemoryStore())


def test_an_attached_image_reaches_the_provider_as_its_bytes_stored_once() -> None:
    model = agent(["A cat.", "Same cat."])
    session = model.session_sync("s1")
    part = session.attach_sync(PNG)
    assert isinstance(part, MediaPart) and part.media_type == "image/png"
    assert part.token.startswith(capture_owner("s1") + "-")
    again = session.attach_sync(PNG, "image/png")
    assert again == part  # one digest, one stored copy
    assert session.reply_sync((TextPart("What is this?"), part)) == "A cat."
    # a data: URL is stored the same way, under the same reference
    url = "data:image/png;base64," + base64.b64encode(PNG).decode()
    assert session.reply_sync((TextPart("And this?"), MediaPart("image/png", url))) == \
        "Same cat."
    requests = model.provider.requests  # type: ignore[attr-defined]
    assert requests[0].attachments == {part.token: PNG}
    sent = [m for m in requests[1].history if isinstance(m, UserMessage)]
    assert sent[1].content == (TextPart("And this?"), part)  # the history keeps the token
    started = [e.message for e in session.events_sync() if isinstance(e, ev.TurnStartedEvent)]
    assert started == ["What is this?[image/png]", "And this?[image/png]"]


@pytest.mark.parametrize(("data", "media_type", "reason"), [
    (b"", None, "empty"),
    (b"\x89PNG\r\n\x1a\n" + b"0" * MAX_ATTACHMENT_BYTES, None, "too_large"),
    (b"<svg xmlns='http://www.w3.org/2000/svg'/>", "image/svg+xml", "unsupported_type"),
    (b"plain words", None, "unsupported_type"),
    (b"GIF89a....", "image/png", "malformed"),
])
def test_attach_refuses_what_cannot_be_sent_as_a_value(data: bytes, media_type: str | None,
                                                       reason: str) -> None:
    store = MemoryStore()
    session = agent([], store).session_sync("s1")
    refused = session.attach_sync(data, media_type)
    assert isinstance(refused, MediaRefused)
    assert refused.reason == reason and refused.message


def test_send_refuses_a_token_that_is_not_there_and_keeps_nothing() -> None:
    model = agent(["never"])
    session = model.session_sync("s1")
    other = agent([]).session_sync("s2")
    foreign = other.attach_sync(PNG)
    assert isinstance(foreign, MediaPart)
    for token in ("no-such-blob", foreign.token, capture_owner("s1") + "-" + "0" * 64):
        with pytest.raises(AttachmentRefused) as refused:
            session.reply_sync((TextPart("look"), MediaPart("image/png", token)))
        assert refused.value.reason == "not_found"
        assert "no attachment" in str(refused.value)
    with pytest.raises(AttachmentRefused) as refused:
        session.reply_sync((MediaPart("text/html", "https://example.com/x"),))
    assert refused.value.reason == "unsupported_type"
    assert session.history == () and session.turn == 0
    assert model.provider.requests == []  # type: ignore[attr-defined]


def test_a_tool_returns_an_image_the_model_sees_once(tmp_path: Any) -> None:
    drawn.clear()
    store = SQLiteStore(tmp_path / "s.db")
    script: list[Any] = [{"calls": [{"chart.draw": {}}]}, "Bars go up."]
    model = agent(script, store)
    session = model.session_sync("s1")
    assert session.reply_sync("draw it") == "Bars go up."
    assert drawn == [1]
    result = next(m for m in session.history if isinstance(m, ToolResultMessage))
    assert isinstance(result.content, tuple)
    text, image = result.content
    assert text == TextPart("the chart") and isinstance(image, MediaPart)
    assert image.media_type == "image/png"
    second = model.provider.requests[1]  # type: ignore[attr-defined]
    assert second.attachments == {image.token: CHART}
    events = [e for e in session.events_sync() if isinstance(e, ev.ToolResultEvent)]
    assert events[0].content == "the chart[image/png]"
    # a reopened session (another process) reads the same history and bytes
    reopened = agent([*script, "Still bars."], store).session_sync("s1")
    assert reopened.reply_sync("again?") == "Still bars."
    assert reopened.history[:len(session.history)] == session.history


def test_a_tool_image_the_provider_cannot_take_is_an_error_result() -> None:
    model = agent([{"calls": [{"chart.draw": {}}]}, "Sorry."], tools=(draw_svg,))
    session = model.session_sync("s1")
    assert session.reply_sync("draw it") == "Sorry."
    results = [e for e in session.events_sync() if isinstance(e, ev.ToolResultEvent)]
    assert results[0].status == "error"
    assert "returned an attachment that cannot be sent" in results[0].content
    assert "image/svg+xml" in results[0].content


def test_a_fork_sends_the_images_its_history_took_from_its_parent() -> None:
    store = MemoryStore()
    parent = agent(["A cat.", "Ok."], store).session_sync("s1")
    photo = parent.attach_sync(PNG)
    assert isinstance(photo, MediaPart)
    parent.reply_sync((TextPart("What is this?"), photo))
    parent.reply_sync("thanks")
    model = agent(["A cat.", "Still a cat."], store)
    fork = model.session_sync("s1").fork_sync("s1-b", at_turn=1)
    fork_model = agent(["A cat.", "Still a cat."], store)
    branch = fork_model.session_sync(fork.id)
    # the parent's image, named again in the fork, is the fork's too
    assert branch.reply_sync((TextPart("Again?"), photo)) == "Still a cat."
    sent = fork_model.provider.requests[-1]  # type: ignore[attr-defined]
    assert sent.attachments == {photo.token: PNG}
