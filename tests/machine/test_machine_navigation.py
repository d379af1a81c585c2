"""The navigation block: the spec's exact format and every rule."""

from __future__ import annotations

from phaseflow.machine import State
from phaseflow.spec.model import Navigation, Phase, Preparation, SetEffect, Transition
from tests.support.machines import SPEC_BLOCK, FakeClock, refund_desk, workflow


def test_the_spec_example_exactly() -> None:
    m = refund_desk().machine(clock=FakeClock())
    s = State({"customer_id": "C-1"})
    assert m.advance_sync(State(), turn=1).stayed
    assert m.advance_sync(s, turn=2).transitioned
    assert m.describe_navigation(s) == SPEC_BLOCK


def test_initial_phase_block() -> None:
    m = refund_desk().machine()
    assert m.describe_navigation(State()) == (
        "[Navigation]\n"
        "Current phase: greet — Learn who the customer is and what they need.\n"
        "Tools: lookup_customer\n"
        "Possible next:\n"
        "  → locate_order: Customer verified (waiting for: customer_id)"
    )


def test_condition_shown_when_keys_present_but_false() -> None:
    m = refund_desk().machine()
    s = State({"customer_id": "C-1", "amount": 900})
    m.advance_sync(s, turn=1)
    text = m.describe_navigation(s)
    assert "  → refund: Small refund, no approval from a manager (when: state.amount <= 500)" \
        in text
    assert "Still needed: order_id\n" in text


def test_ready_lines_and_target_requires_as_waiting() -> None:
    m = refund_desk().machine()
    s = State({"customer_id": "C-1", "amount": 100})
    m.advance_sync(s, turn=1)
    text = m.describe_navigation(s)
    assert "  → refund: Small refund, no approval from a manager " \
        "(waiting for: order_id, policy)" in text
    assert "  → escalate (when: state.amount > 500)" in text
    wf = workflow([Phase("a", transitions=[Transition("b", "state.x", "Go")]), Phase("b")])
    assert wf.machine().describe_navigation({"x": 1}).endswith("  → b: Go (ready)")


def test_model_transition_not_ready_says_then() -> None:
    wf = workflow([Phase("a", transitions=[
        Transition("b", "state.ok", "Ask", trigger="model"),
        Transition("b", "state.n > 1", trigger="model")]), Phase("b")])
    text = wf.machine().describe_navigation({"n": 0})
    assert "  → b: Ask (waiting for: ok; then you may ask for this)" in text
    assert "  → b (when: state.n > 1; then you may ask for this)" in text


def test_entry_guard_shown_when_false() -> None:
    wf = workflow([Phase("a", transitions=[Transition("b", None, "To b"),
                                           Transition("c", None, "To c")]),
                   Phase("b", guard="state.vip == true"), Phase("c", guard="state.n > 3")])
    text = wf.machine().describe_navigation({"vip": False})
    assert "  → b: To b (when: state.vip == true)" in text
    assert "  → c: To c (waiting for: n)" in text


def test_previous_lists_the_last_n_phases_left_oldest_first() -> None:
    phases = [Phase(f"p{i}", transitions=[Transition(f"p{i + 1}")]) for i in range(5)]
    wf = workflow([*phases, Phase("p5", terminal=True)])
    m = wf.machine()
    for t in range(1, 6):
        m.advance_sync({}, turn=t * 10)
    text = m.describe_navigation({})
    assert "Previous: p2 (turn 30), p3 (turn 40), p4 (turn 50)\n" in text
    wf1 = workflow([*phases, Phase("p5", terminal=True)], navigation=_nav(history=1))
    m1 = wf1.machine()
    m1.advance_sync({}, turn=1)
    m1.advance_sync({}, turn=2)
    assert "Previous: p1 (turn 2)\n" in m1.describe_navigation({})
    wf0 = workflow([*phases, Phase("p5", terminal=True)], navigation=_nav(history=0))
    m0 = wf0.machine()
    m0.advance_sync({}, turn=1)
    assert "Previous" not in m0.describe_navigation({})


def _nav(**kw: object) -> object:
    from phaseflow.spec.model import Navigation

    return Navigation(**kw)  # type: ignore[arg-type]


def test_terminal_phase() -> None:
    m = refund_desk().machine()
    m.goto_sync("done", State(), turn=4)
    assert m.describe_navigation(State()) == (
        "[Navigation]\n"
        "Current phase: done — Close the conversation politely.\n"
        "Previous: greet (turn 4)\n"
        "This is the final phase."
    )


def test_blocked_until_required_state_after_a_programmatic_move() -> None:
    m = refund_desk().machine()
    m.goto_sync("refund", State(), turn=1)
    text = m.describe_navigation(State({"amount": 5}))
    assert "Blocked until required state is available: order_id, policy\n" in text
    lines = text.splitlines()
    assert lines.index("Blocked until required state is available: order_id, policy") < \
        lines.index("Tools: issue_refund")


def test_tools_none_and_no_tools_line() -> None:
    wf = workflow([Phase("a", goal="G", tools=[], transitions=[Transition("b")]),
                   Phase("b", goal="H")])
    m = wf.machine()
    assert "Tools: none\n" in m.describe_navigation({})
    m.advance_sync({}, turn=1)
    assert m.describe_navigation({}) == "[Navigation]\nCurrent phase: b — H\nPrevious: a (turn 1)"


def test_no_goal_no_dash() -> None:
    wf = workflow([Phase("a")])
    assert wf.machine().describe_navigation({}) == "[Navigation]\nCurrent phase: a"


def test_needs_still_needed_in_order_and_null_is_absent() -> None:
    wf = workflow([Phase("a", needs=["z", "a", "m"])])
    text = wf.machine().describe_navigation({"a": 1, "m": None})
    assert "Still needed: z, m" in text


def test_navigation_is_pure() -> None:
    wf = workflow([Phase("a", transitions=[Transition("b", "state.x < 1")]),
                   Phase("b", requires=["k"], prepare=[Preparation("p", SetEffect({"k": 1}))])])
    m = wf.machine()
    s = State({"x": "str"})
    m.describe_navigation(s)
    assert s.changes == () and m.trace == () and m.current == "a"


def test_template_replaces_the_block_with_structured_facts() -> None:
    template = (
        "{{ phase }}|{{ phase.name }}|{{ goal }}|{{ workflow.name }}|{{ turn }}|"
        "{% for p in previous %}{{ p.phase }}@{{ p.turn }}{% endfor %}|"
        "{{ still_needed|join(',') }}|{{ missing_requires|join(',') }}|{{ tools|join(',') }}|"
        "{% for n in next %}[{{ n.target }} {{ n.trigger }} {{ n.ready }} "
        "{{ n.waiting_for|join(',') }} {{ n.condition }} {{ n.description }}]{% endfor %}|"
        "{{ terminal }}|{{ state.customer_id }}"
    )
    m = refund_desk(template=template).machine()
    s = State({"customer_id": "C-1"})
    m.advance_sync(s, turn=2)
    assert m.describe_navigation(s) == (
        "locate_order|locate_order|Identify the order to refund.|refund-desk|2|greet@2|"
        "order_id,amount||find_order|"
        "[refund auto False amount state.amount <= 500 Small refund, no approval from a manager]"
        "[escalate auto False amount state.amount > 500 ]"
        "[escalate model True   The customer asks for a human]|False|C-1"
    )


def test_navigation_facts_next_items() -> None:
    m = refund_desk().machine()
    s = State({"customer_id": "C-1"})
    m.advance_sync(s, turn=1)
    f = m.navigation_facts(s)
    assert f["next"][0] == {
        "target": "refund", "description": "Small refund, no approval from a manager",
        "trigger": "auto", "ready": False, "waiting_for": ["amount"],
        "condition": "state.amount <= 500", "blocked_by": "when", "unmet": "state.amount <= 500",
    }
    assert f["tools"] == ["find_order"] and f["terminal"] is False


def test_unknown_current_phase() -> None:
    from phaseflow.machine import PhaseMachine

    assert PhaseMachine("ghost").describe_navigation({}) == "[Navigation]\nCurrent phase: ghost"


def test_a_key_tested_only_for_absence_is_not_waited_for() -> None:
    """A false condition lists the absent keys whose setting could make it true: a key it
    only tests for absence (``state.x == null``, ``not state.x``) is not one of them."""
    wf = workflow([
        Phase("a", transitions=[
            Transition("b", "state.cancelled == null and turns_in_phase > 2", "Time out"),
            Transition("b", "state.cancelled == null and state.amount > 5", "Large"),
            Transition("b", "not state.cancelled and state.amount > 5", "Large, not cancelled"),
            Transition("b", "not (state.cancelled == null)", "Cancelled"),
            Transition("b", "state.cancelled == null or state.cancelled > 3", "Either"),
            Transition("c", None, "Guarded"),
        ]),
        Phase("b"),
        Phase("c", guard="state.blocked is None and state.n > 1"),
    ])
    m = wf.machine()
    text = m.describe_navigation({})
    assert "  → b: Time out (when: state.cancelled == null and turns_in_phase > 2)" in text
    assert "  → b: Large (waiting for: amount)" in text
    assert "  → b: Large, not cancelled (waiting for: amount)" in text
    assert "  → b: Cancelled (waiting for: cancelled)" in text  # a presence test
    assert "  → c: Guarded (waiting for: n)" in text
    facts = m.navigation_facts({})
    assert [n["waiting_for"] for n in facts["next"]] == [
        [], ["amount"], ["amount"], ["cancelled"], [], ["n"]]
    assert facts["next"][4]["ready"] is True  # 'Either' holds while cancelled is absent


def test_keys_the_model_may_record_follow_still_needed() -> None:
    """A phase's ``collect`` keys that are still absent are offered to the model on one
    line after ``Still needed``; present keys drop off, and no line when none is left."""
    wf = workflow([
        Phase("intake", goal="Take the claim.", needs=["policy_no"],
              collect=["name", "reason", "phone"], tools=["lookup"],
              transitions=[Transition("done", "state.name and state.reason", "All known")]),
        Phase("done", terminal=True),
    ])
    m = wf.machine()
    assert m.describe_navigation(State({"phone": None})) == (
        "[Navigation]\n"
        "Current phase: intake — Take the claim.\n"
        "Still needed: policy_no\n"
        "You may record: name, reason, phone\n"
        "Tools: lookup\n"
        "Possible next:\n"
        "  → done: All known (waiting for: name, reason)"
    )
    text = m.describe_navigation(State({"name": "Ada", "phone": "1"}))
    assert "You may record: reason\n" in text
    assert m.navigation_facts(State({"name": "Ada"}))["collect"] == ["reason", "phone"]
    every = State({"name": "Ada", "reason": "hail", "phone": "1"})
    assert "You may record" not in m.describe_navigation(every)
    assert m.navigation_facts(every)["collect"] == []


def test_a_phase_that_collects_nothing_has_no_record_line() -> None:
    m = refund_desk().machine()
    s = State({"customer_id": "C-1"})
    m.advance_sync(s, turn=2)
    assert m.navigation_facts(s)["collect"] == []
    assert "You may record" not in m.describe_navigation(s)


def test_a_navigation_template_gets_collect() -> None:
    wf = workflow(
        [Phase("a", collect=["name", "reason"]), Phase("b")],
        navigation=Navigation(template="{{ phase }}: {{ collect|join(', ') or 'nothing' }}"),
    )
    m = wf.machine()
    assert m.describe_navigation(State({"name": "Ada"})) == "a: reason"
    assert m.describe_navigation(State({"name": "Ada", "reason": "r"})) == "a: nothing"
