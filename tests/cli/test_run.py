"""``phaseflow run`` without a terminal, as a user or a script runs it: a real process,
a scripted model, tools from a module in the current folder."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.phaseflow_cli import PHASEFLOW, cli_env
from tests.support.run_cli import (
    DESK,
    DESK_ARGS,
    PAY_SCRIPT,
    besides_the_store,
    events,
    project,
    run,
)

REPO = Path(__file__).resolve().parents[2]


# --- the happy paths ----------------------------------------------------------------------

def test_json_prints_every_event_of_each_message_in_order(tmp_path: Path) -> None:
    cwd = project(tmp_path)
    proc = run(cwd, *DESK_ARGS, "--approve", "all", "--json", "--session", "s-1",
               "--message", "Please pay 5")
    assert proc.returncode == 0, proc.stderr
    seen = events(proc.stdout)
    types = [e["type"] for e in seen if e["type"] != "text_delta"]
    assert types == ["turn_started", "tool_call", "approval_requested", "approval_resolved",
                     "tool_result", "state_changed", "phase_changed", "turn_finished"]
    assert {e["session_id"] for e in seen} == {"s-1"}
    assert seen[0]["message"] == "Please pay 5"
    by_type = {e["type"]: e for e in seen}
    assert by_type["tool_call"]["arguments"] == {"amount": 5}
    assert by_type["approval_resolved"]["decision"] == "approve"
    assert by_type["tool_result"]["status"] == "ok"
    assert (by_type["phase_changed"]["from_phase"], by_type["phase_changed"]["to_phase"]) == (
        "work", "finished")
    streamed = "".join(e["text"] for e in seen if e["type"] == "text_delta")
    assert streamed == by_type["turn_finished"]["reply"] == "Paid, thank you."
    assert by_type["turn_finished"]["status"] == "completed"
    persisted = [e["seq"] for e in seen if e["type"] != "text_delta"]
    assert persisted == sorted(persisted) and 0 not in persisted


def test_each_message_is_one_turn_and_the_transcript_is_plain_without_a_terminal(
        tmp_path: Path) -> None:
    script = "- Hello, what can I do?\n- Still here.\n"
    cwd = project(tmp_path, script)
    proc = run(cwd, *DESK_ARGS, "-m", "hi", "--message", "anyone there?")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "you: hi", "agent: Hello, what can I do?",
        "you: anyone there?", "agent: Still here.",
    ]
    assert "\x1b[" not in proc.stdout + proc.stderr


def test_text_the_terminal_cannot_encode_is_replaced_not_a_crash(tmp_path: Path) -> None:
    cwd = project(tmp_path, "- \"Caf\\xe9 \\u2615 ready\"\n")
    proc = run(cwd, *DESK_ARGS, "-m", "hi", env=cli_env(PYTHONIOENCODING="ascii"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "agent: Caf? ? ready"


def test_lines_of_standard_input_are_the_messages_when_there_is_no_message_option(
        tmp_path: Path) -> None:
    cwd = project(tmp_path, "- One.\n- Two.\n")
    proc = run(cwd, *DESK_ARGS, "--json", stdin="first\n\nsecond\n")
    assert proc.returncode == 0, proc.stderr
    started = [e["message"] for e in events(proc.stdout) if e["type"] == "turn_started"]
    assert started == ["first", "second"]


def test_no_messages_at_all_is_a_usage_error(tmp_path: Path) -> None:
    """Without a terminal, without --message and with empty standard input nothing would
    happen: a job set up that way fails instead of passing having done nothing."""
    cwd = project(tmp_path, "- One.\n")
    proc = run(cwd, *DESK_ARGS)
    assert proc.returncode == 2
    assert proc.stderr == ("phaseflow run: error: no messages: standard input is not a "
                           "terminal and gave no lines (send them with --message TEXT)\n")


def test_an_approval_is_refused_when_nobody_can_be_asked(tmp_path: Path) -> None:
    script = PAY_SCRIPT.replace("Paid, thank you.", "I could not pay.")
    cwd = project(tmp_path, script)
    proc = run(cwd, *DESK_ARGS, "-m", "Please pay 5")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "  approval needed: pay {\"amount\": 5}" in out
    assert "[pay: rejected: not interactive (--approve all approves every call)]" in out
    assert "  < pay: rejected" in out
    assert "paid" not in out.split("< pay: rejected")[1].split("agent:")[0]  # no state write
    assert "[phase" not in out
    assert out.rstrip().endswith("agent: I could not pay.")


def test_approve_none_rejects_without_asking(tmp_path: Path) -> None:
    cwd = project(tmp_path, PAY_SCRIPT)
    proc = run(cwd, *DESK_ARGS, "--approve", "none", "--json", "-m", "Please pay 5")
    assert proc.returncode == 0, proc.stderr
    seen = events(proc.stdout)
    resolved = [e for e in seen if e["type"] == "approval_resolved"]
    assert [e["decision"] for e in resolved] == ["reject"]
    assert [e["status"] for e in seen if e["type"] == "tool_result"] == ["rejected"]


def test_a_failed_turn_exits_1_after_the_other_messages_ran(tmp_path: Path) -> None:
    cwd = project(tmp_path, "- {error: model overloaded}\n- Recovered.\n")
    proc = run(cwd, *DESK_ARGS, "-m", "one", "-m", "two")
    assert proc.returncode == 1
    assert proc.stdout.splitlines() == [
        "you: one", "  error provider_error: model overloaded", "[turn failed]",
        "you: two", "agent: Recovered."]
    assert besides_the_store(proc.stderr) == ""


def test_messages_after_the_session_finished_are_not_sent(tmp_path: Path) -> None:
    cwd = project(tmp_path)
    proc = run(cwd, *DESK_ARGS, "--approve", "all", "-m", "Please pay 5", "-m", "thanks")
    assert proc.returncode == 1
    assert "[phase work -> finished] (guard)" in proc.stdout
    assert proc.stderr.strip().endswith(
        "has finished (phase finished is terminal); not sent: 'thanks'")


def test_tools_without_an_implementation_are_named_in_a_warning(tmp_path: Path) -> None:
    cwd = project(tmp_path, "- Hello.\n")
    proc = run(cwd, "desk.yaml", "--provider", "scripted:script.yaml", "-m", "hi")
    assert proc.returncode == 0, proc.stderr
    assert besides_the_store(proc.stderr) == (
        "phaseflow run: warning: no implementation for 3 tool(s), so they are never "
        "offered: pay, slow.wait, slow.block (give them with --tools)\n")


def test_a_mapping_from_tool_name_to_callable_is_accepted(tmp_path: Path) -> None:
    cwd = project(tmp_path)
    (cwd / "mapped.py").write_text(
        "def pay(amount: float) -> dict:\n    return {'paid': True}\n\n"
        "TOOLS = {'pay': pay}\nHOOKS = {}\n", encoding="utf-8")
    proc = run(cwd, "desk.yaml", "--provider", "scripted:script.yaml", "--tools",
               "mapped:TOOLS", "--hooks", "mapped:HOOKS", "--approve", "all", "-m", "pay")
    assert proc.returncode == 0, proc.stderr
    assert "[phase work -> finished] (guard)" in proc.stdout
    assert "slow.wait, slow.block" in proc.stderr  # the two still missing


# --- the bundled demo -----------------------------------------------------------------------

def _quick_start_run_command() -> list[str]:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    first = readme.split("```bash\n", 1)[1].split("\n", 1)[0]
    runs = [part for part in first.split(" && ") if part.startswith("phaseflow run ")]
    assert len(runs) == 1, first
    return shlex.split(runs[0])


def test_the_quick_start_demo_walks_the_refund_desk_to_the_end() -> None:
    """Run by the installed ``phaseflow`` script, as the README runs it: its ``sys.path``
    does not start with the current folder, so ``--tools`` must put it there."""
    args = _quick_start_run_command()
    script = Path(sys.executable).parent / "phaseflow"
    if not script.exists():
        pytest.skip("the phaseflow console script is not installed next to this Python")
    proc = subprocess.run([str(script), *args[1:]], cwd=REPO, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=120, check=False,
                          env=cli_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # every tool and hook has a stand-in (the store file, phaseflow-sessions.db in the
    # repository, is named the first time only)
    assert besides_the_store(proc.stderr) == ""
    out = proc.stdout
    phases = [line for line in out.splitlines() if line.startswith("[phase ")]
    assert phases == ["[phase greet -> locate_order] (guard)",
                      "[phase locate_order -> refund] (guard)",
                      "[phase refund -> done] (guard)"]
    assert '  > record {"refund_reason": "the kettle arrived broken"}' in out
    assert '  state: policy = {"name": "standard"' in out  # the preparation's hook ran
    assert "  approval needed: payments.issue_refund" in out
    assert "  approved: payments.issue_refund (approve)" in out
    assert '  state: refund_id = "R-77"' in out
    assert out.rstrip().endswith("finished in phase done]")
    assert "[turn" not in out and "error" not in out


def test_the_demo_as_json_records_the_reason_and_the_refund() -> None:
    args = _quick_start_run_command()
    proc = run(REPO, *args[2:], "--json")
    assert proc.returncode == 0, proc.stderr
    seen = events(proc.stdout)
    state: dict[str, Any] = {}
    for e in seen:
        if e["type"] == "state_changed":
            state.update(e["new"])
    assert state["refund_reason"] == "the kettle arrived broken"
    assert state["refund_id"] == "R-77"
    assert [e["status"] for e in seen if e["type"] == "turn_finished"] == ["completed"] * 4


def test_the_demo_in_docs_run_md_prints_what_the_page_shows() -> None:
    doc = (REPO / "docs" / "run.md").read_text(encoding="utf-8")
    command = doc.split("```bash\n", 1)[1].split("\n", 1)[0]
    shown = doc.split("```console\n", 1)[1].split("```", 1)[0]
    args = shlex.split(command)
    assert args[:2] == ["phaseflow", "run"]
    proc = run(REPO, *args[2:])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == shown


# --- misuse: one clear line, exit 2 -------------------------------------------------------

BAD_SCRIPT = "- calls: [{pay: 5}]\n"


@pytest.mark.parametrize(("args", "message"), [
    (("nope.yaml", "--provider", "scripted:script.yaml", "-m", "x"),
     "phaseflow run: error: no such file: nope.yaml"),
    (("desk.yaml", "--provider", "scripted:missing.yaml", "-m", "x"),
     "phaseflow run: error: --provider scripted: missing.yaml: cannot read the script"),
    (("desk.yaml", "--provider", "scripted:bad.yaml", "-m", "x"),
     "phaseflow run: error: --provider scripted: bad.yaml:1: script entry 1.calls[0].pay: "
     "the arguments of 'pay' must be a mapping, not int"),
    (("desk.yaml", "--provider", "scripted", "-m", "x"),
     "phaseflow run: error: --provider scripted: expected 'anthropic', 'openai', "
     "'responses', 'gemini' or 'scripted:FILE'"),
    (("desk.yaml", "--store", "ftp://host/db", "-m", "x"),
     "phaseflow run: error: --store ftp://host/db: unknown kind of store 'ftp'"),
    (("desk.yaml", "--provider", "scripted:script.yaml", "--tools", "desk_tools", "-m", "x"),
     "phaseflow run: error: --tools takes MODULE:ATTR, got 'desk_tools'"),
    (("desk.yaml", "--provider", "scripted:script.yaml", "--tools", "nowhere:TOOLS"),
     "phaseflow run: error: --tools nowhere:TOOLS: cannot import nowhere: "
     "ModuleNotFoundError: No module named 'nowhere'"),
    (("desk.yaml", "--provider", "scripted:script.yaml", "--tools", "desk_tools:NOPE"),
     "phaseflow run: error: --tools desk_tools:NOPE: desk_tools has no attribute 'NOPE'"),
    (("desk.yaml", "--provider", "scripted:script.yaml", "--tools", "desk_tools:NOT_TOOLS"),
     "phaseflow run: error: --tools desk_tools:NOT_TOOLS: expected a list of tools or a "
     "mapping from tool name to callable, got int"),
    (("desk.yaml", "--provider", "scripted:script.yaml", "--tools", "broken:TOOLS"),
     "phaseflow run: error: --tools broken:TOOLS: cannot import broken: "
     "RuntimeError: no database"),
    (("desk.yaml", "--provider", "scripted:script.yaml", "--hooks", "desk_tools:TOOLS"),
     "phaseflow run: error: --hooks desk_tools:TOOLS: expected a mapping from name to "
     "callable, got list"),
    (("desk.yaml", "--provider", "scripted:script.yaml", "--tools", "extra:TOOLS"),
     "phaseflow run: error: tools not in the workflow's catalogue: refund"),
    (("desk.yaml", "--model", "m", "-m", "x"),
     "phaseflow run: error: --provider openai needs an API key: set OPENAI_API_KEY"),
    (("desk.yaml", "-m", "x"),
     "phaseflow run: error: --provider openai needs --model"),
    (("desk.yaml", "--provider", "scripted:script.yaml", "--base-url", "http://x/v1"),
     "phaseflow run: error: --base-url is for --provider openai"),
])
def test_bad_input_is_one_clear_line_and_exit_2(tmp_path: Path, args: tuple[str, ...],
                                                message: str) -> None:
    cwd = project(tmp_path)
    (cwd / "bad.yaml").write_text(BAD_SCRIPT, encoding="utf-8")
    (cwd / "broken.py").write_text("raise RuntimeError('no database')\n", encoding="utf-8")
    (cwd / "extra.py").write_text("def refund() -> None: ...\nTOOLS = [refund]\n",
                                  encoding="utf-8")
    proc = run(cwd, *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith(message), proc.stderr
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    assert proc.stdout == ""


def test_an_invalid_workflow_is_reported_with_its_diagnostics_and_exit_2(
        tmp_path: Path) -> None:
    cwd = project(tmp_path)
    (cwd / "desk.yaml").write_text(DESK.replace("to: finished", "to: finishd"),
                                   encoding="utf-8")
    proc = run(cwd, *DESK_ARGS, "-m", "x")
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert "error PF201" in lines[0] and "did you mean 'finished'?" in lines[0]
    assert lines[-1] == ("phaseflow run: desk.yaml has errors; fix them first "
                         "(phaseflow validate desk.yaml)")
    assert "Traceback" not in proc.stderr


def test_a_missing_openai_package_says_how_to_install_it(tmp_path: Path) -> None:
    cwd = project(tmp_path)
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "openai.py").write_text("raise ImportError('No module named openai')\n",
                                      encoding="utf-8")
    env = cli_env(PYTHONPATH=os.pathsep.join([str(shadow), str(REPO)]),
                  OPENAI_API_KEY="sk-test")
    proc = run(cwd, "desk.yaml", "--model", "m", "-m", "x", env=env)
    assert proc.returncode == 2
    assert proc.stderr == ("phaseflow run: error: --provider openai needs the openai "
                           "package: pip install '.[openai]' in phaseflow's folder (the "
                           "phaseflow-agent distribution)\n")


def test_run_is_listed_and_its_help_names_every_option() -> None:
    proc = subprocess.run([*PHASEFLOW, "run", "--help"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0
    for option in ("--tools", "--hooks", "--model", "--base-url", "--session", "--store",
                   "--message", "--json", "--provider", "--approve", "--system",
                   "--max-tokens", "--lease"):
        assert option in proc.stdout
    listing = subprocess.run([*PHASEFLOW, "--help"],
                             capture_output=True, text=True, timeout=60, check=False)
    assert "    run " in listing.stdout


def test_the_tools_module_is_found_from_the_current_folder_only(tmp_path: Path) -> None:
    """``--tools`` imports with the current folder on the path, as ``python -m`` does:
    run from elsewhere, the same module is not found."""
    cwd = project(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = run(elsewhere, "../desk.yaml", "--provider", "scripted:../script.yaml",
               "--tools", "desk_tools:TOOLS", "-m", "x")
    assert proc.returncode == 2
    assert "cannot import desk_tools" in proc.stderr
    assert (cwd / "desk_tools.py").exists()
