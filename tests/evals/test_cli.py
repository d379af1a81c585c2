"""``phaseflow eval`` as a user runs it: the bundled eval in a real process, the
sessions it stores, the JUnit and JSON files, compare, validate, a budget, Ctrl-C."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from phaseflow.cli.main import main
from phaseflow.evals import evalfile
from tests.support.eval_files import ROOT, bundled, cooperative, write_eval
from tests.support.phaseflow_cli import PHASEFLOW, cli_env, run_phaseflow

SCHEMA = ROOT / "phaseflow" / "schemas" / "eval.schema.json"


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``phaseflow ARGS`` in a child that imports this checkout, wherever it runs."""
    return run_phaseflow(*args, cwd=cwd, env=cli_env())


def test_the_bundled_eval_runs_and_its_sessions_open(tmp_path: Path) -> None:
    store, report, junit = tmp_path / "s.db", tmp_path / "r.json", tmp_path / "r.xml"
    proc = _cli("eval", "workflows/", "--store", str(store), "--run-id", "ci",
                         "--json", str(report), "--junit", str(junit), cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.endswith("4 conversations: 4 passed, 0 failed "
                                f"({json.loads(report.read_text())['totals']['tokens']} "
                                "tokens); run ci\n")
    assert proc.stderr == ""  # no progress bar when standard error is not a terminal
    suites = ET.parse(junit).getroot()
    cases = suites.findall("./testsuite/testcase")
    assert [c.get("name") for c in cases] == [s["name"] for s in bundled()["scenarios"]]
    assert all(c.find("failure") is None for c in cases)
    shown = _cli("sessions", "show", "--store", str(store),
                          "eval-ci-a-refund-of-900-is-escalated-to-a-duty-manager-t1")
    assert shown.returncode == 0, shown.stderr
    assert "phase      locate_order -> manager_approval (guard)" in shown.stdout
    assert "status finished, phase done" in shown.stdout
    again = _cli("eval", "workflows/", "--store", str(store), "--run-id", "ci", cwd=ROOT)
    assert (again.returncode, again.stdout) == (2, "")
    assert again.stderr == ("phaseflow eval: error: the store already has session "
                            "eval-ci-a-cooperative-customer-gets-a-small-refund-t1: give "
                            "another --run-id\n")


def test_a_failing_run_exits_1_and_junit_says_why(tmp_path: Path) -> None:
    path = write_eval(tmp_path, [cooperative(expect=["phase == 'handoff'"])])
    junit = tmp_path / "r.xml"
    assert main(["eval", str(path), "--store", "memory", "--junit", str(junit), "--trials",
                 "2", "--quiet"]) == 1
    [failure] = ET.parse(junit).getroot().findall("./testsuite/testcase/failure")
    assert failure.get("message") == "0/2 trials passed"
    assert "trial 2: expect: phase == 'handoff' -- false at the end (phase done)" in (
        failure.text or "")


def _report(path: Path, *scenarios: tuple[str, int, int]) -> Path:
    path.write_text(json.dumps({"phaseflow_eval_report": 1, "workflows": [
        {"workflow": "refund-desk", "scenarios": [
            {"name": n, "passed": p, "trials": t} for n, p, t in scenarios]}]}))
    return path


def test_compare_gates_on_a_significant_regression_only(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = _report(tmp_path / "a.json", ("cooperative", 20, 20), ("escalated", 9, 10))
    noisy = _report(tmp_path / "b.json", ("cooperative", 19, 20), ("escalated", 7, 10))
    worse = _report(tmp_path / "c.json", ("cooperative", 9, 20), ("escalated", 9, 10))
    assert main(["eval", "compare", str(base), str(noisy), "--fail-on-regression"]) == 0
    assert ("  same   refund-desk :: escalated: 9/10 -> 7/10 (-0.20, 95% interval -0.51 to "
            "+0.16: within noise)") in capsys.readouterr().out
    # a real process, for the exit status a CI job sees
    gated = _cli("eval", "compare", str(base), str(worse), "--fail-on-regression")
    assert gated.returncode == 1
    assert "  WORSE  refund-desk :: cooperative: 20/20 -> 9/20" in gated.stdout
    assert gated.stdout.endswith("2 scenarios compared: 1 regressions\n")
    assert main(["eval", "compare", str(base), str(worse)]) == 0
    assert main(["eval", "compare", str(base), str(ROOT / "README.md")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_validate_reads_eval_files_with_positions(tmp_path: Path) -> None:
    folder = tmp_path / "flows"
    folder.mkdir()
    (folder / "desk.yaml").write_text((ROOT / "workflows" / "refund-desk.yaml").read_text())
    (folder / "desk.eval.yaml").write_text(
        "phaseflow-eval: 1\nworkflow: desk.yaml\ntools:\n  crm.nope: {returns: {}}\n"
        "scenarios:\n  - name: one\n    user: {goal: a refund, max_turns: 0}\n"
        "    expect: [\"entered('refnd')\", \"called(state.x)\"]\n    nevr: []\n")
    proc = _cli("validate", str(folder))
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    eval_path = str(folder / "desk.eval.yaml")
    assert lines == [
        f"{eval_path}:4:3: warning EV002 tool 'crm.nope' is not in the workflow's catalogue",
        f"{eval_path}:6:5: warning EV002 scenario 'one': the workflow calls fetch_refund_policy, "
        "notify_customer, record_refund_audit, request_manager_approval, transfer_to_human, "
        "which no mock answers (they return nothing; add them under 'mocks')",
        f"{eval_path}:7:39: error EV001 user max_turns is a whole number from 1 to 1000",
        f"{eval_path}:8:14: warning EV002 entered('refnd'): the workflow has no phase 'refnd'",
        f"{eval_path}:8:42: error EV001 expect: called() takes a name in quotes: called('...')",
        f"{eval_path}:9:5: error EV001 unknown key 'nevr' in scenario 1; did you mean 'never'?",
        "2 files checked: 3 errors, 3 warnings"]


def test_the_bundled_folder_validates_strictly_and_its_tests_still_run() -> None:
    proc = _cli("validate", "--strict", "workflows/", cwd=ROOT)
    assert (proc.returncode, proc.stdout) == (0, "10 files checked: 0 errors, 0 warnings\n")


def test_the_schema_agrees_with_the_reader_and_accepts_the_bundled_file() -> None:
    schema = json.loads(SCHEMA.read_text())
    assert (ROOT / "schemas" / "eval.schema.json").read_bytes() == SCHEMA.read_bytes()
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(bundled(), schema)
    defs = schema["$defs"]
    assert set(schema["properties"]) == evalfile.TOP_KEYS
    assert set(defs["scenario"]["properties"]) == evalfile.SCENARIO_KEYS
    assert set(defs["user"]["properties"]) == evalfile.USER_KEYS
    assert set(defs["case"]["properties"]) == evalfile.CASE_KEYS
    wrong = bundled()
    wrong["scenarios"][0]["user"]["max_turns"] = 0
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(wrong, schema)


def _json(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def test_a_budget_stops_the_run_and_reports_what_finished(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_eval(tmp_path, [cooperative()])
    report = tmp_path / "r.json"
    code = main(["eval", str(path), "--store", "memory", "--trials", "3", "--concurrency",
                 "1", "--max-turns", "6", "--json", str(report)])
    assert code == 1
    assert "stopped early (budget)" in capsys.readouterr().out
    got = _json(report)
    assert (got["stopped"], got["planned"], got["totals"]["conversations"]) == ("budget", 3, 1)
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"m": {"input": 1.0, "output": 1.0}}))
    code = main(["eval", str(path), "--store", "memory", "--trials", "3", "--concurrency",
                 "1", "--model", "m", "--prices", str(prices), "--max-cost", "0.004",
                 "--json", str(report)])
    got = _json(report)
    assert code == 1
    assert (got["stopped"], got["totals"]["conversations"]) == ("budget", 1)
    assert 0.002 < got["totals"]["cost"] < 0.004


SLOW_TOOL = '''
import asyncio, pathlib
from phaseflow.tools import tool

CALLS = pathlib.Path(__file__).with_name("calls")

@tool(name="orders.search")
async def search() -> dict:
    """List the orders."""
    with CALLS.open("a") as handle:
        handle.write("x")
    if len(CALLS.read_text()) >= 3:  # the third conversation waits here
        await asyncio.sleep(60)
    return {"orders": []}

TOOLS = [search]
'''


def test_ctrl_c_keeps_the_conversations_that_finished(tmp_path: Path) -> None:
    data = bundled()
    del data["tools"]["orders.search"]  # the host's tool: slow from the third call on
    path = write_eval(tmp_path, [cooperative()], tools=data["tools"])
    (tmp_path / "slowtools.py").write_text(SLOW_TOOL)
    report, store = tmp_path / "r.json", tmp_path / "s.db"
    child = subprocess.Popen(
        [*PHASEFLOW, "eval", str(path), "--store", str(store), "--trials", "5",
         "--concurrency", "1", "--tools", "slowtools:TOOLS", "--json", str(report),
         "--run-id", "c"],
        cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    calls = tmp_path / "calls"
    deadline = time.monotonic() + 60
    while not (calls.exists() and len(calls.read_text()) >= 3):
        assert child.poll() is None, child.communicate()
        assert time.monotonic() < deadline, "the third conversation never started"
        time.sleep(0.05)
    started = time.monotonic()
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=30)
    assert child.returncode == 130, out + err
    assert time.monotonic() - started < 10  # the waiting tool was cancelled
    got = _json(report)
    assert (got["stopped"], got["totals"]["conversations"], got["totals"]["passed"]) == (
        "interrupted", 2, 2)
    assert [c["trial"] for c in got["workflows"][0]["scenarios"][0]["conversations"]] == [1, 2]
    assert "stopped early (interrupted)" in out
    listed = _cli("sessions", "list", "--store", str(store))
    assert "eval-c-a-cooperative-customer-gets-a-small-refund-t2  refund-desk  finished" in (
        listed.stdout)


def test_a_progress_bar_on_a_terminal(tmp_path: Path) -> None:
    import os
    import pty

    leader, follower = pty.openpty()
    child = subprocess.Popen([*PHASEFLOW, "eval", "workflows/", "--store", "memory"],
                             cwd=ROOT, env=cli_env(), stdout=subprocess.PIPE,
                             stderr=follower, stdin=subprocess.DEVNULL, text=True)
    os.close(follower)
    out, _ = child.communicate(timeout=60)
    shown = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        shown += chunk
    os.close(leader)
    assert child.returncode == 0, out
    text = shown.decode()
    assert "\r[#######.......................] 1/4 conversations (" in text
    assert "\r[##############################] 4/4 conversations (" in text
    assert "4 conversations: 4 passed" in out and "conversations (" not in out


def test_bad_input_is_one_clear_message_and_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """(In this process: each case is an argument check, before anything runs.)"""
    no_script = cooperative()
    del no_script["model"]
    path = write_eval(tmp_path, [no_script])
    cases: list[tuple[tuple[str, ...], str]] = [
        ((), "name eval files or folders: phaseflow eval workflows/"),
        (("nowhere.eval.yaml",), "no such file or folder: nowhere.eval.yaml"),
        ((str(ROOT / "examples"),), f"no eval files (*.eval.yaml) in {ROOT / 'examples'}"),
        ((str(path), "--trials", "0"), "--trials: expected a positive whole number up to "
                                       "10000, got '0'"),
        ((str(path), "--max-cost", "1"), "--max-cost needs --prices (what a token costs)"),
        ((str(path), "--min-pass-rate", "2"), "--min-pass-rate: expected a share from 0 to 1, "
                                              "got '2'"),
        ((str(path),), "--provider scripted replays each scenario's 'model' replies; these "
                       "have none (give --provider openai --model M):\n  "
                       f"{path}: a cooperative customer gets a small refund"),
        ((str(path), "--provider", "openai"), "--provider openai needs --model (the model the "
                                              "server should run)"),
    ]
    for args, message in cases:
        code = main(["eval", *args, "--store", "memory"])
        captured = capsys.readouterr()
        assert (code, captured.out, captured.err) == (
            2, "", f"phaseflow eval: error: {message}\n"), args
    broken = tmp_path / "broken.eval.yaml"
    broken.write_text("phaseflow-eval: 2\nworkflow: x.yaml\nscenarios:\n  - user: {}\n")
    assert main(["eval", str(broken), "--store", "memory"]) == 2
    assert capsys.readouterr().err == (
        "phaseflow eval: error: the eval files have mistakes:\n"
        f"{broken}:1:17: an eval file starts with 'phaseflow-eval: 1'\n"
        f"{broken}:4:5: scenario 'scenario 1' has no criteria: give expect, never or judge\n"
        f"{broken}:4:11: scenario 'scenario 1' user needs a goal (for a simulated user) or a "
        "script (for a scripted one)\n")


@pytest.mark.parametrize("layout", [(), ("--context-position", "system", "--offer-tools",
                                         "workflow")])
def test_the_request_layout_is_chosen_for_the_agent_s_model(
        tmp_path: Path, fake_openai: Any, layout: tuple[str, ...]) -> None:
    from tests.support.fake_openai_server import text_reply

    scenario = cooperative()
    del scenario["model"]  # the agent's model is the server's
    path = write_eval(tmp_path, [scenario])
    fake_openai.push(*(text_reply("Hello, how can I help?") for _ in range(4)))
    report = tmp_path / "r.json"
    # the model only greets: the scenario fails its criteria (exit 1)
    assert main(["eval", str(path), "--provider", "openai", "--model", "m", "--base-url",
                 fake_openai.base_url, "--store", "memory", "--json", str(report),
                 "--quiet", *layout]) == 1
    first = fake_openai.requests[0].body
    messages, tools = first["messages"], {t["function"]["name"] for t in first["tools"]}
    written = json.loads(report.read_text())
    if layout:
        # the block in the one system message; every tool of the workflow offered, the
        # phase's named at the end of the block
        assert messages[0]["role"] == "system" and "[Navigation]" in messages[0]["content"]
        assert [m["role"] for m in messages[1:]] == ["user"]
        assert "payments__issue_refund" in tools and "crm__lookup_customer" in tools
        assert "Tools: only these may be called" in messages[0]["content"]
        assert (written["context_position"], written["offer_tools"]) == ("system", "workflow")
    else:
        # the default: the block after the history, the phase's tools only
        assert messages[-1]["role"] == "system" and "[Navigation]" in messages[-1]["content"]
        assert "[Navigation]" not in messages[0]["content"]
        assert "payments__issue_refund" not in tools and "crm__lookup_customer" in tools
        assert (written["context_position"], written["offer_tools"]) == ("end", "phase")
