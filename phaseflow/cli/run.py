"""``phaseflow run``: talk to a workflow's agent in the terminal, or run scripted messages.

Interactive when standard input is a terminal and no ``--message`` is given: a chat, with
the reply streamed as it is written, tool calls, results, state and phase changes shown
as they happen, and approvals asked inline. Otherwise every ``--message`` (or every line
of standard input) is one turn, in order, and approvals are refused unless
``--approve all``. A scripted model's run whose script does not fit what happened (a call
rejected because nobody was there to approve it, replies never asked for) ends with a
warning naming the first mismatch; ``--strict-script`` makes it an error. Exit status: 0
when every turn completed (or was cancelled from the chat), 1 when a turn failed (or the
script did not fit, with ``--strict-script``), 2 for bad input (a workflow, module,
script or option that cannot be used), 130 when interrupted.

Ctrl-C while a turn runs cancels that turn (``session.cancel()``: the stream is closed,
running tools are cancelled, every call gets a result); a second Ctrl-C, or Ctrl-C at the
prompt, quits.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from phaseflow.cli.render import Sink, Transcript
    from phaseflow.providers.protocol import Provider
    from phaseflow.session import Agent, PendingApproval, Session
    from phaseflow.session.events import Event
    from phaseflow.turn.messages import Content

#: the answers to an approval prompt and the decision each means
ANSWERS = {
    "y": "approve", "yes": "approve",
    "n": "reject", "no": "reject",
    "t": "approve_turn", "turn": "approve_turn",
    "s": "approve_session", "session": "approve_session",
}

#: exit status after Ctrl-C (128 + SIGINT), as shells report it
INTERRUPTED = 130


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("workflow", metavar="WORKFLOW", help="the workflow file to run")
    parser.add_argument(
        "--tools", metavar="MODULE:ATTR",
        help="the tools: a list of @tool functions or a mapping from tool name to callable "
        "(MODULE is imported with the current folder on the path)")
    parser.add_argument(
        "--hooks", metavar="MODULE:ATTR",
        help="the callables of the workflow's 'call' effects: a mapping from name to callable")
    from phaseflow.cli.agent_options import MCP_HELP, add_request_layout
    from phaseflow.cli.providers import CHOICES, ROLE_HELP
    from phaseflow.cli.providers import HELP as PROVIDER_HELP

    add_request_layout(parser)

    parser.add_argument("--mcp", metavar="FILE", help=MCP_HELP)
    parser.add_argument(
        "--provider", action="append", metavar=CHOICES, help=PROVIDER_HELP + "." + ROLE_HELP)
    parser.add_argument("--model", metavar="M",
                        help="the model name (required but for scripted:FILE)")
    parser.add_argument("--base-url", metavar="URL",
                        help="the model server of --provider (default: its SDK's "
                        "variable, such as OPENAI_BASE_URL, or the hosted API)")
    parser.add_argument("--max-tokens", metavar="N",
                        help="the most tokens one model reply may have (--provider openai; "
                        "a scripted model's replies are written in advance: ignored)")
    parser.add_argument("--system", metavar="TEXT", default="",
                        help="the host's system text, before the phase's instructions")
    parser.add_argument("--session", metavar="ID",
                        help="the session id: resumed when the store has it (default: a new id)")
    parser.add_argument("--store", metavar="STORE", default=None,
                        help="where sessions are kept: a SQLite file (default: "
                        "phaseflow-sessions.db in the current folder), a postgresql:// URL, "
                        "or 'memory' (nothing kept after the process ends)")
    parser.add_argument("--lease", metavar="SECONDS",
                        help="how long this process holds the session's turn before it "
                        "must renew it (default 30; a turn left by a killed process on "
                        "another machine is taken over once it expires)")
    parser.add_argument(
        "-m", "--message", action="append", metavar="TEXT",
        help="send TEXT as one turn and exit when every --message is done (repeatable: "
        "one turn each, in order). Leading @FILE words attach files: '@photo.png What is "
        "this?' sends the image with the text; '@@' starts a text with a literal '@'")
    parser.add_argument(
        "--max-history-tokens", metavar="N",
        help="compact the history when a request would carry more than N tokens: its "
        "oldest turns are folded into a summary the model makes (every message is kept)")
    parser.add_argument(
        "--max-continuations", metavar="N",
        help="how many times a reply cut at the model's output limit is continued (the "
        "model is asked to go on) before the turn ends 'cut' (default 2; 0: never)")
    parser.add_argument(
        "--busy", choices=("queue", "reject", "steer", "interrupt"),
        help="what a message does when another worker runs the session's turn: queue it "
        "for the next turn (default), reject it, steer the running turn with it, or "
        "interrupt that turn (it is cancelled and this message starts the next)")
    parser.add_argument(
        "--mode", choices=("exec", "plan"),
        help="plan: only the catalogue's read_only tools run, every other call is listed "
        "as the plan, not run; exec (a new session's default): tools run. Given for a "
        "stored session (--session), it switches that session's mode first")
    parser.add_argument("--json", action="store_true",
                        help="print every event as one JSON line instead of the transcript")
    parser.add_argument(
        "--approve", choices=("all", "none"),
        help="decide every approval without asking: 'all' approves, 'none' rejects "
        "(default: ask in a chat, reject otherwise)")
    parser.add_argument(
        "--strict-script", action="store_true",
        help="with --provider scripted:FILE: exit 1 when the script does not fit what "
        "happened (a call rejected because nobody approved it, replies never asked "
        "for); without it that is a warning")


#: seconds after which a cancelled turn still waiting for its tools is said to be
STILL_STOPPING_AFTER = 2.0


class Misuse(Exception):
    """Input the command cannot use: printed as one line, exit status 2."""


def split_attachments(message: str) -> tuple[list[str], str]:
    """The files a message attaches (its leading ``@FILE`` words) and its text: ``@a.png
    @b.pdf compare them`` is two files and ``compare them``; a message starting ``@@``
    is text starting with one ``@``."""
    if message.startswith("@@"):
        return [], message[1:]
    paths: list[str] = []
    rest = message
    while rest.startswith("@") and len(rest) > 1 and not rest[1].isspace():
        word, _, rest = rest[1:].partition(" ")
        paths.append(word)
        rest = rest.lstrip(" ")
    return paths, rest


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except Misuse as problem:
        print(f"phaseflow run: error: {problem}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    import os

    from phaseflow.cli.agent_options import (
        TERMINATED,
        agent_code,
        count_option,
        given_options,
        positive_integer,
        seconds,
        sigterm_quits,
    )
    from phaseflow.cli.common import load_or_report
    from phaseflow.cli.providers import split_providers
    from phaseflow.cli.stores import DEFAULT_STORE, open_store
    from phaseflow.cli.telemetry import switch_on
    from phaseflow.errors import ConfigError, PhaseflowError

    try:
        args.provider, args.role_providers = split_providers(args.provider)
    except ConfigError as exc:
        raise Misuse(str(exc)) from None
    if _provider_choice(args)[0] != "scripted" and args.strict_script:
        raise Misuse("--strict-script checks the script of --provider scripted:FILE")
    switch_on(Misuse)  # traces and metrics when the OTEL_* variables ask for them
    try:
        max_tokens = positive_integer(args.max_tokens, "--max-tokens")
        max_history = positive_integer(args.max_history_tokens, "--max-history-tokens")
        continuations = count_option(args.max_continuations, "--max-continuations")
        lease = seconds(args.lease, "--lease")
        store = open_store(args.store)
    except ConfigError as exc:
        raise Misuse(str(exc)) from None
    #: the store file this run creates when no --store is given, said once it exists
    new_store = (os.path.abspath(DEFAULT_STORE)
                 if args.store is None and not os.path.exists(DEFAULT_STORE) else None)
    workflow = load_or_report(args.workflow, "run")
    if isinstance(workflow, int):
        return 2  # what is wrong with it is printed
    try:
        tools, hooks, mcp = agent_code(args)
    except ConfigError as exc:
        raise Misuse(str(exc)) from None
    provider = _provider(args, max_tokens)
    from phaseflow.cli.providers import make_role_providers

    try:
        roles = make_role_providers(args.role_providers, max_tokens=max_tokens)
    except ConfigError as exc:
        raise Misuse(str(exc)) from None
    from phaseflow.session import Agent

    options = given_options(lease=lease, mode=args.mode, busy=args.busy,
                            max_history_tokens=max_history,
                            context_position=args.context_position,
                            offer_tools=args.offer_tools,
                            max_continuations=continuations)
    try:
        with sigterm_quits(mcp is not None) as term:
            agent = Agent(workflow, provider, providers=roles, tools=tools, hooks=hooks,
                          system=args.system, model=args.model, store=store, mcp=mcp,
                          **options)
    except PhaseflowError as exc:
        raise Misuse(str(exc)) from None
    if term.received:
        return TERMINATED  # while the servers started (those that did are stopped)
    _warn_missing(agent)
    _warn_script(agent, provider)
    loop = asyncio.new_event_loop()
    chat = Chat(agent, loop, args, new_store=new_store)
    try:
        code = TERMINATED
        with sigterm_quits(mcp is not None) as term:
            code = chat.start()
        return TERMINATED if term.received else code
    finally:
        agent.close()  # stops the MCP servers it started (Ctrl-C and SIGTERM too)
        closing = getattr(provider, "aclose", None)
        if not chat.abandoned:
            from phaseflow.cli.stores import close_store

            with contextlib.suppress(Exception):
                if closing is not None:
                    loop.run_until_complete(closing())
                from phaseflow.cli.providers import close_provider

                for role_provider in roles.values():
                    loop.run_until_complete(close_provider(role_provider))
                loop.run_until_complete(close_store(store))
                # what asyncio.run does: finish the async generators still open (an SDK's
                # stream iterators), or they are reported as destroyed while pending
                loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


# --- inputs ---------------------------------------------------------------------------

def _provider_choice(args: argparse.Namespace) -> tuple[str, str]:
    """('openai', '') or ('scripted', FILE), checked before anything is loaded."""
    from phaseflow.cli.providers import check_provider
    from phaseflow.errors import ConfigError

    try:
        return check_provider(args.provider, args.base_url)
    except ConfigError as exc:
        raise Misuse(str(exc)) from None


def _provider(args: argparse.Namespace, max_tokens: int | None) -> Provider:
    from phaseflow.cli.providers import make_provider
    from phaseflow.errors import ConfigError

    try:
        return make_provider(args.provider, args.model, args.base_url, max_tokens=max_tokens)
    except ConfigError as exc:
        raise Misuse(str(exc)) from None


def _warn_missing(agent: Agent) -> None:
    """Catalogue tools without an implementation are never offered: said, not refused
    (a run may leave a tool out on purpose). A ``call`` effect without its callable is
    refused by the Agent itself (exit 2)."""
    missing = agent.missing_tools()
    if missing:
        print(f"phaseflow run: warning: no implementation for {len(missing)} tool(s), so "
              f"they are never offered: {', '.join(missing)} (give them with --tools)",
              file=sys.stderr)


def _warn_script(agent: Agent, provider: Provider) -> None:
    """Name the scripted calls of tools the session does not know, with a "did you
    mean": the session would refuse them only when their reply comes."""
    from phaseflow.providers.scripted import ScriptedProvider

    if not isinstance(provider, ScriptedProvider):
        return
    from phaseflow.expr.describe import did_you_mean
    from phaseflow.session.core import GO_TO_PHASE, RECORD
    from phaseflow.spec.model import tree_catalogue

    catalogue = tree_catalogue(agent.workflow)
    known = {*(catalogue if catalogue is not None else agent.tools), GO_TO_PHASE, RECORD}
    for where, name in provider.unknown_tools(known):
        print(f"phaseflow run: warning: {where} calls {name!r}, which is not a tool of the "
              f"workflow{did_you_mean(name, known)} (the session refuses the call)",
              file=sys.stderr)


# --- the conversation -----------------------------------------------------------------

def _readline() -> bool:
    """Load line editing for ``input()`` where the platform has it (not on Windows)."""
    try:
        import readline  # noqa: F401 - importing it is what turns it on
    except ImportError:
        return False
    return True


@dataclass
class _Outcome:
    """How driving one stream of events ended, as far as the user's Ctrl-C goes."""

    quit: bool = False  # pressed twice: leave now
    cancelled: bool = False  # pressed once: the turn was asked to stop
    events: int = 0  # how many events the stream gave
    refused: bool = False  # the stream ended with an error (a busy session's reject)


class Chat:
    """One session driven from the command line, on one event loop (the session's
    asyncio objects belong to it). The loop runs only while a turn does; between turns
    the prompt reads standard input, where Ctrl-C is a plain ``KeyboardInterrupt``."""

    def __init__(self, agent: Agent, loop: asyncio.AbstractEventLoop,
                 args: argparse.Namespace, *, new_store: str | None = None) -> None:
        from phaseflow.cli.render import JsonLines, Transcript, wants_colour

        for stream in (sys.stdout, sys.stderr):
            # a model's text in a terminal that cannot show it: replaced, not a crash
            reconfigure = getattr(stream, "reconfigure", None)
            if reconfigure is not None:
                reconfigure(errors="replace")
        self.agent = agent
        self.loop = loop
        self.args = args
        self.interactive = not args.message and sys.stdin.isatty()
        self.sink: Sink = (
            JsonLines(sys.stdout, sys.stderr) if args.json
            else Transcript(sys.stdout, colour=wants_colour(sys.stdout),
                            echo_user=not self.interactive))
        #: the transcript, when the prompt has line editing (readline: arrow keys and
        #: history), for a person at a terminal
        self.line_editing: Transcript | None = (
            self.sink if isinstance(self.sink, Transcript) and self.interactive
            and sys.stdout.isatty() and _readline() else None)
        self.failed = False
        self.abandoned = False
        self.session: Session | None = None
        #: the store file this run creates (no --store), named once it exists
        self.new_store = new_store
        #: the turn a stopped process left unfinished, which the first send finishes
        self.resuming: int | None = None
        #: where a scripted run's script did not fit what happened, in order
        self.script_mismatches: list[str] = []

    # --- the whole run ----------------------------------------------------------------

    def start(self) -> int:
        import itertools
        import uuid

        from phaseflow.errors import PhaseflowError

        messages: Iterator[str] = iter(())
        for message in self.args.message or ():  # every attachment checked before a turn
            self._content(message)
        if not self.interactive:
            # the first message is read before the session is opened: no messages at
            # all is a usage error, which leaves nothing behind (not even a store file)
            messages = self._messages()
            first = next(messages, None)
            if first is None:
                raise Misuse("no messages: standard input is not a terminal and gave no "
                             "lines (send them with --message TEXT)")
            messages = itertools.chain([first], messages)
        session_id = self.args.session or f"run-{uuid.uuid4().hex[:12]}"
        from phaseflow.stores.codec import StoreDataError

        try:
            self.session = self.loop.run_until_complete(self.agent.session(session_id))
        except StoreDataError as exc:  # damage, as the sessions commands report it: 1
            print(f"phaseflow run: error: {exc}", file=sys.stderr)
            return 1
        except PhaseflowError as exc:
            raise Misuse(str(exc)) from None
        session = self.session
        self._store_notice()
        if self.args.mode is not None and session.mode != self.args.mode:
            try:
                for event in self.loop.run_until_complete(session.set_mode(self.args.mode)):
                    self.sink.show(event)
            except PhaseflowError as exc:
                raise Misuse(str(exc)) from None
        if session.status == "running":
            self.resuming = session.turn
        if self.interactive:
            self.sink.notice(f"{self.agent.workflow.name}: session {session.id}, phase "
                             f"{session.phase}; Ctrl-C cancels a turn, Ctrl-D or Ctrl-C at "
                             "the prompt quits")
        if session.pending_approval is not None and self._approvals().quit:
            return INTERRUPTED
        if self.interactive:
            return self._chat()
        return self._scripted(messages)

    def _store_notice(self) -> None:
        """Say where the sessions are kept when this run made the default store file
        (once: later runs find it); on standard error, so ``--json`` output stays JSON."""
        import os

        if self.new_store is not None and os.path.exists(self.new_store):
            print(f"phaseflow run: sessions are kept in {self.new_store} (a new file; "
                  "--store names another, 'phaseflow sessions list' shows them)",
                  file=sys.stderr)
            self.new_store = None

    def _messages(self) -> Iterator[str]:
        if self.args.message:
            yield from self.args.message
            return
        for line in sys.stdin:
            if line.strip():
                yield line.rstrip("\n")

    def _scripted(self, messages: Iterator[str]) -> int:
        session = self._session()
        for message in messages:
            if session.status == "finished":
                print(f"phaseflow run: error: session {session.id} has finished (phase "
                      f"{session.phase} is terminal); not sent: {message!r}",
                      file=sys.stderr)
                return 1
            outcome = self._send(message)
            if not outcome.quit and not outcome.cancelled:
                outcome = self._approvals()
            if outcome.quit or outcome.cancelled:
                return INTERRUPTED
        self._finished_notice()
        if self._script_misfit():
            return 1
        return 1 if self.failed else 0

    def _script_misfit(self) -> bool:
        """Say the first place where a scripted model's script did not fit what happened
        (a warning; an error with ``--strict-script``); True when that fails the run."""
        from phaseflow.providers.scripted import ScriptedProvider, ScriptIncomplete

        provider = self.agent.provider
        if not isinstance(provider, ScriptedProvider):
            return False
        mismatches = self.script_mismatches
        try:
            provider.assert_complete()
        except ScriptIncomplete as exc:
            mismatches.append(str(exc))
        if not mismatches:
            return False
        strict = bool(self.args.strict_script)
        more = f" (and {len(mismatches) - 1} more)" if len(mismatches) > 1 else ""
        tail = "" if strict else "; --strict-script makes this an error"
        print(f"phaseflow run: {'error' if strict else 'warning'}: the script does not fit "
              f"the conversation: {mismatches[0]}{more}{tail}", file=sys.stderr)
        return strict

    def _chat(self) -> int:
        session = self._session()
        while session.status != "finished":
            try:
                line = self._ask("you> ")
            except KeyboardInterrupt:
                self._newline()
                return INTERRUPTED
            if line is None:
                self._newline()
                break
            if not line.strip():
                continue
            try:
                self._content(line)
            except Misuse as refused:  # a person corrects the line: the chat goes on
                self.sink.notice(f"not sent: {refused}")
                continue
            outcome = self._send(line)
            if not outcome.quit:  # (a turn may reach its approval before a Ctrl-C lands)
                outcome = self._approvals()
            if outcome.quit:
                return INTERRUPTED
        self._finished_notice()
        return 1 if self.failed else 0

    def _finished_notice(self) -> None:
        session = self._session()
        if session.status == "finished":
            self.sink.notice(f"session {session.id} finished in phase {session.phase}")

    def _session(self) -> Session:
        assert self.session is not None
        return self.session

    # --- input ------------------------------------------------------------------------

    def _ask(self, prompt: str, *, question: bool = False) -> str | None:
        """One line typed by the user (``None`` at end of input). Ctrl-C is a
        ``KeyboardInterrupt``, never missed: CPython's line reader waits in ``select``
        and sees a signal only when it interrupts that wait, so one that lands as the
        prompt is drawn would wait for the next key (:mod:`phaseflow.cli.ctrl_c`)."""
        from phaseflow.cli.ctrl_c import CtrlC

        presses = CtrlC(quit_after=1)
        try:
            with presses:
                line = self._read_line(prompt, question=question)
        finally:
            presses.close()
        if presses.quit.is_set():  # pressed as the line was read: still a Ctrl-C
            raise KeyboardInterrupt
        return line

    def _read_line(self, prompt: str, *, question: bool) -> str | None:
        if self.line_editing is not None:
            try:
                return input(self.line_editing.line_prompt(prompt, question=question))
            except EOFError:
                return None
        self.sink.prompt(prompt, question=question)
        line = sys.stdin.readline()
        if not line:
            return None
        return line.rstrip("\r\n")

    def _newline(self) -> None:
        self.sink.prompt("\n")

    # --- turns ------------------------------------------------------------------------

    def _turn(self, stream: Callable[[], AsyncIterator[Event]]) -> _Outcome:
        """Drive one stream of events to its end. The first Ctrl-C cancels the turn (the
        session closes it cleanly); a second one quits at once, even while a tool that
        blocks holds the loop (see :mod:`phaseflow.cli.ctrl_c`: the presses are counted
        off the main thread, so none is missed while a tool sleeps)."""
        from phaseflow.cli.ctrl_c import CtrlC

        outcome = _Outcome()
        task = self.loop.create_task(self._consume(stream(), outcome))
        session = self._session()

        def first_press() -> None:  # in the watchdog thread
            outcome.cancelled = True
            # said at once (a blocking tool may hold the loop); done when the loop can
            self.sink.urgent("cancelling the turn; Ctrl-C again quits")
            self.loop.call_soon_threadsafe(session.cancel)

        presses = CtrlC(first_press)
        try:
            with presses:
                self.loop.run_until_complete(task)
        except KeyboardInterrupt:
            outcome.quit = True
        finally:
            presses.close()
        if presses.presses:  # (one that landed as the turn ended counts too)
            outcome.cancelled = True
        if outcome.quit or presses.quit.is_set():
            outcome.quit = True
            self.abandon()
        return outcome

    def _send(self, message: str) -> _Outcome:
        """Send one message; say so when another worker holds the session's turn (the
        message then waits in the session's queue for that worker, and nothing else is
        shown here)."""
        outcome = self._turn(partial(self._session().send, self._content(message)))
        if outcome.events == 0 and not (outcome.quit or outcome.cancelled or outcome.refused):
            self._queued_notice()
        return outcome

    def _content(self, message: str) -> Content:
        """A line as a message: leading ``@FILE`` words are attachments (read, and
        checked against the provider's types and the size limit: one line and exit 2
        when one cannot be sent); ``@@`` is a literal ``@``."""
        from phaseflow.providers.media import accepted_media
        from phaseflow.turn.media import MediaRefused, check_media, data_url
        from phaseflow.turn.messages import MediaPart, TextPart

        paths, text = split_attachments(message)
        if not paths:
            return text
        parts: list[TextPart | MediaPart] = []
        for path in paths:
            try:
                data = Path(path).read_bytes()
            except OSError as exc:
                raise Misuse(f"cannot attach {path}: {exc.strerror or exc}") from None
            kind = check_media(data, None, accepted_media(self.agent.provider))
            if isinstance(kind, MediaRefused):
                raise Misuse(f"cannot attach {path}: {kind}")
            parts.append(MediaPart(kind, data_url(kind, data)))
        return (TextPart(text), *parts) if text else tuple(parts)

    def _queued_notice(self) -> None:
        import time

        session = self._session()
        held = self.loop.run_until_complete(self.agent.store.lease(session.id))
        who = "another worker"
        if held is not None:
            left = held.expires - time.time()
            who = (f"worker {held.owner} (its lease ends in {max(left, 0):.0f} s)"
                   if left > 0 else f"worker {held.owner}")
        self.sink.notice(f"session {session.id} is busy: {who} runs its turn; the message "
                         f"is queued for it. If that worker is gone, 'phaseflow sessions "
                         f"recover {session.id} --force' takes the session over")

    def abandon(self) -> None:
        """Quit in the middle of a turn: the loop never runs again (a tool that blocks
        would hold it), and what it leaves pending is not reported at exit.

        The turn's task is left suspended (in a tool's ``gather``, an ``asyncio.wait``),
        and it is garbage in a reference cycle. Collected after the loop has closed, its
        coroutines are closed and their ``finally`` blocks run without a loop (a lease
        given back, a waiter cancelled): since Python 3.12 closing a coroutine closes the
        async generators it awaits, and each failure is printed as ``Exception ignored
        ... RuntimeError: Event loop is closed`` (or ``no running event loop``). So
        every object alive now is frozen out of the collector (``gc.freeze``): the
        process is leaving, and what the abandoned turn holds is never finalised."""
        import gc
        import warnings

        self.abandoned = True
        self.loop.set_exception_handler(lambda loop, context: None)
        warnings.filterwarnings("ignore", "coroutine .* was never awaited", RuntimeWarning)
        gc.freeze()

    async def _consume(self, stream: AsyncIterator[Event], outcome: _Outcome) -> None:
        from phaseflow.errors import PhaseflowError
        from phaseflow.session.events import TurnCancelling, TurnFinished

        stopping: asyncio.Future[None] | None = None
        try:
            async for event in stream:
                outcome.events += 1
                self._resuming_notice(event)
                self.sink.show(event)
                if isinstance(event, TurnCancelling):
                    stopping = asyncio.ensure_future(self._still_stopping(event.tools))
                if isinstance(event, TurnFinished) and stopping is not None:
                    stopping.cancel()
                if isinstance(event, TurnFinished) and event.status in ("failed",
                                                                        "step_limit", "cut"):
                    self.failed = True
        except PhaseflowError as exc:
            print(f"phaseflow run: error: {exc}", file=sys.stderr)
            self.failed = True
            outcome.refused = True
        finally:
            if stopping is not None:
                stopping.cancel()

    async def _still_stopping(self, tools: tuple[str, ...]) -> None:
        """A cancelled turn waits for its sync tools' threads: said after 2 s."""
        await asyncio.sleep(STILL_STOPPING_AFTER)
        self.sink.urgent(f"still stopping: {', '.join(tools)}")

    def _resuming_notice(self, event: Event) -> None:
        """Before the first event of a turn a stopped process left unfinished (the
        first send finishes it), say which turn it is: a bare result would be shown
        out of its context otherwise."""
        from phaseflow.session.events import TurnStartedEvent

        turn, self.resuming = self.resuming, None
        if turn is not None and event.turn == turn and not isinstance(event, TurnStartedEvent):
            self.sink.notice(f"resuming turn {turn} of session {self._session().id}: the "
                             "process that ran it stopped before it ended")

    # --- approvals --------------------------------------------------------------------

    def _approvals(self) -> _Outcome:
        """Decide pending approvals until the turn no longer waits for one."""
        session = self._session()
        outcome = _Outcome()
        while session.pending_approval is not None:
            pending = session.pending_approval
            try:
                decision, reason = self._decide(pending)
            except KeyboardInterrupt:
                self._newline()
                self._turn_cancel_pending()
                outcome.cancelled = True
                return outcome
            outcome = self._turn(partial(session.resolve, pending.call_id, decision,
                                         reason=reason, arguments_hash=pending.arguments_hash))
            if outcome.quit or outcome.cancelled:
                return outcome
        return outcome

    def _turn_cancel_pending(self) -> None:
        self.sink.notice("cancelling the turn")

        async def cancel() -> None:
            for event in await self._session().cancel_pending():
                self.sink.show(event)

        self.loop.run_until_complete(cancel())

    def _decide(self, pending: PendingApproval) -> tuple[str, str]:
        """The decision on one call, and the reason the model sees for a rejection."""
        from phaseflow.cli.render import one_line

        if self.args.approve == "all":
            return "approve", ""
        if self.args.approve == "none":
            return "reject", "The user rejected this call."
        if not self.interactive:
            self.sink.notice(f"{pending.name}: rejected: not interactive (--approve all "
                             "approves every call)")
            self.script_mismatches.append(
                f"turn {self._session().turn}: {pending.name} was rejected because nobody "
                "was there to approve it, and the script's later replies were written "
                "without knowing it (--approve all approves every call, --approve none "
                "rejects them on purpose)")
            return "reject", "Not approved: nobody was there to approve it."
        question = (f"approve {pending.name} {one_line(pending.arguments)}? "
                    "[y]es, [n]o, this [t]urn, this [s]ession: ")
        while True:
            answer = self._ask(question, question=True)
            if answer is None:  # end of input: fail closed
                self._newline()
                return "reject", "The user rejected this call."
            decision = ANSWERS.get(answer.strip().lower())
            if decision is not None:
                reason = "The user rejected this call." if decision == "reject" else ""
                return decision, reason
