"""Criteria: the guard language with the eval's names, each read from the facts."""

from __future__ import annotations

from typing import Any

import pytest

from phaseflow.evals.criteria import CriterionError, compile_criterion

FACTS: dict[str, Any] = {
    "state": {"amount": 900, "customer": {"verified": True}}, "status": "finished",
    "data": {"refunds": [{"order_id": "O-7"}]}, "turns": 4,
    "called": {"payments.issue_refund": 1}, "args": {"payments.issue_refund": {"amount": 900}},
    "entered": {"greet": 1, "refund": 1}, "refused": 2,
    "refused_tools": {"payments.issue_refund": 1}, "approvals": 1,
    "approved": {"payments.issue_refund": 1}, "rejected": {}, "errors": 0,
}


@pytest.mark.parametrize(("source", "expected"), [
    ("called('payments.issue_refund')", True),
    ("called('orders.search')", False),
    ("args('payments.issue_refund').amount > 500", True),
    ("args('orders.search').amount > 500", False),  # never called: null, so false
    ("entered('refund') and not entered('manager_approval')", True),
    ("refused == 2 and refused('payments.issue_refund')", True),
    ("refused('crm.lookup_customer')", False),
    ("approvals == 1 and approved('payments.issue_refund')", True),
    ("rejected('payments.issue_refund')", False),
    ("errors == 0", True),
    ("state.amount > 500 and state.customer.verified", True),
    ("len(data.refunds) == 1 and data.refunds[0].order_id == 'O-7'", True),
    ("status == 'finished' and turns == 4", True),
    ("phase == 'done'", True),
    ("phase == 'refund'", False),
])
def test_each_name_reads_its_fact(source: str, expected: bool) -> None:
    held, error = compile_criterion(source).holds(FACTS, "done")
    assert (held, error) == (expected, None)


def test_a_type_error_is_false_with_its_reason() -> None:
    held, error = compile_criterion("state.amount > 'a lot'").holds(FACTS, "done")
    assert held is False
    assert error == "'>' not supported between 'int' and 'str'"


@pytest.mark.parametrize(("source", "message"), [
    ("called(state.tool)", "takes a name in quotes"),
    ("called('a', 'b')", "takes one argument"),
    ("open('/etc/passwd')", "function 'open' is not allowed"),
    ("state.__class__", "_"),
    ("called('x') and", "not an expression"),
    ("", "non-empty"),
])
def test_a_wrong_criterion_says_why(source: str, message: str) -> None:
    with pytest.raises(CriterionError) as raised:
        compile_criterion(source)
    assert message in str(raised.value)
