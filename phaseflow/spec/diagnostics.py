"""Diagnostics: what the validator says about a file.

Modelled on ruff's: a stable code users can search and suppress by, an exact position
(1-based line and column) and a message that names the fix where it can.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Severity = Literal["error", "warning"]

#: Every code with its severity and a one-line summary (the spec's table).
CODES: dict[str, tuple[Severity, str]] = {
    "PF001": ("error", "file cannot be read, or is not UTF-8"),
    "PF002": ("error", "YAML syntax error"),
    "PF003": ("error", "duplicate key in a mapping"),
    "PF004": ("error", "empty file, or more than one YAML document"),
    "PF101": ("error", "a required key is missing"),
    "PF102": ("error", "unknown key"),
    "PF103": ("error", "wrong type or value"),
    "PF110": ("error", "unsupported phaseflow format version"),
    "PF200": ("error", "initial names no phase"),
    "PF201": ("error", "a transition's target names no phase"),
    "PF202": ("warning", "a phase cannot be reached from initial"),
    "PF203": ("warning", "a non-terminal phase has no transitions"),
    "PF204": ("error", "a terminal phase has transitions"),
    "PF205": ("warning", "no terminal phase can be reached from this phase"),
    "PF206": ("warning", "a transition can never be taken"),
    "PF207": ("warning", "the same transition is written twice"),
    "PF208": ("warning", "a guard counts visits of a phase that does not exist"),
    "PF209": ("warning", "a guard on time has no moment a timer can wait for"),
    "PF300": ("error", "guard expression: syntax error or forbidden construct"),
    "PF301": ("warning", "guard reads a state key that is not declared"),
    "PF302": ("error", "template syntax error"),
    "PF303": ("warning", "template reads a state key that is not declared"),
    "PF304": ("error", "a template construct the sandbox refuses, or a limit its text breaks"),
    "PF305": ("warning", "a set effect writes a value that does not match the key's declared type"),
    "PF400": ("error", "a phase names a tool that is not in the catalogue"),
    "PF401": ("warning", "requires/needs names an undeclared state key"),
    "PF402": ("warning", "a required key can never be produced"),
    "PF403": ("warning", "a preparation or 'call' effect produces an undeclared state key"),
    "PF404": ("warning", "clear_on_enter or unset names an undeclared state key"),
    "PF406": ("error", "collect names an undeclared state key"),
    "PF407": ("warning", "a phase collects a key that a tool writes"),
    # Beyond the spec's table (documented in docs/validation.md):
    "PF405": ("error", "a call effect names no callable in the host's registry"),
    "PF104": ("error", "a tool's parameters use a keyword JSON Schema does not have"),
    "PF408": ("error", "a catalogue tool has the name of a built-in tool"),
    "PF105": ("error", "a transition's 'after' is not a valid duration"),
    "PF409": ("error", "a phase's tools names a built-in tool"),
    # Reported by ``phaseflow validate --mcp`` only (it connects to the servers):
    "PF410": ("error", "a catalogue tool NAME.TOOL names a tool its MCP server does not have"),
    "PF411": ("error", "a catalogue tool's parameters disagree with its MCP server's"),
    # A phase's structured reply (``reply: record``):
    "PF431": ("error", "a reply records an undeclared state key or a property its schema lacks"),
    # Reported by ``phaseflow validate --models`` only (the host's model roles):
    "PF430": ("error", "a workflow or phase names a model role the host does not map"),
    # Across files, when workflows compose (spec/tree.py, spec/composition_checks.py):
    "PF500": ("error", "a workflow 'uses' names a file that is missing or cannot be read"),
    "PF501": ("error", "a workflow 'uses' names a file that has errors"),
    "PF502": ("error", "a cycle of calls: a workflow calls itself, directly or through others"),
    "PF503": ("error", "a call or hand-off names a workflow that 'uses' does not"),
    "PF504": ("error", "a call's or hand-off's input or output names an undeclared key"),
    "PF505": ("error", "a call's or hand-off's input or output has a type that cannot match"),
    "PF506": ("error", "a called workflow has no terminal phase"),
    "PF507": ("error", "a caller branches on a terminal phase the callee does not have"),
    "PF508": ("error", "a tool or state key defined differently in two files"),
    "PF509": ("error", "an imported shared file is missing or is not a shared file"),
}


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One finding about one node of one file."""

    path: str
    line: int
    column: int
    code: str
    message: str

    @property
    def severity(self) -> Severity:
        return CODES[self.code][0]

    def format(self) -> str:
        return f"{self.path}:{self.line}:{self.column}: {self.severity} {self.code} {self.message}"

    def as_json(self) -> dict[str, object]:
        return {
            "path": self.path,
            "line": self.line,
            "column": self.column,
            "severity": self.severity,
            "code": self.code,
            "message": self.message,
        }

    def sort_key(self) -> tuple[str, int, int, str, str]:
        return (self.path, self.line, self.column, self.code, self.message)
