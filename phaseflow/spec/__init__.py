"""Workflow files: load with positions, validate against the schema, check, compile."""

from phaseflow.spec.diagnostics import CODES, Diagnostic
from phaseflow.spec.loader import CheckResult, check_file, check_text, compile_file

__all__ = ["CODES", "CheckResult", "Diagnostic", "check_file", "check_text", "compile_file"]
