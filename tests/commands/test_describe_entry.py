"""`phaseflow describe` shows a phase as the model sees it: after its entry ran
(clear_on_enter, then the on_enter set/unset effects), with on_enter calls named, not
run. The preview is checked against the machine itself entering the phase."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from phaseflow.machine import PhaseMachine, State
from phaseflow.machine.preview import apply_entry
from phaseflow.spec.loader import compile_text
from tests.support.commands import run_cli

WORKFLOW = """\
phaseflow: 1
name: entry
initial: start
state:
  status: {type: string, default: new}
  note: {type: string}
  draft: {type: string}
phases:
  start:
    goal: Start.
    transitions: [{to: review}]
  review:
    goal: Review.
    instructions: >-
      Status {{ state.status }}; note {{ state.note or 'none' }};
      draft {{ state.draft or 'none' }}.
    clear_on_enter: [draft]
    on_enter:
      - set: {status: reviewing, note: entered}
      - unset: [note]
      - call: notify_customer
        with: {channel: email}
      - set: {note: again}
    transitions: [{to: done}]
  done:
    goal: Done.
    terminal: true
"""


def _write(tmp_path: Path) -> Path:
    path = tmp_path / "entry.yaml"
    path.write_text(WORKFLOW)
    return path


def test_describe_applies_the_entry_effects_and_names_the_calls(tmp_path: Path) -> None:
    proc = run_cli("describe", str(_write(tmp_path)), "--phase", "review",
                   "--state", json.dumps({"draft": "d1", "status": "new"}))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("[Instructions]\nStatus reviewing; note again; draft none.\n")
    assert "phaseflow describe: on_enter calls (not run): notify_customer\n" in proc.stderr
    assert "phaseflow describe: clear_on_enter applied: draft\n" in proc.stderr
    assert "on_enter applied: set status, note; unset note; set note" in proc.stderr


def test_no_on_enter_renders_the_state_as_given(tmp_path: Path) -> None:
    proc = run_cli("describe", str(_write(tmp_path)), "--phase", "review",
                   "--state", '{"draft": "d1"}', "--no-on-enter")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("[Instructions]\nStatus new; note none; draft d1.\n")
    assert proc.stderr == ""


def test_a_phase_without_entry_effects_prints_no_notes(tmp_path: Path) -> None:
    proc = run_cli("describe", str(_write(tmp_path)))
    assert proc.returncode == 0
    assert proc.stderr == ""


KEYS = ("a", "b", "c")
VALUES = st.one_of(st.integers(-5, 5), st.text("xyz", max_size=3), st.none(),
                   st.lists(st.integers(0, 3), max_size=2))
EFFECTS = st.lists(
    st.one_of(
        st.dictionaries(st.sampled_from(KEYS), VALUES, min_size=1).map(lambda d: {"set": d}),
        st.lists(st.sampled_from(KEYS), min_size=1, unique=True).map(lambda k: {"unset": k}),
        st.just({"call": "hook"}),
    ),
    max_size=5,
)


def _workflow_text(effects: list[dict[str, Any]], clear: list[str]) -> str:
    phase: dict[str, Any] = {
        "goal": "Target.", "on_enter": effects, "transitions": [{"to": "start"}]
    }
    if clear:
        phase["clear_on_enter"] = clear
    doc = {
        "phaseflow": 1,
        "name": "prop",
        "initial": "start",
        "phases": {"start": {"goal": "Start.", "transitions": [{"to": "target"}]},
                   "target": phase},
    }
    return json.dumps(doc)  # JSON is YAML


@settings(max_examples=60, deadline=None)
@given(
    effects=EFFECTS,
    clear=st.lists(st.sampled_from(KEYS), unique=True),
    start=st.dictionaries(st.sampled_from(KEYS), VALUES),
)
def test_the_preview_is_the_state_the_machine_enters_with(
    effects: list[dict[str, Any]], clear: list[str], start: dict[str, Any]
) -> None:
    registry = {"hook": lambda context, **kwargs: None}
    workflow = compile_text(_workflow_text(effects, clear), registry)
    machine = PhaseMachine("start", workflow=workflow, registry=registry, clock=lambda: 0.0)
    state = State(dict(start))
    machine.goto_sync("target", state, turn=1)
    preview = dict(start)
    notes = apply_entry(workflow.phases["target"], preview)
    assert preview == dict(state)
    calls = sum(1 for e in effects if "call" in e)
    assert any(n.startswith("on_enter calls (not run): hook") for n in notes) == bool(calls)


def test_the_initial_phase_is_shown_as_a_conversation_starts(tmp_path: Path) -> None:
    """A session starts in the initial phase without entering it: no entry effects."""
    text = WORKFLOW.replace("initial: start", "initial: review")
    path = tmp_path / "entry.yaml"
    path.write_text(text)
    proc = run_cli("describe", str(path), "--state", '{"draft": "d1"}')
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("[Instructions]\nStatus new; note none; draft d1.\n")
    assert "the initial phase is not entered, so its on_enter and clear_on_enter do not run" in (
        proc.stderr
    )
