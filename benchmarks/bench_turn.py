"""Micro-benchmarks of the turn core (run by hand: ``python benchmarks/bench_turn.py``).

Measures, with ``time.perf_counter`` over many iterations:

* a full turn with 5 tool calls through all four parts (execution, turn state,
  continuation with its exactly-once ledger, tool output), without and with a JSON
  snapshot of the continuation after every ledger step (what a host persists);
* ``begin_request`` and ``complete`` on 1,000- and 10,000-message histories, which must
  not scale with the history length;
* ``to_json``/``from_json`` of a 1,000-message continuation, which must (linearly).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from phaseflow.turn import (
    AssistantMessage,
    Continuation,
    OutputReference,
    PromptKind,
    Rejected,
    RequestOutcome,
    StopReason,
    SystemMessage,
    ToolCall,
    ToolResultMessage,
    TrustScope,
    TurnExecution,
    TurnId,
    TurnProgress,
    UserMessage,
    present_lines,
    result,
)

SHA = "0" * 64
CALLS = tuple(ToolCall.of(f"call_{i}", "bash", {"command": f"echo {i}"}) for i in range(5))
OUTPUT = "".join(f"line {n}\n" for n in range(40))
REF = OutputReference("out-1", "text/plain", len(OUTPUT), SHA)


def ok(value: object) -> object:
    if isinstance(value, Rejected):
        raise SystemExit(f"unexpected rejection: {value}")
    return value


def history(n: int) -> Continuation:
    msgs: list[object] = [SystemMessage("system")]
    i = 0
    while len(msgs) < n:
        msgs += [UserMessage(f"q{i}"), AssistantMessage(f"a{i}")]
        i += 1
    c = Continuation.restore(msgs[:n], 1, 1)  # type: ignore[arg-type]
    assert isinstance(c, Continuation)
    return c


def full_turn(
    ex: TurnExecution, m: TurnProgress, c: Continuation, snapshot: bool
) -> tuple[TurnExecution, TurnProgress, Continuation]:
    ex = ok(ex.admit_prompt(PromptKind.FOLLOW_UP, "do it")).execution  # type: ignore[attr-defined]
    started = ok(m.start_turn())
    m, turn = started.progress, started.turn_id  # type: ignore[attr-defined]
    rid = f"req{turn}"
    c = ok(c.begin_request(rid, turn, "do it"))  # type: ignore[assignment]
    ex = ok(ex.provider_started())  # type: ignore[assignment]
    for piece in ("Running ", "five ", "commands."):
        m = ok(m.text_delta(turn, piece))  # type: ignore[assignment]
    for call in CALLS:
        m = ok(m.tool_call(turn, call))  # type: ignore[assignment]
    ended = ok(m.stream_ended(turn, StopReason.TOOL_USE))
    m = ended.progress  # type: ignore[attr-defined]
    assert c.request is not None
    group = c.request.messages.append(AssistantMessage(ended.text, ended.tool_calls))  # type: ignore[attr-defined]
    c = ok(c.checkpoint_tool_group(rid, group, CALLS))  # type: ignore[assignment]
    assert c.checkpoint is not None
    cp = c.checkpoint.id
    for call in CALLS:
        if ex.trusted_scope(call) is None:
            ex = ok(ex.auto_approve(call, TrustScope.TURN))  # type: ignore[assignment]
        ex = ok(ex.tool_started(call.id, call.name)).execution  # type: ignore[attr-defined]
        c = ok(c.admit_call(rid, cp, call))  # type: ignore[assignment]
        if snapshot:
            c.to_json()
        outcome = result(ok(present_lines(OUTPUT, 20, reference=REF)))  # type: ignore[arg-type]
        c = ok(c.complete_call(rid, cp, call, outcome))  # type: ignore[assignment]
        if snapshot:
            c.to_json()
        m = ok(m.tool_result(turn, call.id, outcome)).progress  # type: ignore[attr-defined]
        ex = ok(ex.tool_completed(call.id))  # type: ignore[assignment]
    m = ok(m.text_delta(turn, "All done."))  # type: ignore[assignment]
    final = ok(m.stream_ended(turn, StopReason.END_TURN))
    m = final.progress  # type: ignore[attr-defined]
    reply = AssistantMessage(final.text)  # type: ignore[attr-defined]
    outcome_msgs = c.checkpoint.resolved_messages().append(reply)  # type: ignore[union-attr]
    assert c.request is not None
    c = ok(c.complete(RequestOutcome(rid, turn, c.request.revision, outcome_msgs)))  # type: ignore[assignment]
    ex = ok(ex.finish_completion()).execution  # type: ignore[attr-defined]
    return ex, m, c


def timeit(label: str, fn: Callable[[], object], iterations: int, repeats: int = 5) -> float:
    """Best of ``repeats`` runs of ``iterations`` calls (the least disturbed by other load)."""
    for _ in range(min(iterations, 50)):
        fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(iterations):
            fn()
        best = min(best, (time.perf_counter() - start) / iterations * 1e6)
    print(f"{label:<58} {best:>10.2f} µs/op   (best of {repeats} x {iterations})")
    return best


def main() -> None:
    print(f"python {sys.version.split()[0]}")
    base_c = history(1000)
    ex0, m0 = TurnExecution(), TurnProgress()
    timeit(
        "full turn, 5 tool calls, 4 parts (1,000-msg history)",
        lambda: full_turn(ex0, m0, base_c, snapshot=False),
        500,
    )
    small = history(20)
    timeit(
        "full turn, 5 tool calls + JSON snapshot per step (20 msgs)",
        lambda: full_turn(ex0, m0, small, snapshot=True),
        100,
    )

    state = [ex0, m0, base_c]

    def chained() -> None:
        state[0], state[1], state[2] = full_turn(state[0], state[1], state[2], False)  # type: ignore[arg-type,assignment]

    timeit("full turn, chained (history grows 8 msgs per turn)", chained, 400)
    grown = state[2]
    assert isinstance(grown, Continuation)
    print(f"{'':<58} history now {len(grown.messages)} messages, {len(grown.marks)} marks")
    tool_msgs = sum(isinstance(m, ToolResultMessage) for m in grown.messages)
    assert tool_msgs == 5 * len(grown.marks)

    for n in (1000, 10000):
        c = history(n)
        active = c.begin_request("r", TurnId(1), "hello")
        assert isinstance(active, Continuation) and active.request is not None
        outcome = RequestOutcome(
            "r", TurnId(1), active.revision, active.request.messages.append(AssistantMessage("hi"))
        )
        timeit(
            f"begin_request on {n:,} messages",
            lambda c=c: c.begin_request("r", TurnId(1), "hello"),
            20_000,
        )  # type: ignore[misc]
        timeit(f"complete on {n:,} messages", lambda a=active, o=outcome: a.complete(o), 20_000)  # type: ignore[misc]
        rebuilt = RequestOutcome(
            "r", TurnId(1), active.revision, type(outcome.messages)(list(outcome.messages))
        )
        timeit(
            f"complete on {n:,} messages, unshared outcome (slow path)",
            lambda a=active, o=rebuilt: a.complete(o),
            50,
        )  # type: ignore[misc]

    c = history(1000)
    data = c.to_json()
    timeit("Continuation.to_json, 1,000 messages", c.to_json, 100)
    timeit(
        "Continuation.from_json (validating), 1,000 messages",
        lambda: Continuation.from_json(data),
        50,
    )


if __name__ == "__main__":
    main()
