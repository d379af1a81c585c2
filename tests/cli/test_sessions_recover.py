"""``phaseflow sessions recover``: finish the turn a killed worker left.

A worker process runs the refund desk (``examples/support_agent.py``'s tools, hooks and
script) on an SQLite store; its customer lookup blocks, and the test kills the worker
with SIGKILL while it does. ``recover`` then runs as a real subprocess with the same
workflow, tools and script: the lookup (idempotent in the workflow) runs again with the
same idempotency key, and the turn continues to its end.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.phaseflow_cli import cli_env, run_phaseflow

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / "workflows" / "refund-desk.yaml"

HOST = f"""
import asyncio, os, sys
sys.path.insert(0, {str(ROOT / "examples")!r})
import support_agent as sa
from phaseflow.tools import ToolContext, tool

async def ran(what: str, ctx: ToolContext) -> None:
    with open(os.environ["HOST_LOG"], "a") as log:
        log.write(f"{{what}} {{ctx.idempotency_key}}\\n")
    if os.environ.get("HOST_BLOCK") == what:
        await asyncio.sleep(600)  # killed here

@tool(name="crm.lookup_customer")
async def lookup_customer(ctx: ToolContext, email: str = "", phone: str = "") -> dict:
    await ran("lookup", ctx)
    return {{"customer_id": "C-1042", "customer": {{"name": "Ada", "verified": True}}}}

@tool(name="orders.select")
async def select_order(order_id: str, ctx: ToolContext) -> dict:
    await ran("select", ctx)
    return {{"order_id": order_id, "amount": 120.0,
             "order": {{"status": "delivered", "days_since_delivery": 6}}}}

TOOLS = [lookup_customer, select_order, sa.issue_refund]
HOOKS = sa.HOOKS
"""

WORKER = """
import asyncio, os, sys
import host
from phaseflow.providers import ScriptedProvider
from phaseflow.session import Agent
from phaseflow.stores import SQLiteStore

async def main() -> None:
    store, session_id, lease, *messages = sys.argv[1:]
    agent = Agent(host.sa.WORKFLOW, ScriptedProvider(host.sa.SCRIPT), tools=host.TOOLS,
                  hooks=host.HOOKS, store=SQLiteStore(store), lease=float(lease),
                  worker=os.environ.get("HOST_WORKER"))
    session = await agent.session(session_id)
    for message in messages:
        async for _ in session.send(message):
            pass

asyncio.run(main())
"""

FIRST = "Hi, I'd like a refund. I'm ada@example.com"
SECOND = "Order O-9. It arrived broken."


@pytest.fixture
def host(tmp_path: Path) -> Path:
    sys.path.insert(0, str(ROOT / "examples"))
    import support_agent as sa

    (tmp_path / "host.py").write_text(textwrap.dedent(HOST))
    (tmp_path / "worker.py").write_text(textwrap.dedent(WORKER))
    (tmp_path / "script.yaml").write_text(yaml.safe_dump(sa.SCRIPT, sort_keys=False))
    return tmp_path


def env(folder: Path, **extra: str) -> dict[str, str]:
    # this checkout first on the path, as cli_env has it: the children (a worker,
    # `phaseflow sessions`) run this checkout's phaseflow and its store schema
    out = {**os.environ, "HOST_LOG": str(folder / "calls.log"),
           "PYTHONPATH": cli_env()["PYTHONPATH"]}
    out.pop("HOST_BLOCK", None)
    out.update(extra)
    return out


def runs(folder: Path, what: str) -> list[str]:
    """The idempotency keys of the runs of ``what`` (lookup, select) so far."""
    log = folder / "calls.log"
    lines = log.read_text().splitlines() if log.exists() else []
    return [line.split()[1] for line in lines if line.split()[0] == what]


#: the name of a worker on another machine (this one cannot tell whether it is alive)
ELSEWHERE = "other-host:4242:worker"


def kill_mid_turn(folder: Path, session_id: str, lease: float, *, block: str = "lookup",
                  messages: tuple[str, ...] = (FIRST,), worker_id: str = ELSEWHERE) -> None:
    """Run a worker until the tool ``block`` blocks, then SIGKILL it. ``worker_id``: its
    name in the lease ("" for the default, which says it ran on this machine)."""
    before = len(runs(folder, block))
    extra = {"HOST_BLOCK": block, **({"HOST_WORKER": worker_id} if worker_id else {})}
    worker = subprocess.Popen(
        [sys.executable, "worker.py", "s.db", session_id, str(lease), *messages], cwd=folder,
        env=env(folder, **extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while len(runs(folder, block)) == before:
        assert worker.poll() is None, worker.communicate()
        assert time.monotonic() < deadline, "the worker never reached its tool"
        time.sleep(0.02)
    worker.send_signal(signal.SIGKILL)
    worker.wait()


def sessions(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_phaseflow("sessions", *args, "--store", "s.db", cwd=folder, env=env(folder))


@pytest.fixture
def here(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Any:
    """``sessions`` in this process, for reading the store (faster than a process)."""
    def run(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
        from phaseflow.cli.main import main

        monkeypatch.chdir(folder)
        code = main(["sessions", *args, "--store", "s.db"])
        out = capsys.readouterr()
        return subprocess.CompletedProcess(list(args), code, out.out, out.err)
    return run


RECOVER = ("--workflow", str(WORKFLOW), "--tools", "host:TOOLS", "--hooks", "host:HOOKS",
           "--provider", "scripted:script.yaml")


def test_recover_a_turn_a_killed_worker_left(host: Path, here: Any) -> None:
    kill_mid_turn(host, "crash-1", lease=30)
    shown = json.loads(here(host, "show", "crash-1", "--json").stdout)
    assert shown["status"] == "running"
    assert "left by a worker that stopped" in here(host, "show", "crash-1").stdout

    # the dead worker's lease has 30 s to go: not taken without --force
    busy = sessions(host, "recover", "crash-1", *RECOVER)
    assert busy.returncode == 1, busy.stderr
    assert busy.stdout == "crash-1: busy (lease held by another worker)\n"

    done = sessions(host, "recover", "crash-1", "--force", *RECOVER)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ("crash-1: recovered: turn 1 completed; now idle in phase "
                           "locate_order\n")
    # the idempotent lookup ran again, with the key of the interrupted call
    lookups = runs(host, "lookup")
    assert len(lookups) == 2 and lookups[0] == lookups[1]

    shown = json.loads(here(host, "show", "crash-1", "--json").stdout)
    assert (shown["status"], shown["phase"], shown["turn"]) == ("idle", "locate_order", 1)
    assert shown["state"]["customer_id"] == "C-1042"
    history = shown["history"]
    assert history[-1]["content"].startswith("Thanks, Ada, you're verified.")
    calls = [c["id"] for m in history if m["role"] == "assistant" for c in m["tool_calls"]]
    results = [m["tool_call_id"] for m in history if m["role"] == "tool"]
    assert sorted(calls) == sorted(results)  # every call has exactly one result

    # nothing is left to do: a second recovery is a no-op
    again = sessions(host, "recover", "crash-1", *RECOVER)
    assert again.returncode == 0, again.stderr
    assert again.stdout == "crash-1: nothing to recover (idle, phase locate_order)\n"


def test_a_killed_worker_of_this_machine_is_recognised_and_its_turn_taken_at_once(
        host: Path, here: Any) -> None:
    # Its lease has 30 s to go, but the process it names no longer exists here.
    kill_mid_turn(host, "crash-3", lease=30, worker_id="")
    done = sessions(host, "recover", "crash-3", *RECOVER)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ("crash-3: recovered: turn 1 completed; now idle in phase "
                           "locate_order\n")
    lookups = runs(host, "lookup")
    assert len(lookups) == 2 and lookups[0] == lookups[1]  # idempotent: run again, same key


def test_recover_every_running_session_once_its_lease_expired(host: Path, here: Any) -> None:
    lease = 0.5
    kill_mid_turn(host, "crash-2", lease=lease)
    time.sleep(lease + 0.2)  # the lease was last renewed before the tool started
    listed = {s["id"]: s["status"] for s in json.loads(here(host, "list", "--json").stdout)}
    assert listed == {"crash-2": "running"}

    out = sessions(host, "recover", *RECOVER)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "crash-2: recovered: turn 1 completed; now idle in phase locate_order\n"
    assert "Thanks, Ada" in here(host, "show", "crash-2").stdout

    out = sessions(host, "recover", *RECOVER)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "nothing to recover: no session of refund-desk is running\n"


def test_recover_names_what_it_cannot_do(host: Path, here: Any) -> None:
    missing = sessions(host, "recover", "nobody", *RECOVER)
    assert missing.returncode == 2  # no store yet: misuse, and none is created
    assert "no session store at s.db" in missing.stderr
    assert not (host / "s.db").exists()

    # killed while orders.select (not idempotent) runs, in the second turn
    kill_mid_turn(host, "crash-3", lease=30, block="select", messages=(FIRST, SECOND))
    out = sessions(host, "recover", "nobody", "crash-3", "--force", *RECOVER)
    assert out.returncode == 1, out.stderr
    assert out.stdout.splitlines() == [
        "nobody: no such session",
        "crash-3: recovered: turn 2 completed; now idle in phase locate_order; 1 interrupted "
        "call(s) got 'outcome unknown' (not run again)"]
    assert len(runs(host, "select")) == 1  # never run twice
    shown = json.loads(here(host, "show", "crash-3", "--json").stdout)
    unknown = [m for m in shown["history"] if m["role"] == "tool" and m["status"] == "error"
               and "outcome is unknown" in m["content"]]
    assert len(unknown) == 1
    assert "order_id" not in shown["state"] or shown["state"]["order_id"] is None


@pytest.mark.parametrize(("args", "message"), [
    (("--provider", "gpt"), "--provider gpt: expected 'anthropic', 'openai'"),
    (("--provider", "scripted:nope.yaml"), "--provider scripted: nope.yaml: cannot read"),
    (("--tools", "nowhere:TOOLS"), "--tools nowhere:TOOLS: cannot import nowhere"),
    (("--tools", "host"), "--tools takes MODULE:ATTR, got 'host'"),
    (("--hooks", "host:TOOLS"), "--hooks host:TOOLS: expected a mapping"),
    (("--lease", "0"), "--lease: expected a positive number of seconds, got '0'"),
])
def test_bad_options_are_exit_2(host: Path, args: tuple[str, ...], message: str,
                                monkeypatch: pytest.MonkeyPatch,
                                capsys: pytest.CaptureFixture[str]) -> None:
    from phaseflow.cli.main import main

    monkeypatch.chdir(host)
    monkeypatch.setattr(sys, "path", list(sys.path))  # --tools puts the folder on it
    monkeypatch.delitem(sys.modules, "host", raising=False)
    options = ["--workflow", str(WORKFLOW), "--tools", "host:TOOLS",
               "--provider", "scripted:script.yaml", *args]
    code = main(["sessions", "recover", *options, "--store", "s.db"])
    err = capsys.readouterr().err
    sys.modules.pop("host", None)
    assert code == 2
    assert err.startswith(f"phaseflow sessions recover: error: {message}"), err
    assert len(err.splitlines()) == 1


def test_a_workflow_that_does_not_exist(host: Path) -> None:
    out = sessions(host, "recover", "--workflow", "nope.yaml", "--provider",
                   "scripted:script.yaml")
    assert out.returncode == 2
    assert "no such file: nope.yaml" in out.stderr
