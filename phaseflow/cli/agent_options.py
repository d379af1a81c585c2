"""The options that build an agent, read and checked once for ``phaseflow run``,
``phaseflow serve`` and ``phaseflow sessions recover``: ``--tools``, ``--hooks``,
``--lease``, ``--max-tokens``, ``--mcp`` (and how SIGTERM stops the MCP servers it starts).

Each reader returns the checked value or raises :class:`ConfigError` naming the option
and what is wrong with it (the command prints that one line and exits 2), before any
model is called or any file is written.
"""

from __future__ import annotations

import argparse
import contextlib
import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple, TypeVar

from phaseflow.cli.imports import import_attr
from phaseflow.errors import ConfigError
from phaseflow.expr.describe import clip


def _kind(value: Any) -> str:
    return f"{type(value).__name__} {clip(repr(value), 40)}"


def tools_option(spec: str | None) -> Any:
    """``--tools MODULE:ATTR``: a list of tools or a mapping from tool name to callable,
    every entry a callable (``None`` when the option is not given)."""
    if spec is None:
        return None
    value = import_attr(spec, "--tools")
    if isinstance(value, Mapping):
        for name, fn in value.items():
            if not isinstance(name, str) or not name:
                raise ConfigError(f"--tools {spec}: a tool name must be a non-empty string, "
                                  f"not {_kind(name)}")
            if not callable(fn):
                raise ConfigError(f"--tools {spec}: {name!r} is not a callable but "
                                  f"{_kind(fn)}")
        return value
    if isinstance(value, list | tuple):
        for number, fn in enumerate(value, 1):
            if not callable(fn):
                raise ConfigError(f"--tools {spec}: entry {number} is not a tool (a @tool "
                                  f"function or a callable) but {_kind(fn)}")
        return list(value)
    raise ConfigError(f"--tools {spec}: expected a list of tools or a mapping from tool name "
                      f"to callable, got {type(value).__name__}")


def hooks_option(spec: str | None) -> Mapping[str, Any] | None:
    """``--hooks MODULE:ATTR``: a mapping from a name to a callable, every entry."""
    if spec is None:
        return None
    value = import_attr(spec, "--hooks")
    if not isinstance(value, Mapping):
        raise ConfigError(f"--hooks {spec}: expected a mapping from name to callable, got "
                          f"{type(value).__name__}")
    for name, fn in value.items():
        if not isinstance(name, str) or not name:
            raise ConfigError(f"--hooks {spec}: a hook name must be a non-empty string, not "
                              f"{_kind(name)}")
        if not callable(fn):
            raise ConfigError(f"--hooks {spec}: {name!r} is not a callable but {_kind(fn)}")
    return value


_Number = TypeVar("_Number", int, float)


def _positive(value: str | None, option: str, parse: Callable[[str], _Number],
              expected: str) -> _Number | None:
    """``value`` read by ``parse``: a positive, finite number, ``None`` when the option is
    not given, or a :class:`ConfigError` naming the option and what it ``expected``."""
    if value is None:
        return None
    try:
        number: _Number | None = parse(value.strip())
    except ValueError:
        number = None
    if number is None or not number > 0 or number == math.inf:
        raise ConfigError(f"{option}: expected {expected}, got {value!r}")
    return number


def positive_integer(value: str | None, option: str) -> int | None:
    """A positive integer option (``--max-tokens``), ``None`` when not given."""
    return _positive(value, option, int, "a positive integer")


def count_option(value: str | None, option: str) -> int | None:
    """A count that may be 0 (``--max-continuations``), ``None`` when not given."""
    if value is None:
        return None
    from phaseflow.errors import ConfigError

    try:
        number = int(value)
    except ValueError:
        number = -1
    if number < 0:
        raise ConfigError(f"{option}: expected a whole number (0 or more), not {value!r}")
    return number


def seconds(value: str | None, option: str) -> float | None:
    """A positive, finite number of seconds (``--lease``), ``None`` when not given."""
    return _positive(value, option, float, "a positive number of seconds")


class AgentCode(NamedTuple):
    """The code an agent runs, as ``--tools``, ``--hooks`` and ``--mcp`` name it."""

    tools: Any
    hooks: Mapping[str, Any] | None
    mcp: str | None


def agent_code(args: argparse.Namespace) -> AgentCode:
    """``--tools``, ``--hooks`` and ``--mcp``, each read and checked, in that order."""
    return AgentCode(tools_option(args.tools), hooks_option(args.hooks), mcp_option(args.mcp))


def given_options(**options: Any) -> dict[str, Any]:
    """The :class:`~phaseflow.session.Agent` keywords of the options the command line
    gave (``lease=``, ``mode=``, ``max_history_tokens=``...), without those it did not
    (``None``): an option left out keeps the agent's own default, not ``None``."""
    return {name: value for name, value in options.items() if value is not None}


#: the help of ``--mcp`` (run, sessions recover, validate)
MCP_HELP = ("a JSON file of MCP servers ({\"mcpServers\": {NAME: {\"command\": ...} or "
            "{\"url\": ...}}}): the workflow's catalogue tools NAME.TOOL are their tools")


def mcp_option(path: str | None) -> str | None:
    """``--mcp FILE``: the servers file, read and checked (nothing is started yet)."""
    if path is None:
        return None
    from phaseflow.mcp.config import read_servers

    read_servers(path)
    return path


#: exit status after SIGTERM (128 + 15), as shells report it
TERMINATED = 143


class Terminated:
    """Whether SIGTERM arrived in a :func:`sigterm_quits` block."""

    received = False


@contextlib.contextmanager
def sigterm_quits(wanted: bool) -> Iterator[Terminated]:
    """While the block runs, SIGTERM quits the command as a second Ctrl-C does (a
    ``KeyboardInterrupt`` in the main thread: a turn is abandoned, the ``finally`` blocks
    that stop the MCP servers run), and the block ends quietly with ``received`` set:
    the caller exits with :data:`TERMINATED`. Without ``wanted`` (no servers to stop)
    nothing changes: SIGTERM ends the process at once, as it always did."""
    import signal
    import threading

    state = Terminated()
    if not wanted or threading.current_thread() is not threading.main_thread():
        yield state
        return

    def stop(signum: int, frame: object) -> None:
        state.received = True
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield state
    except KeyboardInterrupt:
        if not state.received:
            raise
    finally:
        signal.signal(signal.SIGTERM, previous)


def add_request_layout(parser: Any) -> None:
    """``--context-position`` and ``--offer-tools`` (run, serve): how each model request is
    laid out (docs/sessions.md, What a request holds)."""
    parser.add_argument(
        "--context-position", choices=("end", "system"), default=None,
        help="where the phase's instructions and navigation block go: after the history "
        "(end, the default: a prompt cache reuses everything before them) or in the "
        "system text (system: one system message, as before)")
    parser.add_argument(
        "--offer-tools", choices=("phase", "workflow"), default=None,
        help="the tools each request offers: the current phase's (phase, the default) or "
        "every tool of the workflow in one order (workflow: a phase change keeps the "
        "request's prefix; a call the phase does not allow is still refused)")
