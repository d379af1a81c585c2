"""docs/mcp.md's complete example, run as a reader runs it: its server, servers file,
workflow and script written out, then ``phaseflow run --mcp`` (a real process starting a
real stdio MCP server)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from tests.support.phaseflow_cli import PHASEFLOW, cli_env

REPO = Path(__file__).resolve().parents[2]


def test_the_complete_example_runs_as_written(tmp_path: Path) -> None:
    blocks = re.findall(r"```(\w*)\n(.*?)```", (REPO / "docs" / "mcp.md").read_text(
        encoding="utf-8"), re.S)
    server, servers, workflow, script = (b for _, b in blocks[1:5])
    assert "MCPServer" in server and "mcpServers" in servers
    (tmp_path / "crm_server.py").write_text(server, encoding="utf-8")
    (tmp_path / "servers.json").write_text(servers.replace('"python"', json.dumps(
        sys.executable)), encoding="utf-8")
    (tmp_path / "desk.yaml").write_text(workflow, encoding="utf-8")
    (tmp_path / "script.yaml").write_text(script, encoding="utf-8")
    proc = subprocess.run(
        [*PHASEFLOW, "run", "desk.yaml", "--mcp",
         "servers.json", "--provider", "scripted:script.yaml", "--store", "memory",
         "--json", "--message", "I am ada@example.com"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, env=cli_env(),
        check=False)
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    changed = [e for e in events if e["type"] == "state_changed"]
    assert changed and changed[0]["new"] == {"customer_id": "C-1"}
    assert [e["to_phase"] for e in events if e["type"] == "phase_changed"] == ["help"]
