"""MCP servers' tools as the session's tools: the catalogue's ``NAME.TOOL`` is server
``NAME``'s tool ``TOOL``.

Each becomes a :class:`~phaseflow.tools.function.FunctionTool` like a host's own, so the
phase's tool filter, approvals, argument checks, timeouts and the call ledger treat it as
any tool. What the model is shown: the catalogue's ``description`` and ``parameters``
when it gives them, the server's otherwise. A workflow without a catalogue gets every
tool of every server, as ``NAME.TOOL``. When a server's list changes while the agent
runs, :func:`server_tools` gives that server's tools anew (the agent's follow it: see
:mod:`phaseflow.mcp.attach`).

What a call returns to the session (:func:`result_value`): the text of the result's
content (text blocks as they are; an image, audio or a resource as a one-line note, never
its bytes); a result with ``isError`` is an :class:`McpToolError`, which the session
turns into an error result the model sees. When the catalogue lets the tool write state
keys, the result's ``structuredContent`` keys of those names are its writes (or, when it
has none, those of its text when that is one JSON object: what a server's tool returning
a mapping without an output schema sends).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import mcp_types

from phaseflow.errors import ConfigError, PhaseflowError
from phaseflow.mcp.config import McpConfigError
from phaseflow.mcp.hub import McpHub
from phaseflow.spec.model import Tool, Workflow, tree_catalogue
from phaseflow.tools.function import FunctionTool, ToolContext, ToolResult, tool
from phaseflow.tools.schema import tool_name_problem

__all__ = ["IDEMPOTENCY_KEY", "McpToolError", "content_text", "mcp_tools", "result_value",
           "server_tools", "split_name"]

#: the ``_meta`` key of every call's request: the call's idempotency key
#: (``session_id:call_id``, the same when a recovered session calls it again), so that a
#: server whose tool has side effects can make them once
IDEMPOTENCY_KEY = "phaseflow/idempotency-key"


class McpToolError(PhaseflowError):
    """The server answered the call with ``isError``: its text is the error the model
    sees."""


def split_name(name: str) -> tuple[str, str] | None:
    """``("crm", "lookup")`` for the catalogue name ``crm.lookup`` (at the first dot:
    a server name has none; the tool's own name may), ``None`` without a dot."""
    server, dot, rest = name.partition(".")
    return (server, rest) if dot and server and rest else None


def mcp_tools(workflow: Workflow, hub: McpHub) -> dict[str, FunctionTool]:
    """The tools ``hub``'s servers implement for ``workflow``, by catalogue name.

    A catalogue tool ``NAME.TOOL`` whose ``NAME`` is a server of the file must be one of
    that server's tools: otherwise :class:`McpConfigError` (the agent is refused at
    start, not at the model's first call). Names whose prefix is no server are left to
    the host's tools."""
    out: dict[str, FunctionTool] = {}
    for server in hub.links:
        out.update(server_tools(workflow, hub, server, strict=True))
    return out


def server_tools(workflow: Workflow, hub: McpHub, server: str, *, strict: bool = False
                 ) -> dict[str, FunctionTool]:
    """The tools server ``server`` implements for ``workflow`` now, from its cached list.
    ``strict`` (at start): a catalogue tool the server lacks, or a server schema that is
    not a usable JSON Schema, is an :class:`McpConfigError`; otherwise (a list that
    changed while the agent runs) such a tool is left out, so it is not offered."""
    out: dict[str, FunctionTool] = {}
    listed = hub.tools(server)
    catalogue = tree_catalogue(workflow)  # the workflows it calls declare theirs
    wanted: list[tuple[str, str, Tool | None]] = []  # (catalogue name, tool, its entry)
    if catalogue is None:
        wanted = [(f"{server}.{t}", t, None) for t in listed
                  if tool_name_problem(f"{server}.{t}") is None]
    else:
        wanted = [(name, parts[1], entry) for name, entry in catalogue.items()
                  if (parts := split_name(name)) is not None and parts[0] == server]
    for name, tool_name, entry in wanted:
        remote = listed.get(tool_name)
        if remote is None:
            if strict:
                offered = ", ".join(sorted(listed)) or "none"
                raise McpConfigError(f"catalogue tool {name!r}: MCP server {server!r} has no "
                                     f"tool {tool_name!r} (its tools: {offered})")
            continue
        try:
            out[name] = _tool(hub, name, server, remote,
                              entry.description if entry is not None else None,
                              entry.parameters_json() if entry is not None else None,
                              entry.writes if entry is not None else ())
        except McpConfigError:
            if strict:
                raise
    return out


def _tool(hub: McpHub, name: str, server: str, listed: mcp_types.Tool,
          description: str | None, parameters: Mapping[str, Any] | None,
          writes: tuple[str, ...]) -> FunctionTool:
    schema = parameters if parameters is not None else _server_schema(listed.input_schema)
    remote = listed.name

    async def call_mcp_tool(context: ToolContext, **arguments: Any) -> Any:
        meta = {IDEMPOTENCY_KEY: context.idempotency_key}
        result = await hub.call(server, remote, arguments, meta=meta)
        return result_value(result, writes)

    call_mcp_tool.__qualname__ = call_mcp_tool.__name__ = f"mcp_{server}_{remote}"
    try:
        return tool(name=name, description=description or listed.description or name,
                    parameters=schema)(call_mcp_tool)
    except ConfigError as exc:
        raise McpConfigError(f"MCP server {server!r}, tool {remote!r}: {exc}; declare the "
                             f"tool's parameters in the workflow's catalogue ({name}: "
                             "parameters:) to use it") from None


def _server_schema(schema: Mapping[str, Any] | None) -> dict[str, Any]:
    """The server's input schema as a tool's parameters: an ``object`` schema (MCP says
    it is one; a server that leaves ``type`` out gets it added)."""
    plain = dict(schema or {})
    plain.setdefault("type", "object")
    plain.setdefault("properties", {})
    return plain


def result_value(result: mcp_types.CallToolResult, writes: tuple[str, ...] = ()) -> Any:
    """What the session gets of a call's result (see the module docstring)."""
    text = content_text(result.content)
    structured = result.structured_content
    if result.is_error:
        raise McpToolError(text or "the tool reported an error without a message")
    if not text and structured is not None:
        text = json.dumps(structured, ensure_ascii=False)
    if writes and structured is None:
        # A server whose tool returns a mapping without declaring an output schema (a
        # Python MCP server's `-> dict`) sends it as JSON text only: read as a Python
        # tool's returned mapping is, its keys in `writes` are written.
        try:
            structured = json.loads(text) if text.lstrip().startswith("{") else None
        except ValueError:
            structured = None
    if writes and isinstance(structured, Mapping):
        return ToolResult(output=text, writes={k: structured[k] for k in writes
                                               if k in structured})
    return text


def content_text(blocks: list[mcp_types.ContentBlock]) -> str:
    """The content blocks as text for the model: text as it is, one line for the rest."""
    parts: list[str] = []
    for block in blocks:
        if isinstance(block, mcp_types.TextContent):
            parts.append(block.text)
        elif isinstance(block, mcp_types.ImageContent | mcp_types.AudioContent):
            kind = "image" if isinstance(block, mcp_types.ImageContent) else "audio"
            parts.append(f"[{kind} {block.mime_type}, {len(block.data) * 3 // 4} bytes, "
                         "not shown]")
        elif isinstance(block, mcp_types.EmbeddedResource):
            resource = block.resource
            if isinstance(resource, mcp_types.TextResourceContents):
                parts.append(resource.text)
            else:
                parts.append(f"[resource {resource.uri}, binary, not shown]")
        elif isinstance(block, mcp_types.ResourceLink):
            parts.append(f"[resource link {block.uri}" + (f" ({block.name})" if block.name
                                                          else "") + "]")
        else:
            parts.append(f"[{getattr(block, 'type', 'content')} block, not shown]")
    return "\n".join(parts)
