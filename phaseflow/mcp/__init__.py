"""Tools from MCP servers (the ``mcp`` extra): the catalogue's ``NAME.TOOL`` is server
``NAME``'s tool ``TOOL``. See ``docs/mcp.md``.

* :mod:`phaseflow.mcp.config` reads the servers file MCP clients share (no ``mcp``
  import: a bad file is refused before anything starts);
* :mod:`phaseflow.mcp.link` keeps one server's connection in one long-lived task;
* :mod:`phaseflow.mcp.hub` runs every link of an agent on a loop and thread of its own,
  and takes calls from any loop;
* :mod:`phaseflow.mcp.tools` makes the catalogue's ``NAME.TOOL`` entries tools;
* :mod:`phaseflow.mcp.attach` is ``Agent(mcp=...)``'s one entry point;
* :mod:`phaseflow.mcp.check` is ``phaseflow validate --mcp`` (PF410, PF411).

Importing this package imports nothing else: the ``mcp`` SDK is loaded by ``link``
(and what imports it) only when servers are given.
"""
