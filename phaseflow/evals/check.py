"""What ``phaseflow validate`` says about eval files (``*.eval.yaml``).

Each mistake of the file (read by :mod:`phaseflow.evals.evalfile`) is an ``EV001``
error at its line and column; against the workflow it names: a workflow that does not
load is ``EV001`` too, and ``EV002`` warns of a stand-in for a tool the catalogue does
not have, a mock of a callable the workflow never calls, a call the workflow makes that
no mock answers, and a phase named in ``entered('...')`` that the workflow lacks.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from phaseflow.evals.criteria import Criterion
from phaseflow.evals.evalfile import EvalFile, read_eval_file
from phaseflow.spec.diagnostics import Diagnostic

__all__ = ["EVAL_CODES", "EvalDiagnostic", "check_eval_file", "is_eval_file"]

#: the codes of eval files' findings: code -> (severity, meaning)
EVAL_CODES = {
    "EV001": ("error", "an eval file's mistake, or a workflow it names that does not load"),
    "EV002": ("warning", "an eval file names a tool, callable or phase its workflow lacks"),
}
_EVAL_KEY = re.compile(r"(?m)^[\"']?phaseflow-eval[\"']?[ \t]*:")
_ENTERED = re.compile(r"entered\(\s*['\"]([^'\"]+)['\"]\s*\)")


@dataclass(frozen=True, slots=True)
class EvalDiagnostic(Diagnostic):
    """A finding about an eval file, shown and counted as validate's others are."""

    @property
    def severity(self) -> str:  # type: ignore[override]
        return EVAL_CODES[self.code][0]


def is_eval_file(path: str, text: str | None = None) -> bool:
    """An eval file: named ``*.eval.yaml``/``*.eval.yml``, or with a top-level
    ``phaseflow-eval`` key."""
    if path.endswith((".eval.yaml", ".eval.yml")):
        return True
    return text is not None and _EVAL_KEY.search(text) is not None


def _criteria(found: EvalFile) -> list[Criterion]:
    return [c for s in found.scenarios for c in (*s.expect, *s.never)]


def check_eval_file(path: str) -> list[Diagnostic]:
    """Every finding about the eval file at ``path``."""
    found, problems = read_eval_file(path)
    out: list[Diagnostic] = [EvalDiagnostic(path, p.line, p.column, "EV001", p.message)
                             for p in problems]
    if found is None or not found.workflow_path:
        return out
    from phaseflow.errors import WorkflowError
    from phaseflow.spec.loader import compile_file
    from phaseflow.spec.model import tree_catalogue
    from phaseflow.testing.crosscheck import call_names

    if not os.path.isfile(found.workflow_path):
        return [*out, EvalDiagnostic(path, 1, 1, "EV001", f"workflow {found.workflow_path} "
                                     "does not exist")]
    try:
        workflow = compile_file(found.workflow_path)
    except WorkflowError:
        return [*out, EvalDiagnostic(path, 1, 1, "EV001", f"workflow {found.workflow_path} "
                                     "has errors: phaseflow validate it")]
    catalogue = tree_catalogue(workflow)  # a callee's tools are the session's too
    calls = call_names(workflow)
    for scenario in found.scenarios:
        for name, stand_in in scenario.tools.items():
            if catalogue is not None and name not in catalogue:
                out.append(EvalDiagnostic(path, stand_in.spot.line, stand_in.spot.column,
                                          "EV002", f"tool '{name}' is not in the workflow's "
                                          "catalogue"))
        for name, mock in scenario.mocks.items():
            if name not in calls:
                out.append(EvalDiagnostic(path, mock.spot.line, mock.spot.column, "EV002",
                                          f"mock '{name}': the workflow never calls it"))
        unmocked = sorted(calls - set(scenario.mocks))
        if unmocked:
            out.append(EvalDiagnostic(path, scenario.line, scenario.column, "EV002",
                                      f"scenario '{scenario.name}': the workflow calls "
                                      f"{', '.join(unmocked)}, which no mock answers (they "
                                      "return nothing; add them under 'mocks')"))
    for criterion in _criteria(found):
        for phase in _ENTERED.findall(criterion.source):
            if phase not in workflow.phases and not any(  # a callee's phase is entered too
                    phase in used.phases for used in workflow.used()):
                out.append(EvalDiagnostic(path, criterion.line, criterion.column, "EV002",
                                          f"entered('{phase}'): the workflow has no phase "
                                          f"'{phase}'"))
    return list({(d.line, d.column, d.message): d for d in out}.values())
