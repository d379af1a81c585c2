"""Micro-benchmark of guard expressions: microseconds per evaluation and per compilation.

A guard runs at every turn boundary for every candidate transition, so evaluation cost
matters far more than compile cost (once per workflow load). Run:

    python benchmarks/bench_guards.py [--number N]
"""

from __future__ import annotations

import argparse
import sys
import timeit
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from phaseflow.expr import GuardContext, compile_guard

STATE: dict[str, Any] = {
    "amount": 120,
    "customer_id": "c-42",
    "name": "Alice Smith",
    "items": [{"sku": "a", "qty": 2}, {"sku": "b", "qty": 1}],
    "tags": ["vip", "eu"],
    "customer": {"tier": "gold", "address": {"country": "FR"}},
}
CONTEXT = GuardContext(
    phase="review", turn=12, turns_in_phase=3, seconds_in_phase=41.5, visits={"greet": 1}
)

GUARDS: dict[str, str] = {
    "typical": "state.amount <= 500 and state.customer_id",
    "missing key": "state.refund_id",
    "nested + chain": "0 < state.items[0].qty <= 5 and state.customer.address.country == 'FR'",
    "functions": "startswith(lower(state.name), 'al') and len(state.tags) >= 2",
    "context": "turns_in_phase >= 3 or visits.greet > 2 or seconds_in_phase > 300",
    "type error": "state.name < 1",
}


def per_call_us(statement: Any, number: int) -> float:
    """Best of 5 repeats, in microseconds per call (the minimum is the least noisy)."""
    return min(timeit.repeat(statement, number=number, repeat=5)) / number * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=200_000, help="calls per repeat")
    args = parser.parse_args()
    number: int = args.number

    print(f"{'guard':<16} {'evaluate µs':>12} {'compile µs':>12}  source")
    for label, source in GUARDS.items():
        guard = compile_guard(source)
        evaluate = guard.evaluate
        evaluate_us = per_call_us(lambda: evaluate(STATE, CONTEXT), number)  # noqa: B023
        compile_us = per_call_us(lambda: compile_guard(source), max(number // 100, 100))  # noqa: B023
        print(f"{label:<16} {evaluate_us:>12.3f} {compile_us:>12.1f}  {source}")

    baseline = per_call_us(
        lambda: STATE.get("amount", 0) <= 500 and STATE.get("customer_id"), number
    )
    print(f"\nhand-written Python equivalent of 'typical': {baseline:.3f} µs")


if __name__ == "__main__":
    main()
