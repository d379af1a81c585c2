"""Workflow test files: prove a workflow's behaviour in CI without a model.

See "Testing a workflow" in docs/workflows.md and the reference in docs/format.md.
``load_test_file`` reads a file (every step keeps its line), ``run_test_file`` runs its
scenarios - machine scenarios against fresh machines, conversation scenarios against a
real session with a scripted model and stand-in tools
(:mod:`phaseflow.testing.conversation`) - and ``Coverage`` adds up which phases and
transitions the scenarios exercised.
"""

from phaseflow.testing.coverage import Coverage
from phaseflow.testing.runner import ScenarioResult, TestFileResult, run_test_file
from phaseflow.testing.testfile import (
    Scenario,
    ScenarioStep,
    TestFile,
    TestFileError,
    TestFileProblem,
    load_test_file,
)

__all__ = [
    "Coverage",
    "Scenario",
    "ScenarioResult",
    "ScenarioStep",
    "TestFile",
    "TestFileError",
    "TestFileProblem",
    "TestFileResult",
    "load_test_file",
    "run_test_file",
]
