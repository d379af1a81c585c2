"""The write check, once, in the pure core: a host tool's result may write only the keys
its catalogue entry lists, each of its declared type; the rest are refused with a
``write_refused`` event the host sees beside the result."""

from __future__ import annotations

from phaseflow.session import events as ev
from phaseflow.session.tool_calls import judged_writes
from phaseflow.session.values import Done, OfferedTool, PhaseView
from phaseflow.turn.messages import ToolCall, ToolOutcome

CALL = ToolCall("call_1_1_0", "lookup", "{}")
VIEW = PhaseView("intake", tools=(OfferedTool(
    "lookup", "find an order", {"type": "object"}, writes=("order_id", "note"),
    write_types={"order_id": "integer"}),))


def done(*writes: tuple[str, object]) -> Done:
    return Done(ToolOutcome.ok("found"), "ok", tuple(writes))


def test_declared_writes_of_the_declared_type_are_kept_as_they_came() -> None:
    asked = done(("order_id", 42), ("note", {"any": ["json"]}))
    assert judged_writes(asked, CALL, VIEW) is asked


def test_a_key_outside_the_catalogue_and_a_value_of_the_wrong_type_are_refused() -> None:
    judged = judged_writes(done(("order_id", "42"), ("secret", 1), ("note", "kept")),
                           CALL, VIEW)
    assert judged.writes == (("note", "kept"),)
    assert judged.outcome == ToolOutcome.ok("found")  # the model's view is unchanged
    (refused,) = judged.notes
    assert isinstance(refused, ev.ErrorEvent) and refused.code == "write_refused"
    assert refused.message.startswith("lookup (call_1_1_0): not written: 'order_id': ")
    assert "'secret' is not in the tool's writes" in refused.message


def test_a_tool_the_phase_does_not_offer_writes_nothing() -> None:
    judged = judged_writes(done(("order_id", 1)), ToolCall("c", "gone", "{}"), VIEW)
    assert judged.writes == ()
    (refused,) = judged.notes
    assert isinstance(refused, ev.ErrorEvent)
    assert refused.message == "gone (c): not written: 'order_id' is not in the tool's writes"
