"""The conversation steps that act in the middle of a turn or between turns: a crash
anywhere in a turn (between two replies, after a tool group, while a tool runs) resumed
as a restarted worker does; `steer` and `interrupt` sent while the turn runs; `mode`;
`compact` - each passing, and each misplaced step found before the file runs."""

from __future__ import annotations

from pathlib import Path

from tests.support.shop import WORKFLOW, conversation, failure


def _passes(result: object) -> None:
    assert getattr(result, "error", None) is None, result.error  # type: ignore[attr-defined]
    for scenario in result.scenarios:  # type: ignore[attr-defined]
        assert scenario.failure is None, scenario.failure


def test_a_crash_after_a_tool_group_resumes_the_turn_in_a_new_worker(tmp_path: Path) -> None:
    result = conversation(tmp_path, """
        - user: I'm C-1
        - model: {calls: [{crm.lookup: {}}]}
        - crash: true                      # after the group, before the next reply
        - expect: {status: running, phase: pay, results: [ok], called: [crm.lookup, notify]}
        - model: Found you.
        - expect: {status: idle, reply: Found you, state: {customer_id: C-1}}
    """)
    _passes(result)


def test_a_crash_while_a_tool_runs_reports_its_outcome_unknown(tmp_path: Path) -> None:
    result = conversation(tmp_path, """
        - user: I'm C-1
        - model: {calls: [{crm.lookup: {}}]}
        - crash: {during: crm.lookup}     # the worker dies while the call runs
        - model: Let me try that again.
        - expect:
            status: idle
            results: [{status: unknown, contains: not run again}]
            state: {customer_id: null}
            reply: try that again
    """)
    _passes(result)


def test_a_steering_message_reaches_the_next_request_of_the_turn(tmp_path: Path) -> None:
    result = conversation(tmp_path, """
        - user: I'm C-1
        - model: {calls: [{crm.lookup: {}}]}
        - steer: Actually, call me Ada.
        - model: {calls: [{record: {name: Ada}}]}
        - model: Hello Ada.
        - expect: {status: idle, state: {name: Ada}, reply: Hello Ada}
    """, workflow=WORKFLOW.replace("    tools: [pay]\n", "    tools: [pay]\n"
                                   "    collect: [name]\n"))
    _passes(result)


def test_an_interrupt_cancels_the_turn_and_starts_the_next(tmp_path: Path) -> None:
    result = conversation(tmp_path, """
        - user: I'm C-1
        - model: {calls: [{crm.lookup: {}}]}
        - interrupt: Stop, I'm in a hurry.
        - model: Sorry, stopping.
        - expect: {status: idle, reply: stopping, state: {customer_id: null}}
        - user: hello
        - interrupt: never mind
        - model: Of course.
        - expect: {status: idle, reply: Of course}
    """)
    _passes(result)


def test_plan_mode_and_back(tmp_path: Path) -> None:
    workflow = WORKFLOW.replace("    writes: [customer_id]\n",
                                "    writes: [customer_id]\n    read_only: true\n")
    result = conversation(tmp_path, """
        - mode: plan
        - user: I'm C-1 and I want to pay
        - model: {calls: [{crm.lookup: {}}]}
        - model: {calls: [{pay: {amount: 3}}]}
        - model: I would pay 3.
        - expect: {status: idle, results: [planned], phase: pay}
        - mode: exec
        - user: go ahead
        - model: {calls: [{pay: {amount: 3}}]}
        - expect: {status: awaiting_approval, approval: pay}
    """, workflow=workflow)
    _passes(result)


def test_compact_folds_the_history_and_the_script_goes_on(tmp_path: Path) -> None:
    result = conversation(tmp_path, """
        - user: hello
        - model: Hello.
        - user: I'm Ada
        - model: {calls: [{record: {name: Ada}}]}
        - model: Hi Ada.
        - compact: true
        - user: still me
        - model: Still you, Ada.
        - expect: {reply: Still you}
    """)
    _passes(result)


def test_misplaced_steps_are_found_before_the_file_runs(tmp_path: Path) -> None:
    result = conversation(tmp_path, """
        - steer: too early
        - user: hi
        - model: Hello.
        - steer: after a reply without calls
        - mode: dry
        - compact: yes please
        - crash: {during: 3}
    """)
    assert result.error is not None
    for needle in ("steer is sent while a turn runs", "reply without calls",
                   "mode takes plan or exec", "compact takes true", "crash during"):
        assert needle in result.error, (needle, result.error)


def test_a_crash_that_stops_no_turn_is_a_reopening(tmp_path: Path) -> None:
    result = conversation(tmp_path, """
        - user: hi
        - model: Hello.
        - crash: true
        - model: This reply is never asked for.
    """)
    assert "never asked for" in failure(result)


def test_a_fork_goes_on_from_a_past_turn_and_the_script_goes_on(tmp_path: Path) -> None:
    result = conversation(tmp_path, """
        - user: I'm Ada
        - model: {calls: [{record: {name: Ada}}]}
        - model: Hello Ada.
        - user: I'm C-1
        - model: {calls: [{crm.lookup: {}}]}
        - model: Found you.
        - expect: {phase: pay, state: {customer_id: C-1}}
        - fork: {at: 1}                 # back to the end of turn 1, in a new session
        - expect: {phase: ask, state: {name: Ada, customer_id: null}, status: idle}
        - user: I'd rather talk to a person
        - model: {calls: [{go_to_phase: {phase: human}}]}
        - model: A colleague will help you.
        - expect: {phase: human, status: finished}
    """)
    _passes(result)


def test_a_fork_of_a_turn_not_reached_fails_at_its_line(tmp_path: Path) -> None:
    result = conversation(tmp_path, """
        - user: hi
        - model: Hello.
        - fork: {at: 3}
    """)
    assert "fork" in failure(result) and "turn" in failure(result)
