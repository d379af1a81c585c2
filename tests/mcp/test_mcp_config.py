"""The MCP servers file: what is accepted, and a bad file's message names file and field
(nothing is started to find out; a header's value is never repeated)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from phaseflow.errors import ConfigError
from phaseflow.mcp.config import HttpServer, McpConfigError, StdioServer, read_servers


def test_the_shared_form_is_read(tmp_path: Path) -> None:
    path = tmp_path / "servers.json"
    path.write_text(json.dumps({"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "server-files", "/tmp"],
                  "env": {"ROOT": "/tmp"}},
        "crm": {"type": "http", "url": "https://crm.example/mcp",
                "headers": {"Authorization": "Bearer s3cret"}, "timeout": 5},
    }}), encoding="utf-8")
    servers = read_servers(path)
    assert servers["files"] == StdioServer("files", "npx", ("-y", "server-files", "/tmp"),
                                           {"ROOT": "/tmp"})
    assert servers["crm"] == HttpServer("crm", "https://crm.example/mcp",
                                        {"Authorization": "Bearer s3cret"}, 5.0)
    assert read_servers({"mcpServers": {}}) == {}


BAD: list[tuple[Any, str]] = [
    ([], 'expected an object with "mcpServers"'),
    ({"servers": {}}, 'expected an object with "mcpServers"'),
    ({"mcpServers": []}, "mcpServers: expected an object (server name -> server), got an array"),
    ({"mcpServers": {"a.b": {"command": "x"}}}, "'a.b' is not a usable server name"),
    ({"mcpServers": {"s": "x"}}, "mcpServers.s: expected an object, got a string"),
    ({"mcpServers": {"s": {}}}, "mcpServers.s: give either \"command\""),
    ({"mcpServers": {"s": {"command": "x", "url": "http://h"}}}, "not both"),
    ({"mcpServers": {"s": {"command": ""}}}, "mcpServers.s.command: must not be empty"),
    ({"mcpServers": {"s": {"command": "x", "args": "a b"}}},
     "mcpServers.s.args: expected a list of strings, got a string"),
    ({"mcpServers": {"s": {"command": "x", "args": ["a", 2]}}},
     "mcpServers.s.args[1]: expected a string, got a number"),
    ({"mcpServers": {"s": {"command": "x", "env": {"K": 1}}}},
     "mcpServers.s.env.K: expected a string, got a number"),
    ({"mcpServers": {"s": {"command": "x", "cmd": "y"}}},
     "mcpServers.s: unknown field(s) 'cmd' (a stdio server has: args, command, cwd, env, "
     "timeout, type)"),
    ({"mcpServers": {"s": {"url": "ftp://h/x"}}},
     "mcpServers.s.url: expected an http:// or https:// URL"),
    ({"mcpServers": {"s": {"type": "sse", "url": "http://h/sse"}}},
     "the old HTTP+SSE transport is not supported"),
    ({"mcpServers": {"s": {"type": "stdio", "url": "http://h/mcp"}}},
     "mcpServers.s.type: 'stdio' does not fit url"),
    ({"mcpServers": {"s": {"command": "x", "timeout": 0}}},
     "mcpServers.s.timeout: expected a number of seconds"),
    ({"mcpServers": {"s": {"url": "http://h/mcp", "headers": {"Authorization": 7}}}},
     "mcpServers.s.headers.Authorization: expected a string, got a number (the value is "
     "not shown)"),
]


@pytest.mark.parametrize(("data", "message"), BAD, ids=[m[:40] for _, m in BAD])
def test_a_bad_file_names_the_field(tmp_path: Path, data: Any, message: str) -> None:
    path = tmp_path / "servers.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(McpConfigError) as raised:
        read_servers(path)
    assert str(raised.value).startswith(f"{path}: ")
    assert message in str(raised.value)
    assert isinstance(raised.value, ConfigError)


def test_unreadable_and_broken_files(tmp_path: Path) -> None:
    with pytest.raises(McpConfigError, match="no such file"):
        read_servers(tmp_path / "missing.json")
    broken = tmp_path / "broken.json"
    broken.write_text('{"mcpServers": {\n  "a": }', encoding="utf-8")
    with pytest.raises(McpConfigError, match=r"broken.json:2:8: not JSON: Expecting value"):
        read_servers(broken)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000, encoding="utf-8")
    with pytest.raises(McpConfigError, match="not JSON"):
        read_servers(deep)
    with pytest.raises(McpConfigError, match="not int"):
        read_servers(42)  # type: ignore[arg-type]


def test_a_header_value_is_never_shown(tmp_path: Path) -> None:
    path = tmp_path / "servers.json"
    path.write_text(json.dumps({"mcpServers": {"s": {
        "url": "http://h/mcp", "headers": {"Authorization": "Bearer s3cret\nX: y"}}}}),
        encoding="utf-8")
    with pytest.raises(McpConfigError) as raised:
        read_servers(path)
    assert "s3cret" not in str(raised.value)
    assert "control character" in str(raised.value)


def _python(code: str) -> list[str]:
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=120).stdout.splitlines()


def test_mcp_is_imported_only_when_servers_are_given(tmp_path: Path) -> None:
    workflow = tmp_path / "w.yaml"
    workflow.write_text("phaseflow: 1\nname: w\ninitial: a\nphases:\n  a: {goal: G, terminal: "
                        "true}\n", encoding="utf-8")
    out = _python(
        "import sys, contextlib, io\n"
        "from phaseflow import Agent, ScriptedProvider\n"
        "from phaseflow.cli.main import main\n"
        f"Agent({str(workflow)!r}, ScriptedProvider(['hi'])).close()\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    main(['validate', {str(workflow)!r}])\n"
        "print(sorted(m for m in sys.modules if m == 'mcp' or m.startswith(('mcp.', "
        "'mcp_types', 'phaseflow.mcp'))))\n")
    assert out == ["[]"]


def test_without_the_extra_the_refusal_says_what_to_install(tmp_path: Path) -> None:
    workflow = tmp_path / "w.yaml"
    workflow.write_text("phaseflow: 1\nname: w\ninitial: a\nphases:\n  a: {goal: G, terminal: "
                        "true}\n", encoding="utf-8")
    out = _python(
        "import sys\n"
        "sys.modules['mcp'] = None  # as if the package were not installed\n"
        "from phaseflow import Agent, ScriptedProvider\n"
        "from phaseflow.errors import ConfigError\n"
        "try:\n"
        f"    Agent({str(workflow)!r}, ScriptedProvider(['hi']),\n"
        "          mcp={'mcpServers': {'s': {'command': 'x'}}})\n"
        "except ConfigError as exc:\n"
        "    print(exc)\n")
    assert out == ["MCP servers need the 'mcp' package: pip install '.[mcp]' in phaseflow's "
                   "folder (the phaseflow-agent distribution)"]
