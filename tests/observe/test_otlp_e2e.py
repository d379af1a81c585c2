"""End to end: ``phaseflow run`` and ``phaseflow sessions recover`` as real processes,
switched on by the ``OTEL_*`` variables, exporting with the real OTLP/HTTP exporter to a
receiver on loopback that decodes the protobuf. A turn paused for an approval is resumed
in a new process, and a turn whose process died is finished by ``sessions recover``:
each resumed turn's span links to the span of the drive it continues."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.otlp_receiver import Received, Span, otlp_receiver
from tests.support.phaseflow_cli import PHASEFLOW, cli_env, run_phaseflow

pty = pytest.importorskip("pty")

WORKFLOW = """\
phaseflow: 1
name: desk
initial: work
state:
  paid: {type: boolean}
tools:
  lookup:
    description: Look up the order
  pay:
    description: Pay an amount
    approval: always
    writes: [paid]
phases:
  work:
    goal: Do the work.
    tools: [lookup, pay]
    transitions:
      - to: thanks
        when: state.paid
        description: Paid
  thanks:
    goal: Thank the customer.
"""

TOOLS = '''\
import os
import time
from pathlib import Path

from phaseflow.tools import tool


@tool
def lookup(order: str) -> str:
    """Look up; with a file 'crash' present, wait for 'go' and kill this process."""
    if Path("crash").exists():
        Path("crash").unlink()
        deadline = time.monotonic() + 60
        while not Path("go").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        os._exit(9)
    return "order " + order + ": a kettle"


@tool
def pay(amount: float) -> dict:
    """Pay."""
    return {"paid": True}


TOOLS = [lookup, pay]
'''

SCRIPT = """\
- calls: [{lookup: {order: O-9}}]
- calls: [{pay: {amount: 5}}]
- Paid, thank you.
- You're welcome.
"""

ARGS = ("desk.yaml", "--provider", "scripted:script.yaml", "--tools", "desk_tools:TOOLS",
        "--session", "s-1", "--store", "sessions.db")


def project(tmp_path: Path) -> Path:
    (tmp_path / "desk.yaml").write_text(WORKFLOW, encoding="utf-8")
    (tmp_path / "desk_tools.py").write_text(TOOLS, encoding="utf-8")
    (tmp_path / "script.yaml").write_text(SCRIPT, encoding="utf-8")
    return tmp_path


def otel_env(endpoint: str) -> dict[str, str]:
    # spans leave the process within 0.1 s (a process that is killed exports nothing)
    return cli_env(OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, OTEL_BSP_SCHEDULE_DELAY="100")


def cli(cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run_phaseflow(*args, cwd=cwd, env=env, timeout=120)


def turns(spans: list[Span]) -> list[Span]:
    return [s for s in spans if s.name == "invoke_agent desk"]


def children(spans: list[Span], parent: Span) -> list[Span]:
    return [s for s in spans if s.parent_span_id == parent.span_id]


def chat_until_the_approval(cwd: Path, env: dict[str, str], received: Received) -> None:
    """A chat in a terminal: the message, then the approval prompt; the process is killed
    there once its paused turn was exported (the approval stays pending in the store)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([*PHASEFLOW, "run", *ARGS],
                            cwd=cwd, env=env, stdin=slave, stdout=slave, stderr=slave,
                            close_fds=True)
    os.close(slave)
    seen = b""
    try:
        deadline = time.monotonic() + 60
        typed = False
        while b"approve pay" not in seen:
            assert time.monotonic() < deadline, seen.decode(errors="replace")
            ready, _, _ = select.select([master], [], [], 1.0)
            if ready:
                seen += os.read(master, 65536)
            if not typed and b"you>" in seen:
                os.write(master, b"Please pay 5\n")
                typed = True
        received.wait_for(lambda spans: any(
            s.attributes.get("phaseflow.turn.status") == "awaiting_approval"
            for s in turns(spans)))
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        os.close(master)


def test_an_approval_resumed_by_a_new_run_links_to_the_paused_turn(tmp_path: Path) -> None:
    cwd = project(tmp_path)
    with otlp_receiver() as (endpoint, received):
        env = otel_env(endpoint)
        chat_until_the_approval(cwd, env, received)
        proc = cli(cwd, env, "run", *ARGS, "--approve", "all", "--json", "-m", "Thanks")
        assert proc.returncode == 0, proc.stderr
        spans = received.snapshot()
        metrics = set(received.metrics)
        plain = {k: v for k, v in env.items() if not k.startswith("OTEL_")}
        shown = cli(cwd, plain, "sessions", "show", "s-1", "--store", "sessions.db")
        stored = cli(cwd, plain, "sessions", "events", "s-1", "--store", "sessions.db",
                     "--json")
    assert shown.returncode == 0 and "Paid, thank you." in shown.stdout, shown.stderr
    assert stored.returncode == 0, stored.stderr
    kept = {json.loads(line).get("trace") for line in stored.stdout.splitlines()} - {None}
    paused, resumed, second = turns(spans)
    # the span contexts the store keeps are those of the three drives
    assert {t.split("-")[2] for t in kept} == {paused.span_id, resumed.span_id,
                                               second.span_id}
    assert {s.resource.get("service.name") for s in spans} == {"phaseflow"}
    for span in (paused, resumed, second):
        assert span.kind == 1  # SPAN_KIND_INTERNAL
        assert span.attributes["gen_ai.conversation.id"] == "s-1"
        assert span.attributes["gen_ai.agent.name"] == "desk"
    assert [s.attributes["phaseflow.turn"] for s in (paused, resumed, second)] == [1, 1, 2]
    assert [s.attributes["phaseflow.turn.status"] for s in (paused, resumed, second)] == [
        "awaiting_approval", "completed", "completed"]

    # the first process: the model called lookup (run), then pay (needs approval)
    first = children(spans, paused)
    assert [s.name for s in first if s.name.startswith(("chat", "execute_tool"))] == [
        "chat", "execute_tool lookup", "chat"]
    lookup = next(s for s in first if s.name == "execute_tool lookup")
    assert lookup.attributes["gen_ai.tool.call.id"] == "call_1_1"
    assert lookup.attributes["phaseflow.tool.status"] == "ok"
    chats = [s for s in first if s.name.startswith("chat")]
    assert all(c.kind == 3 for c in chats)  # SPAN_KIND_CLIENT
    assert [c.attributes["gen_ai.response.finish_reasons"] for c in chats] == [
        ("tool_calls",), ("tool_calls",)]
    assert all(c.attributes["gen_ai.usage.input_tokens"] > 0 for c in chats)
    assert [name for name, _ in paused.events] == ["phaseflow.approval_requested"]

    # the second process continues that turn: a new trace, linked to the paused span
    assert resumed.trace_id != paused.trace_id
    assert resumed.links == ((paused.trace_id, paused.span_id, {"phaseflow.link": "continues"}),)
    later = children(spans, resumed)
    pay = [s for s in later if s.name == "execute_tool pay"]
    assert len(pay) == 1 and pay[0].attributes["gen_ai.tool.call.id"] == "call_2_1"
    names = [name for name, _ in resumed.events]
    assert names == ["phaseflow.approval_resolved", "phaseflow.phase_changed"]
    assert dict(resumed.events)["phaseflow.phase_changed"]["phaseflow.phase.to"] == "thanks"
    assert not second.links
    assert not any("gen_ai.input.messages" in s.attributes for s in spans)
    assert {"gen_ai.client.token.usage", "gen_ai.client.operation.duration",
            "phaseflow.turn.duration", "phaseflow.tool.duration",
            "phaseflow.transitions"} <= metrics


def test_sessions_recover_links_the_finished_turn_to_the_dead_process_s(
        tmp_path: Path) -> None:
    cwd = project(tmp_path)
    (cwd / "crash").write_text("", encoding="utf-8")
    with otlp_receiver() as (endpoint, received):
        env = otel_env(endpoint)
        proc = subprocess.Popen(
            [*PHASEFLOW, "run", *ARGS, "--approve", "all",
             "-m", "Please pay 5"], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            # the model's first request is exported; then lookup kills its process
            spans = received.wait_for(lambda spans: any(
                s.name.startswith("chat") for s in spans))
            (cwd / "go").write_text("", encoding="utf-8")
            assert proc.wait(timeout=60) == 9
        finally:
            proc.kill()
        dead_turn = next(s for s in spans if s.name.startswith("chat")).parent_span_id
        recovered = cli(cwd, env, "sessions", "recover", "s-1", "--store", "sessions.db",
                        "--workflow", "desk.yaml", "--provider", "scripted:script.yaml",
                        "--tools", "desk_tools:TOOLS")
        assert recovered.returncode == 0, recovered.stdout + recovered.stderr
        after = received.snapshot()
    (turn,) = turns(after)  # the dead process never ended (nor exported) its turn span
    assert turn.attributes["phaseflow.turn.continues"] is True
    assert [(t, s) for t, s, _ in turn.links] == [(spans[0].trace_id, dead_turn)]
    # the interrupted lookup's outcome is unknown; the turn then waits for an approval
    assert turn.attributes["phaseflow.turn.status"] == "awaiting_approval"
