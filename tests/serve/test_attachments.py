"""Images in messages over HTTP and AG-UI against a real ``phaseflow serve`` whose model
is the ``openai`` SDK against a loopback server: what the model received, the
attachment stored once, and a refusal as ``422 attachment_refused`` (problem+json) with
nothing kept."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from ag_ui.core import RunAgentInput

from tests.support.fake_openai_server import FakeOpenAIServer, text_reply
from tests.support.phaseflow_cli import cli_env
from tests.support.serve_server import Server, frames, serving

pytest.importorskip("openai")

WORKFLOW = """\
phaseflow: 1
name: photos
initial: look
phases:
  look:
    goal: Look at photos.
"""

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(48))
PNG_URL = "data:image/png;base64," + base64.b64encode(PNG).decode()


@pytest.fixture(scope="module")
def model() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as server:
        yield server


@pytest.fixture(scope="module")
def served(model: FakeOpenAIServer, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("photos")
    (folder / "photos.yaml").write_text(WORKFLOW, encoding="utf-8")
    with serving(["photos.yaml", "--store", str(folder / "s.db"), "--provider", "openai",
                  "--base-url", model.base_url, "--model", "vision-model",
                  "--max-body", str(8 << 20)],
                 folder / "server.log", cwd=folder,
                 env=cli_env(OPENAI_API_KEY="sk-loopback")) as server:
        yield server


@pytest.fixture
def client(served: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=served.base, timeout=30) as http:
        yield http


def _new(client: httpx.Client) -> str:
    sid = f"p-{uuid.uuid4().hex[:10]}"
    assert client.post("/v1/sessions", json={"id": sid}).status_code == 201
    return sid


def _user_parts(model: FakeOpenAIServer) -> Any:
    body = model.requests[-1].body
    return [m for m in body["messages"] if m["role"] == "user"][-1]["content"]


def test_a_message_with_a_data_url_reaches_the_model_as_an_image_url_part(
        client: httpx.Client, model: FakeOpenAIServer) -> None:
    sid = _new(client)
    model.push(text_reply("A small PNG."))
    answer = client.post(f"/v1/sessions/{sid}/messages", json={
        "text": "What is this?", "attachments": [PNG_URL]},
        headers={"Accept": "application/json"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["reply"] == "A small PNG."
    assert _user_parts(model) == [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": PNG_URL}}]
    history = client.get(f"/v1/sessions/{sid}/history").json()["messages"]
    part = history[0]["content"][1]
    assert part["type"] == "media" and part["media_type"] == "image/png"
    assert not part["token"].startswith("data:")  # kept once, by digest, in the store
    # the same image again (as an object, no text): the same stored reference
    model.push(text_reply("The same one."))
    again = client.post(f"/v1/sessions/{sid}/messages", json={
        "attachments": [{"url": PNG_URL, "media_type": "image/png"}]},
        headers={"Accept": "application/json"})
    assert again.status_code == 200, again.text
    history = client.get(f"/v1/sessions/{sid}/history").json()["messages"]
    assert history[2]["content"] == [part]


@pytest.mark.parametrize(("attachment", "reason"), [
    ("data:image/png;base64," + base64.b64encode(b"not a png").decode(), "malformed"),
    ("data:image/svg+xml;base64," + base64.b64encode(b"<svg/>").decode(), "unsupported_type"),
    ("data:image/png;base64,%%%", "malformed"),
    ("no-such-blob", "malformed"),
    ("data:image/png;base64," + base64.b64encode(
        b"\x89PNG\r\n\x1a\n" + b"0" * (5 << 20)).decode(), "too_large"),
])
def test_an_attachment_that_cannot_be_sent_is_a_422_and_nothing_is_kept(
        client: httpx.Client, model: FakeOpenAIServer, attachment: str, reason: str) -> None:
    sid = _new(client)
    sent = len(model.requests)
    answer = client.post(f"/v1/sessions/{sid}/messages", json={
        "text": "look", "attachments": [attachment]})
    assert answer.status_code == 422, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")
    problem = answer.json()
    assert problem["code"] == "attachment_refused" and problem["reason"] == reason
    assert problem["field"] == "attachments[0]"
    assert len(model.requests) == sent
    assert client.get(f"/v1/sessions/{sid}/history").json()["messages"] == []


def _agui(client: httpx.Client, thread: str, content: list[dict[str, Any]]) -> httpx.Response:
    run = RunAgentInput.model_validate({
        "threadId": thread, "runId": "r1", "state": {}, "tools": [], "context": [],
        "forwardedProps": {}, "messages": [{"id": "m1", "role": "user", "content": content}]})
    body = run.model_dump(by_alias=True, exclude_none=True)
    return client.post("/v1/ag-ui/photos", json=body, headers={"Accept": "text/event-stream"})


def test_agui_image_parts_reach_the_model(client: httpx.Client,
                                          model: FakeOpenAIServer) -> None:
    model.push(text_reply("A PNG."))
    answer = _agui(client, f"t-{uuid.uuid4().hex[:8]}", [
        {"type": "text", "text": "Look"},
        {"type": "image", "source": {"type": "data", "value": base64.b64encode(PNG).decode(),
                                     "mimeType": "image/png"}}])
    assert answer.status_code == 200, answer.text
    kinds = [f.data["type"] for f in frames(iter(answer.text.splitlines()))
             if isinstance(f.data, dict)]
    assert kinds[-1] == "RUN_FINISHED", kinds
    assert _user_parts(model) == [{"type": "text", "text": "Look"},
                                  {"type": "image_url", "image_url": {"url": PNG_URL}}]


def test_agui_refuses_a_file_handle_and_a_type_the_model_cannot_take(
        client: httpx.Client) -> None:
    handle = _agui(client, f"t-{uuid.uuid4().hex[:8]}", [
        {"type": "image", "source": {"type": "file", "value": "file-abc123"}}])
    assert handle.status_code == 422 and handle.json()["code"] == "attachment_refused"
    audio = _agui(client, f"t-{uuid.uuid4().hex[:8]}", [
        {"type": "audio", "source": {"type": "data", "value": "UklGRg==",
                                     "mimeType": "audio/wav"}}])
    assert audio.status_code == 422, audio.text
    assert audio.json()["reason"] == "unsupported_type"
