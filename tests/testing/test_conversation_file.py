"""Mistakes in a conversation scenario are found before it runs, each with
file:line:column: steps out of order, bad values, names the workflow does not have;
a likely typo in a model's call is a warning, a deliberate hallucination is not."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from phaseflow.testing import run_test_file
from tests.support.shop import HEADER, conversation, failure, write


def _errors(tmp_path: Path, steps: str, *, extra: str = "", header: str = HEADER
            ) -> list[str]:
    result = conversation(tmp_path, steps, extra=extra, header=header)
    assert result.error is not None, "the file ran"
    prefix = f"{tmp_path / 'shop.test.yaml'}:"
    lines = result.error.splitlines()
    assert all(line.startswith(prefix) for line in lines), lines
    return [line[len(prefix):] for line in lines]


def _warnings(tmp_path: Path, steps: str) -> list[str]:
    result = conversation(tmp_path, steps)
    assert result.error is None, result.error
    return [f"{w.line}:{w.column}: {w.message}" for w in result.warnings]


def test_steps_out_of_order_and_bad_values_are_all_reported(tmp_path: Path) -> None:
    errors = _errors(tmp_path, """
        - model: too early
        - usr: hi
        - user: {text: hi}
        - user: hi
        - model: {text: hi, call: []}
        - model: {}
        - model: {calls: [{crm.lookup: [a]}]}
        - model: Hello.
        - cancel: true
        - crash: yes
        - approve: {tool: pay, scope: forever}
        - reject: {reason: no}
        - expect: {tools: [pay], status: asleep, results: [okay, {contains: x}]}
    """)
    assert errors == [
        "12:9: a model step is a reply in a turn: it follows a user, approve, reject, "
        "crash or wait step (before any user step)",
        "13:9: unknown conversation step 'usr'; did you mean 'user'?",
        "14:15: user takes a text",
        "16:27: unknown key 'call' in model; did you mean 'calls'?",
        "17:16: a model reply needs text or calls",
        "18:38: the arguments of 'crm.lookup' are a mapping (or nothing)",
        "20:9: cancel after a reply without calls: that reply ended the turn (cancel follows "
        "a user step, or a model step with calls)",
        "21:16: crash takes true: 'crash: true', or {during: TOOL}",
        "22:37: scope is once, turn or session, not 'forever'",
        "23:17: reject names the tool: {tool: TOOL}",
        "24:18: 'tools' checks a machine scenario; a conversation checks offered (the tools "
        "of the model's request)",
        "24:40: status is one of idle, running, awaiting_approval, finished, failed, not "
        "'asleep'",
        "24:58: unknown result status 'okay'; did you mean 'ok'?",
    ]


def test_cancel_with_nothing_before_it_or_after_a_check(tmp_path: Path) -> None:
    errors = _errors(tmp_path, """
        - cancel: true
        - user: hi
        - expect: {status: running}
        - cancel: true
    """)
    assert errors == [
        "12:9: cancel: there is no turn to cancel yet (add a user step)",
        "15:9: cancel follows the turn it cancels directly: put the checks after the "
        "cancel step",
    ]


def test_a_wait_takes_seconds_and_replies_after_it_answer_a_timer(tmp_path: Path) -> None:
    steps = ["- user: hi", "- model: Hello.", "- wait: -1", "- wait: true", "- wait: .inf",
             "- wait: five minutes", "- wait: 60", "- model: a timer's", "- wait: 1e16",
             *["- wait: 31536000"] * 101]
    errors = _errors(tmp_path, "\n".join(steps))
    assert errors == [
        "14:15: wait takes a number of seconds that is 0 or more",
        "15:15: wait takes a number of seconds that is 0 or more",
        "16:15: wait takes a number of seconds that is 0 or more",
        "17:15: wait takes a number of seconds that is 0 or more",
        "20:15: wait takes at most 31,536,000 seconds (a year)",
        "120:9: the conversation's waits add up to more than 3,153,600,000 seconds (a "
        "century)",
    ]


def test_a_scenario_is_steps_or_a_conversation(tmp_path: Path) -> None:
    text = HEADER + textwrap.dedent("""\
      - name: both
        state: {name: Ada}
        steps: []
        conversation:
          - user: hi
          - model: Hello.
      - name: tools without a conversation
        tools: {pay: {}}
        steps:
          - expect: {phase: ask}
    """)
    result = run_test_file(str(write(tmp_path, text)))
    assert result.error is not None
    assert [line.split(":", 1)[1] for line in result.error.splitlines()] == [
        "12:10: scenario 'both' has steps and a conversation: a scenario is one or the other",
        "17:10: scenario 'tools without a conversation': tools are stand-ins for a "
        "conversation; machine steps do not call tools",
    ]


def test_stand_ins_and_names_the_workflow_does_not_have(tmp_path: Path) -> None:
    header = HEADER.replace("scenarios:\n", textwrap.dedent("""\
      crm.lookup_customer: {returns: {}}
      pay.twice: {returns: 1, raises: no}
    scenarios:
    """))
    errors = _errors(tmp_path, """
        - user: hi
        - model: Hello.
        - expect: {phase: payy, offered: [crm.lookp], approval: note, called: [notfy]}
        - approve: helpdesk.not
    """, header=header)
    assert errors == [
        "9:3: tool 'crm.lookup_customer': the workflow's tools have no 'crm.lookup_customer';"
        " did you mean 'crm.lookup'?",
        "10:14: tool 'pay.twice': one of returns, raises or echo",
        "16:25: expect phase: the workflow has no phase 'payy'; did you mean 'pay'?",
        "16:41: expect offered: the workflow has no tool 'crm.lookp'; did you mean "
        "'crm.lookup'?",
        "16:63: expect approval: the workflow has no tool 'note' (tools: crm.lookup, pay, "
        "helpdesk.note, go_to_phase, record, read_output)",
        "16:78: expect called: the workflow has no tool or call 'notfy'; did you mean "
        "'notify'?",
        "17:18: approve: the workflow has no tool 'helpdesk.not'; did you mean "
        "'helpdesk.note'?",
    ]


def test_a_call_close_to_a_tool_is_a_typo_warning_a_far_one_a_hallucination(
        tmp_path: Path) -> None:
    warnings = _warnings(tmp_path, """
        - user: hi
        - model: {calls: [{crm.lokup: {}}, {weather.now: {}}, {go_to_phase: {phase: humna}}]}
        - expect: {results: [refused, refused, refused]}
        - model: Hello.
    """)
    assert "13:26: model calls 'crm.lokup', which the workflow does not have; did you mean " \
           "'crm.lookup'? (a call of an unknown tool is refused)" in warnings
    assert "13:83: go_to_phase: the workflow has no phase 'humna'; did you mean 'human'?" \
           in warnings
    assert not any("weather.now" in w for w in warnings)


def test_stand_ins_and_mocks_no_conversation_calls_are_warnings(tmp_path: Path) -> None:
    warnings = _warnings(tmp_path, """
        - user: hi
        - model: Hello.
    """)
    assert warnings == [
        "4:3: mock 'notify' is never called by any scenario",
        "6:3: tool 'crm.lookup' is never called by any scenario",
        "7:3: tool 'pay' is never called by any scenario",
        "8:3: tool 'helpdesk.note' is never called by any scenario",
    ]


_TURN = st.lists(st.sampled_from(["refused", "record", "text"]), min_size=0, max_size=3)


@settings(max_examples=25, deadline=None)
@given(turns=st.lists(_TURN, min_size=1, max_size=4), drop=st.integers(min_value=0))
def test_a_conversation_passes_exactly_when_its_replies_match_its_turns(
        tmp_path_factory: object, turns: list[list[str]], drop: int) -> None:
    """Property: turns of tool replies each closed by a text reply pass, with the right
    results at every point; dropping any one model step makes the scenario fail, at the
    line of a model step of that turn (a turn asks for a reply that is not written)."""
    tmp_path = tmp_path_factory.mktemp("prop")  # type: ignore[attr-defined]
    steps: list[str] = []
    reply = 0
    for number, kinds in enumerate(turns):
        steps.append(f"- user: turn {number}")
        for kind in kinds:
            reply += 1
            if kind == "refused":
                steps += [f"- model: {{calls: [{{weather.now{reply}: {{}}}}]}}",
                          f"- expect: {{results: [{{status: refused, contains: "
                          f"\"now{reply}'\"}}], status: running}}"]
            elif kind == "record":
                steps += [f"- model: {{calls: [{{record: {{name: Ada {reply}}}}}]}}",
                          f"- expect: {{results: [ok], state: {{name: Ada {reply}}}}}"]
        steps += [f"- model: reply {number}", f"- expect: {{reply: reply {number}, "
                                              "status: idle}"]
    result = conversation(tmp_path, "\n".join(steps))
    assert result.error is None, result.error
    assert result.scenarios[0].failure is None, result.scenarios[0].failure
    models = [i for i, s in enumerate(steps) if s.startswith("- model:")]
    gone = models[drop % len(models)]
    result = conversation(tmp_path, "\n".join(s for i, s in enumerate(steps) if i != gone))
    assert result.error is None, result.error
    message = failure(result)
    assert "expect failed" in message or "the turn asks for another reply" in message, message


REPO = Path(__file__).resolve().parents[2]


def test_the_guides_conversation_example_runs_as_written(tmp_path: Path) -> None:
    """docs/workflows.md's example passes against the bundled refund desk (with the
    mocks its effects need)."""
    guide = (REPO / "docs" / "workflows.md").read_text(encoding="utf-8")
    section = guide.split("### Conversation scenarios", 1)[1]
    example = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    header = (f"phaseflow-test: 1\nworkflow: {REPO / 'workflows' / 'refund-desk.yaml'}\n"
              "mocks:\n  fetch_refund_policy: {}\n")
    path = tmp_path / "guide.test.yaml"
    path.write_text(header + example)
    result = run_test_file(str(path))
    assert result.error is None, result.error
    assert [s.failure for s in result.scenarios] == [None]


def test_the_format_reference_names_every_conversation_step_and_check() -> None:
    from phaseflow.testing import convsteps

    reference = (REPO / "docs" / "format.md").read_text(encoding="utf-8")
    names = {*convsteps.CONVERSATION_STEPS, *convsteps.CONVERSATION_EXPECT_KEYS,
             *convsteps.RESULT_STATUSES, *convsteps.SESSION_STATUSES, "echo", "tools",
             "conversation", "scope", "reason", "contains"}
    prose = re.sub(r"```.*?```", "", reference, flags=re.S)
    quoted = " ".join(re.findall(r"`[^`\n]+`", prose))
    missing = sorted(n for n in names if not re.search(rf"(?<![\w.]){re.escape(n)}(?![\w.])",
                                                       quoted))
    assert not missing, f"docs/format.md does not document: {missing}"
