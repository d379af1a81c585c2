"""Images in messages over HTTP and AG-UI against a real ``phaseflow serve`` whose model
is the ``openai`` SDK against a loopback server: what the model received, the
attachment stored once, and a refusal as ``422 attachment_refused`` (problem+json) with
nothing kept."""

from __future__ import annotations

import base64
import contextlib
import socket
import time
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
MAX_BODY = 8 << 20


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
                  "--max-body", str(MAX_BODY)],
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


# -- multipart/form-data: the same message as a form with file parts --------------------

def _form(client: httpx.Client, sid: str, files: list[tuple[str, Any]],
          data: dict[str, str] | None = None, **headers: str) -> httpx.Response:
    return client.post(f"/v1/sessions/{sid}/messages", data=data or {}, files=files,
                       headers={"Accept": "application/json", **headers})


def test_a_form_with_a_file_part_reaches_the_model_as_the_json_message_does(
        client: httpx.Client, model: FakeOpenAIServer) -> None:
    sid = _new(client)
    model.push(text_reply("A small PNG."))
    answer = _form(client, sid, [("attachments", ("photo.png", PNG, "image/png"))],
                   {"text": "What is this?"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["reply"] == "A small PNG."
    assert _user_parts(model) == [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": PNG_URL}}]
    # the same image as a JSON data URL: the one stored reference
    model.push(text_reply("Again."))
    again = client.post(f"/v1/sessions/{sid}/messages", json={"attachments": [PNG_URL]},
                        headers={"Accept": "application/json"})
    assert again.status_code == 200, again.text
    history = client.get(f"/v1/sessions/{sid}/history").json()["messages"]
    part = history[0]["content"][1]
    assert part["type"] == "media" and part["media_type"] == "image/png"
    assert history[2]["content"] == [part]


def test_a_form_file_of_no_declared_type_is_read_by_its_bytes_and_no_file_is_skipped(
        client: httpx.Client, model: FakeOpenAIServer) -> None:
    sid = _new(client)
    model.push(text_reply("Seen."))
    answer = _form(client, sid, [
        ("attachments", ("photo", PNG, "application/octet-stream")),
        ("attachments", ("", b"", "application/octet-stream"))],  # "no file chosen"
        {"busy": "reject"})
    assert answer.status_code == 200, answer.text
    assert _user_parts(model) == [{"type": "image_url", "image_url": {"url": PNG_URL}}]


@pytest.mark.parametrize(("upload", "reason"), [
    (("x.png", b"not a png", "image/png"), "malformed"),
    (("x.svg", b"<svg/>", "image/svg+xml"), "unsupported_type"),
    (("x.bin", b"\x00\x01 what", "application/octet-stream"), "unsupported_type"),
    (("x.png", b"", "image/png"), "empty"),
    (("x.png", b"\x89PNG\r\n\x1a\n" + b"0" * (5 << 20), "image/png"), "too_large"),
])
def test_a_form_file_that_cannot_be_sent_is_the_same_422_and_nothing_is_kept(
        client: httpx.Client, model: FakeOpenAIServer, upload: Any, reason: str) -> None:
    sid = _new(client)
    sent = len(model.requests)
    answer = _form(client, sid, [("attachments", ("ok.png", PNG, "image/png")),
                                 ("attachments", upload)], {"text": "look"})
    assert answer.status_code == 422, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")
    problem = answer.json()
    assert problem["code"] == "attachment_refused" and problem["reason"] == reason
    assert problem["field"] == "attachments[1]"
    assert len(model.requests) == sent
    assert client.get(f"/v1/sessions/{sid}/history").json()["messages"] == []


@pytest.mark.parametrize(("content_type", "body", "status", "code"), [
    ("multipart/form-data", b"--x--", 400, "invalid_multipart"),
    ("multipart/form-data; boundary=" + "x" * 80, b"", 400, "invalid_multipart"),
    ("multipart/form-data; boundary=x", b"--x\r\nContent-Disposition: form-data; name=text"
     b"\r\n\r\nnever closed", 400, "invalid_multipart"),
    ("multipart/form-data; boundary=x", b"--x\r\nContent-Disposition: form-data; "
     b"name=\xff\r\n\r\nhi\r\n--x--", 400, "invalid_multipart"),
    ("multipart/form-data; boundary=x", b"--x\r\nContent-Disposition: form-data; name=txt"
     b"\r\n\r\nhi\r\n--x--", 400, "unknown_field"),
    ("multipart/form-data; boundary=x", b"--x\r\nContent-Disposition: form-data; "
     b"name=text; filename=a.txt\r\n\r\nhi\r\n--x--", 400, "invalid_field"),
    ("multipart/form-data; boundary=x", b"--x\r\nContent-Disposition: form-data; "
     b"name=text\r\n\r\n\xff\xfe\r\n--x--", 400, "invalid_field"),
    ("multipart/form-data; boundary=x", b"--x\r\nContent-Disposition: form-data; "
     b"name=busy\r\n\r\nqueue\r\n--x--", 400, "missing_field"),
    ("text/plain", b"hello", 415, "unsupported_media_type"),
])
def test_a_hostile_form_is_a_problem_never_a_traceback(
        client: httpx.Client, served: Server, content_type: str, body: bytes, status: int,
        code: str) -> None:
    sid = _new(client)
    answer = client.post(f"/v1/sessions/{sid}/messages", content=body,
                         headers={"Content-Type": content_type})
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")
    assert answer.json()["code"] == code
    assert "Traceback" not in served.log()
    assert client.get(f"/v1/sessions/{sid}/history").json()["messages"] == []


def _raw(served: Server, head: str, chunks: Iterator[bytes]) -> bytes:
    """Send ``head`` and what ``chunks`` yields while the server has not answered; the
    server's answer (its status line and headers)."""
    url = httpx.URL(served.base)
    with socket.create_connection((url.host, url.port), timeout=10) as sock:
        sock.sendall(head.replace("Host: x", f"Host: {url.host}:{url.port}").encode())
        sock.setblocking(False)
        answer = b""
        for chunk in chunks:
            with contextlib.suppress(BlockingIOError):
                answer += sock.recv(65536)
            if answer:
                break
            try:
                sock.sendall(chunk)
            except (BlockingIOError, BrokenPipeError, ConnectionResetError):
                break
        sock.settimeout(10)  # (setblocking(True) would wait forever)
        while b"\r\n\r\n" not in answer:
            more = sock.recv(65536)
            if not more:
                break
            answer += more
        return answer


def test_a_form_over_the_body_limit_is_refused_before_it_is_read(
        client: httpx.Client, served: Server) -> None:
    sid = _new(client)
    path = f"/v1/sessions/{sid}/messages"
    # a declared length over the limit: 413 with not one byte of the body sent
    declared = _raw(served, f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: "
                    f"multipart/form-data; boundary=x\r\nContent-Length: {MAX_BODY + 1}"
                    "\r\n\r\n", iter(()))
    assert declared.startswith(b"HTTP/1.1 413 "), declared
    # a streamed (chunked) form that grows past the limit: 413 while it still streams,
    # long before its 64 MiB would have been sent
    sent = 0

    def chunks() -> Iterator[bytes]:
        nonlocal sent
        first = b"--x\r\nContent-Disposition: form-data; name=attachments; filename=a\r\n\r\n"
        yield f"{len(first):x}\r\n".encode() + first + b"\r\n"
        for _ in range(1024):
            time.sleep(0.002)
            sent += 64 << 10
            yield f"{64 << 10:x}\r\n".encode() + b"0" * (64 << 10) + b"\r\n"

    streamed = _raw(served, f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: "
                    "multipart/form-data; boundary=x\r\nTransfer-Encoding: chunked\r\n\r\n",
                    chunks())
    assert streamed.startswith(b"HTTP/1.1 413 "), streamed
    assert b"application/problem+json" in streamed
    assert sent < 2 * MAX_BODY
    # the same with httpx's own multipart encoder (a Content-Length it computes)
    too_big = _form(client, sid, [("attachments", ("a.png", b"0" * (MAX_BODY + 1),
                                                   "image/png"))])
    assert too_big.status_code == 413 and too_big.json()["code"] == "body_too_large"
    assert client.get(f"/v1/sessions/{sid}/history").json()["messages"] == []


def test_a_form_repeated_with_its_idempotency_key_is_one_message(
        client: httpx.Client, model: FakeOpenAIServer) -> None:
    """A retried form is the same message (its files by their digest), a different file
    under the same key is refused as another request."""
    sid = _new(client)
    model.push(text_reply("Once."))
    files = [("attachments", ("photo.png", PNG, "image/png"))]
    first = _form(client, sid, files, {"text": "look"}, **{"Idempotency-Key": "k1"})
    assert first.status_code == 200, first.text
    sent = len(model.requests)
    again = _form(client, sid, files, {"text": "look"}, **{"Idempotency-Key": "k1"})
    assert again.status_code == 200 and again.headers["Idempotent-Replayed"] == "true"
    other = _form(client, sid, [("attachments", ("photo.png", PNG + b"x", "image/png"))],
                  {"text": "look"}, **{"Idempotency-Key": "k1"})
    assert other.status_code == 422 and other.json()["code"] == "idempotency_key_reused"
    assert len(model.requests) == sent
    assert len(client.get(f"/v1/sessions/{sid}/history").json()["messages"]) == 2
