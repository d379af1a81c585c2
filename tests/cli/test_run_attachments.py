"""``phaseflow run -m '@photo.png What is this?'``: the file is attached (the model, the
``openai`` SDK against a loopback server, receives its bytes as an image part); a file
that is missing, too big or of a type the model cannot take is one line and exit 2,
before any turn; ``@@`` starts a text with a literal ``@``."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path

import pytest

from tests.support.fake_openai_server import FakeOpenAIServer, text_reply
from tests.support.phaseflow_cli import cli_env
from tests.support.run_cli import besides_the_store, run

pytest.importorskip("openai")

WORKFLOW = """\
phaseflow: 1
name: photos
initial: look
phases:
  look:
    goal: Look at photos.
"""

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(32))


def _project(tmp_path: Path) -> Path:
    (tmp_path / "photos.yaml").write_text(WORKFLOW, encoding="utf-8")
    (tmp_path / "photo.png").write_bytes(PNG)
    (tmp_path / "notes.txt").write_text("just words", encoding="utf-8")
    (tmp_path / "big.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"0" * (5 << 20))
    return tmp_path


def _run(cwd: Path, server: FakeOpenAIServer, *messages: str
         ) -> subprocess.CompletedProcess[str]:
    args = [a for m in messages for a in ("-m", m)]
    return run(cwd, "photos.yaml", "--base-url", server.base_url, "--model", "vision",
               "--store", "memory", *args, env=cli_env(OPENAI_API_KEY="sk-loopback"))


def test_an_at_file_is_sent_as_an_image_and_double_at_is_text(
        tmp_path: Path, fake_openai: FakeOpenAIServer) -> None:
    cwd = _project(tmp_path)
    fake_openai.push(text_reply("A PNG."), text_reply("Hello."))
    proc = _run(cwd, fake_openai, "@photo.png What is this?", "@@home is where I am")
    assert proc.returncode == 0, proc.stderr
    first = [m for m in fake_openai.requests[0].body["messages"] if m["role"] == "user"]
    url = "data:image/png;base64," + base64.b64encode(PNG).decode()
    assert first[-1]["content"] == [{"type": "text", "text": "What is this?"},
                                    {"type": "image_url", "image_url": {"url": url}}]
    second = [m for m in fake_openai.requests[1].body["messages"] if m["role"] == "user"]
    assert second[-1]["content"] == "@home is where I am"
    assert "you: What is this?[image/png]" in proc.stdout


@pytest.mark.parametrize(("message", "said"), [
    ("@missing.png look", "cannot attach missing.png: No such file or directory"),
    ("@notes.txt look", "cannot attach notes.txt: the attachment is of no type phaseflow takes"),
    ("@big.png look", "cannot attach big.png: the attachment is 5,242,888 bytes; the limit "
                      "is 5,242,880 bytes"),
])
def test_an_attachment_that_cannot_be_sent_is_one_line_and_exit_2(
        tmp_path: Path, fake_openai: FakeOpenAIServer, message: str, said: str) -> None:
    cwd = _project(tmp_path)
    proc = _run(cwd, fake_openai, "hello", message)
    assert proc.returncode == 2
    lines = besides_the_store(proc.stderr).splitlines()
    assert len(lines) == 1 and lines[0].startswith("phaseflow run: error: " + said), lines
    assert fake_openai.requests == []  # checked before the first turn
