"""The JSON file MCP clients share, read and checked: ``{"mcpServers": {NAME: SERVER}}``.

A server is started as a subprocess that speaks MCP on its standard input and output
(``{"command": ..., "args": [...], "env": {...}, "cwd": ...}``) or reached over
Streamable HTTP (``{"url": ..., "headers": {...}}``); ``"type"`` may say which
(``stdio``, ``http``, ``streamable-http``), as other clients' files do, and
``"timeout"`` the seconds it has to start and to answer (default 30). Everything is
checked before anything starts, and a mistake is a :class:`McpConfigError` naming the
file and the field (``servers.json: mcpServers.crm.args[1]: expected a string``).

A header's value is never repeated in a message (it is often a token). Server names
are the ``NAME`` of the catalogue's ``NAME.TOOL``, so they have no ``.`` in them.
Nothing here imports the ``mcp`` package: reading a file needs none of it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from phaseflow.errors import ConfigError
from phaseflow.expr.describe import json_kind

__all__ = ["HttpServer", "McpConfigError", "ServerConfig", "StdioServer", "read_servers"]

#: a server's name: what a catalogue tool ``NAME.TOOL`` can name (no dot)
_SERVER_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")
_STDIO_KEYS = frozenset({"type", "command", "args", "env", "cwd", "timeout"})
_HTTP_KEYS = frozenset({"type", "url", "headers", "timeout"})
#: seconds a server has to start and answer, unless its entry says otherwise
DEFAULT_TIMEOUT = 30.0
_TYPES = {"stdio": "stdio", "http": "http", "streamable-http": "http",
          "streamable_http": "http", "streamableHttp": "http"}


class McpConfigError(ConfigError):
    """The MCP servers file (or mapping) cannot be used; the message names the field."""


@dataclass(frozen=True, slots=True)
class StdioServer:
    """A server phaseflow starts as a subprocess (and stops when the agent closes)."""

    name: str
    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    timeout: float = DEFAULT_TIMEOUT

    @property
    def where(self) -> str:
        """How a message names it: the command line."""
        return " ".join((self.command, *self.args))[:200]


@dataclass(frozen=True, slots=True)
class HttpServer:
    """A server reached over Streamable HTTP."""

    name: str
    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout: float = DEFAULT_TIMEOUT

    @property
    def where(self) -> str:
        """How a message names it: the URL without credentials or query (either may hold
        a token)."""
        return re.sub(r"//[^/@]*@", "//", self.url.split("?", 1)[0].split("#", 1)[0])[:200]


ServerConfig = StdioServer | HttpServer


def read_servers(source: str | Path | Mapping[str, Any]) -> dict[str, ServerConfig]:
    """The servers of ``source``: a path to the JSON file, or the parsed mapping (the
    same shape). Raises :class:`McpConfigError` for a file that cannot be read, is not
    JSON, or does not have the shape above; nothing is started here."""
    if isinstance(source, str | Path):
        origin = str(source)
        try:
            text = Path(source).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise McpConfigError(f"{origin}: no such file (the MCP servers file)") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise McpConfigError(f"{origin}: cannot be read: {exc}") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise McpConfigError(f"{origin}:{exc.lineno}:{exc.colno}: not JSON: {exc.msg}"
                                 ) from None
        except RecursionError:
            raise McpConfigError(f"{origin}: not JSON: nested too deeply") from None
    elif isinstance(source, Mapping):
        origin, data = "mcp", source
    else:
        raise McpConfigError(f"mcp must be the path of an MCP servers file or its mapping, "
                             f"not {type(source).__name__}")
    return _servers(origin, data)


def _servers(origin: str, data: Any) -> dict[str, ServerConfig]:
    if not isinstance(data, Mapping) or "mcpServers" not in data:
        raise McpConfigError(f"{origin}: expected an object with \"mcpServers\": "
                             "{NAME: {\"command\": ...} or {\"url\": ...}}")
    servers = data["mcpServers"]
    if not isinstance(servers, Mapping):
        raise McpConfigError(f"{origin}: mcpServers: expected an object (server name -> "
                             f"server), got {json_kind(servers)}")
    out: dict[str, ServerConfig] = {}
    for name, entry in servers.items():
        if not isinstance(name, str) or not _SERVER_NAME.fullmatch(name):
            raise McpConfigError(
                f"{origin}: mcpServers: {str(name)[:60]!r} is not a usable server name "
                "(letters, digits, '_' and '-', starting with a letter or '_', no '.': "
                "the catalogue names its tools NAME.TOOL)")
        out[name] = _server(origin, name, entry)
    return out


def _server(origin: str, name: str, entry: Any) -> ServerConfig:
    where = f"{origin}: mcpServers.{name}"
    if not isinstance(entry, Mapping):
        raise McpConfigError(f"{where}: expected an object, got {json_kind(entry)}")
    kind = entry.get("type")
    if kind is not None and kind not in _TYPES:
        hint = (" (the old HTTP+SSE transport is not supported: use the server's "
                "Streamable HTTP endpoint)" if kind == "sse" else "")
        raise McpConfigError(f"{where}.type: {str(kind)[:40]!r} is not a transport phaseflow "
                             f"speaks: stdio or http{hint}")
    if ("command" in entry) == ("url" in entry):
        raise McpConfigError(f"{where}: give either \"command\" (a server started as a "
                             "subprocess) or \"url\" (Streamable HTTP), not "
                             + ("both" if "command" in entry else "neither"))
    stdio = "command" in entry
    timeout = _seconds(entry.get("timeout", DEFAULT_TIMEOUT), f"{where}.timeout")
    if kind is not None and (_TYPES[kind] == "stdio") != stdio:
        raise McpConfigError(f"{where}.type: {kind!r} does not fit "
                             f"{'command' if stdio else 'url'}")
    unknown = sorted(str(k) for k in entry if k not in (_STDIO_KEYS if stdio else _HTTP_KEYS))
    if unknown:
        allowed = ", ".join(sorted(_STDIO_KEYS if stdio else _HTTP_KEYS))
        raise McpConfigError(f"{where}: unknown field(s) {', '.join(map(repr, unknown))} "
                             f"(a {'stdio' if stdio else 'Streamable HTTP'} server has: "
                             f"{allowed})")
    if stdio:
        command = _text(entry["command"], f"{where}.command")
        args = entry.get("args", [])
        if not isinstance(args, list):
            raise McpConfigError(f"{where}.args: expected a list of strings, got "
                                 f"{json_kind(args)}")
        cwd = entry.get("cwd")
        return StdioServer(
            name, command, tuple(_text(a, f"{where}.args[{i}]", empty=True)
                                 for i, a in enumerate(args)),
            _strings(entry.get("env", {}), f"{where}.env", show=True),
            None if cwd is None else _text(cwd, f"{where}.cwd"), timeout)
    url = _text(entry["url"], f"{where}.url")
    if not re.match(r"https?://[^/\s]+", url):
        raise McpConfigError(f"{where}.url: expected an http:// or https:// URL")
    return HttpServer(name, url, _strings(entry.get("headers", {}), f"{where}.headers",
                                          show=False), timeout)


def _seconds(value: Any, where: str) -> float:
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or not math.isfinite(value) or not 0 < value <= 3600):
        shown = value if isinstance(value, int | float) else json_kind(value)
        raise McpConfigError(f"{where}: expected a number of seconds (0 < seconds <= 3600), "
                             f"got {shown}")
    return float(value)


def _text(value: Any, where: str, *, empty: bool = False) -> str:
    if not isinstance(value, str):
        raise McpConfigError(f"{where}: expected a string, got {json_kind(value)}")
    if not empty and not value.strip():
        raise McpConfigError(f"{where}: must not be empty")
    if "\0" in value:
        raise McpConfigError(f"{where}: contains a NUL character")
    return value


def _strings(value: Any, where: str, *, show: bool) -> dict[str, str]:
    """An object of strings (``env``, ``headers``); a header's value is never shown."""
    if not isinstance(value, Mapping):
        raise McpConfigError(f"{where}: expected an object of strings, got "
                             f"{json_kind(value)}")
    out: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not key or "\0" in key or ("=" in key and show):
            raise McpConfigError(f"{where}: {str(key)[:40]!r} is not a usable name")
        if not isinstance(item, str):
            raise McpConfigError(f"{where}.{key}: expected a string, got {json_kind(item)}"
                                 + ("" if show else " (the value is not shown)"))
        if "\0" in item or (not show and ("\n" in item or "\r" in item)):
            raise McpConfigError(f"{where}.{key}: contains a control character"
                                 + ("" if show else " (the value is not shown)"))
        out[key] = item
    return out
