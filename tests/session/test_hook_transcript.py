"""Hooks see the conversation: a ``call`` effect (``on_enter``/``on_exit``) or a
preparation receives the last ``transcript: N`` messages of the session's history as
``ctx.transcript`` (default 6; 0: none), through the public API."""

from __future__ import annotations

from typing import Any

import pytest

from phaseflow import Agent, ScriptedProvider, load_workflow_text
from phaseflow.errors import WorkflowError
from phaseflow.spec.loader import check_text

WORKFLOW = """\
phaseflow: 1
name: desk
initial: talk
state:
  summary: {type: string}
  facts: {type: string}
phases:
  talk:
    goal: Talk with the customer.
    transitions:
      - to: wrap
        trigger: model
    on_exit:
      - call: summarise
        transcript: 3
      - call: log_default
      - call: log_nothing
        transcript: 0
  wrap:
    goal: Wrap up.
    requires: [facts]
    prepare:
      - name: gather
        produces: [facts]
        call: gather
        transcript: 2
"""


def _agent(seen: dict[str, Any]) -> Agent:
    def summarise(ctx: Any) -> dict[str, Any]:
        seen["summarise"] = ctx.transcript
        said = [m["content"] for m in ctx.transcript if m["role"] == "user"]
        return {"summary": " / ".join(said)}

    def log_default(ctx: Any) -> None:
        seen["log_default"] = ctx.transcript

    def log_nothing(ctx: Any) -> None:
        seen["log_nothing"] = ctx.transcript

    def gather(ctx: Any) -> dict[str, Any]:
        seen["gather"] = ctx.transcript
        return {"facts": ctx.transcript[-1]["content"]}

    script = ["Hello, what happened?", "I see.",
              {"calls": [{"go_to_phase": {"phase": "wrap"}}]}, "Wrapped up."]
    return Agent(load_workflow_text(WORKFLOW), ScriptedProvider(script), hooks={
        "summarise": summarise, "log_default": log_default, "log_nothing": log_nothing,
        "gather": gather})


def test_on_exit_and_preparation_receive_the_last_messages_of_the_history() -> None:
    seen: dict[str, Any] = {}
    session = _agent(seen).session_sync("s")
    session.reply_sync("My parcel is late")
    session.reply_sync("It was order O-7")
    assert "summarise" not in seen
    assert session.reply_sync("Please wrap up") == "Wrapped up."
    assert session.phase == "wrap"
    # history so far: user, assistant, user, assistant, user, assistant(go_to_phase), tool
    summarised = seen["summarise"]
    assert [m["role"] for m in summarised] == ["user", "assistant", "tool"]
    assert summarised[0]["content"] == "Please wrap up"
    assert summarised[1]["tool_calls"][0]["name"] == "go_to_phase"
    assert session.state["summary"] == "Please wrap up"
    assert [(m["role"], m["content"]) for m in seen["log_default"]] == [
        ("assistant", "Hello, what happened?"), ("user", "It was order O-7"),
        ("assistant", "I see."), ("user", "Please wrap up"), ("assistant", ""),
        ("tool", "Moving to wrap after this step.")]  # the default: the last 6
    assert seen["log_nothing"] == ()
    # the preparation ran when the model asked to move (its target lacked 'facts'),
    # before that call had its result
    assert [m["role"] for m in seen["gather"]] == ["user", "assistant"]
    assert seen["gather"][1]["tool_calls"][0]["arguments"] == {"phase": "wrap"}


def test_a_workflow_without_call_effects_builds_no_transcript() -> None:
    from phaseflow.session.runner_config import transcript_window

    plain = load_workflow_text("phaseflow: 1\nname: p\ninitial: a\nphases:\n  a: {goal: A.}\n")
    assert transcript_window(plain) == 0
    assert transcript_window(load_workflow_text(WORKFLOW)) == 6


@pytest.mark.parametrize(("value", "message"), [
    ("-1", "transcript"), ("'six'", "transcript"), ("1001", "transcript")])
def test_a_bad_transcript_window_is_refused_by_validate(value: str, message: str) -> None:
    text = WORKFLOW.replace("transcript: 3", f"transcript: {value}")
    errors = [d for d in check_text(text).diagnostics if d.severity == "error"]
    assert errors and message in errors[0].message
    with pytest.raises(WorkflowError):
        load_workflow_text(text)


def test_transcript_needs_a_call() -> None:
    text = WORKFLOW.replace("      - call: log_default\n",
                            "      - set: {summary: x}\n        transcript: 2\n")
    errors = [d for d in check_text(text).diagnostics if d.severity == "error"]
    assert errors and "transcript" in errors[0].message


def test_a_conversation_test_file_runs_hooks_with_a_transcript_window() -> None:
    from pathlib import Path

    from tests.support.phaseflow_cli import cli_env, run_phaseflow

    folder = Path(__file__).resolve().parents[1] / "fixtures" / "transcript"
    checked = run_phaseflow("validate", "handover.yaml", cwd=folder, env=cli_env(),
                            timeout=120)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    ran = run_phaseflow("test", "handover.test.yaml", cwd=folder, env=cli_env(), timeout=120)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "1 passed, 0 failed" in ran.stdout


def test_the_test_file_s_hooks_receive_what_was_said() -> None:
    """The same workflow through the API: what the conversation test file's mocks stand
    in for is called with the last messages its ``transcript`` asks for."""
    from pathlib import Path

    from phaseflow import load_workflow

    seen: dict[str, Any] = {}

    def note(ctx: Any) -> dict[str, Any]:
        seen["note"] = ctx.transcript
        return {"handover_note": " | ".join(str(m["content"]) for m in ctx.transcript
                                            if m["role"] == "user")}

    def ticket(ctx: Any) -> dict[str, Any]:
        seen["ticket"] = ctx.transcript
        return {"ticket": "T-1"}

    folder = Path(__file__).resolve().parents[1] / "fixtures" / "transcript"
    script = ["Sorry to hear that. Let me look.",
              {"calls": [{"go_to_phase": {"phase": "handed_over"}}]}, "A person takes over."]
    agent = Agent(load_workflow(folder / "handover.yaml"), ScriptedProvider(script),
                  hooks={"write_handover_note": note, "open_ticket": ticket})
    session = agent.session_sync("s")
    session.reply_sync("My parcel O-7 is late")
    session.reply_sync("I want to talk to a person")
    assert session.phase == "handed_over"
    assert [m["role"] for m in seen["note"]] == ["assistant", "user", "assistant", "tool"]
    assert session.state["handover_note"] == "I want to talk to a person"
    assert [m["role"] for m in seen["ticket"]] == ["user", "assistant"]
