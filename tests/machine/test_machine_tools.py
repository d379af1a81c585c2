"""active_tools / tool_allowed: the phase's tool filter."""

from __future__ import annotations

from phaseflow.machine import PhaseMachine
from phaseflow.spec.model import Phase, Tool
from tests.support.machines import workflow

CATALOGUE = {n: Tool(n) for n in ("crm.lookup", "crm.update", "web-search", "mail.send")}


def _m(tools: list[str] | None, catalogue: dict[str, Tool] | None = CATALOGUE) -> PhaseMachine:
    return workflow([Phase("a", tools=tools)], tools=catalogue).machine()


def test_no_filter_is_none() -> None:
    m = _m(None)
    assert m.active_tools() is None and m.tool_allowed("anything")


def test_empty_list_allows_nothing() -> None:
    m = _m([])
    assert m.active_tools() == () and not m.tool_allowed("crm.lookup")


def test_globs_expand_against_the_catalogue_in_catalogue_order() -> None:
    m = _m(["web-search", "crm.*", "crm.update", "nomatch.*"])
    assert m.active_tools() == ("web-search", "crm.lookup", "crm.update")
    assert m.tool_allowed("crm.update") and not m.tool_allowed("mail.send")
    assert not m.tool_allowed("nomatch.x")


def test_question_mark_and_brackets() -> None:
    assert _m(["mail.sen?", "crm.[l]*"]).active_tools() == ("mail.send", "crm.lookup")


def test_without_catalogue_patterns_are_kept() -> None:
    m = _m(["crm.*", "web-search"], catalogue=None)
    assert m.active_tools() == ("crm.*", "web-search")
    assert m.tool_allowed("crm.anything") and m.tool_allowed("web-search")
    assert not m.tool_allowed("mail.send")


def test_in_code_machine_keeps_patterns() -> None:
    m = PhaseMachine("a")
    m.add_phase(Phase("a", tools=["x.*"]))
    assert m.active_tools() == ("x.*",)


def test_tools_follow_the_current_phase() -> None:
    from phaseflow.machine import State
    from phaseflow.spec.model import Transition

    wf = workflow([Phase("a", tools=["crm.*"], transitions=[Transition("b")]),
                   Phase("b", tools=["mail.send"])], tools=CATALOGUE)
    m = wf.machine()
    assert m.active_tools() == ("crm.lookup", "crm.update")
    m.advance_sync(State(), turn=1)
    assert m.active_tools() == ("mail.send",)
