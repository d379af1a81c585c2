"""``phaseflow eval``: run eval files' scenarios against a model, and compare two runs.

``phaseflow eval PATH...`` plays every scenario of the eval files (``*.eval.yaml``, or
the folders holding them) ``--trials`` times, ``--concurrency`` conversations at once,
and reports in the terminal (and ``--json``, ``--html``, ``--junit``). Exit status: 0
when every scenario's criteria held in every trial (or each scenario reached
``--min-pass-rate``), 1 otherwise or when the run stopped early (a budget), 2 for bad
input, 130 after Ctrl-C (the conversations that finished are reported and written).

``phaseflow eval compare A.json B.json`` shows each scenario's change in pass rate with
a 95% interval; ``--fail-on-regression`` exits 1 when one is significantly worse.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

    from phaseflow.evals.evalfile import EvalFile, EvalScenario
    from phaseflow.evals.runner import Job
    from phaseflow.providers.protocol import Provider

#: exit status after Ctrl-C (128 + SIGINT)
INTERRUPTED = 130


class Misuse(Exception):
    """A bad option or file: one line, exit 2."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "paths", nargs="*", metavar="PATH",
        help="eval files (*.eval.yaml) or folders holding them; or 'compare A.json B.json'")
    parser.add_argument(
        "--provider", default="scripted", metavar="scripted|openai|scripted:FILE",
        help="the agent's model: 'scripted' (default: each scenario's own 'model' replies), "
        "or any provider 'phaseflow run' takes (openai, scripted:FILE)")
    parser.add_argument("--model", metavar="M", help="the agent's model name")
    parser.add_argument("--base-url", metavar="URL", help="the agent's server (openai)")
    parser.add_argument("--max-tokens", metavar="N", help="the most tokens of one agent reply")
    parser.add_argument(
        "--user-provider", default="scripted", metavar="scripted|openai|scripted:FILE",
        help="the simulated user: 'scripted' (default: each scenario's user.script) or a "
        "provider that plays the persona")
    parser.add_argument("--user-model", metavar="M", help="the user simulator's model name")
    parser.add_argument("--user-base-url", metavar="URL", help="the user simulator's server")
    parser.add_argument("--judge-provider", metavar="P",
                        help="the judge of 'judge' criteria (without it they are not judged)")
    parser.add_argument("--judge-model", metavar="M", help="the judge's model name")
    parser.add_argument("--judge-base-url", metavar="URL", help="the judge's server")
    parser.add_argument("--trials", metavar="K", default="1",
                        help="conversations per scenario (pass^k for k = 1..K; default 1)")
    parser.add_argument("--concurrency", metavar="N", default="4",
                        help="conversations at once (default 4)")
    parser.add_argument("--seed", metavar="S",
                        help="shuffle the order the conversations start in with this seed "
                        "(recorded in the report)")
    parser.add_argument("--max-cost", metavar="USD",
                        help="stop starting turns once this much was spent (needs --prices)")
    parser.add_argument("--max-turns", metavar="N",
                        help="stop starting turns after this many user messages in all")
    parser.add_argument("--prices", metavar="FILE",
                        help="a YAML or JSON price table: {MODEL: {input: USD, output: USD}} "
                        "per million tokens")
    parser.add_argument("--min-pass-rate", metavar="R",
                        help="pass when each scenario passed at least this share of its "
                        "trials (0..1; default: every trial)")
    parser.add_argument("--json", metavar="FILE", help="write the report as JSON")
    parser.add_argument("--html", metavar="FILE", help="write the report as one HTML page")
    parser.add_argument("--junit", metavar="FILE", help="write the report as JUnit XML")
    parser.add_argument("--store", metavar="STORE", default=None,
                        help="where the conversations are kept as sessions (as 'phaseflow "
                        "run': default phaseflow-sessions.db; 'memory' keeps none)")
    parser.add_argument("--run-id", metavar="ID",
                        help="the eval run's id, in every session id (default: the time)")
    parser.add_argument("--tools", metavar="MODULE:ATTR",
                        help="host tools for the tools the eval file gives no stand-in")
    parser.add_argument("--hooks", metavar="MODULE:ATTR",
                        help="host callables for the 'call's the eval file does not mock")
    from phaseflow.cli.agent_options import add_request_layout

    add_request_layout(parser)
    parser.add_argument("--fail-on-regression", action="store_true",
                        help="compare: exit 1 when a scenario is significantly worse in B")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    try:
        if args.paths[:1] == ["compare"]:
            return _compare(args)
        return _run(args)
    except Misuse as problem:
        print(f"phaseflow eval: error: {problem}", file=sys.stderr)
        return 2


# --- options ------------------------------------------------------------------------


def _number(value: str | None, option: str, *, whole: bool = False,
            most: float | None = None) -> float | None:
    if value is None:
        return None
    try:
        number = int(value) if whole else float(value)
    except ValueError:
        number = -1
    if not number > 0 or number != number or number == float("inf") or (
            most is not None and number > most):
        kind = "a positive whole number" if whole else "a positive number"
        raise Misuse(f"{option}: expected {kind}"
                     + (f" up to {most:g}" if most is not None else "") + f", got {value!r}")
    return number


def _prices(path: str | None, model: str, user_model: str) -> Any:
    from phaseflow.evals.runner import Prices

    if path is None:
        return Prices()
    import yaml

    try:
        with open(path, encoding="utf-8") as handle:
            table = yaml.safe_load(handle)
    except (OSError, yaml.YAMLError, UnicodeDecodeError) as exc:
        raise Misuse(f"--prices {path}: cannot read it: {exc}") from None

    def of(name: str) -> tuple[float, float]:
        entry = table.get(name) if isinstance(table, dict) else None
        if entry is None:
            return 0.0, 0.0
        if not isinstance(entry, dict) or not all(
                isinstance(entry.get(k, 0), int | float) for k in ("input", "output")):
            raise Misuse(f"--prices {path}: {name}: expected {{input: USD, output: USD}}")
        return float(entry.get("input", 0)), float(entry.get("output", 0))

    agent_in, agent_out = of(model)
    user_in, user_out = of(user_model)
    return Prices(agent_in, agent_out, (user_in + user_out) / 2)


def _provider(spec: str, model: str | None, base_url: str | None,
              max_tokens: int | None = None) -> Provider:
    from phaseflow.cli.providers import make_provider
    from phaseflow.errors import ConfigError

    try:
        return make_provider(spec, model, base_url, max_tokens=max_tokens)
    except ConfigError as exc:
        raise Misuse(str(exc)) from None


def _eval_files(paths: list[str]) -> list[EvalFile]:
    import os

    from phaseflow.cli.discovery import SKIPPED_FOLDERS
    from phaseflow.evals.evalfile import EvalFileError, load_eval_file

    found: list[str] = []
    for path in paths:
        if not os.path.exists(path):
            raise Misuse(f"no such file or folder: {path}")
        if not os.path.isdir(path):
            found.append(path)
            continue
        before = len(found)
        for folder, dirs, names in os.walk(path):
            dirs[:] = sorted(d for d in dirs if not d.startswith(".")
                             and d not in SKIPPED_FOLDERS)
            found.extend(os.path.join(folder, f) for f in sorted(names)
                         if f.endswith((".eval.yaml", ".eval.yml")))
        if len(found) == before:
            raise Misuse(f"no eval files (*.eval.yaml) in {path}")
    files: list[EvalFile] = []
    errors: list[str] = []
    for path in dict.fromkeys(found):
        try:
            files.append(load_eval_file(path))
        except EvalFileError as exc:
            errors.append(str(exc))
    if errors:
        raise Misuse("the eval files have mistakes:\n" + "\n".join(errors))
    return files


def _jobs(files: list[EvalFile], trials: int, seed: str | None) -> list[Job]:
    from phaseflow.api import load_workflow
    from phaseflow.errors import WorkflowError
    from phaseflow.evals.runner import Job

    jobs: list[Job] = []
    for found in files:
        try:
            workflow = load_workflow(found.workflow_path)
        except WorkflowError as exc:
            raise Misuse(f"{found.path}: its workflow does not load:\n{exc}") from None
        for trial in range(1, trials + 1):
            jobs.extend(Job(found, workflow, s, trial) for s in found.scenarios)
    if seed is not None:
        import random

        random.Random(seed).shuffle(jobs)
    return jobs


def _agent_models(args: argparse.Namespace, files: list[EvalFile],
                  opened: list[Provider]) -> Any:
    """The agent's provider for a scenario: its own script, or the one given (added to
    ``opened``, to be closed at the end, when one serves every conversation)."""
    from phaseflow.providers.scripted import ScriptedProvider

    if args.provider == "scripted":
        missing = [f"{f.path}: {s.name}" for f in files for s in f.scenarios if s.model is None]
        if missing:
            raise Misuse("--provider scripted replays each scenario's 'model' replies; "
                         "these have none (give --provider openai --model M):\n  "
                         + "\n  ".join(missing))

        def scripted(scenario: EvalScenario) -> Provider:
            return ScriptedProvider(list(scenario.model or ()))

        return scripted
    max_tokens = _number(args.max_tokens, "--max-tokens", whole=True)
    if args.provider.startswith("scripted:"):
        _provider(args.provider, args.model, args.base_url)  # checked once, at start
        return lambda scenario: _provider(args.provider, args.model, args.base_url)
    shared = _provider(args.provider, args.model, args.base_url,
                       int(max_tokens) if max_tokens else None)
    opened.append(shared)
    return lambda scenario: shared


def _users(args: argparse.Namespace, files: list[EvalFile], opened: list[Provider]) -> Any:
    from phaseflow.evals.users import ModelUser, ScriptedUser

    if args.user_provider == "scripted":
        missing = [f"{f.path}: {s.name}" for f in files for s in f.scenarios
                   if s.user.script is None]
        if missing:
            raise Misuse("--user-provider scripted plays each scenario's user.script; these "
                         "have none (give --user-provider openai --user-model M):\n  "
                         + "\n  ".join(missing))
        return lambda scenario: ScriptedUser(scenario.user.script or ())
    provider = _provider(args.user_provider, args.user_model, args.user_base_url)
    opened.append(provider)
    return lambda scenario: ModelUser(scenario.user, provider, args.user_model or "")


# --- running ------------------------------------------------------------------------


class _Progress:
    """A one-line progress bar on a terminal (standard error); nothing elsewhere."""

    def __init__(self, total: int, shown: bool) -> None:
        self.total, self.shown = total, shown
        self.done = 0

    def __call__(self, conversation: Any) -> None:
        self.done += 1
        if not self.shown:
            return
        width = 30
        filled = width * self.done // max(1, self.total)
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] "
                         f"{self.done}/{self.total} conversations ({conversation.ended})   ")
        sys.stderr.flush()

    def close(self) -> None:
        if self.shown and self.done:
            sys.stderr.write("\n")


def _run(args: argparse.Namespace) -> int:
    import asyncio
    import contextlib
    import signal
    import time

    from phaseflow.cli.agent_options import hooks_option, tools_option
    from phaseflow.cli.providers import close_provider
    from phaseflow.cli.stores import close_store, open_store, store_name
    from phaseflow.errors import ConfigError
    from phaseflow.evals.runner import Budget, EvalRun, RunOptions

    if not args.paths:
        raise Misuse("name eval files or folders: phaseflow eval workflows/")
    trials = int(_number(args.trials, "--trials", whole=True, most=10_000) or 1)
    concurrency = int(_number(args.concurrency, "--concurrency", whole=True, most=1000) or 4)
    max_cost = _number(args.max_cost, "--max-cost")
    max_turns = _number(args.max_turns, "--max-turns", whole=True)
    min_rate = None
    if args.min_pass_rate is not None:
        try:
            min_rate = float(args.min_pass_rate)
        except ValueError:
            min_rate = -1.0
        if not 0 <= min_rate <= 1:
            raise Misuse(f"--min-pass-rate: expected a share from 0 to 1, got "
                         f"{args.min_pass_rate!r}")
    if max_cost is not None and args.prices is None:
        raise Misuse("--max-cost needs --prices (what a token costs)")
    files = _eval_files(args.paths)
    jobs = _jobs(files, trials, args.seed)
    opened: list[Provider] = []  # made once for the whole run: closed at its end
    agent_models = _agent_models(args, files, opened)
    users = _users(args, files, opened)
    judge = (_provider(args.judge_provider, args.judge_model, args.judge_base_url)
             if args.judge_provider else None)
    if judge is not None:
        opened.append(judge)
    prices = _prices(args.prices, args.model or "", args.user_model or "")
    try:
        tools, hooks = tools_option(args.tools), hooks_option(args.hooks)
        store = open_store(args.store)
    except ConfigError as exc:
        raise Misuse(str(exc)) from None
    if tools is not None and not isinstance(tools, dict):
        from phaseflow.tools.function import FunctionTool

        tools = {t.name if isinstance(t, FunctionTool) else t.__name__: t for t in tools}
    run_id = args.run_id or time.strftime("%Y%m%d-%H%M%S")
    progress = _Progress(len(jobs), sys.stderr.isatty() and not args.quiet)
    options = RunOptions(run_id=run_id, store=store, agent_provider=agent_models, user=users,
                         model=args.model or "", judge=judge,
                         judge_model=args.judge_model or "", concurrency=concurrency,
                         budget=Budget(max_cost, int(max_turns) if max_turns else None),
                         prices=prices, tools=tools, hooks=hooks, on_done=progress,
                         context_position=args.context_position or "end",
                         offer_tools=args.offer_tools or "phase")
    runner = EvalRun(options)
    started = time.perf_counter()

    async def main() -> None:
        loop = asyncio.get_running_loop()

        def interrupted() -> None:
            loop.remove_signal_handler(signal.SIGINT)  # a second Ctrl-C quits at once
            runner.stop()

        with contextlib.suppress(NotImplementedError, RuntimeError):  # not the main thread
            loop.add_signal_handler(signal.SIGINT, interrupted)
        try:
            await runner.run(jobs)
        finally:
            await close_store(store)
            for provider in opened:
                await close_provider(provider)

    try:
        asyncio.run(main())
    except ConfigError as exc:
        raise Misuse(str(exc)) from None
    progress.close()
    meta = {"run_id": run_id, "provider": args.provider, "model": args.model or "",
            "user_provider": args.user_provider, "user_model": args.user_model or "",
            "judge_provider": args.judge_provider or "", "trials": trials,
            "concurrency": concurrency, "seed": args.seed, "store": store_name(args.store),
            "seconds": time.perf_counter() - started, "stopped": runner.stopped,
            "planned": len(jobs), "context_position": options.context_position,
            "offer_tools": options.offer_tools}
    return _report(args, files, jobs, runner.conversations, meta, min_rate)


def _report(args: argparse.Namespace, files: list[EvalFile], jobs: list[Job],
            conversations: list[Any], meta: dict[str, Any], min_rate: float | None) -> int:
    import json

    from phaseflow.evals.html import html_page
    from phaseflow.evals.report import ScenarioRun, build_report, passed_all
    from phaseflow.evals.text import junit, terminal

    ended: dict[tuple[str, str], list[Any]] = {}
    for conversation in conversations:
        ended.setdefault((conversation.eval_file, conversation.scenario), []).append(
            conversation)
    runs: list[ScenarioRun] = []
    seen: set[tuple[str, str]] = set()
    for job in sorted(jobs, key=lambda j: (files.index(j.file), j.scenario.line)):
        key = (job.file.path, job.scenario.name)
        if key in seen:
            continue
        seen.add(key)
        runs.append(ScenarioRun(job.file, job.workflow, job.scenario, ended.get(key, [])))
    report = build_report(runs, meta)
    writers: tuple[tuple[str | None, Callable[[], str]], ...] = (
        (args.json, lambda: json.dumps(report, default=str)),
        (args.html, lambda: html_page(report)),
        (args.junit, lambda: junit(report)))
    for path, text in writers:
        if path:
            try:
                with open(path, "w", encoding="utf-8") as handle:
                    handle.write(text())
            except OSError as exc:
                print(f"phaseflow eval: error: cannot write {path}: {exc}", file=sys.stderr)
                return 2
    sys.stdout.write(terminal(report))
    if meta["stopped"] == "interrupted":
        return INTERRUPTED
    return 0 if passed_all(report, min_rate) else 1


# --- compare --------------------------------------------------------------------------


def _read_report(path: str) -> dict[str, Any]:
    import json

    try:
        with open(path, encoding="utf-8") as handle:
            report = json.load(handle)
    except (OSError, ValueError) as exc:
        raise Misuse(f"compare: cannot read {path}: {exc}") from None
    if not isinstance(report, dict) or "phaseflow_eval_report" not in report:
        raise Misuse(f"compare: {path} is not a report of 'phaseflow eval --json'")
    return report


def _compare(args: argparse.Namespace) -> int:
    from phaseflow.evals.compare import compare

    if len(args.paths) != 3:
        raise Misuse("compare takes two JSON reports: phaseflow eval compare A.json B.json")
    before, after = _read_report(args.paths[1]), _read_report(args.paths[2])
    changes = compare(before, after)
    out = sys.stdout
    regressions = 0
    for change in changes:
        if change.before is None or change.after is None:
            where = change.after or change.before
            assert where is not None
            out.write(f"  {change.verdict:<12} {change.scenario} ({where[0]}/{where[1]})\n")
            continue
        regressions += change.verdict == "regression"
        mark = {"regression": "WORSE", "improvement": "better"}.get(change.verdict, "same")
        out.write(f"  {mark:<6} {change.scenario}: {change.before[0]}/{change.before[1]} -> "
                  f"{change.after[0]}/{change.after[1]} ({change.delta:+.2f}, 95% interval "
                  f"{change.low:+.2f} to {change.high:+.2f}: {change.verdict})\n")
    out.write(f"{len(changes)} scenarios compared: {regressions} regressions\n")
    return 1 if args.fail_on_regression and regressions else 0
