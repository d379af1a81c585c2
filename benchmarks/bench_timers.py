"""Timers: how long one ``phaseflow serve`` worker takes to fire the due timers of many
sessions on SQLite (run by hand: ``python benchmarks/bench_timers.py [SESSIONS]
[--code DIR]... [--profile FILE]``).

Setup (not timed): SESSIONS sessions (default 10,000) of a two-phase workflow are made
in one SQLite file with the Python API, each with one turn, in a phase whose transition
has ``after: 2m``, stored as if an hour ago (the agent's clock set back): every
deadline has passed. Then one ``phaseflow serve`` worker
(``--timers 0.2``, the scripted model) is started on the file, and the time from its
start until the store's index of timers is empty - every timer fired - is measured.
Afterwards every session is checked: in the timer's phase, exactly two turns (the
user's and the timer's), the ``on_enter`` effect recorded once.

``--code DIR`` (repeatable): the worker runs the phaseflow of DIR (another checkout, e.g.
``git archive COMMIT | tar -x -C DIR``) instead of this one's, each on a fresh copy of the
same sessions, one after another: a before/after comparison in one run. Reported for
each: the wall time, the worker's CPU time (user + system, read from ``/proc`` before it
is stopped) per timer, and the load average while it ran. ``--profile FILE``: the worker
runs under cProfile, its statistics written to FILE when it stops.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WORKFLOW = """\
phaseflow: 1
name: waiter
initial: wait
state:
  followed: {type: integer, default: 0}
phases:
  wait:
    goal: Wait for the customer's answer.
    transitions:
      - to: follow_up
        after: 2m
  follow_up:
    goal: Follow up with the customer.
    on_enter:
      - set: {followed: 1}
    transitions:
      - to: done
        when: "state.followed > 1"
  done:
    goal: Done.
    terminal: true
"""


async def _setup(folder: Path, count: int) -> None:
    from phaseflow.providers.scripted import ScriptedProvider
    from phaseflow.session import Agent
    from phaseflow.stores.sqlite import SQLiteStore

    store = SQLiteStore(str(folder / "sessions.db"))
    # the sessions talked an hour ago (the agent's wall clock): every deadline has passed
    agent = Agent(str(folder / "waiter.yaml"), ScriptedProvider(["Hello."]), store=store,
                  clock=lambda: time.time() - 3600)
    gate = asyncio.Semaphore(64)

    async def one(k: int) -> None:
        async with gate:
            await (await agent.session(f"s{k:05d}")).reply("hi")

    await asyncio.gather(*(one(k) for k in range(count)))
    store.close()


def _cpu_seconds(pid: int) -> float:
    """The process's user + system CPU time so far (Linux: ``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _fire(folder: Path, code: Path, count: int, profile: str | None) -> dict[str, float]:
    """One worker running ``code`` fires every timer of the sessions in ``folder``."""
    db = sqlite3.connect(folder / "sessions.db")
    assert db.execute("SELECT count(*) FROM timers").fetchone()[0] == count
    env = {**os.environ, "PYTHONPATH": str(code)}
    log = open(folder / "serve.log", "w", encoding="utf-8")  # noqa: SIM115
    python = [sys.executable] + (["-m", "cProfile", "-o", profile] if profile else [])
    load_before = os.getloadavg()[0]
    t0 = time.perf_counter()
    server = subprocess.Popen(
        [*python, "-m", "phaseflow.cli.main", "serve", str(folder / "waiter.yaml"),
         "--provider", f"scripted:{folder / 'script.yaml'}", "--store",
         str(folder / "sessions.db"), "--timers", "0.2", "--port", "0", "--log-format",
         "json"], cwd=folder, env=env, stdout=subprocess.DEVNULL, stderr=log)
    try:
        while True:
            time.sleep(0.1)
            left = db.execute("SELECT count(*) FROM timers").fetchone()[0]
            finished = db.execute("SELECT count(*) FROM sessions WHERE turn = 2 AND status"
                                  " = 'idle'").fetchone()[0]
            if left == 0 and finished == count:
                break
            if time.perf_counter() - t0 > 600 or server.poll() is not None:
                raise SystemExit(f"gave up: {left} timers left, {finished} sessions done")
        elapsed = time.perf_counter() - t0
        cpu = _cpu_seconds(server.pid)
        load_after = os.getloadavg()[0]
    finally:
        server.terminate()
        server.wait(60)
    twice = db.execute(
        "SELECT count(*) FROM (SELECT session_id FROM events WHERE data LIKE"
        " '%\"type\":\"turn_started\"%' GROUP BY session_id HAVING count(*) != 2)"
    ).fetchone()[0]
    phases = dict(db.execute("SELECT phase, count(*) FROM sessions GROUP BY phase").fetchall())
    print(f"{code}: {count} timers fired by one serve worker in {elapsed:.1f} s (server "
          f"start included), {count / elapsed:.0f} timers/s, worker CPU {cpu:.1f} s = "
          f"{1000 * cpu / count:.2f} ms/timer; load average {load_before:.2f} before, "
          f"{load_after:.2f} at the end; sessions without exactly two turns: {twice}; "
          f"phases: {phases}", flush=True)
    return {"wall": elapsed, "cpu": cpu, "twice": twice}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sessions", nargs="?", type=int, default=10_000)
    parser.add_argument("--code", action="append", type=Path, default=[])
    parser.add_argument("--profile")
    args = parser.parse_args()
    count = args.sessions
    folder = Path(tempfile.mkdtemp(prefix="bench-timers-"))
    (folder / "waiter.yaml").write_text(WORKFLOW, encoding="utf-8")
    (folder / "script.yaml").write_text('- "Hello."\n- "Any news?"\n', encoding="utf-8")
    started = time.perf_counter()
    asyncio.run(_setup(folder, count))
    print(f"setup: {count} sessions in {time.perf_counter() - started:.1f} s", flush=True)
    failed = False
    for n, code in enumerate(args.code or [ROOT]):
        run = folder / f"run{n}"
        run.mkdir()
        for name in ("waiter.yaml", "script.yaml", "sessions.db"):
            shutil.copy(folder / name, run / name)
        failed |= bool(_fire(run, code.resolve(), count, args.profile)["twice"])
    if failed:
        raise SystemExit("a session did not have exactly two turns")


if __name__ == "__main__":
    main()
