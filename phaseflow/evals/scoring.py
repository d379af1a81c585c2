"""Scoring: each conversation against its scenario's criteria, and pass^k.

pass^k is tau-bench's: the chance that all k trials of a task succeed, estimated
without bias from n trials with c successes as C(c, k) / C(n, k), and averaged over
tasks. Pure functions of the conversations; no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import comb

from phaseflow.evals.criteria import Criterion
from phaseflow.evals.transcript import Conversation, frames

__all__ = ["Failure", "Verdict", "pass_hat_k", "pass_hat_ks", "score"]


@dataclass(frozen=True, slots=True)
class Failure:
    """One criterion that failed: ``kind`` is ``expect`` (did not hold at the end),
    ``never`` (held at some point), ``judged`` (the judge said no) or ``ended`` (the
    conversation could not run to its end: a failed turn, a harness error)."""

    kind: str
    criterion: str
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Verdict:
    passed: bool
    failures: tuple[Failure, ...]


def score(conversation: Conversation, expect: Sequence[Criterion],
          never: Sequence[Criterion]) -> Verdict:
    """Every ``expect`` criterion must hold at the end; no ``never`` criterion may hold
    after any event; a judged criterion the judge failed fails the conversation."""
    failures: list[Failure] = []
    if conversation.ended in ("failed", "error"):
        failures.append(Failure("ended", conversation.ended,
                                conversation.error or "the conversation did not end normally"))
    broken: dict[str, str] = {}
    facts: dict[str, object] = {}
    phase = conversation.initial_phase
    for facts, phase in frames(conversation):
        for criterion in never:
            if criterion.source in broken:
                continue
            held, _ = criterion.holds(facts, phase)
            if held:
                broken[criterion.source] = (f"held in phase {phase} after turn "
                                            f"{facts.get('turns', 0)}")
    failures.extend(Failure("never", c.source, broken[c.source]) for c in never
                    if c.source in broken)  # in the order written
    for criterion in expect:
        held, error = criterion.holds(facts, phase)
        if not held:
            failures.append(Failure("expect", criterion.source,
                                    error or f"false at the end (phase {phase})"))
    judged = conversation.judgement
    if judged is not None and judged.passed is False:
        failures.append(Failure("judged", judged.rubric, judged.reason))
    return Verdict(not failures, tuple(failures))


def pass_hat_k(trials: int, successes: int, k: int) -> float:
    """C(c, k) / C(n, k): the chance that k trials drawn from the n all succeeded."""
    if not 0 < k <= trials or not 0 <= successes <= trials:
        raise ValueError(f"pass^k needs 0 < k <= n and 0 <= c <= n (n={trials}, "
                         f"c={successes}, k={k})")
    return comb(successes, k) / comb(trials, k)


def pass_hat_ks(tasks: Sequence[tuple[int, int]]) -> list[float]:
    """pass^k for k = 1..min n, the mean over ``tasks`` of (n trials, c successes)."""
    if not tasks:
        return []
    most = min(n for n, _ in tasks)
    sums = [0.0] * most
    for n, c in tasks:
        if not 0 <= c <= n:
            raise ValueError(f"pass^k needs 0 <= c <= n (n={n}, c={c})")
        # C(c, k) / C(n, k) = prod over i < k of (c - i) / (n - i): each k from the last
        value = 1.0
        for k in range(1, most + 1):
            value *= (c - k + 1) / (n - k + 1)
            sums[k - 1] += value
    return [total / len(tasks) for total in sums]
