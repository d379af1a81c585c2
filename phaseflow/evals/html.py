"""The report as one self-contained HTML page: inline CSS and SVG charts, no script,
no request to anywhere (every value is escaped; nothing is loaded from a URL)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

__all__ = ["html_page"]

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:2rem auto;max-width:72rem;color:#1d232a;
padding:0 1rem}h1{font-size:1.5rem}h2{font-size:1.2rem;margin-top:2rem}
table{border-collapse:collapse;margin:.5rem 0}td,th{padding:.25rem .6rem;
border-bottom:1px solid #dde;text-align:left;vertical-align:top}th{background:#f3f4f8}
.ok{color:#176c2c}.fail{color:#b3261e}.judged{background:#fff4d6;border-radius:3px;
padding:0 .3rem;font-size:.8em}code{background:#f3f4f8;padding:0 .2rem}
.transcript{display:none;border:1px solid #dde;padding:.5rem;margin:.5rem 0}
.transcript:target{display:block}.turn{margin:.2rem 0 .2rem 1rem}.user{color:#174f9c}
.tool{color:#6b5800}.agent{color:#1d232a}svg{display:block;margin:.5rem 0}
"""


def _short(text: str, most: int = 38) -> str:
    return text if len(text) <= most else text[:most - 1] + "\u2026"


def _bar_chart(title: str, rows: Sequence[tuple[str, float, str]], cls: str) -> str:
    """A horizontal bar chart of values in [0, 1] (label, value, text)."""
    height = 24 * len(rows) + 30
    parts = [f'<svg class="{cls}" role="img" aria-label="{escape(title)}" width="900" '
             f'height="{height}" viewBox="0 0 900 {height}" '
             'xmlns="http://www.w3.org/2000/svg">',
             f'<text x="0" y="14" font-size="13" font-weight="bold">{escape(title)}</text>']
    for i, (label, value, text) in enumerate(rows):
        y = 24 + i * 24
        width = max(0.0, min(1.0, value)) * 400
        colour = "#2e7d32" if value >= 0.999 else "#c62828" if value < 0.5 else "#f9a825"
        parts.append(f'<text x="0" y="{y + 14}" font-size="12">{escape(_short(label))}'
                     f'<title>{escape(label)}</title></text>')
        parts.append(f'<rect x="280" y="{y + 3}" width="400" height="14" fill="#eceff1"/>')
        parts.append(f'<rect class="bar" x="280" y="{y + 3}" width="{width:.1f}" height="14" '
                     f'fill="{colour}"/>')
        parts.append(f'<text x="690" y="{y + 14}" font-size="12">{escape(text)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _pass_k_chart(scenarios: Sequence[Mapping[str, Any]]) -> str:
    """pass^k against k, a line per scenario."""
    most = max((len(s["pass_hat_k"]) for s in scenarios), default=0)
    if most < 2:
        return ""
    left, top, width, height = 40, 20, 480, 180
    parts = ['<svg class="pass-k" role="img" aria-label="pass^k by k" width="900" '
             f'height="{height + 60}" xmlns="http://www.w3.org/2000/svg">',
             '<text x="0" y="14" font-size="13" font-weight="bold">pass^k by k</text>',
             f'<line x1="{left}" y1="{top + height}" x2="{left + width}" '
             f'y2="{top + height}" stroke="#999"/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + height}" stroke="#999"/>',
             f'<text x="4" y="{top + 10}" font-size="11">1.0</text>',
             f'<text x="4" y="{top + height}" font-size="11">0.0</text>']
    palette = ["#1565c0", "#c62828", "#2e7d32", "#6a1b9a", "#ef6c00", "#00838f"]
    for k in range(1, most + 1):
        x = left + (k - 1) * width / (most - 1)
        parts.append(f'<text x="{x - 3:.1f}" y="{top + height + 14}" '
                     f'font-size="11">{k}</text>')
    for i, s in enumerate(scenarios):
        values = s["pass_hat_k"]
        if not values:
            continue
        colour = palette[i % len(palette)]
        points = " ".join(
            f"{left + k * width / (most - 1):.1f},{top + height - v * height:.1f}"
            for k, v in enumerate(values))
        parts.append(f'<polyline class="line" fill="none" stroke="{colour}" '
                     f'stroke-width="2" points="{points}"/>')
        parts.append(f'<text x="{left + width + 10}" y="{top + 12 + i * 14}" '
                     f'font-size="11" fill="{colour}">{escape(_short(s["name"], 50))}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _funnel_chart(funnel: Mapping[str, Any]) -> str:
    total = max(1, funnel["conversations"])
    rows = [(p["phase"], p["entered"] / total,
             f"{p['entered']} in, {p['ended']} ended"
             + (f", {p['stalled']} stalled" if p["stalled"] else ""))
            for p in funnel["phases"] if p["entered"]]
    return _bar_chart("Phase funnel: conversations that entered each phase", rows, "funnel")


def _transcript(sid: str, conversation: Mapping[str, Any]) -> str:
    lines = []
    for event in conversation.get("events", ()):
        kind = event.get("type")
        if kind == "turn_started" and event.get("message"):
            lines.append(f'<div class="turn user">user: {escape(str(event["message"]))}</div>')
        elif kind == "tool_call":
            lines.append(f'<div class="turn tool">call {escape(str(event.get("name")))} '
                         f'{escape(str(event.get("arguments")))[:300]}</div>')
        elif kind == "tool_result":
            lines.append(f'<div class="turn tool">result {escape(str(event.get("name")))}: '
                         f'{escape(str(event.get("status")))} '
                         f'{escape(str(event.get("content", ""))[:300])}</div>')
        elif kind == "phase_changed":
            lines.append(f'<div class="turn">phase {escape(str(event.get("from_phase")))} '
                         f'&rarr; {escape(str(event.get("to_phase")))}</div>')
        elif kind == "turn_finished" and event.get("reply"):
            lines.append(f'<div class="turn agent">agent: {escape(str(event["reply"]))}</div>')
    # shown when its link is followed (:target): no script needed to open it
    return (f'<section class="transcript" id="t-{escape(sid)}"><h4>transcript '
            f'<code>{escape(sid)}</code> (ended: {escape(str(conversation.get("ended")))})'
            f'</h4>' + "".join(lines) + "</section>")


def html_page(report: Mapping[str, Any]) -> str:
    """The whole page."""
    totals = report["totals"]
    out = ['<!doctype html><html lang="en"><head><meta charset="utf-8">',
           "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
           "style-src 'unsafe-inline'; img-src data:\">",
           f"<title>phaseflow eval {escape(str(report.get('run_id', '')))}</title>",
           f"<style>{_CSS}</style></head><body>",
           f"<h1>phaseflow eval <code>{escape(str(report.get('run_id', '')))}</code></h1>",
           f"<p>{totals['conversations']} conversations: "
           f"<span class=\"ok\">{totals['passed']} passed</span>, "
           f"<span class=\"fail\">{totals['failed']} failed</span>; "
           f"model <code>{escape(str(report.get('model') or report.get('provider', '')))}"
           f"</code>, user <code>{escape(str(report.get('user_provider', '')))}</code>; "
           f"{totals['tokens']} tokens"
           + (f", ${totals['cost']:.4f}" if totals["cost"] else "") + "</p>"]
    if report.get("stopped"):
        out.append(f"<p class=\"fail\">Stopped early ({escape(str(report['stopped']))}): "
                   "the figures are of the conversations that finished.</p>")
    transcripts = report.get("transcripts", {})
    for workflow in report["workflows"]:
        scenarios = workflow["scenarios"]
        out.append(f"<h2>{escape(workflow['workflow'])} "
                   f"<small><code>{escape(workflow['eval_file'])}</code></small></h2>")
        out.append(_bar_chart("Pass rate by scenario", [
            (s["name"], s["pass_rate"], f"{s['passed']}/{s['trials']}") for s in scenarios],
            "pass-rate"))
        out.append(_pass_k_chart(scenarios))
        out.append("<table><tr><th>scenario</th><th>passed</th><th>pass^k</th>"
                   "<th>turns</th><th>tokens</th><th>latency (s)</th><th>cost</th></tr>")
        for s in scenarios:
            judged = ' <span class="judged">judged</span>' if s["judged"] else ""
            ks = ", ".join(f"{v:.2f}" for v in s["pass_hat_k"])
            cls = "ok" if s["trials"] and s["passed"] == s["trials"] else "fail"
            out.append(f"<tr><td>{escape(s['name'])}{judged}</td>"
                       f"<td class=\"{cls}\">{s['passed']}/{s['trials']}</td><td>{ks}</td>"
                       f"<td>{s['turns']['mean']:.1f}</td><td>{s['tokens']['mean']:.0f}</td>"
                       f"<td>{s['latency']['mean']:.2f} (p95 {s['latency']['p95']:.2f})</td>"
                       f"<td>{s['cost']:.4f}</td></tr>")
        out.append("</table>")
        funnel = workflow["funnel"]
        out.append("<h3>Where conversations go</h3>")
        out.append(_funnel_chart(funnel))
        out.append("<table><tr><th>phase</th><th>entered</th><th>left by</th>"
                   "<th>ended</th><th>stalled</th></tr>")
        for p in funnel["phases"]:
            exits = ", ".join(f"&rarr; {escape(e['to'])} {e['taken']}" for e in p["exits"])
            out.append(f"<tr><td>{escape(p['phase'])}</td><td>{p['entered']}</td>"
                       f"<td>{exits}</td><td>{p['ended']}</td><td>{p['stalled']}</td></tr>")
        out.append("</table>")
        for title, rows, cells in (
                ("Guards still closed where conversations stalled", funnel["closed_guards"],
                 lambda g: (g["phase"], g["to"], g["when"], g["times"])),
                ("Moves refused", funnel["blocked"],
                 lambda b: (b["phase"], b["requested"], b["reason"], b["times"])),
                ("Tools tried where not offered", funnel["not_offered"],
                 lambda t: (t["phase"], t["tool"], t["times"])),
                ("Tool errors", funnel["tool_errors"], lambda t: (t["tool"], t["times"]))):
            if rows:
                out.append(f"<h4>{title}</h4><table>")
                for row in rows[:20]:
                    out.append("<tr>" + "".join(f"<td>{escape(str(c))}</td>"
                                                for c in cells(row)) + "</tr>")
                out.append("</table>")
        failures = [(s, f) for s in scenarios for f in s["failures"]]
        if failures:
            out.append("<h3>Failed criteria</h3><table><tr><th>scenario</th><th>trial</th>"
                       "<th>kind</th><th>criterion</th><th>detail</th><th>transcript</th></tr>")
            for s, f in failures[:500]:
                judged = ' <span class="judged">judged</span>' if f["judged"] else ""
                sid = escape(f["session_id"])
                out.append(f"<tr><td>{escape(s['name'])}</td><td>{f['trial']}</td>"
                           f"<td>{escape(f['kind'])}{judged}</td>"
                           f"<td><code>{escape(f['criterion'])}</code></td>"
                           f"<td>{escape(f['detail'])}</td>"
                           f"<td><a href=\"#t-{sid}\">{sid}</a></td></tr>")
            out.append("</table>")
    if transcripts:
        out.append("<h2>Transcripts of failed conversations</h2><p>Follow a link in "
                   "the failed criteria to show one.</p>")
        out.extend(_transcript(sid, c) for sid, c in list(transcripts.items())[:500])
    out.append("</body></html>")
    return "\n".join(out) + "\n"
