"""Whole-process wall time of ``phaseflow validate`` (run by hand, not by pytest).

    python benchmarks/bench_validate.py [--rounds 10]

1. ``phaseflow validate FILE`` against ``check-jsonschema --schemafile
   schemas/workflow.schema.json FILE`` (pip install check-jsonschema), runs interleaved
   (ours, theirs, ours, theirs...) so that machine noise hits both alike, on the spec's
   small example and on a generated 5,000-phase workflow. Prints the medians and the
   ratio ours/theirs: it must be <= 1.0 (phaseflow does everything check-jsonschema does
   plus the graph, guard and template checks).
2. ``phaseflow validate`` on generated 1,000 / 5,000 / 10,000 / 20,000-phase workflows, with
   the time per phase: it should stay flat (linear growth).
3. ``phaseflow validate`` and ``phaseflow describe`` on compact workflows of 5,000 / 20,000
   / 60,000 phases (about 95 bytes a phase, 5.8 MB at 60,000: a goal, one or two
   transitions, most with a ``when``, some tools; no template), CPU time (user + sys of the
   child) and wall time, median of ``--rounds``: CPU time per phase should stay flat.

    python benchmarks/bench_validate.py --compact [--base CHECKOUT] [--sizes 15000,60000]

runs part 3 only. With ``--base`` (another checkout of the repository, e.g. made by
``git worktree add /tmp/base <commit>``), each run of this checkout is followed by the
same run of that one (``python -m phaseflow.cli.main`` with ``PYTHONPATH`` set to each),
so machine noise hits both alike, and the ratio of the CPU medians is printed.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCHEMA = REPO / "schemas" / "workflow.schema.json"
SMALL = REPO / "tests" / "spec" / "data" / "refund_desk.yaml"


def generate(phases: int) -> str:
    """A valid workflow: a chain of phases, each with a goal, an instructions template,
    a guarded transition onward and a model-triggered way back to the start."""
    lines = ["phaseflow: 1", "name: generated", "initial: p0", "state:",
             "  counter: {type: integer, default: 0}", "phases:"]
    for i in range(phases):
        lines += [
            f"  p{i}:",
            f"    goal: Phase number {i} of a long and winding conversation.",
            f"    instructions: Step {i}; the counter is {{{{ state.counter }}}}.",
        ]
        if i + 1 < phases:
            lines += ["    transitions:",
                      f"      - to: p{i + 1}", f"        when: state.counter > {i}",
                      "        description: onwards",
                      "      - to: p0", "        trigger: model"]
        else:
            lines += ["    terminal: true"]
    return "\n".join(lines) + "\n"


def generate_compact(phases: int) -> str:
    """A valid workflow as a generator of large workflows writes one (about 95 bytes a
    phase): a goal, one or two transitions in flow style, three in four guarded by a
    condition on one of 30 declared state keys, a tool list on every third phase; no
    template."""
    tools, keys = 40, 30
    lines = ["phaseflow: 1", "name: generated-compact", "initial: p0", "state:"]
    lines += [f"  k{j}: {{type: integer, default: 0}}" for j in range(keys)]
    lines += ["tools:"]
    lines += [f"  t{j}: {{writes: [k{j % keys}]}}" for j in range(tools)]
    lines += ["phases:"]
    for i in range(phases):
        lines += [f"  p{i}:", f"    goal: Step {i} of it."]
        if i % 3 == 0:
            lines += [f"    tools: [t{i % tools}, t{(i + 7) % tools}]"]
        if i + 1 >= phases:
            lines += ["    terminal: true"]
        elif i % 4 == 0:
            lines += [f"    transitions: [{{to: p{i + 1}, when: state.k{i % keys} > {i % 9}}}, "
                      "{to: p0, trigger: model}]"]
        elif i % 2:
            lines += [f"    transitions: [{{to: p{i + 1}, when: state.k{i % keys}}}]"]
        else:
            lines += [f"    transitions: [{{to: p{i + 1}}}]"]
    return "\n".join(lines) + "\n"


def cpu_and_wall(command: list[str], checkout: Path | None = None) -> tuple[float, float]:
    """User + sys CPU time of the child, and wall time (the machine may be shared: CPU
    time is the figure that moves least with the other jobs); ``checkout`` is the
    repository the child imports phaseflow from (this one when ``None``)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    elapsed = wall(command, env=_env(checkout))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, elapsed


def command(name: str, path: Path, checkout: Path | None = None) -> list[str]:
    """The command line of ``phaseflow NAME PATH``: the installed script, or (for another
    checkout, or when none is installed) the module run by this interpreter."""
    if checkout is not None:
        return [sys.executable, "-m", "phaseflow.cli.main", name, str(path)]
    exe = shutil.which("phaseflow")
    return [exe, name, str(path)] if exe else [
        sys.executable, "-m", "phaseflow.cli.main", name, str(path)]


def _env(checkout: Path | None) -> dict[str, str] | None:
    if checkout is None:
        return None
    return {**os.environ, "PYTHONPATH": str(checkout)}


def wall(command: list[str], expect: int = 0, env: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, check=False, env=env,
                          cwd=None if env is None else tempfile.gettempdir())
    elapsed = time.perf_counter() - start
    if proc.returncode != expect:
        raise SystemExit(f"{' '.join(command)} exited {proc.returncode}:\n{proc.stdout}"
                         f"{proc.stderr}")
    return elapsed


def ours(path: Path) -> list[str]:
    return command("validate", path)


def theirs(path: Path) -> list[str]:
    exe = shutil.which("check-jsonschema")
    if exe is None:
        raise SystemExit("check-jsonschema is not installed: pip install check-jsonschema")
    return [exe, "--schemafile", str(SCHEMA), str(path)]


def compare(label: str, path: Path, rounds: int) -> float:
    a: list[float] = []
    b: list[float] = []
    wall(ours(path))  # warm the file cache and .pyc files for both
    wall(theirs(path))
    for _ in range(rounds):
        a.append(wall(ours(path)))
        b.append(wall(theirs(path)))
    ma, mb = statistics.median(a), statistics.median(b)
    print(f"{label:<22} phaseflow {ma * 1000:8.0f} ms   check-jsonschema {mb * 1000:8.0f} ms"
          f"   ratio {ma / mb:5.2f}")
    return ma / mb


def compact_against(sizes: list[int], rounds: int, base: Path | None) -> None:
    """Part 3, optionally interleaved with the same runs of another checkout."""
    here = REPO if base is not None else None
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            path = Path(tmp) / f"compact_{n}.yaml"
            path.write_text(generate_compact(n))
            size = path.stat().st_size / 1e6
            for name in ("validate", "describe"):
                ours_cpu: list[float] = []
                base_cpu: list[float] = []
                for _ in range(rounds):
                    ours_cpu.append(cpu_and_wall(command(name, path, here), here)[0])
                    if base is not None:
                        base_cpu.append(cpu_and_wall(command(name, path, base), base)[0])
                line = (f"  {n:>6,} phases ({size:.1f} MB) {name:<8}  CPU median "
                        f"{statistics.median(ours_cpu):6.2f} s")
                if base is not None:
                    mb = statistics.median(base_cpu)
                    line += (f"   base {mb:6.2f} s   ratio "
                             f"{statistics.median(ours_cpu) / mb:5.2f}")
                print(line, flush=True)


def generate_tree(folder: Path, files: int, phases: int) -> Path:
    """``files`` workflows of ``phases`` phases each, every one calling the next two (a
    tree of calls that share callees), written into ``folder``; the root's path."""
    for i in range(files):
        callees = [j for j in (i + 1, i + 2) if j < files]
        uses = "".join(f"  w{j}: w{j}.yaml\n" for j in callees)
        lines = [f"phaseflow: 1\nname: w{i}\ninitial: p0\n"
                 + (f"uses:\n{uses}" if uses else "") + "phases:\n"]
        for p in range(phases - 1):
            call = f"    call: w{callees[p % len(callees)]}\n" if callees and p < 2 else ""
            lines.append(f"  p{p}:\n    goal: Phase {p}.\n{call}"
                         f"    transitions: [{{to: p{p + 1}}}]\n")
        lines.append(f"  p{phases - 1}: {{goal: Done., terminal: true}}\n")
        (folder / f"w{i}.yaml").write_text("".join(lines))
    return folder / "w0.yaml"


def tree_growth(rounds: int) -> None:
    """validate on trees of 50, 100 and 200 files that call each other: time per phase
    (each file is read once)."""
    print("phaseflow validate on a tree of files calling each other "
          f"(20 phases a file, median of {rounds}):")
    here = Path(__file__).resolve().parent.parent  # this checkout's phaseflow
    with tempfile.TemporaryDirectory() as tmp:
        roots = {}
        for files in (50, 100, 200):
            folder = Path(tmp) / f"tree_{files}"
            folder.mkdir()
            roots[files] = generate_tree(folder, files, 20)
        runs: dict[object, list[float]] = {n: [] for n in (0, *roots)}
        for _ in range(rounds):  # interleaved: CPU time (user + sys) of each child
            runs[0].append(cpu_and_wall(command("validate", SMALL, here), here)[0])
            for files, root in roots.items():
                runs[files].append(cpu_and_wall(command("validate", root, here), here)[0])
        base = statistics.median(runs[0])
        print(f"  start-up (spec example): CPU {base * 1000:.0f} ms")
        for files in roots:
            t = statistics.median(runs[files])
            print(f"  {files:>4} files ({files * 20:>5} phases)  CPU {t * 1000:7.0f} ms   "
                  f"{(t - base) / (files * 20) * 1e6:5.0f} µs/phase (start-up excluded)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--compact", action="store_true", help="run part 3 only")
    parser.add_argument("--tree", action="store_true",
                        help="run only the tree of files that call each other")
    parser.add_argument("--base", type=Path, help="a checkout to compare against (part 3)")
    parser.add_argument("--sizes", default="5000,20000,60000",
                        help="phases of the compact workflows (part 3)")
    args = parser.parse_args()
    if args.tree:
        tree_growth(args.rounds)
        return 0
    if args.compact or args.base is not None:
        print(f"compact workflows, CPU (user + sys), median of {args.rounds} interleaved "
              "rounds:")
        compact_against([int(n) for n in args.sizes.split(",")], args.rounds, args.base)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        files = {}
        for n in (1000, 5000, 10000, 20000):
            files[n] = Path(tmp) / f"generated_{n}.yaml"
            files[n].write_text(generate(n))
        compact = {}
        for n in (5000, 20000, 60000):
            compact[n] = Path(tmp) / f"compact_{n}.yaml"
            compact[n].write_text(generate_compact(n))
        print(f"median of {args.rounds} interleaved rounds, whole process wall time\n")
        ratios = [compare("spec example", SMALL, args.rounds),
                  compare("5,000 phases "
                          f"({files[5000].stat().st_size / 1e6:.1f} MB)", files[5000],
                          args.rounds)]
        print("\nphaseflow validate, growth with size (median of 3):")
        base = statistics.median(wall(ours(SMALL)) for _ in range(3))
        for n, path in files.items():
            t = statistics.median(wall(ours(path)) for _ in range(3))
            print(f"  {n:>6,} phases  {t * 1000:8.0f} ms   {(t - base) / n * 1e6:6.0f} µs/phase "
                  "(start-up excluded)")
        print(f"  start-up (spec example): {base * 1000:.0f} ms")
        print(f"\ncompact workflows, CPU (user + sys) and wall, median of {args.rounds}:")
        for n, path in compact.items():
            size = path.stat().st_size / 1e6
            for name in ("validate", "describe"):
                runs = [cpu_and_wall(command(name, path)) for _ in range(args.rounds)]
                cpu = statistics.median(c for c, _ in runs)
                elapsed = statistics.median(w for _, w in runs)
                print(f"  {n:>6,} phases ({size:.1f} MB) {name:<8}  CPU {cpu:6.2f} s  "
                      f"wall {elapsed:6.2f} s  {cpu / n * 1e6:5.0f} µs/phase")
    worst = max(ratios)
    print(f"\nworst ratio ours/theirs: {worst:.2f} ({'OK' if worst <= 1.0 else 'TOO SLOW'})")
    return 0 if worst <= 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
