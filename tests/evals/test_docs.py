"""docs/evals.md shows what the command prints: its first run, its compare example, and
an eval file that reads without a mistake."""

from __future__ import annotations

import json
import re
from pathlib import Path

from phaseflow.evals.evalfile import read_eval_file
from tests.support.eval_files import REFUND_DESK, ROOT
from tests.support.phaseflow_cli import cli_env, run_phaseflow

DOCS = (ROOT / "docs" / "evals.md").read_text(encoding="utf-8")
_SECONDS = re.compile(r"\d+\.\d\d s$", re.M)


def _block(after: str, kind: str) -> str:
    start = DOCS.index(f"```{kind}\n", DOCS.index(after)) + len(kind) + 4
    return DOCS[start:DOCS.index("```", start)]


def test_the_first_run_prints_what_the_guide_shows() -> None:
    shown = _block("## A first run", "console")
    command, _, output = shown.partition("\n")
    assert command == "$ phaseflow eval workflows/ --store memory --run-id docs"
    proc = run_phaseflow(*command.split()[2:], cwd=ROOT, env=cli_env())
    assert proc.returncode == 0
    assert _SECONDS.sub("N s", proc.stdout) == _SECONDS.sub("N s", output)


def test_the_compare_example_prints_what_the_guide_shows(tmp_path: Path) -> None:
    shown = _block("## Comparing two runs", "console")
    command, _, output = shown.partition("\n")
    rows = re.findall(r"refund-desk :: (.+?): (\d+)/(\d+) -> (\d+)/(\d+)", output)
    for name, runs in (("baseline.json", [(n, int(p), int(t)) for n, p, t, _, _ in rows]),
                       ("report.json", [(n, int(p), int(t)) for n, _, _, p, t in rows])):
        (tmp_path / name).write_text(json.dumps({"phaseflow_eval_report": 1, "workflows": [
            {"workflow": "refund-desk", "scenarios": [
                {"name": n, "passed": p, "trials": t} for n, p, t in runs]}]}))
    proc = run_phaseflow(*command.split()[2:], cwd=tmp_path, env=cli_env())
    assert (proc.returncode, proc.stdout) == (1, output)


def test_the_guide_s_eval_file_reads_without_a_mistake(tmp_path: Path) -> None:
    text = _block("## The eval file", "yaml").replace("refund-desk.yaml", str(REFUND_DESK))
    path = tmp_path / "desk.eval.yaml"
    path.write_text(text, encoding="utf-8")
    found, problems = read_eval_file(str(path))
    assert problems == []
    assert found is not None and found.scenarios[0].judge is not None


def test_the_guide_names_every_key_and_code_and_criterion_name() -> None:
    from phaseflow.evals import evalfile
    from phaseflow.evals.check import EVAL_CODES
    from phaseflow.evals.criteria import FUNCTIONS, NAMES

    keys = (evalfile.TOP_KEYS | evalfile.SCENARIO_KEYS | evalfile.USER_KEYS
            | evalfile.CASE_KEYS | evalfile.JUDGE_KEYS)
    assert sorted(k for k in keys if f"`{k}" not in DOCS) == []
    assert sorted(c for c in EVAL_CODES if f"| {c} |" not in DOCS) == []
    named = {f"`{n}('" for n in FUNCTIONS} | {f"`{n}`" for n in NAMES if n != "args"}
    assert sorted(n for n in named if n not in DOCS) == []
