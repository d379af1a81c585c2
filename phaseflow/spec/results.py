"""What checking one file found (the spec layer's answer, shared by its modules)."""

from __future__ import annotations

import dataclasses

from phaseflow.spec.diagnostics import Diagnostic
from phaseflow.spec.model import Workflow

__all__ = ["CheckResult"]


@dataclasses.dataclass(frozen=True, slots=True)
class CheckResult:
    """What checking one file found; ``workflow`` is set when there were no errors."""

    path: str
    diagnostics: tuple[Diagnostic, ...]
    workflow: Workflow | None

    @property
    def errors(self) -> int:
        return sum(1 for d in self.diagnostics if d.severity == "error")

    @property
    def warnings(self) -> int:
        return sum(1 for d in self.diagnostics if d.severity == "warning")
