"""Starting and stopping ``phaseflow serve``: what it refuses at start (exit 2), bearer
tokens, and the graceful stop on SIGTERM (503 with Retry-After while running turns
finish within --grace, then cancelled; leases released; no traceback in the log)."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx

from tests.support.phaseflow_cli import cli_env, run_phaseflow
from tests.support.serve_server import REFUND_DESK, ROOT, start, write_desk

TOKEN = "tok-" + "a1b2c3d4" * 4


def _serve(*args: str, env: dict[str, str] | None = None, cwd: Path = ROOT
           ) -> subprocess.CompletedProcess[str]:
    return run_phaseflow("serve", *args, cwd=cwd, env=env or cli_env())


def test_bad_configuration_is_refused_at_start(tmp_path: Path) -> None:
    store = ["--store", str(tmp_path / "x.db")]
    cases = [
        ([*REFUND_DESK, *store, "--host", "0.0.0.0"], "not loopback: give bearer tokens"),
        ([*REFUND_DESK, "--store", "memory", "--workers", "2"], "not 'memory'"),
        ([*REFUND_DESK, *store, "--token-file", str(tmp_path / "none")], "cannot read it"),
        ([*REFUND_DESK, *store, "--port", "70000"], "--port"),
        ([*REFUND_DESK, *store, "--max-body", "lots"], "--max-body"),
        ([*REFUND_DESK, *store, "--kept-sessions", "-1"], "--kept-sessions"),
        ([*REFUND_DESK, *store, "--store-pool", "8"],
         "--store-pool sizes a PostgreSQL store's pool of connections"),
        ([*REFUND_DESK, "--store", "memory", "--store-pool", "8"], "--store memory has none"),
        ([*REFUND_DESK, "--store", "postgresql://127.0.0.1:1/x", "--store-pool", "0"],
         "--store-pool: expected a number from 1"),
        ([str(tmp_path / "missing.yaml"), *REFUND_DESK[1:], *store], "no such file"),
        ([*REFUND_DESK[:-2], *store, "--hooks", "examples.demo.refund_desk:NOPE"],
         "NOPE"),
        ([REFUND_DESK[0], *REFUND_DESK, *store], "two workflows are named 'refund-desk'"),
    ]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(4) as pool:  # each a process of its own: run them together
        results = list(pool.map(lambda case: _serve(*case[0]), cases))
    for (args, said), done in zip(cases, results, strict=True):
        assert done.returncode == 2, (args, done.stderr)
        assert said in done.stderr and "Traceback" not in done.stderr, done.stderr
    short = _serve(*REFUND_DESK, *store, env=cli_env(PHASEFLOW_TOKENS="short"))
    assert short.returncode == 2 and "token 1 is not usable" in short.stderr
    assert "short" not in short.stderr.replace("token 1 is not usable", "")


def test_bearer_tokens(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"# the front end\n{TOKEN}\n\n", encoding="utf-8")
    other = "env-" + "z9" * 10
    server = start([*REFUND_DESK, "--store", str(tmp_path / "s.db"), "--token-file",
                    str(tokens), "--host", "127.0.0.1", "--log-format", "json"],
                   tmp_path / "log",
                   env=cli_env(PHASEFLOW_TOKENS=other))
    try:
        with httpx.Client(base_url=server.base, timeout=30) as client:
            assert client.get("/healthz").status_code == 200  # probes need no token
            for headers in ({}, {"Authorization": "Bearer wrong-" + TOKEN},
                            {"Authorization": f"Basic {TOKEN}"}):
                denied = client.get("/v1/workflows", headers=headers)
                assert denied.status_code == 401
                assert denied.headers["www-authenticate"].startswith("Bearer")
                assert denied.json()["code"] == "unauthorized"
            for token in (TOKEN, other):
                ok = client.get("/v1/workflows", headers={"Authorization": f"Bearer {token}"})
                assert ok.status_code == 200
        assert "no tokens" not in "".join(server.banner)
    finally:
        assert server.stop() == 0
    log = server.log()
    assert TOKEN not in log and other not in log
    lines = [json.loads(line) for line in log.splitlines()]  # every line is JSON
    denied = [r for r in lines if r["kind"] == "request" and r["status"] == 401]
    assert len(denied) == 3 and all(r["path"] == "/v1/workflows" for r in denied)


def _lease(db: Path, sid: str) -> object:
    from phaseflow.stores.sqlite import SQLiteStore

    async def read() -> object:
        store = SQLiteStore(str(db))
        try:
            return await store.lease(sid)
        finally:
            store.close()

    return asyncio.run(read())


def _stop_during_a_turn(tmp_path: Path, delay: float, grace: float) -> tuple[str, dict]:
    args = write_desk(tmp_path)
    db = tmp_path / "desk.db"
    server = start([*args, "--store", str(db), "--grace", str(grace)], tmp_path / "log",
                   cwd=tmp_path, env=cli_env(DESK_DELAY=str(delay)))
    sid = f"s-{uuid.uuid4().hex[:8]}"
    with httpx.Client(base_url=server.base, timeout=30) as client:
        client.post("/v1/sessions", json={"id": sid})
        other = client.post("/v1/sessions", json={"id": sid + "-b"})
        assert other.status_code == 201
        with client.stream("GET", f"/v1/sessions/{sid}/events") as follower:
            lines = follower.iter_lines()
            client.post(f"/v1/sessions/{sid}/messages", json={"text": "go"},
                        headers={"Prefer": "respond-async"})
            server.process.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 30
            while client.get("/healthz").status_code != 503:  # the signal is taken
                assert time.monotonic() < deadline, "the server never began to stop"
                time.sleep(0.02)
            refused = client.post(f"/v1/sessions/{sid}-b/messages", json={"text": "hi"})
            assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
            assert refused.json()["code"] == "shutting_down"
            for _ in lines:  # the events stream is closed by the server
                pass
    assert server.process.wait(60) == 0
    log = server.log()
    assert "Traceback" not in log
    from phaseflow.stores.sqlite import SQLiteStore

    async def read() -> tuple[list, object]:
        store = SQLiteStore(str(db))
        try:
            events = [e.data for e in await store.events(sid)]
            return events, await store.load(sid)
        finally:
            store.close()

    events, record = asyncio.run(read())
    assert _lease(db, sid) is None  # released
    return sid, {"events": events, "record": record}


def test_sigterm_lets_the_running_turn_finish(tmp_path: Path) -> None:
    _, stored = _stop_during_a_turn(tmp_path, delay=2.0, grace=30)
    assert stored["events"][-1]["type"] == "turn_finished"
    assert stored["events"][-1]["status"] == "completed"
    assert stored["record"].status == "idle"


def test_sigterm_cancels_a_turn_past_the_grace(tmp_path: Path) -> None:
    _, stored = _stop_during_a_turn(tmp_path, delay=30.0, grace=0.5)
    assert stored["events"][-1]["type"] == "turn_finished"
    assert stored["events"][-1]["status"] == "cancelled"
    assert stored["record"].status == "idle"


def test_other_commands_do_not_import_the_server() -> None:
    code = ("import sys\nfrom phaseflow.cli.main import main\n"
            "main(['validate', 'workflows/refund-desk.yaml'])\n"
            "import phaseflow\n"
            "print(sorted(m for m in ('starlette', 'uvicorn', 'sse_starlette', "
            "'phaseflow.serve') if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=cli_env(),
                          capture_output=True, text=True, timeout=60)
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout + done.stderr
