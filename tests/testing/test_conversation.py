"""Conversation scenarios: a real session driven by the file's `model:` steps, with
stand-in tools; every step kind and every `expect` key, passing and failing (a failure
names the step's line and says what was expected and what was found)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.shop import WORKFLOW, conversation, failure, line_of


def _passes(result: object) -> None:
    assert getattr(result, "error", None) is None, result.error  # type: ignore[attr-defined]
    assert result.scenarios, "no scenario ran"  # type: ignore[attr-defined]
    for scenario in result.scenarios:  # type: ignore[attr-defined]
        assert scenario.failure is None, scenario.failure


def test_a_whole_conversation_passes(tmp_path: Path) -> None:
    result = conversation(tmp_path, """
        - expect: {phase: ask, status: idle, approval: null}
        - user: "Hi, I'm Ada"
        - expect:
            offered: [crm.lookup, go_to_phase, record]
            status: running
            navigation: ["Current phase: ask", "→ pay: The customer is known"]
        - model: {calls: [{record: {name: Ada}}, {crm.lookup: {email: ada@example.com}}]}
        - expect:
            phase: pay
            results: [ok, {status: ok, contains: C-1}]
            state: {name: Ada, customer_id: C-1, receipt: null}
            called: [crm.lookup, notify]
            offered: [pay]
            navigation: ["Current phase: pay"]
        - model: {text: "Paying now.", calls: [{pay: {amount: 3}}]}
        - expect: {status: awaiting_approval, approval: pay, results: [pending], reply: Paying}
        - approve: pay
        - expect: {results: [ok], phase: done, called: [pay], state: {receipt: R-1}}
        - model: "Thank you, goodbye."
        - expect: {status: finished, reply: goodbye, offered: [], approval: null}
    """)
    _passes(result)
    assert result.coverage is not None
    assert result.coverage.seen_transitions == {("ask", 0), ("pay", 0)}
    assert result.coverage.seen_phases == {"ask", "pay", "done"}


def test_a_model_transition_taken_in_a_conversation_counts_for_coverage(
        tmp_path: Path) -> None:
    result = conversation(tmp_path, """
        - user: a human please
        - model: {calls: [{go_to_phase: {phase: human, reason: asked}}]}
        - expect: {phase: human, results: [ok], offered: []}
        - model: A colleague takes over.
        - expect: {status: finished}
    """)
    _passes(result)
    assert result.coverage is not None
    assert ("ask", 1) in result.coverage.seen_transitions
    assert "human" in result.coverage.seen_phases


def test_coverage_credits_the_model_transition_whose_when_held(tmp_path: Path) -> None:
    # Two model transitions to the same phase: the one taken is the one credited, not the
    # first one written.
    two_ways = (
        "      - to: human\n"
        "        trigger: model\n"
        "        when: state.name == \"Ada\"\n"
        "        description: Ada asks for a human\n"
        "      - to: human\n"
        "        trigger: model\n"
        "        when: state.name != \"Ada\"\n"
        "        description: Someone else asks for a human\n")
    one_way = ("      - to: human\n"
               "        trigger: model\n"
               "        description: The customer asks for a human\n")
    assert one_way in WORKFLOW
    result = conversation(tmp_path, """
        - user: I'm Bob, a human please
        - model: {calls: [{record: {name: Bob}}]}
        - model: {calls: [{go_to_phase: {phase: human, reason: asked}}]}
        - expect: {phase: human, results: [ok]}
        - model: A colleague takes over.
    """, workflow=WORKFLOW.replace(one_way, two_ways))
    _passes(result)
    assert result.coverage is not None
    assert ("ask", 2) in result.coverage.seen_transitions
    assert ("ask", 1) not in result.coverage.seen_transitions


def test_refused_ignored_and_error_results(tmp_path: Path) -> None:
    result = conversation(tmp_path, """
        - user: hi
        - model:
            calls:
              - {weather.now: {city: Paris}}
              - {pay: {amount: 3}}
              - {go_to_phase: {phase: pay}}
              - {go_to_phase: {phase: human}}
        - expect:
            results:
              - {status: refused, contains: "not available in this phase (ask)"}
              - {status: refused, contains: "Tools available now: crm.lookup"}
              - {status: error, contains: "Cannot move to 'pay'"}
              - {status: ignored, contains: one phase change per step}
            phase: ask
            called: []
        - model: {calls: [{go_to_phase: {phase: human}}, {go_to_phase: {phase: human}}]}
        - expect: {results: [ok, ignored], phase: human}
        - model: bye
    """)
    _passes(result)


def test_a_tool_that_raises_is_an_error_result(tmp_path: Path) -> None:
    result = conversation(tmp_path, """
        - user: hi
        - model: {calls: [{crm.lookup: {email: a@x}}]}
        - expect: {results: [{status: error, contains: crm down}], phase: ask}
        - model: Sorry, the CRM is down.
        - expect: {reply: CRM is down, status: idle}
    """, extra="""    tools:
      crm.lookup: {raises: crm down}
""")
    _passes(result)


def test_an_echo_stand_in_returns_the_arguments(tmp_path: Path) -> None:
    result = conversation(tmp_path, """
        - user: I'm C-9
        - model: {calls: [{crm.lookup: {customer_id: C-9, note: gold}}]}
        - expect: {results: [{status: ok, contains: '"note": "gold"'}], state: {customer_id: C-9}}
        - model: Hello.
    """, extra="""    tools:
      crm.lookup: {echo: true}
""")
    _passes(result)


def test_reject_gives_the_model_the_reason(tmp_path: Path) -> None:
    result = conversation(tmp_path, """
        - user: I'm C-1
        - model: {calls: [{crm.lookup: {}}]}
        - model: {calls: [{pay: {amount: 300}}]}
        - expect: {approval: pay}
        - reject: {tool: pay, reason: too much}
        - expect: {results: [{status: rejected, contains: too much}], called: [], phase: pay}
        - model: {calls: [{pay: {amount: 3}}]}
        - reject: pay
        - expect: {results: [rejected], approval: null, status: running}
        - model: I could not take the payment.
        - expect: {status: idle, phase: pay, state: {receipt: null}}
    """)
    _passes(result)


def test_approve_for_the_turn_runs_a_later_call_without_asking(tmp_path: Path) -> None:
    result = conversation(tmp_path, """
        - user: I'm C-1
        - model: {calls: [{crm.lookup: {}}]}
        - model: {calls: [{pay: {amount: 3}}]}
        - approve: {tool: pay, scope: turn}
        - expect: {results: [ok], called: [crm.lookup, notify, pay], status: running}
        - model: {calls: [{pay: {amount: 3}}]}
        - expect: {results: [ok], called: [pay], approval: null}
        - model: done
    """, extra="""    tools:
      pay: {returns: {declined: true}}
""")
    _passes(result)


def test_a_crash_reopens_the_session_from_the_store(tmp_path: Path) -> None:
    result = conversation(tmp_path, """
        - user: I'm Ada
        - model: {calls: [{record: {name: Ada}}]}
        - model: Hello Ada.
        - crash: true
        - expect: {state: {name: Ada}, phase: ask, status: idle}
        - user: I'm C-1
        - model: {calls: [{crm.lookup: {}}]}
        - model: {calls: [{pay: {amount: 3}}]}
        - crash: true
        - expect: {status: awaiting_approval, approval: pay, phase: pay}
        - approve: pay
        - model: Paid.
        - expect: {status: finished, reply: Paid}
    """)
    _passes(result)


def test_cancel_while_the_tool_group_runs(tmp_path: Path) -> None:
    result = conversation(tmp_path, """
        - user: I'm C-1
        - model: {calls: [{crm.lookup: {}}]}
        - cancel: true
        - expect:
            status: idle
            results: [{status: cancelled, contains: outcome unknown}]
            called: [crm.lookup]
            state: {customer_id: null}
            phase: ask
        - user: again
        - model: Hello again.
        - expect: {reply: Hello again, status: idle}
    """)
    _passes(result)


def test_cancel_while_the_model_is_asked_for_a_reply(tmp_path: Path) -> None:
    result = conversation(tmp_path, """
        - user: hi
        - cancel: true
        - expect: {status: idle, called: []}
        - user: I'm Ada
        - model: {calls: [{record: {name: Ada}}]}
        - cancel: true
        - expect: {status: idle, results: [ok], state: {name: Ada}}
        - user: still there?
        - model: Yes.
        - expect: {reply: "Yes."}
    """)
    _passes(result)


def test_cancel_while_an_approval_is_pending(tmp_path: Path) -> None:
    result = conversation(tmp_path, """
        - user: I'm C-1
        - model: {calls: [{crm.lookup: {}}]}
        - model: {calls: [{pay: {amount: 3}}]}
        - cancel: true
        - expect: {status: idle, approval: null, called: [crm.lookup, notify]}
        - user: pay please
        - model: {calls: [{pay: {amount: 3}}]}
        - approve: pay
        - model: Paid.
        - expect: {status: finished}
    """)
    _passes(result)


def test_cancel_when_nothing_runs_fails(tmp_path: Path) -> None:
    result = conversation(tmp_path, """
        - user: I'm Ada
        - model: Hello.
        - crash: true
        - cancel: true
    """)
    message = failure(result)
    assert message == (f"{tmp_path / 'shop.test.yaml'}:{line_of(tmp_path, 'cancel')}: "
                       "cancel: no turn is running or waiting for an approval (status idle)")


@pytest.mark.parametrize(("check", "found"), [
    ("phase: pay", "phase: expected 'pay', found 'ask'"),
    ("state: {name: Bob}", "state.name: expected 'Bob', found 'Ada'"),
    ("state: {customer_id: C-1}", "state.customer_id: expected 'C-1', found absent"),
    ("state: {name: null}", "state.name: expected absent, found 'Ada'"),
    ("offered: [crm.lookup]",
     "offered: expected [crm.lookup], found [crm.lookup, go_to_phase, record]"),
    ("results: [refused]", "results: expected [refused], found [ok] (record: ok)"),
    ("results: [{status: ok, contains: Bob}]",
     "results: the result of record does not contain 'Bob': 'recorded: name'"),
    ("reply: Bob", "reply: expected to contain 'Bob', found ''"),
    ("status: idle", "status: expected idle, found running"),
    ("approval: pay", "approval: expected pay, found none pending"),
    ("called: [notify]", "called: expected [notify], found []"),
    ('navigation: ["Current phase: pay"]',
     "navigation: expected to contain 'Current phase: pay', found:"),
])
def test_a_wrong_expect_between_replies_names_its_line(tmp_path: Path, check: str,
                                                       found: str) -> None:
    result = conversation(tmp_path, f"""
        - user: I'm Ada
        - model: {{calls: [{{record: {{name: Ada}}}}]}}
        - expect: {{{check}}}
        - model: Hello Ada.
    """)
    message = failure(result)
    line = line_of(tmp_path, "- expect:")
    assert message.startswith(f"{tmp_path / 'shop.test.yaml'}:{line}: expect failed:\n  ")
    assert found in message


def test_a_wrong_expect_after_the_turn_names_its_line(tmp_path: Path) -> None:
    result = conversation(tmp_path, """
        - user: I'm Ada
        - model: Hello.
        - expect: {status: running, reply: Bye, results: [ok]}
    """)
    message = failure(result)
    line = line_of(tmp_path, "- expect:")
    assert message == (
        f"{tmp_path / 'shop.test.yaml'}:{line}: expect failed:\n"
        "  status: expected running, found idle\n"
        "  reply: expected to contain 'Bye', found 'Hello.'\n"
        "  results: expected [ok], found [] (no tool was called)")


def test_a_turn_that_asks_for_more_replies_than_written_fails(tmp_path: Path) -> None:
    result = conversation(tmp_path, """
        - user: I'm Ada
        - model: {calls: [{record: {name: Ada}}]}
        - user: and then?
        - model: Then this.
    """)
    line = line_of(tmp_path, "record:")
    assert failure(result) == (
        f"{tmp_path / 'shop.test.yaml'}:{line}: the turn asks for another reply (reply 2 of "
        "the conversation), but 1 is written for it; add a model step")


def test_replies_the_turn_never_asked_for_fail(tmp_path: Path) -> None:
    result = conversation(tmp_path, """
        - user: I'm Ada
        - model: Hello.
        - model: And another thing.
    """)
    line = line_of(tmp_path, "another thing")
    assert failure(result) == (
        f"{tmp_path / 'shop.test.yaml'}:{line}: this reply was never asked for: the turn "
        "ended after 1 of its 2 replies (status idle)")


def test_a_turn_past_the_step_limit_says_so(tmp_path: Path) -> None:
    refused = "\n".join("- model: {calls: [{weather.now: {}}]}" for _ in range(10))
    result = conversation(tmp_path, f"- user: hi\n{refused}\n- model: Finally.")
    line = line_of(tmp_path, "Finally.")
    assert failure(result) == (
        f"{tmp_path / 'shop.test.yaml'}:{line}: this reply was never asked for: the turn "
        "ended (step_limit: the turn made 10 model requests (max_steps) without a final "
        "reply; it ends here) after 10 of its 11 replies (status idle)")


def test_a_reply_written_past_an_approval_pause_fails(tmp_path: Path) -> None:
    result = conversation(tmp_path, """
        - user: I'm C-1
        - model: {calls: [{crm.lookup: {}}]}
        - model: {calls: [{pay: {amount: 3}}]}
        - model: Paid.
    """)
    assert "the turn paused for an approval after 2 of its 3 replies" in failure(result)


def test_approve_names_the_tool_that_waits(tmp_path: Path) -> None:
    result = conversation(tmp_path, """
        - user: I'm C-1
        - model: {calls: [{crm.lookup: {}}]}
        - model: {calls: [{pay: {amount: 3}}]}
        - approve: helpdesk.note
    """)
    line = line_of(tmp_path, "approve:")
    assert failure(result) == (f"{tmp_path / 'shop.test.yaml'}:{line}: approve helpdesk.note: "
                               "the pending approval is for pay")


def test_reject_with_nothing_pending_fails(tmp_path: Path) -> None:
    result = conversation(tmp_path, """
        - user: hi
        - model: Hello.
        - reject: pay
    """)
    assert failure(result).endswith("reject pay: no approval is pending (status idle)")


def test_a_message_to_a_finished_session_fails(tmp_path: Path) -> None:
    result = conversation(tmp_path, """
        - user: a human please
        - model: {calls: [{go_to_phase: {phase: human}}]}
        - model: A colleague takes over.
        - user: hello?
    """)
    line = line_of(tmp_path, "hello?")
    message = failure(result)
    assert message.startswith(f"{tmp_path / 'shop.test.yaml'}:{line}: user: ")
    assert "finished" in message


def test_an_unmocked_call_fails(tmp_path: Path) -> None:
    header = ("phaseflow-test: 1\nworkflow: shop.yaml\ntools:\n"
              "  crm.lookup: {returns: {customer_id: C-1}}\nscenarios:\n")
    result = conversation(tmp_path, """
        - user: I'm C-1
        - model: {calls: [{crm.lookup: {}}]}
        - model: Hello.
    """, header=header)
    assert failure(result).endswith(
        "the workflow called notify, which the test file does not mock; add it under 'mocks'")


def test_a_tool_without_a_stand_in_fails_when_called(tmp_path: Path) -> None:
    header = "phaseflow-test: 1\nworkflow: shop.yaml\nmocks:\n  notify: {}\nscenarios:\n"
    result = conversation(tmp_path, """
        - user: I'm C-1
        - expect: {offered: [crm.lookup, go_to_phase, record]}
        - model: {calls: [{crm.lookup: {}}]}
        - model: Hello.
    """, header=header)
    line = line_of(tmp_path, "I'm C-1")
    assert failure(result) == (
        f"{tmp_path / 'shop.test.yaml'}:{line}: the model called crm.lookup, which the "
        "test file has no stand-in for; add it under 'tools'")


def test_a_scenario_stand_in_replaces_the_files(tmp_path: Path) -> None:
    result = conversation(tmp_path, """
        - user: I'm C-2
        - model: {calls: [{crm.lookup: {}}]}
        - expect: {state: {customer_id: C-2}, phase: pay}
        - model: Hello.
    """, extra="""    tools:
      crm.lookup: {returns: {customer_id: C-2}}
    mocks:
      notify: {raises: mail down}
""")
    _passes(result)


def test_failures_are_reported_like_machine_scenarios_by_the_cli(tmp_path: Path) -> None:
    from tests.support.commands import run_cli

    conversation(tmp_path, """
        - user: hi
        - model: Hello.
        - expect: {reply: Bye}
    """)
    proc = run_cli("test", str(tmp_path / "shop.test.yaml"))
    assert proc.returncode == 1
    line = line_of(tmp_path, "- expect:")
    assert proc.stdout.splitlines()[-4:] == [
        "  FAIL the conversation",
        f"       {tmp_path / 'shop.test.yaml'}:{line}: expect failed:",
        "         reply: expected to contain 'Bye', found 'Hello.'",
        "0 passed, 1 failed",
    ]


def test_a_conversation_may_start_from_a_state_of_its_own(tmp_path: Path) -> None:
    # `state` seeds the new session over the workflow's defaults: here the customer is
    # known before the first message, so the first turn's boundary moves to `pay`.
    result = conversation(tmp_path, """
        - expect: {phase: ask, state: {customer_id: C-7, name: Ada, receipt: null}}
        - user: hello
        - expect: {phase: ask, offered: [crm.lookup, go_to_phase, record]}
        - model: Hello Ada.
        - expect: {status: idle, phase: pay, called: [notify]}
        - user: I'd like to pay
        - expect: {offered: [pay]}
        - model: How much?
    """, extra="    state: {customer_id: C-7, name: Ada}\n")
    _passes(result)
    assert result.coverage is not None and ("ask", 0) in result.coverage.seen_transitions


def test_a_seeded_state_of_the_wrong_type_fails_where_the_key_is_written(
        tmp_path: Path) -> None:
    text = failure(conversation(tmp_path, """
        - user: hello
        - model: Hi.
    """, extra="    state:\n      name: Ada\n      customer_id: 7\n"))
    assert text.startswith(f"{tmp_path / 'shop.test.yaml'}:"
                           f"{line_of(tmp_path, 'customer_id: 7')}: scenario "
                           "'the conversation' state: initial state key 'customer_id':"), text


#: the shop with a time-based move: five minutes in ``ask`` without progress hand over
TIMED = WORKFLOW.replace(
    "        description: The customer asks for a human\n",
    "        description: The customer asks for a human\n"
    "      - to: human\n"
    "        when: seconds_in_phase >= 300\n"
    "        description: Nobody answered for five minutes\n")
assert TIMED != WORKFLOW


def test_wait_moves_the_phase_clock_so_a_time_based_transition_fires(
        tmp_path: Path) -> None:
    result = conversation(tmp_path, """
        - user: hi
        - model: Who are you?
        - expect: {phase: ask, status: idle}
        - wait: 299.5
        - user: hello?
        - model: Still here.
        - expect: {phase: ask}
        - wait: 1
        - user: anyone?
        - model: Handing you over.
        - expect: {phase: human, status: running}
        - model: A colleague takes over.
        - expect: {phase: human, status: finished}
    """, workflow=TIMED)
    _passes(result)
    assert result.coverage is not None and ("ask", 2) in result.coverage.seen_transitions


def test_time_waited_before_a_crash_still_counts_after_it(tmp_path: Path) -> None:
    # A reopened session adds the time it spent stored (since its last commit) to the
    # time in phase, as a worker restarted after a crash does.
    result = conversation(tmp_path, """
        - user: hi
        - model: Who are you?
        - wait: 200
        - crash: true
        - wait: 90
        - user: anyone?
        - model: Still here.
        - expect: {phase: ask}
        - wait: 10
        - user: anyone?
        - model: Handing you over.
        - model: A colleague takes over.
        - expect: {phase: human, status: finished}
    """, workflow=TIMED)
    _passes(result)


def test_a_crash_during_an_approval_keeps_the_time_spent_before_it(tmp_path: Path) -> None:
    # The session was committed (paused for the approval) 299 s into the phase: the
    # reopened session starts from those 299 s, not from the phase's last boundary.
    timed = WORKFLOW.replace(
        "        when: state.receipt\n        description: Paid\n",
        "        when: state.receipt\n        description: Paid\n"
        "      - to: human\n"
        "        when: seconds_in_phase >= 300\n"
        "        description: Five minutes without a payment\n")
    assert timed != WORKFLOW
    result = conversation(tmp_path, """
        - user: hi
        - model: Hello Ada.
        - expect: {phase: pay}
        - wait: 299
        - user: pay 3
        - model: {calls: [{pay: {amount: 3}}]}
        - expect: {approval: pay, phase: pay}
        - crash: true
        - wait: 1
        - reject: pay
        - model: No payment, then; a colleague takes over.
        - expect: {phase: human, status: finished}
    """, extra="    state: {customer_id: C-7}\n", workflow=timed)
    _passes(result)


#: the shop with a timer: five minutes in ``ask`` without an answer hand over, fired by
#: the session itself (``after``), with no user message
TIMER = WORKFLOW.replace(
    "        description: The customer asks for a human\n",
    "        description: The customer asks for a human\n"
    "      - to: human\n"
    "        after: 5m\n"
    "        description: Nobody answered for five minutes\n")
assert TIMER != WORKFLOW


def test_a_wait_followed_by_replies_answers_the_timer_turn(tmp_path: Path) -> None:
    result = conversation(tmp_path, """
        - user: hi
        - model: Who are you?
        - expect: {phase: ask, status: idle}
        - wait: 299
        - wait: 1
        - model: A colleague takes over, nobody answered.
        - expect: {phase: human, status: finished}
    """, workflow=TIMER)
    _passes(result)


def test_a_timer_turn_not_yet_due_asks_for_no_reply(tmp_path: Path) -> None:
    text = failure(conversation(tmp_path, """
        - user: hi
        - model: Who are you?
        - wait: 60
        - model: Too early.
    """, workflow=TIMER))
    assert "Too early" in text or "never asked" in text or "not used" in text, text
