"""``phaseflow run --provider openai`` against a real OpenAI-compatible HTTP server on
loopback (the fake server of the provider tests), through the official SDK."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.fake_openai_server import (
    FakeOpenAIServer,
    text_reply,
    tool_calls_reply,
)
from tests.support.phaseflow_cli import cli_env
from tests.support.run_cli import STORE_NOTICE, project, run

pytest.importorskip("openai")


def test_a_turn_through_the_openai_provider(tmp_path: Path,
                                            fake_openai: FakeOpenAIServer) -> None:
    fake_openai.push(tool_calls_reply(("call_a", "pay", '{"amount": 5}')),
                     text_reply("Paid, thanks."))
    cwd = project(tmp_path)
    proc = run(cwd, "desk.yaml", "--provider", "openai", "--base-url", fake_openai.base_url,
               "--model", "fake-model", "--tools", "desk_tools:TOOLS", "--approve", "all",
               "--system", "You are the desk.", "--json", "-m", "Please pay 5",
               env=cli_env())
    assert proc.returncode == 0, proc.stderr
    seen = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [e["name"] for e in seen if e["type"] == "tool_result"] == ["pay"]
    assert [e["to_phase"] for e in seen if e["type"] == "phase_changed"] == ["finished"]
    finished = [e for e in seen if e["type"] == "turn_finished"]
    assert [(e["reply"], e["status"]) for e in finished] == [("Paid, thanks.", "completed")]
    first = fake_openai.requests[0].body
    assert first["model"] == "fake-model"
    assert first["messages"][0]["role"] == "system"
    assert first["messages"][0]["content"].startswith("You are the desk.")
    assert first["messages"][-2] == {"role": "user", "content": "Please pay 5"}
    # the phase's block goes after the history (docs/sessions.md, What a request holds)
    assert first["messages"][-1]["role"] == "system"
    assert "Current phase: work" in first["messages"][-1]["content"]
    offered = sorted(t["function"]["name"] for t in first["tools"])
    assert offered == ["pay", "slow__block", "slow__wait"]
    assert fake_openai.pending == 0
    # the notice of the end, nothing left pending at exit (the SDK's stream iterators)
    assert proc.stderr.splitlines() == [e for e in proc.stderr.splitlines()
                                        if e.startswith(("[session ", STORE_NOTICE))], proc.stderr


def test_a_server_error_fails_the_turn_with_exit_1(tmp_path: Path,
                                                   fake_openai: FakeOpenAIServer) -> None:
    from tests.support.fake_openai_server import Fail

    fake_openai.push(Fail(400, "model 'nope' does not exist", type="invalid_request_error"))
    cwd = project(tmp_path)
    proc = run(cwd, "desk.yaml", "--base-url", fake_openai.base_url, "--model", "nope",
               "--tools", "desk_tools:TOOLS", "-m", "hi", env=cli_env())
    assert proc.returncode == 1
    assert "model 'nope' does not exist" in proc.stdout
    assert "[turn failed]" in proc.stdout
    assert "Traceback" not in proc.stderr
