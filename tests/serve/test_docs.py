"""docs/serve.md: the server starts as the page says, and its curl examples, pasted in
order into a shell, do what the page says."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.serve_server import ROOT, start

DOC = ROOT / "docs" / "serve.md"
DOCUMENTED = "http://127.0.0.1:8765"


def _bash_blocks() -> list[str]:
    return re.findall(r"```bash\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


def test_the_curl_examples_run_in_order(tmp_path: Path) -> None:
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    blocks = _bash_blocks()
    [command] = [b for b in blocks if b.startswith("phaseflow serve workflows/refund-desk")
                 and "--store memory" in b]
    args = shlex.split(command)[2:]
    server = start(args, tmp_path / "log")  # with --port 0: the address it prints
    try:
        curls = [line for b in blocks for line in b.splitlines() if line.startswith("curl ")]
        assert len(curls) >= 12
        outputs = []
        for line in curls:
            line = line.replace(DOCUMENTED, server.base)
            follows = "/events" in line and "follow=false" not in line
            if follows:  # a stream that goes on until Ctrl-C: two seconds of it
                line += " --max-time 2"
            done = subprocess.run(["bash", "-c", line], capture_output=True, text=True,
                                  timeout=60, cwd=ROOT)
            assert done.returncode == (28 if follows else 0), (line, done.stdout,
                                                                 done.stderr)
            outputs.append((line, done.stdout))
        by_path = {line.split(server.base, 1)[1].split("'")[0].split(" ")[0]: out
                   for line, out in outputs}
        first = json.loads(by_path["/v1/sessions/demo/messages"])  # the last one: refused
        assert first["code"] == "session_finished"
        session = json.loads(by_path["/v1/sessions/demo"])  # before the approval
        assert session["status"] == "awaiting_approval"
        call = session["pending_approval"]["call_id"]
        approved = json.loads(by_path[f"/v1/sessions/demo/approvals/{call}"])
        assert approved["status"] == "completed" and approved["phase"] == "done"
        streamed = next(out for line, out in outputs if "-H 'Last-Event-ID: 25'" in line)
        ids = [int(m) for m in re.findall(r"^id: (\d+)$", streamed, re.M)]
        assert ids and ids[0] == 26 and ids == list(range(26, 26 + len(ids)))
        history = json.loads(by_path["/v1/sessions/demo/history"])["messages"]
        assert history[-1]["content"].startswith("Done: refund R-77")
    finally:
        assert server.stop() == 0
