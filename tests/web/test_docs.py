"""docs/web-view.md does what it says: the server starts as shown and prints the page's
address on the documented line, the customer's side of the walk-through (its curl
commands, in order) leaves the session waiting for the approval the page describes, and
the README and serve.md lead to the page."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.support.serve_server import ROOT, start

DOC = ROOT / "docs" / "web-view.md"
DOCUMENTED = "http://127.0.0.1:8765"


def _blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


def test_the_walk_through_runs(tmp_path: Path) -> None:
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    [command] = [b for b in _blocks("bash") if "phaseflow serve " in b]
    serve = next(line for line in command.splitlines() if line.startswith("phaseflow serve"))
    server = start(shlex.split(serve)[2:], tmp_path / "server.log")
    try:
        [console] = _blocks("console")
        documented = [line.replace(DOCUMENTED, server.base) for line in console.splitlines()]
        assert [line.rstrip("\n") for line in server.banner[:3]] == documented
        for block in _blocks("bash"):
            if not block.startswith("curl"):
                continue
            done = subprocess.run(["bash", "-euo", "pipefail", "-c",
                                   block.replace(DOCUMENTED, server.base)],
                                  capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, done.stderr
            assert '"status":"failed"' not in done.stdout, done.stdout
        session = httpx.get(server.base + "/v1/sessions/demo", timeout=30).json()
        assert session["status"] == "awaiting_approval"
        assert session["pending_approval"]["arguments"] == {"amount": 120, "order_id": "O-9"}
        assert '{"amount": 120, "order_id":\n"O-9"}' in DOC.read_text(encoding="utf-8")
    finally:
        server.stop()


def test_the_readme_and_serve_docs_lead_here() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    images = re.findall(r"!\[[^\]]+\]\(([^)]+\.png)\)", readme)
    assert images == ["docs/web-view.png"]
    shot = (ROOT / images[0]).read_bytes()
    assert shot.startswith(b"\x89PNG\r\n\x1a\n") and len(shot) < 200_000
    assert "(docs/web-view.md)" in readme
    assert "(web-view.md)" in (ROOT / "docs" / "serve.md").read_text(encoding="utf-8")
    assert "web-view.png" in DOC.read_text(encoding="utf-8")
