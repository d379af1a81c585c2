"""``phaseflow eval`` run in this process with scripted users and models: each kind of
criterion passing and failing, approvals answered as the scenario says, a model user
and a judge (scripted providers), and what the JSON report says of each."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from phaseflow.cli.main import main
from tests.support.eval_files import bundled, cooperative, write_eval


def _eval(tmp_path: Path, capsys: pytest.CaptureFixture[str], scenarios: list[dict[str, Any]],
          *options: str, **top: Any) -> tuple[int, dict[str, Any], str]:
    path = write_eval(tmp_path, scenarios, **top)
    report = tmp_path / "report.json"
    code = main(["eval", str(path), "--store", "memory", "--json", str(report), "--run-id",
                 "t", *options])
    out = capsys.readouterr().out
    return code, json.loads(report.read_text(encoding="utf-8")), out


def _failures(report: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(s["name"], f["kind"], f["criterion"]) for w in report["workflows"]
            for s in w["scenarios"] for f in s["failures"]]


def test_the_bundled_scenarios_pass_and_report_per_scenario(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, report, out = _eval(tmp_path, capsys, bundled()["scenarios"], "--trials", "2")
    assert code == 0, out
    [workflow] = report["workflows"]
    assert [(s["name"], s["trials"], s["passed"], s["pass_hat_k"])
            for s in workflow["scenarios"]] == [
        (s["name"], 2, 2, [1.0, 1.0]) for s in bundled()["scenarios"]]
    assert report["totals"]["conversations"] == 8
    first = workflow["scenarios"][0]["conversations"][0]
    assert (first["session_id"], first["ended"], first["phase"], first["turns"]) == (
        "eval-t-a-cooperative-customer-gets-a-small-refund-t1", "finished", "done", 4)
    assert first["tokens"] > 0
    assert "4 conversations" not in out and "8 conversations: 8 passed, 0 failed" in out


def test_expect_and_never_fail_with_the_session_to_open(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = cooperative(expect=["phase == 'declined'", "state.refund_id == 'R-77'"],
                           never=["entered('refund') and state.amount > 100"])
    code, report, out = _eval(tmp_path, capsys, [scenario])
    assert code == 1
    assert _failures(report) == [
        (scenario["name"], "never", "entered('refund') and state.amount > 100"),
        (scenario["name"], "expect", "phase == 'declined'")]
    session = "eval-t-a-cooperative-customer-gets-a-small-refund-t1"
    assert f"expect: phase == 'declined' -- false at the end (phase done)  " \
           f"[phaseflow sessions show {session}]" in out
    assert session in report["transcripts"]


def test_approvals_are_answered_as_the_scenario_says(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    refused = cooperative(approve="never", expect=[
        "rejected('payments.issue_refund')", "not called('payments.issue_refund')",
        "phase == 'refund'", "len(data.refunds) == 0"])
    per_tool = cooperative(name="per tool", approve={"payments.issue_refund": "always"},
                           expect=["approved('payments.issue_refund')", "phase == 'done'"])
    code, report, out = _eval(tmp_path, capsys, [refused, per_tool])
    assert (code, _failures(report)) == (0, []), out


def test_a_data_set_stand_in_answers_by_its_cases(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = bundled()["scenarios"][1]  # a wrong email first: found on the second try
    scenario["expect"] = ["len(data.lookups) == 2", "data.lookups[1].email == 'ada@example.com'",
                          "state.customer_id == 'C-1042'", "errors == 0"]
    code, report, out = _eval(tmp_path, capsys, [scenario])
    assert (code, _failures(report)) == (0, []), out


def test_a_model_that_breaks_the_workflow_fails_and_the_funnel_shows_where(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the model asks for the refund phase itself and tries a tool of a later phase
    model = [{"calls": [{"crm.lookup_customer": {"email": "ada@example.com"}}]},
             "Your first pet?",
             {"calls": [{"go_to_phase": {"phase": "refund"}},
                        {"payments.issue_refund": {"order_id": "O-9", "amount": 120}}]},
             "I could not do that."]
    scenario = cooperative(model=model, user={"goal": "a refund", "script": ["hi", "Rex"]})
    code, report, out = _eval(tmp_path, capsys, [scenario])
    assert code == 1
    funnel = report["workflows"][0]["funnel"]
    assert funnel["not_offered"] == [{"phase": "greet", "tool": "payments.issue_refund",
                                      "times": 1}]
    assert [(b["phase"], b["requested"], b["times"]) for b in funnel["blocked"]] == [
        ("greet", "refund", 1)]
    greet = funnel["phases"][0]
    assert (greet["phase"], greet["entered"], greet["ended"], greet["stalled"]) == (
        "greet", 1, 1, 1)
    assert report["workflows"][0]["scenarios"][0]["conversations"][0]["ended"] == "user_done"
    assert "blocked 1x in greet: move to refund" in out


def test_a_model_user_and_a_judge(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a scripted provider answers the user's request whose history holds N-1 of its own
    # messages with reply N: the first (the opening) is `opens`, so reply 1 is unused
    user = tmp_path / "user.yaml"
    user.write_text(json.dumps(["(unused)", "Rex", "Order O-9, it arrived broken",
                                "Yes, please", "[done]"]), encoding="utf-8")
    judge = tmp_path / "judge.yaml"
    judge.write_text(json.dumps(["FAIL the agent never apologised"]), encoding="utf-8")
    scenario = cooperative(judge={"rubric": "The agent apologises for the broken kettle."})
    del scenario["user"]["script"]
    code, report, out = _eval(tmp_path, capsys, [scenario], "--user-provider",
                              f"scripted:{user}", "--judge-provider", f"scripted:{judge}")
    assert code == 1
    [s] = report["workflows"][0]["scenarios"]
    assert s["judged"] is True
    assert s["failures"] == [{
        "trial": 1, "session_id": "eval-t-a-cooperative-customer-gets-a-small-refund-t1",
        "kind": "judged", "criterion": "The agent apologises for the broken kettle.",
        "detail": "the agent never apologised", "judged": True}]
    assert s["conversations"][0]["phase"] == "done"
    assert "[judged]" in out and "judged (judged)" not in out
    judge.write_text(json.dumps(["PASS it said sorry"]), encoding="utf-8")
    code, report, out = _eval(tmp_path, capsys, [scenario], "--user-provider",
                              f"scripted:{user}", "--judge-provider", f"scripted:{judge}")
    assert code == 0, out


def test_a_user_who_runs_out_of_turns(tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    scenario = cooperative(expect=["turns == 2", "phase == 'locate_order'"])
    scenario["user"]["max_turns"] = 2
    code, report, out = _eval(tmp_path, capsys, [scenario])
    assert (code, _failures(report)) == (0, []), out
    assert report["workflows"][0]["scenarios"][0]["conversations"][0]["ended"] == "max_turns"


def test_a_model_whose_script_runs_out_fails_the_conversation(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = cooperative(model=cooperative()["model"][:3])
    code, report, _ = _eval(tmp_path, capsys, [scenario], "--min-pass-rate", "0")
    assert code == 0  # every scenario reached the 0% asked for
    assert [kind for _, kind, _ in _failures(report)] == ["ended", "expect", "expect",
                                                          "expect"]
    [conversation] = report["workflows"][0]["scenarios"][0]["conversations"]
    assert (conversation["ended"], conversation["phase"]) == ("failed", "locate_order")


def test_a_scenario_s_stand_in_replaces_the_file_s_whatever_its_form(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the file answers payments.issue_refund by cases; this scenario by `returns`
    scenario = cooperative(tools={"payments.issue_refund": {"returns": {"refund_id": "R-5"}}},
                           expect=["state.refund_id == 'R-5'", "len(data.refunds) == 0"])
    code, report, out = _eval(tmp_path, capsys, [scenario])
    assert (code, _failures(report)) == (0, []), out
