"""``phaseflow serve``: run the agents of one or more workflows as an HTTP service.

Everything is checked before the server starts (a bad option, workflow, module, script,
store or token file is one line and exit status 2); then the address is printed and the
server runs until SIGINT or SIGTERM, which stop it gracefully: new turns are refused
(503 with ``Retry-After``), open event streams are closed, running turns get ``--grace``
seconds and are then cancelled, leases are released; a second signal stops at once.

``--workers N`` binds the socket here and runs N server processes on it (each a
``phaseflow serve`` of its own with the same options), forwarding the stop signals.
Only this module imports starlette and uvicorn (``phaseflow[serve]``).
"""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import os
import socket
import sys
from typing import TYPE_CHECKING, Any

from phaseflow.errors import install_hint

if TYPE_CHECKING:
    from phaseflow.serve.config import ServeConfig

HINT = install_hint("serve")


class Misuse(Exception):
    """Input the command cannot use: one line, exit status 2."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("workflows", metavar="WORKFLOW", nargs="+",
                        help="the workflow files to serve (addressed by their name)")
    parser.add_argument("--tools", metavar="MODULE:ATTR",
                        help="the tools: a list of @tool functions or a mapping from tool "
                        "name to callable (each workflow gets those of its catalogue)")
    parser.add_argument("--hooks", metavar="MODULE:ATTR",
                        help="the callables of the workflows' 'call' effects")
    from phaseflow.cli.providers import CHOICES, ROLE_HELP
    from phaseflow.cli.providers import HELP as PROVIDER_HELP

    parser.add_argument("--provider", action="append", metavar=CHOICES,
                        help=PROVIDER_HELP + "." + ROLE_HELP)
    parser.add_argument("--model", metavar="M", help="the model name (required for openai)")
    parser.add_argument("--base-url", metavar="URL", help="the model server of --provider")
    parser.add_argument("--max-tokens", metavar="N",
                        help="the most tokens one model reply may have (--provider openai)")
    parser.add_argument("--system", metavar="TEXT", default="",
                        help="the host's system text, before the phase's instructions")
    parser.add_argument("--store", metavar="STORE", default=None,
                        help="a SQLite file (default phaseflow-sessions.db), a "
                        "postgresql:// URL, or 'memory'")
    parser.add_argument("--store-pool", metavar="N",
                        help="the most connections each worker opens to a PostgreSQL "
                        "store (default 4; the pool a worker's turns and streams share)")
    parser.add_argument("--lease", metavar="SECONDS",
                        help="how long a worker holds a session's turn before renewing it "
                        "(default 30)")
    parser.add_argument("--max-history-tokens", metavar="N",
                        help="compact a session's history when a request would carry more "
                        "than N tokens (docs/sessions.md, History compaction)")
    parser.add_argument("--max-continuations", metavar="N",
                        help="how many times a reply cut at the model's output limit is "
                        "continued before the turn ends 'cut' (default 2; 0: never)")
    parser.add_argument("--mode", choices=("exec", "plan"), default=None,
                        help="the mode new sessions start in (plan: only read_only tools run)")
    from phaseflow.cli.agent_options import MCP_HELP, add_request_layout

    add_request_layout(parser)

    parser.add_argument("--mcp", metavar="FILE", help=MCP_HELP)
    parser.add_argument("--host", default="127.0.0.1",
                        help="the address to listen on (default 127.0.0.1; any other "
                        "needs tokens)")
    parser.add_argument("--port", default="8765", help="the port (default 8765; 0: any free)")
    parser.add_argument("--app", metavar="DIR",
                        help="serve the files of DIR at /app/: a front end of your own on "
                        "the server's origin (examples/agui-chat/)")
    parser.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                        help="a name the server answers to in Host (besides loopback names "
                        "and --host), e.g. behind a proxy; repeatable; '*': any")
    parser.add_argument("--workers", default="1", metavar="N",
                        help="server processes on one socket (default 1; more need a "
                        "SQLite file or PostgreSQL store)")
    parser.add_argument("--token-file", metavar="FILE",
                        help="bearer tokens, one a line (# comments); or set "
                        "PHASEFLOW_TOKENS")
    parser.add_argument("--auth", metavar="MODULE:ATTR",
                        help="a function of the request returning a "
                        "phaseflow.serve.identity.Identity, or None to refuse it (401): "
                        "each session is then seen by the identity that made it and by "
                        "operators only (docs/serve.md, Users and their sessions)")
    parser.add_argument("--grace", default="30", metavar="SECONDS",
                        help="on SIGTERM, how long running turns may finish (default 30)")
    parser.add_argument("--max-body", default=str(1 << 20), metavar="BYTES",
                        help="the largest request body (default 1 MiB)")
    parser.add_argument("--log-format", choices=("text", "json"), default="text",
                        help="one line per request and per turn, as text or JSON")
    parser.add_argument("--heartbeat", default="15", metavar="SECONDS",
                        help="heartbeat comments on idle streams (default 15, at most 15)")
    parser.add_argument("--poll", default="0.5", metavar="SECONDS",
                        help="how often a stream reads the store for other workers' "
                        "events (default 0.5)")
    parser.add_argument("--sweep", default="10", metavar="SECONDS",
                        help="how often a worker looks for turns whose worker died "
                        "(expired leases) and finishes them (default 10; 0: never)")
    parser.add_argument("--timers", default="1", metavar="SECONDS",
                        help="how often a worker looks for due timers (a transition's "
                        "'after') and fires them, each once across workers (default 1; "
                        "0: never)")
    parser.add_argument("--kept-sessions", default=None, metavar="N",
                        help="idle sessions a worker keeps open between requests, checked "
                        "against the store before each use (default 256; 0: none)")
    parser.add_argument("--fd", type=int, default=None, help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except Misuse as problem:
        print(f"phaseflow serve: error: {problem}", file=sys.stderr)
        return 2


def _number(value: str, option: str, *, low: float, high: float, integer: bool = False
            ) -> float:
    try:
        number = int(value) if integer else float(value)
    except ValueError:
        raise Misuse(f"{option}: expected a number, got {value!r}") from None
    if not low <= number <= high:
        raise Misuse(f"{option}: expected a number from {low:g} to {high:g}, got {value!r}")
    return number


def _tokens(args: argparse.Namespace) -> tuple[str, ...]:
    from phaseflow.serve.auth import token_problem, tokens_from_env, tokens_from_file_text

    tokens: tuple[str, ...] = ()
    if args.token_file:
        try:
            with open(args.token_file, encoding="utf-8") as f:
                tokens = tokens_from_file_text(f.read())
        except (OSError, UnicodeDecodeError) as exc:
            raise Misuse(f"--token-file {args.token_file}: cannot read it: "
                         f"{type(exc).__name__}") from None
        if not tokens:
            raise Misuse(f"--token-file {args.token_file}: holds no token")
    env = os.environ.get("PHASEFLOW_TOKENS", "")
    tokens += tokens_from_env(env)
    for number, token in enumerate(tokens, 1):
        problem = token_problem(token)
        if problem is not None:  # the token itself is never printed
            raise Misuse(f"token {number} is not usable: {problem}")
    return tokens


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _imports() -> None:
    try:
        import sse_starlette  # noqa: F401
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        raise Misuse(f"phaseflow serve needs starlette, uvicorn and sse-starlette: {HINT}"
                     ) from None


def _run(args: argparse.Namespace) -> int:
    _imports()
    workers = int(_number(args.workers, "--workers", low=1, high=64, integer=True))
    port = int(_number(args.port, "--port", low=0, high=65535, integer=True))
    grace = _number(args.grace, "--grace", low=0, high=3600)
    max_body = int(_number(args.max_body, "--max-body", low=64, high=1 << 30, integer=True))
    heartbeat = _number(args.heartbeat, "--heartbeat", low=0.05, high=15)
    poll = _number(args.poll, "--poll", low=0.01, high=60)
    sweep = _number(args.sweep, "--sweep", low=0, high=3600)
    tokens = _tokens(args)
    _allowed_hosts(args)  # checked before anything is loaded
    if not tokens and not args.auth and not _loopback(args.host):
        raise Misuse(f"--host {args.host} is not loopback: give bearer tokens "
                     "(--token-file or PHASEFLOW_TOKENS) or an auth hook (--auth) to serve "
                     "beyond this machine")
    if workers > 1 and args.store == "memory":
        raise Misuse("--workers > 1 needs a store the workers share (a SQLite file or "
                     "PostgreSQL), not 'memory'")
    if workers > 1 and args.fd is None:
        config = _config(args, tokens, max_body, heartbeat, poll, grace, sweep)
        del config  # everything checked here first: a bad option is one line, once
        return _supervise(args, workers, port)
    config = _config(args, tokens, max_body, heartbeat, poll, grace, sweep)
    return _serve(args, config, port)


def _config(args: argparse.Namespace, tokens: tuple[str, ...], max_body: int,
            heartbeat: float, poll: float, grace: float, sweep: float) -> ServeConfig:
    from phaseflow.cli.agent_options import (
        agent_code,
        count_option,
        given_options,
        positive_integer,
        seconds,
    )
    from phaseflow.cli.common import load_or_report
    from phaseflow.cli.providers import (
        check_provider,
        make_provider,
        make_role_providers,
        split_providers,
    )
    from phaseflow.cli.stores import open_store
    from phaseflow.errors import ConfigError, PhaseflowError
    from phaseflow.serve.config import ServeConfig
    from phaseflow.serve.logs import Log
    from phaseflow.serve.served import Served
    from phaseflow.session import Agent
    from phaseflow.session.agent_setup import workflow_hash
    from phaseflow.session.settings import MissingHooks
    from phaseflow.session.workers import new_worker_id

    try:
        args.provider, role_specs = split_providers(args.provider)
        check_provider(args.provider, args.base_url)
        max_tokens = positive_integer(args.max_tokens, "--max-tokens")
        lease = seconds(args.lease, "--lease")
        max_history = positive_integer(args.max_history_tokens, "--max-history-tokens")
        continuations = count_option(args.max_continuations, "--max-continuations")
        tools, hooks, mcp = agent_code(args)
    except ConfigError as exc:
        raise Misuse(str(exc)) from None
    from phaseflow.cli.telemetry import switch_on

    switch_on(Misuse)  # traces and metrics when the OTEL_* variables ask for them
    workflows: list[Any] = []
    for path in args.workflows:
        loaded = load_or_report(path, "serve")
        if isinstance(loaded, int):
            raise Misuse(f"{path}: cannot be served (see above)")
        if any(w.name == loaded.name for w in workflows):
            raise Misuse(f"two workflows are named {loaded.name!r}: a server addresses "
                         "workflows by name")
        workflows.append(loaded)
    try:
        provider = make_provider(args.provider, args.model, args.base_url,
                                 max_tokens=max_tokens)
        roles = make_role_providers(role_specs, max_tokens=max_tokens)
        pool = None if args.store_pool is None else int(_number(
            args.store_pool, "--store-pool", low=1, high=10_000, integer=True))
        store = open_store(args.store, pool_size=pool)
    except ConfigError as exc:
        raise Misuse(str(exc)) from None
    served: dict[str, Served] = {}
    options = given_options(lease=lease, max_history_tokens=max_history, mode=args.mode,
                            context_position=args.context_position,
                            offer_tools=args.offer_tools,
                            max_continuations=continuations)
    for workflow in workflows:
        mine = _tools_for(workflow, tools)
        first: list[Agent] = []

        def make(busy: str, workflow: Any = workflow, mine: Any = mine,
                 first: list[Agent] = first) -> Agent:
            if first and first[0].mcp is not None:
                # the pool's agents share the first one's MCP connections: its tools
                # (the servers' among them), and a change of a server's list
                made = Agent(workflow, provider, providers=roles, tools=first[0].tools,
                             hooks=hooks,
                             store=store, system=args.system, model=args.model,
                             worker=new_worker_id(), busy=busy, **options)  # type: ignore[arg-type]
                first[0].mcp.listeners.append(
                    lambda _server: made.config.views.clear())
                return made
            return Agent(workflow, provider, providers=roles, tools=mine, hooks=hooks,
                         store=store,
                         system=args.system, model=args.model, worker=new_worker_id(),
                         busy=busy, mcp=None if first else mcp,  # type: ignore[arg-type]
                         **options)

        try:
            agent = make("queue")
            first.append(agent)
        except MissingHooks as exc:  # named as this command takes them
            named = MissingHooks(list(exc.missing), "phaseflow serve: --hooks MODULE:ATTR")
            raise Misuse(f"{workflow.name}: {named}") from None
        except PhaseflowError as exc:
            raise Misuse(f"{workflow.name}: {exc}") from None
        served[workflow.name] = Served(workflow.name, agent, make,
                                       workflow_hash(agent.workflow))
    from phaseflow.cli.stores import is_postgres

    kept = None if args.kept_sessions is None else int(_number(
        args.kept_sessions, "--kept-sessions", low=0, high=1_000_000, integer=True))

    notify = args.store if args.store and is_postgres(args.store) else None
    auth = None
    if args.auth:
        from phaseflow.cli.imports import import_attr
        from phaseflow.serve.identity import check_hook

        try:
            auth = check_hook(import_attr(args.auth, "--auth"), f"--auth {args.auth}")
        except ConfigError as exc:
            raise Misuse(str(exc)) from None
    config = ServeConfig(served=served, log=Log(args.log_format), tokens=tokens,
                         max_body=max_body, heartbeat=heartbeat, poll=poll, grace=grace,
                         sweep=sweep, notify_dsn=notify, auth=auth,
                         allowed_hosts=_allowed_hosts(args), app_dir=_app_dir(args))
    if kept is not None:
        config = dataclasses.replace(config, kept_sessions=kept)
    return dataclasses.replace(config, timers=_number(args.timers, "--timers", low=0,
                                                      high=3600))


def _app_dir(args: argparse.Namespace) -> str | None:
    folder: str | None = args.app
    if folder is None:
        return None
    if not os.path.isdir(folder):
        raise Misuse(f"--app {folder}: not a folder")
    return os.path.abspath(folder)


def _allowed_hosts(args: argparse.Namespace) -> tuple[str, ...]:
    """The names given with ``--allowed-host``, checked, and the bound address."""
    from phaseflow.serve.hosts import host_name

    for name in args.allowed_host:
        if name != "*" and not _is_ip(name) and host_name(name) is None:
            raise Misuse(f"--allowed-host {name!r}: expected a host name or address "
                         "(no scheme, no path), or '*'")
    return (*args.allowed_host, args.host)


def _tools_for(workflow: Any, tools: Any) -> Any:
    """The tools of the catalogue of ``workflow`` and every workflow it calls or hands
    off to (all of them when none has one), so one ``--tools`` serves several
    workflows."""
    from phaseflow.spec.model import tree_catalogue

    catalogue = tree_catalogue(workflow)
    if tools is None or catalogue is None:
        return tools
    if isinstance(tools, dict):
        return {n: f for n, f in tools.items() if n in catalogue}
    return [t for t in tools if getattr(t, "name", getattr(t, "__name__", "")) in catalogue]


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named, so that asyncio turns Nagle's algorithm off on every accepted
    # connection (it does so only for a socket whose protocol says TCP; with protocol 0
    # a kept-alive connection waited ~40 ms for each response's delayed ACK)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise Misuse(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _address(sock: socket.socket, host: str) -> str:
    port = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


def _banner(args: argparse.Namespace, address: str, tokens: bool, workers: int) -> None:
    from phaseflow.cli.stores import store_name

    print(f"phaseflow serve: listening on {address} (workflows: "
          f"{', '.join(os.path.basename(w) for w in args.workflows)}; store: "
          f"{store_name(args.store)}; workers: {workers})", flush=True)
    print(f"phaseflow serve: web view at {address}/ui/", flush=True)
    if args.auth:
        print(f"phaseflow serve: every request is checked by the auth hook {args.auth}",
              flush=True)
    elif not tokens:
        print("phaseflow serve: no tokens: anyone on this machine may call (loopback only)",
              flush=True)


def _serve(args: argparse.Namespace, config: ServeConfig, port: int) -> int:
    import asyncio

    from phaseflow.serve.app import create_app
    from phaseflow.serve.process import GracefulServer, uvicorn_config

    if args.fd is not None:
        sock = socket.socket(fileno=args.fd)
    else:
        sock = _bind(args.host, port)
        _banner(args, _address(sock, args.host), bool(config.tokens), 1)
    app = create_app(config)
    server = GracefulServer(uvicorn_config(app), app, config, supervised=args.fd is not None)
    asyncio.run(server.serve(sockets=[sock]))
    return 0


def _supervise(args: argparse.Namespace, workers: int, port: int) -> int:
    from phaseflow.serve.process import supervise

    sock = _bind(args.host, port)
    _banner(args, _address(sock, args.host), bool(_tokens(args)), workers)
    return supervise(sock, workers)
