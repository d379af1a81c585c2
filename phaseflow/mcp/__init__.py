"""MCP servers as tool providers (the ``mcp`` extra)."""
