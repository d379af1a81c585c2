"""``Agent(mcp=...)``: connect the servers and add their tools to the agent's.

The one function the session layer calls (:func:`attach`), so that ``Agent`` needs a
single line for MCP and imports the ``mcp`` package only when a host asks for servers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from phaseflow.errors import ConfigError
from phaseflow.mcp.config import read_servers
from phaseflow.mcp.hub import McpHub
from phaseflow.mcp.tools import mcp_tools, server_tools
from phaseflow.spec.model import Workflow
from phaseflow.tools.function import FunctionTool

__all__ = ["attach"]


def attach(source: str | Path | Mapping[str, Any], workflow: Workflow,
           tools: dict[str, FunctionTool]) -> McpHub:
    """Read ``source`` (the servers file or its mapping), connect every server, and add
    the tools they implement for ``workflow`` to ``tools`` (the host's, by name); the
    connected hub, which the agent closes. A bad file, a server that does not start or
    answer, a catalogue tool a server lacks, or a name that is both a host's tool and a
    server's: a :class:`ConfigError` naming it, with every server already started
    stopped again. While the agent runs, ``tools`` follows the servers' tool lists (a
    changed description or schema, a tool withdrawn or added): see :func:`_follower`."""
    servers = read_servers(source)
    hub = McpHub(servers)
    try:
        found = mcp_tools(workflow, hub)
        clash = sorted(set(found) & set(tools))
        if clash:
            raise ConfigError(f"tool {clash[0]!r} is given as a host tool and is also MCP "
                              f"server {clash[0].partition('.')[0]!r}'s tool: keep one")
        tools.update(found)
    except BaseException:
        hub.close()
        raise
    hub.listeners.append(_follower(workflow, hub, tools, found))
    return hub


def _follower(workflow: Workflow, hub: McpHub, tools: dict[str, FunctionTool],
              found: Mapping[str, FunctionTool]) -> Callable[[str], None]:
    """What keeps ``tools`` in step with a server whose list changed: its tools are made
    again from the new list (a new description or schema), one it no longer has is taken
    out (so it is not offered), one it has again is put back. Runs on the hub's thread:
    each change is one assignment or removal of a key, atomic for the session's thread
    that reads the mapping."""
    owned: dict[str, set[str]] = {}
    for name in found:
        owned.setdefault(name.partition(".")[0], set()).add(name)

    def follow(server: str) -> None:
        current = server_tools(workflow, hub, server)
        for name in owned.get(server, set()) - set(current):
            tools.pop(name, None)
        tools.update(current)
        owned[server] = set(current)

    return follow
