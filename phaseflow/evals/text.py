"""The report in the terminal, and as JUnit XML for CI."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from xml.sax.saxutils import escape, quoteattr

__all__ = ["junit", "terminal"]


def _k(values: list[float]) -> str:
    if not values:
        return "-"
    shown = values if len(values) <= 3 else [values[0], values[-1]]
    ks = [1, len(values)] if len(values) > 3 else list(range(1, len(values) + 1))
    return "  ".join(f"pass^{k} {v:.2f}" for k, v in zip(ks, shown, strict=True))


def terminal(report: Mapping[str, Any]) -> str:
    """The report as text: per scenario a line, its failures; per workflow the funnel."""
    lines: list[str] = []
    for workflow in report["workflows"]:
        lines.append(f"{workflow['eval_file']} ({workflow['workflow']})")
        for s in workflow["scenarios"]:
            mark = "ok  " if s["trials"] and s["passed"] == s["trials"] else "FAIL"
            judged = " [judged]" if s["judged"] else ""
            lines.append(f"  {mark} {s['name']}{judged}: {s['passed']}/{s['trials']} passed"
                         f"  {_k(s['pass_hat_k'])}  turns {s['turns']['mean']:.1f}"
                         f"  tokens {s['tokens']['mean']:.0f}"
                         f"  {s['latency']['mean']:.2f} s"
                         + (f"  ${s['cost']:.4f}" if s["cost"] else ""))
            for f in s["failures"][:5]:
                lines.append(f"       trial {f['trial']}: {f['kind']}: "
                             f"{f['criterion']} -- {f['detail']}  "
                             f"[phaseflow sessions show {f['session_id']}]")
            if len(s["failures"]) > 5:
                lines.append(f"       ... {len(s['failures']) - 5} more failures "
                             "(see the JSON or HTML report)")
        funnel = workflow["funnel"]
        lines.append(f"  funnel ({funnel['conversations']} conversations):")
        for phase in funnel["phases"]:
            if not phase["entered"]:
                continue
            exits = ", ".join(f"-> {e['to']} {e['taken']}" for e in phase["exits"])
            stalled = f", stalled {phase['stalled']}" if phase["stalled"] else ""
            lines.append(f"    {phase['phase']:<20} entered {phase['entered']:>5}"
                         f"  ended {phase['ended']:>5}{stalled}"
                         + (f"  ({exits})" if exits else ""))
        for b in funnel["blocked"][:3]:
            lines.append(f"    blocked {b['times']}x in {b['phase']}: move to "
                         f"{b['requested']} ({b['reason']})")
        for g in funnel["closed_guards"][:3]:
            lines.append(f"    guard closed {g['times']}x in {g['phase']} -> {g['to']}: "
                         f"{' '.join(g['when'].split())}")
        for t in funnel["not_offered"][:3]:
            lines.append(f"    not offered {t['times']}x in {t['phase']}: {t['tool']}")
        for t in funnel["tool_errors"][:3]:
            lines.append(f"    tool error {t['times']}x: {t['tool']}")
        if workflow["pass_hat_k"]:
            lines.append(f"  workflow: {_k(workflow['pass_hat_k'])}")
    totals = report["totals"]
    stopped = report.get("stopped")
    if stopped:
        lines.append(f"stopped early ({stopped}): the figures are of the conversations "
                     "that finished")
    cost = f", ${totals['cost']:.4f}" if totals["cost"] else ""
    layout = [f"--{key.replace('_', '-')} {report[key]}"
              for key, default in (("context_position", "end"), ("offer_tools", "phase"))
              if report.get(key, default) != default]
    lines.append(f"{totals['conversations']} conversations: {totals['passed']} passed, "
                 f"{totals['failed']} failed ({totals['tokens']} tokens{cost}); "
                 f"run {report.get('run_id', '')}"
                 + (f" ({', '.join(layout)})" if layout else ""))
    return "\n".join(lines) + "\n"


def junit(report: Mapping[str, Any]) -> str:
    """JUnit XML: a test suite per eval file, a test case per scenario (failed when a
    trial failed; a judged scenario says so in its name and properties)."""
    out = ['<?xml version="1.0" encoding="UTF-8"?>']
    totals = report["totals"]
    out.append(f'<testsuites name="phaseflow eval" tests="{totals["scenarios"]}">')
    for workflow in report["workflows"]:
        scenarios = workflow["scenarios"]
        failed = sum(1 for s in scenarios if s["passed"] < s["trials"] or not s["trials"])
        out.append(f'  <testsuite name={quoteattr(workflow["eval_file"])} '
                   f'tests="{len(scenarios)}" failures="{failed}">')
        for s in scenarios:
            name = s["name"] + (" [judged]" if s["judged"] else "")
            seconds = sum(c["seconds"] for c in s["conversations"])
            out.append(f'    <testcase classname={quoteattr(workflow["workflow"])} '
                       f'name={quoteattr(name)} time="{seconds:.3f}">')
            out.append("      <properties>")
            out.append(f'        <property name="trials" value="{s["trials"]}"/>')
            out.append(f'        <property name="passed" value="{s["passed"]}"/>')
            out.append(f'        <property name="judged" value="{str(s["judged"]).lower()}"/>')
            for k, value in enumerate(s["pass_hat_k"], 1):
                out.append(f'        <property name="pass^{k}" value="{value:.4f}"/>')
            out.append("      </properties>")
            if s["passed"] < s["trials"] or not s["trials"]:
                detail = "\n".join(
                    f"trial {f['trial']}: {f['kind']}: "
                    f"{f['criterion']} -- {f['detail']} [session {f['session_id']}]"
                    for f in s["failures"])
                message = quoteattr(f"{s['passed']}/{s['trials']} trials passed")
                out.append(f"      <failure message={message}>{escape(detail)}</failure>")
            out.append("    </testcase>")
        out.append("  </testsuite>")
    out.append("</testsuites>")
    return "\n".join(out) + "\n"
