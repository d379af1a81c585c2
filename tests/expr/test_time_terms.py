"""The moments a guard on time can first become true (phaseflow.expr.time_terms), read
from its source: what the session fires as timers, and what PF209 warns about."""

from __future__ import annotations

import pytest

from phaseflow import load_workflow_text
from phaseflow.expr.time_terms import STRICT, time_moments


@pytest.mark.parametrize(("source", "moments"), [
    ("seconds_in_phase >= 600", (600.0,)),
    ("600 <= seconds_in_phase", (600.0,)),
    ("seconds_in_phase > 600", (600.0 + STRICT,)),
    ("seconds_in_phase >= 10 * 60", (600.0,)),
    ("seconds_in_phase >= 300 and state.acknowledged != true", (300.0,)),
    ("seconds_in_phase >= 3600 or turns_in_phase >= 40", (3600.0,)),
    ("seconds_in_phase >= 300 or (seconds_in_phase >= 60 and state.urgent)", (60.0, 300.0)),
    ("seconds_in_phase >= 300 and seconds_in_phase >= 900", (900.0,)),
    ("300 <= seconds_in_phase < 600", (300.0,)),
    ("not (seconds_in_phase < 120)", (120.0,)),
    ("not (seconds_in_phase < 60 or state.x)", (60.0,)),
    ("seconds_in_phase < 600", ()),
    ("state.x == 1", ()),
])
def test_the_moments_a_guard_can_first_become_true(source: str, moments: tuple[float, ...]
                                                   ) -> None:
    terms = time_moments(source)
    assert terms.moments == moments and terms.problem == ""


@pytest.mark.parametrize(("source", "words"), [
    ("seconds_in_phase * 2 > 600", "stands alone"),
    ("seconds_in_phase > state.patience", "other than a number"),
    ("seconds_in_phase == 600", "== or !="),
    ("max(seconds_in_phase, 3) > 4", "stands alone"),
    ("seconds_in_phase", "cannot be derived"),
])
def test_a_use_of_time_with_no_moment_says_why(source: str, words: str) -> None:
    terms = time_moments(source)
    assert terms.moments == () and words in terms.problem


def test_a_transition_carries_its_timers_after_and_guard_alike() -> None:
    wf = load_workflow_text("""
phaseflow: 1
name: t
initial: a
phases:
  a:
    goal: A.
    transitions:
      - {to: b, after: 10m, when: "seconds_in_phase >= 60 or state.x"}
      - {to: b, when: "seconds_in_phase > 30"}
      - {to: b, trigger: model, when: "seconds_in_phase >= 5"}
  b:
    goal: B.
    terminal: true
""")
    first, second, model = wf.phases["a"].transitions
    assert first.timers == (600.0,) and first.after == 600.0
    assert second.timers == (30.0 + STRICT,)
    assert model.timers == ()  # the model's move is checked when it is made
