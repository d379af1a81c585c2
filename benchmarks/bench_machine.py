"""Benchmarks of the phase machine's hot paths (run by hand: python benchmarks/bench_machine.py).

1. A turn boundary that takes a transition (guard true, one ``set`` in on_exit and one in
   on_enter, a history record) on a 100-phase chain, against the same step in
   pytransitions (a ``Machine`` of 100 states with a condition and on_enter/on_exit
   callbacks, ``model.next()``), interleaved in one process; prints the ratio.
2. A boundary that stays (no guard true).
3. ``describe_navigation`` for the spec's example phase.
4. Making a machine from a compiled 1,000-phase workflow, and memory per machine.
5. Workflows that compose: boundaries that enter and return from a call (a phase that
   calls a two-phase workflow, ``returned`` read by the caller's guard), against the
   boundaries of the same loop with a plain transition in place of the call, and the
   plain chain of 1. when the workflow composes nothing (``--calls`` runs only this).

Timings are the median of interleaved rounds, per operation, by the wall clock; with
``--cpu`` the interleaved rounds are timed by the thread's CPU time (``time.thread_time``)
instead, which other jobs on a shared machine move much less (a long batch is not charged
for the time it waited for a core).
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import contextlib

from phaseflow.machine import PhaseMachine, State
from phaseflow.spec.model import (
    Call,
    Input,
    Phase,
    SetEffect,
    Tool,
    Transition,
    Workflow,
)

N_PHASES = 100
BATCH = 2_000
ROUNDS = 25


def chain_workflow(n: int, when: str = "state.go") -> Workflow:
    phases = [
        Phase(
            f"p{i}",
            goal=f"Phase {i}.",
            on_exit=[SetEffect({"left": i})],
            on_enter=[SetEffect({"entered": i})],
            transitions=[Transition(f"p{(i + 1) % n}", when)],
        )
        for i in range(n)
    ]
    return Workflow(name="chain", initial="p0", phases={p.name: p for p in phases},
                    machine_factory=PhaseMachine.from_workflow)


def phaseflow_step(go: bool) -> Callable[[int], None]:
    wf = chain_workflow(N_PHASES)
    m = wf.machine()
    s = State({"go": go})
    turn = [0]
    advance = m.advance_sync

    def run(k: int) -> None:
        t = turn[0]
        for i in range(t, t + k):
            advance(s, turn=i)
        turn[0] = t + k
        s.clear_changes()

    return run


def phaseflow_async_step() -> Callable[[int], None]:
    """``await machine.advance(...)`` driven without an event loop (what a coroutine
    costs on top of ``advance_sync`` when no effect is async)."""
    wf = chain_workflow(N_PHASES)
    m = wf.machine()
    s = State({"go": True})

    def run(k: int) -> None:
        for i in range(k):
            coro = m.advance(s, turn=i)
            with contextlib.suppress(StopIteration):
                coro.send(None)
        s.clear_changes()

    return run


def transitions_step(go: bool) -> Callable[[int], None]:
    from transitions import Machine

    class Model:
        def __init__(self) -> None:
            self.go = go
            self.left = -1
            self.entered = -1

        def is_go(self) -> bool:
            return self.go

    model = Model()
    states: list[dict[str, Any]] = []
    for i in range(N_PHASES):
        def on_exit(i: int = i) -> None:
            model.left = i

        def on_enter(i: int = i) -> None:
            model.entered = i

        states.append({"name": f"s{i}", "on_enter": [on_enter], "on_exit": [on_exit]})
    transitions = [
        {"trigger": "next", "source": f"s{i}", "dest": f"s{(i + 1) % N_PHASES}",
         "conditions": "is_go"}
        for i in range(N_PHASES)
    ]
    Machine(model=model, states=states, transitions=transitions, initial="s0",
            auto_transitions=False)
    step = model.next  # type: ignore[attr-defined]

    def run(k: int) -> None:
        for _ in range(k):
            step()

    return run


#: the clock of the interleaved rounds (``--cpu``: the thread's CPU time)
CLOCK: Callable[[], float] = time.perf_counter


def interleaved(fns: dict[str, Callable[[int], None]]) -> dict[str, float]:
    """Median µs per operation of each function, measured in alternating batches."""
    clock = CLOCK
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():
        fn(BATCH)  # warm up
    gc.disable()
    try:
        for _ in range(ROUNDS):
            for name, fn in fns.items():
                t0 = clock()
                fn(BATCH)
                samples[name].append((clock() - t0) / BATCH * 1e6)
    finally:
        gc.enable()
    return {name: statistics.median(v) for name, v in samples.items()}


def bench_navigation() -> float:
    from phaseflow.spec.model import Navigation

    phases = {
        "greet": Phase("greet", goal="Learn who.", transitions=[
            Transition("locate_order", "state.customer_id", "Customer verified")]),
        "locate_order": Phase(
            "locate_order", goal="Identify the order to refund.", requires=["customer_id"],
            needs=["order_id", "amount"], tools=["find_order"],
            transitions=[
                Transition("refund", "state.amount <= 500",
                           "Small refund, no approval from a manager"),
                Transition("escalate", "state.amount > 500"),
                Transition("escalate", None, "The customer asks for a human", "model"),
            ]),
        "refund": Phase("refund", goal="Refund.", terminal=True),
        "escalate": Phase("escalate", goal="Escalate.", terminal=True),
    }
    wf = Workflow(name="nav", initial="greet", phases=phases, navigation=Navigation(),
                  tools={"find_order": Tool("find_order")},
                  machine_factory=PhaseMachine.from_workflow)
    m = wf.machine()
    s = State({"customer_id": "C-1"})
    m.advance_sync(s, turn=2)
    n = 5_000
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            m.describe_navigation(s)
        best = min(best, (time.perf_counter() - t0) / n * 1e6)
    return best


def bench_build(n_phases: int = 1_000) -> tuple[float, float, float]:
    """µs to make a machine from a compiled workflow, bytes per fresh machine, and bytes
    per machine after one transition (history allocated)."""
    wf = chain_workflow(n_phases)
    wf.machine()  # the workflow's shared index is created once
    n = 20_000
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            wf.machine()
        best = min(best, (time.perf_counter() - t0) / n * 1e6)
    count = 1_000
    gc.collect()
    tracemalloc.start()
    snap0 = tracemalloc.take_snapshot()
    keep = [wf.machine() for _ in range(count)]
    snap1 = tracemalloc.take_snapshot()
    fresh = sum(s.size_diff for s in snap1.compare_to(snap0, "filename")) / count
    s = State({"go": True})
    for m in keep:
        m.advance_sync(s, turn=1)
    s.take_changes()
    snap2 = tracemalloc.take_snapshot()
    moved = sum(st.size_diff for st in snap2.compare_to(snap0, "filename")) / count
    tracemalloc.stop()
    del keep
    return best, fresh, moved


def call_loop(composed: bool) -> Workflow:
    """``p0 -> c -> p0``: ``c`` calls ``inner`` (``i0 -> i1``, terminal) when ``composed``,
    else it is a plain phase with a plain ``c -> i`` transition in place of the call's
    two boundaries (the same number of boundaries, guards and sets)."""
    inner = Workflow(name="inner", initial="i0", phases={
        "i0": Phase("i0", goal="i0", transitions=[Transition("i1", "state.go")]),
        "i1": Phase("i1", goal="i1", terminal=True),
    }, machine_factory=PhaseMachine.from_workflow)
    if composed:
        c = Phase("c", goal="c", call=Call("inner", {"go": Input("go")}),
                  transitions=[Transition("p0", "returned == 'i1'")])
        phases = [c]
    else:
        phases = [Phase("c", goal="c", transitions=[Transition("i", "state.go")]),
                  Phase("i", goal="i", transitions=[Transition("p0", "state.go")])]
    phases.append(Phase("p0", goal="p0", on_enter=[SetEffect({"entered": 0})],
                        transitions=[Transition("c", "state.go")]))
    return Workflow(name="outer", initial="p0", phases={p.name: p for p in phases},
                    uses={"inner": "inner.yaml"} if composed else {},
                    library={"inner": inner} if composed else {},
                    machine_factory=PhaseMachine.from_workflow)


def call_step(composed: bool) -> Callable[[int], None]:
    """``k`` rounds of the loop: three transitions each, with a call's entry and return
    (two boundaries) or without (three boundaries)."""
    m = call_loop(composed).machine()
    s = State({"go": True})
    turn = [0]
    advance = m.advance_sync
    per_round = 2 if composed else 3

    def run(k: int) -> None:
        t = turn[0]
        for i in range(t, t + k * per_round):
            advance(s, turn=i)
        turn[0] = t + k * per_round
        s.clear_changes()

    return run


def bench_calls() -> None:
    t = interleaved({
        "round with a call (3 transitions, enter + return)": call_step(True),
        "round without (3 plain transitions)": call_step(False),
    })
    for name, us in t.items():
        print(f"  {name:<52} {us:8.2f} µs")
    plain = t["round without (3 plain transitions)"] / 3
    crossing = (t["round with a call (3 transitions, enter + return)"] - 3 * plain) / 2
    print(f"a transition: {plain:.2f} µs; entering or returning adds {crossing:.2f} µs: a "
          f"boundary that crosses costs {(plain + crossing) / plain:.2f}x a plain "
          "transition   (target <= 1.5)")


def main() -> None:
    if "--calls" in sys.argv[1:]:
        bench_calls()
        return
    import transitions

    global CLOCK
    if "--cpu" in sys.argv[1:]:
        CLOCK = time.thread_time
    print(f"python {sys.version.split()[0]}, transitions {transitions.__version__}, "
          f"{N_PHASES}-phase chain, {ROUNDS} interleaved rounds of {BATCH}, timed by "
          f"{'CPU time' if CLOCK is time.thread_time else 'the wall clock'}")
    t = interleaved({
        "phaseflow advance_sync (transition)": phaseflow_step(True),
        "phaseflow advance (coroutine, transition)": phaseflow_async_step(),
        "pytransitions model.next() (transition)": transitions_step(True),
        "phaseflow advance_sync (stay)": phaseflow_step(False),
        "pytransitions model.next() (condition false)": transitions_step(False),
    })
    for name, us in t.items():
        print(f"  {name:<48} {us:8.2f} µs")
    ratio = t["phaseflow advance_sync (transition)"] / t["pytransitions model.next() (transition)"]
    ratio_async = (t["phaseflow advance (coroutine, transition)"]
                   / t["pytransitions model.next() (transition)"])
    stay = t["phaseflow advance_sync (stay)"] / t["pytransitions model.next() (condition false)"]
    print(f"ratio phaseflow/pytransitions, transition: {ratio:.3f} (async advance: "
          f"{ratio_async:.3f}); stay: {stay:.3f}   (target <= 0.5, aim 0.2)")
    print(f"describe_navigation (spec example phase): {bench_navigation():.2f} µs")
    build, fresh, moved = bench_build()
    print(f"machine from a compiled 1,000-phase workflow: {build:.2f} µs")
    print(f"memory per machine: {fresh:.0f} B fresh, {moved:.0f} B after one transition")
    bench_calls()


if __name__ == "__main__":
    main()
