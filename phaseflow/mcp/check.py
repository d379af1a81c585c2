"""``phaseflow validate --mcp``: the catalogue's ``NAME.TOOL`` entries against the servers.

Offline, ``validate`` cannot know what a server offers; with ``--mcp`` it connects and
reports, at the catalogue entry, as any other diagnostic:

* **PF410** - ``NAME.TOOL`` where server ``NAME`` has no tool ``TOOL`` (the message lists
  the closest of its tools, and what it has);
* **PF411** - the entry declares ``parameters`` that disagree with the server's input
  schema: an argument the server does not take, one it requires that the entry does not
  declare (or declares optional), or a different JSON type for the same argument.

A catalogue tool whose prefix is not a server of the file is the host's business, and
not looked at.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from phaseflow.expr.describe import closest
from phaseflow.mcp.hub import McpHub
from phaseflow.mcp.tools import split_name
from phaseflow.spec.diagnostics import Diagnostic
from phaseflow.spec.model import Workflow

__all__ = ["mcp_diagnostics", "parameter_disagreements"]


def mcp_diagnostics(workflow: Workflow, path: str, hub: McpHub) -> list[Diagnostic]:
    """PF410 and PF411 for ``workflow`` (checked from the file at ``path``)."""
    out: list[Diagnostic] = []
    for name, entry in (workflow.tools or {}).items():
        parts = split_name(name)
        if parts is None or parts[0] not in hub.links:
            continue
        server, tool_name = parts
        line, column = ((entry.position.line, entry.position.column)
                        if entry.position is not None else (1, 1))
        offered = hub.tools(server)
        listed = offered.get(tool_name)
        if listed is None:
            close = closest(tool_name, sorted(offered))
            hint = (f"did you mean '{server}.{close}'? " if close is not None else "")
            out.append(Diagnostic(
                path, line, column, "PF410",
                f"tool '{name}': MCP server '{server}' has no tool '{tool_name}'; {hint}"
                f"its tools: {', '.join(sorted(offered)) or 'none'}"))
            continue
        declared = entry.parameters_json()
        if declared is None:
            continue
        problems = parameter_disagreements(declared, dict(listed.input_schema or {}))
        if problems:
            out.append(Diagnostic(
                path, line, column, "PF411",
                f"tool '{name}': its parameters disagree with MCP server '{server}''s tool "
                f"'{tool_name}': {'; '.join(problems)}; fix the catalogue's parameters or "
                "leave them out to use the server's"))
    return out


def parameter_disagreements(declared: Mapping[str, Any], server: Mapping[str, Any]
                            ) -> list[str]:
    """Where a catalogue's ``parameters`` and a server's input schema disagree, in words
    (empty when they agree). Only the top level is compared: the argument names, which
    are required, and each argument's JSON ``type`` when both give one."""
    problems: list[str] = []
    ours = _properties(declared)
    theirs = _properties(server)
    open_ended = server.get("additionalProperties") not in (None, False) or (
        not theirs and "properties" not in server)
    for argument in ours:
        if argument not in theirs and not open_ended:
            problems.append(f"the server takes no argument '{argument}' (it takes: "
                            f"{', '.join(theirs) or 'none'})")
    our_required = set(_required(declared))
    for argument in _required(server):
        if argument not in ours:
            problems.append(f"the server requires '{argument}', which is not declared")
        elif argument not in our_required:
            problems.append(f"the server requires '{argument}', which is declared optional")
    for argument, schema in ours.items():
        other = theirs.get(argument)
        if not isinstance(schema, Mapping) or not isinstance(other, Mapping):
            continue
        mine, yours = _types(schema), _types(other)
        if mine and yours and not mine & yours and not (
                "integer" in mine and "number" in yours):
            problems.append(f"'{argument}' is declared {'/'.join(sorted(mine))}, the server "
                            f"takes {'/'.join(sorted(yours))}")
    return problems


def _properties(schema: Mapping[str, Any]) -> dict[str, Any]:
    properties = schema.get("properties")
    return dict(properties) if isinstance(properties, Mapping) else {}


def _required(schema: Mapping[str, Any]) -> list[str]:
    required = schema.get("required")
    return [r for r in required if isinstance(r, str)] if isinstance(required, list) else []


def _types(schema: Mapping[str, Any]) -> set[str]:
    kind = schema.get("type")
    if isinstance(kind, str):
        return {kind}
    if isinstance(kind, list):
        return {k for k in kind if isinstance(k, str)}
    return set()
