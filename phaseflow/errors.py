"""The package's exceptions.

Everything phaseflow raises derives from :class:`PhaseflowError`, so a host can catch one
type. Domain outcomes (a guard that is false, a stale event, a refused tool) are values,
never exceptions; these classes are for misuse and for bad configuration.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from phaseflow.spec.diagnostics import Diagnostic


class PhaseflowError(Exception):
    """Base class of every exception phaseflow raises."""


class ConfigError(PhaseflowError):
    """A machine or workflow built in code is inconsistent (e.g. initial phase unknown)."""


class WorkflowError(PhaseflowError):
    """A workflow file has errors; ``diagnostics`` holds every one, with its position."""

    def __init__(self, diagnostics: Sequence[Diagnostic]) -> None:
        self.diagnostics = tuple(diagnostics)
        errors = [d for d in self.diagnostics if d.severity == "error"]
        shown = "\n".join(d.format() for d in errors[:20])
        more = f"\n... and {len(errors) - 20} more" if len(errors) > 20 else ""
        super().__init__(f"workflow has {len(errors)} error(s):\n{shown}{more}")


#: This project's name on the package index ("phaseflow" there is an unrelated project);
#: the import name and the command stay ``phaseflow``.
DISTRIBUTION = "phaseflow-agent"


def install_hint(extra: str) -> str:
    """The one way every message tells a user to install the optional part ``extra``:
    from the repository's folder, where pyproject.toml declares the extra."""
    return f"pip install '.[{extra}]' in phaseflow's folder (the {DISTRIBUTION} distribution)"
