"""Workflow test files: prove a workflow's behaviour in CI without a model.

See "Workflow test files" in docs/workflows.md. ``load_test_file`` reads a file (every
step keeps its line), ``run_test_file`` runs its scenarios against fresh machines, and
``Coverage`` adds up which phases and transitions the scenarios exercised.
"""

from phaseflow.testing.coverage import Coverage
from phaseflow.testing.runner import ScenarioResult, TestFileResult, run_test_file
from phaseflow.testing.testfile import (
    Scenario,
    Step,
    TestFile,
    TestFileError,
    TestFileProblem,
    load_test_file,
)

__all__ = [
    "Coverage",
    "Scenario",
    "ScenarioResult",
    "Step",
    "TestFile",
    "TestFileError",
    "TestFileProblem",
    "TestFileResult",
    "load_test_file",
    "run_test_file",
]
