"""Reference checks without a fixture of their own: a glob that matches no catalogued tool,
and a navigation template that reads an undeclared key."""

from __future__ import annotations

from phaseflow.spec.loader import check_text

BASE = """\
phaseflow: 1
name: refs
initial: start
state:
  order_id: {type: string}
tools:
  crm.lookup: {writes: [order_id]}
navigation:
  template: "{{ phase }} {{ state.ordr_id }}"
phases:
  start:
    goal: Begin.
    tools: ["crm.*", "billing.*"]
    transitions:
      - to: done
        when: state.order_id
  done:
    goal: Finish.
    terminal: true
"""


def test_a_glob_matching_no_tool_and_a_navigation_template_read() -> None:
    found = [(d.code, d.line, d.column, d.message) for d in check_text(BASE).diagnostics]
    assert [(c, ln, col) for c, ln, col, _ in found] == [("PF303", 9, 35), ("PF400", 13, 22)]
    assert "navigation template reads undeclared state key 'ordr_id'" in found[0][3]
    assert "did you mean 'order_id'?" in found[0][3]
    assert "tool pattern 'billing.*' matches no tool in the catalogue" in found[1][3]
