"""The report of an eval run, as one JSON value (what every reporter renders).

Pure: built from the conversations that ended, grouped by eval file and scenario. Per
scenario: trials, passed, the pass rate, pass^k for k = 1..trials, turns, tokens,
latency and cost per conversation, each failed criterion with the session id of its
transcript (``phaseflow sessions show ID``); per workflow: pass^k averaged over its
scenarios and the phase funnel. The transcripts of failed conversations are kept in
the report (``transcripts``), so the HTML page can show them without a store.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from statistics import fmean
from typing import Any

from phaseflow.evals.evalfile import EvalFile, EvalScenario
from phaseflow.evals.funnel import funnel
from phaseflow.evals.scoring import pass_hat_ks, score
from phaseflow.evals.transcript import Conversation
from phaseflow.spec.model import Workflow

__all__ = ["REPORT_VERSION", "ScenarioRun", "build_report", "passed_all"]

REPORT_VERSION = 1


@dataclass(frozen=True, slots=True)
class ScenarioRun:
    """One scenario and the conversations of its trials that ended."""

    file: EvalFile
    workflow: Workflow
    scenario: EvalScenario
    conversations: Sequence[Conversation]


def _percentile(values: Sequence[float], fraction: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def _spread(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {"mean": 0.0, "p50": 0.0, "p95": 0.0, "max": 0.0}
    return {"mean": fmean(values), "p50": _percentile(values, 0.5),
            "p95": _percentile(values, 0.95), "max": max(values)}


def _scenario(run: ScenarioRun, transcripts: dict[str, Any]) -> dict[str, Any]:
    scenario = run.scenario
    rows: list[dict[str, Any]] = []
    failures: list[dict[str, Any]] = []
    passed = 0
    for conversation in sorted(run.conversations, key=lambda c: c.trial):
        verdict = score(conversation, scenario.expect, scenario.never)
        passed += verdict.passed
        rows.append({"trial": conversation.trial, "session_id": conversation.session_id,
                     "passed": verdict.passed, "ended": conversation.ended,
                     "phase": _last_phase(conversation), "turns": conversation.turns,
                     "tokens": conversation.input_tokens + conversation.output_tokens,
                     "user_tokens": conversation.user_tokens,
                     "seconds": conversation.seconds,
                     "model_seconds": conversation.model_seconds,
                     "cost": conversation.cost,
                     "judged": None if conversation.judgement is None
                     else conversation.judgement.passed})
        for failure in verdict.failures:
            failures.append({"trial": conversation.trial,
                             "session_id": conversation.session_id, "kind": failure.kind,
                             "criterion": failure.criterion, "detail": failure.detail,
                             "judged": failure.kind == "judged"})
        if not verdict.passed:
            transcripts[conversation.session_id] = conversation.to_json()
    trials = len(rows)
    return {
        "name": scenario.name, "line": scenario.line, "trials": trials, "passed": passed,
        "pass_rate": passed / trials if trials else 0.0,
        "pass_hat_k": pass_hat_ks([(trials, passed)]) if trials else [],
        "judged": scenario.judge is not None,
        "turns": _spread([r["turns"] for r in rows]),
        "tokens": _spread([r["tokens"] for r in rows]),
        "latency": _spread([r["seconds"] for r in rows]),
        "cost": sum(r["cost"] for r in rows),
        "failures": failures, "conversations": rows,
    }


def _last_phase(conversation: Conversation) -> str:
    phase = conversation.initial_phase
    for event in conversation.events:
        if event.get("type") == "phase_changed":
            phase = str(event.get("to_phase", phase))
    return phase


def build_report(runs: Iterable[ScenarioRun], meta: Mapping[str, Any]) -> dict[str, Any]:
    """The report: ``meta`` (run id, models, options, how the run stopped) and the
    scenarios of each eval file, in the order given."""
    transcripts: dict[str, Any] = {}
    by_file: dict[str, list[ScenarioRun]] = {}
    for run in runs:
        by_file.setdefault(run.file.path, []).append(run)
    workflows: list[dict[str, Any]] = []
    for path, file_runs in by_file.items():
        workflow = file_runs[0].workflow
        scenarios = [_scenario(run, transcripts) for run in file_runs]
        every = [c for run in file_runs for c in run.conversations]
        phases = list(workflow.phases)
        terminal = [name for name, phase in workflow.phases.items() if phase.terminal]
        guards = {name: [(t.to, t.when.source, t.when) for t in phase.transitions
                         if t.trigger == "auto" and t.when is not None]
                  for name, phase in workflow.phases.items()}
        workflows.append({
            "workflow": workflow.name, "eval_file": path,
            "pass_hat_k": pass_hat_ks([(s["trials"], s["passed"]) for s in scenarios
                                       if s["trials"]]),
            "funnel": funnel(every, phases, terminal, guards).to_json(),
            "scenarios": scenarios,
        })
    conversations = [row for w in workflows for s in w["scenarios"]
                     for row in s["conversations"]]
    passed = sum(1 for row in conversations if row["passed"])
    return {
        "phaseflow_eval_report": REPORT_VERSION, **meta,
        "totals": {
            "scenarios": sum(len(w["scenarios"]) for w in workflows),
            "conversations": len(conversations), "passed": passed,
            "failed": len(conversations) - passed,
            "pass_rate": passed / len(conversations) if conversations else 0.0,
            "tokens": sum(row["tokens"] for row in conversations),
            "user_tokens": sum(row["user_tokens"] for row in conversations),
            "cost": sum(row["cost"] for row in conversations),
        },
        "workflows": workflows,
        "transcripts": transcripts,
    }


def passed_all(report: Mapping[str, Any], min_pass_rate: float | None = None) -> bool:
    """Whether the run passed: every scenario's criteria held in every trial, or, with
    ``min_pass_rate``, each scenario passed at least that share of its trials; a run
    that did not run every trial (Ctrl-C, a budget) does not pass."""
    if report.get("stopped"):
        return False
    for workflow in report.get("workflows", ()):
        for scenario in workflow.get("scenarios", ()):
            if not scenario["trials"]:
                return False
            rate = scenario["passed"] / scenario["trials"]
            if rate < (1.0 if min_pass_rate is None else min_pass_rate):
                return False
    return True
