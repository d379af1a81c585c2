"""Turn execution: values normalised on construction, edit ranges, and JSON restores that
refuse inconsistent values."""

from __future__ import annotations

import pytest

from phaseflow.errors import PhaseflowError
from phaseflow.turn import (
    PromptKind,
    TextPart,
    ToolCall,
    TurnExecution,
)
from tests.support.turn_strategies import (
    assert_json_identity,
    ok,
    rejected,
)
from tests.support.turn_values import thinking


def test_values_never_hold_a_list() -> None:
    ex = TurnExecution(steering=["a", [TextPart("b")]])  # type: ignore[list-item]
    assert ex.steering == ("a", (TextPart("b"),))
    assert_json_identity(ex, TurnExecution.from_json)
    admitted = ok(thinking().admit_prompt(PromptKind.FOLLOW_UP, [TextPart("x")]))  # type: ignore[arg-type]
    assert admitted.execution.follow_up == ((TextPart("x"),),)
    call = ToolCall("c", "t", '{"b": 1, "a": [1.5, "\u00e9"]}')
    assert call.arguments == '{"a":[1.5,"é"],"b":1}' and call == ToolCall.of(
        "c", "t", {"b": 1, "a": [1.5, "é"]}
    )
    assert ToolCall("c", "t", {"x": 1}).arguments == '{"x":1}'  # type: ignore[arg-type]
    with pytest.raises(PhaseflowError):
        ToolCall("c", "t", "not json")
    with pytest.raises(PhaseflowError):
        ToolCall("c", "t", "NaN")


def test_edit_ranges() -> None:
    ex = ok(TurnExecution().set_edit_range("/src/a.py", 10, 20))
    assert ex.may_edit("/src/a.py", 12, 18) and not ex.may_edit("/src/a.py", 5, 12)
    assert ex.may_edit("/src/other.py", 1, 1000)
    assert ok(ex.set_edit_range("/src/a.py", 1, 2)).edit_range("/src/a.py").end == 2  # type: ignore[union-attr]
    rejected(ex.set_edit_range("relative/a.py", 1, 2), "invalid_edit_range")
    rejected(ex.set_edit_range("/a", 5, 2), "invalid_edit_range")
    rejected(ex.set_edit_range("/a", 0, 2), "invalid_edit_range")
    assert ok(ex.set_edit_range("C:\\w\\a.py", 1, 1)).edit_range("C:\\w\\a.py")
    assert ex.clear_edit_range("/src/a.py").edit_ranges == ()


def test_json_restore_rejects_inconsistent_values() -> None:
    good = ok(thinking().tool_started("a", "bash")).execution.to_json()
    bad = dict(
        good,
        phase={
            "kind": "active",
            "activity": {"kind": "tool_execution", "active_tools": []},
            "pending_approval": None,
            "error": None,
        },
    )
    rejected(TurnExecution.from_json(bad), "invalid_restore")
    turn_trust = dict(
        TurnExecution().to_json(),
        trust=[{"key": {"tool": "t", "kind": "name", "detail": ""}, "scope": "turn"}],
    )
    rejected(TurnExecution.from_json(turn_trust), "invalid_restore")
    rejected(TurnExecution.from_json({"mode": "exec"}), "malformed_json")
    rejected(TurnExecution.from_json([1, 2]), "malformed_json")
