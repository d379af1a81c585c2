"""``--mcp FILE`` on the command line: ``phaseflow run`` (a real process, a scripted
model, the test MCP server as its subprocess), ``validate`` and ``sessions recover``; the
server never outlives the command, whether it ends, fails, or is stopped by a signal."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from tests.support.mcp_servers import (
    WORKFLOW,
    server_pids,
    stdio_servers,
    wait_for,
    wait_gone,
    write_json,
)
from tests.support.phaseflow_cli import PHASEFLOW, cli_env, run_phaseflow
from tests.support.run_cli import events


def _project(tmp_path: Path, pids: Path, script: str, mode: str = "stdio") -> Path:
    (tmp_path / "desk.yaml").write_text(WORKFLOW, encoding="utf-8")
    (tmp_path / "script.yaml").write_text(script, encoding="utf-8")
    write_json(tmp_path / "servers.json", stdio_servers(pids, mode))
    return tmp_path


def _phaseflow(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_phaseflow(*args, cwd=cwd, timeout=120, env=cli_env())


LOOKUP = """\
- calls: [{demo.lookup: {email: ada@example.com}}, {demo.fail: {why: no reason}}]
- Found Ada.
"""

RUN = ("run", "desk.yaml", "--mcp", "servers.json", "--provider", "scripted:script.yaml",
       "--store", "memory")


def test_run_calls_the_servers_tools(tmp_path: Path, pids: Path) -> None:
    cwd = _project(tmp_path, pids, LOOKUP)
    proc = _phaseflow(cwd, *RUN, "--json", "--message", "I am ada@example.com")
    assert proc.returncode == 0, proc.stderr
    results = {(e["name"], e["status"]): e["content"] for e in events(proc.stdout)
               if e["type"] == "tool_result"}
    assert json.loads(results[("demo.lookup", "ok")])["customer_id"] == "C-ada"
    assert "refused: no reason" in results[("demo.fail", "error")]
    assert [e["reply"] for e in events(proc.stdout) if e["type"] == "turn_finished"] == [
        "Found Ada."]
    assert len(server_pids(pids)) == 1
    assert "Traceback" not in proc.stderr


def test_run_refuses_a_bad_file_and_a_server_that_does_not_start(tmp_path: Path,
                                                                 pids: Path) -> None:
    cwd = _project(tmp_path, pids, LOOKUP)
    write_json(cwd / "bad.json", {"mcpServers": {"demo": {"command": "x", "args": "a"}}})
    proc = _phaseflow(cwd, *RUN[:3], "bad.json", *RUN[4:], "--message", "hi")
    assert proc.returncode == 2
    assert proc.stderr == ("phaseflow run: error: bad.json: mcpServers.demo.args: expected a "
                           "list of strings, got a string\n")
    write_json(cwd / "servers.json", stdio_servers(pids, "crash"))
    proc = _phaseflow(cwd, *RUN, "--message", "hi")
    assert proc.returncode == 2
    assert proc.stderr.startswith("phaseflow run: error: MCP server 'demo' (")
    assert "did not start" in proc.stderr and "crash mode" in proc.stderr
    assert "Traceback" not in proc.stderr


SLOW = "- calls: [{demo.slow: {seconds: 60}}]\n- Recovered after the interruption.\n"


def _stopped_by(sig: int, cwd: Path, pids: Path, *store: str
                ) -> tuple[subprocess.Popen[str], str]:
    """``phaseflow run`` sent ``sig`` while the server runs a call; the process (ended)
    and its standard error. The server must be gone."""
    process = subprocess.Popen([*PHASEFLOW, *RUN, *store,
                                "--session", "one", "--message", "go slowly"],
                               cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=cli_env())
    try:
        wait_for(pids / "slow-started", 60)
        [server] = server_pids(pids)
        os.kill(process.pid, sig)
        _out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert not wait_gone({server}), "the MCP server outlived phaseflow run"
    return process, err


def test_sigterm_stops_run_and_sessions_recover_finishes_the_turn(tmp_path: Path,
                                                                 pids: Path) -> None:
    cwd = _project(tmp_path, pids, SLOW)
    process, err = _stopped_by(signal.SIGTERM, cwd, pids, "--store", "s.db")
    assert process.returncode == 128 + signal.SIGTERM
    assert err == ""  # quietly: no traceback, no teardown noise
    assert (pids / "slow-cancelled").exists()  # the server was told, then stopped
    # the session was left running: recover finishes its turn, with the servers again
    proc = _phaseflow(cwd, "sessions", "recover", "--workflow", "desk.yaml", "--store", "s.db",
                      "--mcp", "servers.json", "--provider", "scripted:script.yaml")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ("one: recovered: turn 1 completed; now idle in phase work; 1 "
                           "interrupted call(s) got 'outcome unknown' (not run again)\n")
    assert len(server_pids(pids)) == 2  # run's server and recover's, both stopped


def test_ctrl_c_stops_run_and_its_servers(tmp_path: Path, pids: Path) -> None:
    process, err = _stopped_by(signal.SIGINT, _project(tmp_path, pids, SLOW), pids)
    assert process.returncode == 130  # the turn cancelled, as a Ctrl-C does
    assert "Traceback" not in err


def test_validate_offline_and_with_the_servers(tmp_path: Path, pids: Path) -> None:
    cwd = _project(tmp_path, pids, LOOKUP)
    text = WORKFLOW.replace("  demo.pid: {}\n", "  demo.pdi: {}\n").replace(
        "  demo.fail: {}\n",
        "  demo.fail:\n    parameters:\n      type: object\n      properties:\n"
        "        why: {type: integer}\n        extra: {type: string}\n")
    (cwd / "desk.yaml").write_text(text, encoding="utf-8")
    offline = _phaseflow(cwd, "validate", "desk.yaml")
    assert offline.returncode == 0, offline.stdout
    assert server_pids(pids) == set()  # nothing started without --mcp
    proc = _phaseflow(cwd, "validate", "desk.yaml", "--mcp", "servers.json")
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert lines == [
        "desk.yaml:9:3: error PF411 tool 'demo.fail': its parameters disagree with MCP "
        "server 'demo''s tool 'fail': the server takes no argument 'extra' (it takes: why); "
        "the server requires 'why', which is declared optional; 'why' is declared integer, "
        "the server takes string; fix the catalogue's parameters or leave them out to use "
        "the server's",
        "desk.yaml:16:3: error PF410 tool 'demo.pdi': MCP server 'demo' has no tool 'pdi'; "
        "did you mean 'demo.pid'? its tools: fail, grow, header, lookup, meta, pid, retitle, "
        "shrink, slow",
        "1 files checked: 2 errors, 0 warnings",
    ]
    write_json(cwd / "servers.json", stdio_servers(pids, "crash"))
    proc = _phaseflow(cwd, "validate", "desk.yaml", "--mcp", "servers.json")
    assert proc.returncode == 2
    assert proc.stderr.startswith("phaseflow validate: error: MCP server 'demo' (")


def test_ctrl_c_while_a_server_hangs_at_start(tmp_path: Path, pids: Path) -> None:
    """Interrupted while it waits for a server that never answers: run ends at once (not
    after the server's timeout), and the server is stopped."""
    cwd = _project(tmp_path, pids, LOOKUP, mode="hang")
    write_json(cwd / "servers.json", stdio_servers(pids, "hang", timeout=120))
    process = subprocess.Popen([*PHASEFLOW, *RUN, "--message",
                                "hi"], cwd=cwd, stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=cli_env())
    try:
        deadline = time.monotonic() + 60
        while not server_pids(pids):
            assert time.monotonic() < deadline, "the server never started"
            time.sleep(0.05)
        [server] = server_pids(pids)
        started = time.monotonic()
        os.kill(process.pid, signal.SIGINT)
        _out, err = process.communicate(timeout=60)
        assert time.monotonic() - started < 40  # well before the server's 120 s
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 130
    assert "Traceback" not in err
    assert not wait_gone({server})
