"""``phaseflow sessions``: what a session store holds, and finishing what a dead worker left.

- ``list``: one line per session (id, workflow, status, phase, turn, last update).
- ``show ID``: a readable timeline (turns, tool calls and results, approvals, state and
  phase changes) from the stored events and record; ``--json``: the record as one object
  with the exact model messages (``history``), which is what a support engineer or a
  test needs to see what the model was actually sent.
- ``events ID``: the stored events (``--after SEQ`` resumes a stream; ``--json``: one
  JSON object a line).
- ``delete ID``: remove a session and its events.
- ``fork ID --at N --as NEW``: a new session NEW that starts where ID stood at the end
  of its turn N (history, state, phase, machine, calls); ID is untouched.
- ``branches ID``: the branches of ID (``ID~1``, ``ID~2``, ...: its last message edited
  and asked again, ``session.edit_last``), one line each.
- ``recover [ID ...]``: finish the turns that a stopped worker left - what a recovery
  job runs after a crash or a deploy. It needs the workflow, tools and model the
  sessions run with, since a turn continues where it stopped.
- ``tick``: fire the due timers of the workflow's sessions (a transition's ``after``),
  each once, under its session's lease - what cron runs on a host without a server.
  It takes the options of ``recover``.

Exit status: 0 when everything asked was done, 1 when a session is missing, unreadable
or could not be recovered, 2 for misuse (a store that cannot be opened, bad options). An
error is one line naming what is wrong, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from phaseflow.errors import ConfigError

if TYPE_CHECKING:
    from phaseflow.session import Agent
    from phaseflow.session.events import Event
    from phaseflow.stores.base import SessionRecord, SessionSummary, Store, StoredEvent

PROG = "phaseflow sessions"

#: how many characters of a tool result or a message one timeline line shows
LINE_CHARS = 160

#: session statuses a turn is left in when its worker stopped
RUNNING = "running"


class Misuse(Exception):
    """Input the command cannot use: one line, exit status 2."""


class Failed(Exception):
    """What was asked could not be done (no such session, unreadable data): exit 1."""


class Reported(Exception):
    """What is wrong was printed already (a workflow's diagnostics): exit ``code``."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


# --- arguments ---------------------------------------------------------------------------

def add_arguments(parser: argparse.ArgumentParser) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--store", metavar="PATH|URL",
        help="the session store: an SQLite file or a postgresql:// URL (default: "
        "phaseflow-sessions.db in the current folder)")
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    listing = sub.add_parser("list", parents=[common], help="one line per stored session")
    listing.add_argument("--json", action="store_true", help="print a JSON array")
    show = sub.add_parser("show", parents=[common],
                          help="a session's timeline (--json: its record and exact history)")
    show.add_argument("id", metavar="ID")
    show.add_argument("--json", action="store_true",
                      help="print one object: id, workflow, status, phase, turn, state, "
                      "pending_approval, trust, history (what the model sees), transcript (every "
                      "message)")
    events = sub.add_parser("events", parents=[common], help="a session's stored events")
    events.add_argument("id", metavar="ID")
    events.add_argument("--after", type=int, default=0, metavar="SEQ",
                        help="only the events after this sequence number")
    events.add_argument("--json", action="store_true", help="print one JSON object a line")
    delete = sub.add_parser("delete", parents=[common], help="remove a session and its events")
    delete.add_argument("id", metavar="ID")
    output = sub.add_parser("output", parents=[common],
                            help="a tool output of ID that was cut for the model, whole (or "
                            "a byte range): REF is the reference its result names")
    output.add_argument("id", metavar="ID")
    output.add_argument("reference", metavar="REF")
    output.add_argument("--offset", default="0", metavar="N",
                        help="the first byte to print (default 0)")
    output.add_argument("--limit", default=None, metavar="N",
                        help="the most bytes to print (default: to the end)")
    trust = sub.add_parser("trust", parents=[common],
                           help="what ID trusts (tools that run without asking); --revoke "
                           "TOOL takes every trust of TOOL back")
    trust.add_argument("id", metavar="ID")
    trust.add_argument("--revoke", metavar="TOOL",
                       help="take back every trust of TOOL (a host's grant and every "
                       "approval for the turn or the session)")
    trust.add_argument("--json", action="store_true", help="print a JSON array")
    fork = sub.add_parser("fork", parents=[common],
                          help="a new session that starts at the end of a past turn of ID")
    fork.add_argument("id", metavar="ID")
    fork.add_argument("--at", required=True, metavar="N", dest="at_turn",
                      help="the turn whose end the new session starts from (1, 2, ...)")
    fork.add_argument("--as", required=True, metavar="NEW", dest="new_id",
                      help="the new session's id (a session of that id must not exist)")
    branches = sub.add_parser("branches", parents=[common],
                              help="the branches of ID (its last message edited: ID~1, ...)")
    branches.add_argument("id", metavar="ID")
    recover = sub.add_parser(
        "recover", parents=[common],
        help="finish the turns a stopped worker left (every running session, or the IDs)")
    recover.add_argument("ids", nargs="*", metavar="ID",
                         help="the sessions (default: every running session of the workflow)")
    _agent_arguments(recover)
    tick = sub.add_parser(
        "tick", parents=[common],
        help="fire the due timers of the workflow's sessions, each once (run it from cron)")
    tick.add_argument("--limit", default="1000", metavar="N",
                      help="the most timers fired by one run (default: 1000, soonest first)")
    tick.add_argument("--concurrency", default="64", metavar="N",
                      help="timer turns run at once (default: 64; their commits are "
                      "written together)")
    _agent_arguments(tick)


def _agent_arguments(recover: argparse.ArgumentParser) -> None:
    """The options that build the agent a turn continues with (recover, tick)."""
    recover.add_argument("--workflow", required=True, metavar="PATH",
                         help="the workflow file the sessions run")
    recover.add_argument("--tools", metavar="MODULE:ATTR",
                         help="the tools: a list of @tool functions or a mapping from tool "
                         "name to callable (MODULE is imported with the current folder on "
                         "the path)")
    recover.add_argument("--hooks", metavar="MODULE:ATTR",
                         help="the callables of the workflow's 'call' effects: a mapping")
    from phaseflow.cli.agent_options import MCP_HELP

    recover.add_argument("--mcp", metavar="FILE", help=MCP_HELP)
    from phaseflow.cli.providers import CHOICES, ROLE_HELP

    recover.add_argument("--provider", action="append", metavar=CHOICES,
                         help="the model that continues the turns (default: openai)."
                         + ROLE_HELP)
    recover.add_argument("--model", metavar="M", help="the model name (required for openai)")
    recover.add_argument("--base-url", metavar="URL", help="the server of --provider openai")
    recover.add_argument("--system", metavar="TEXT", default="",
                         help="the host's system text, as the sessions were run with")
    recover.add_argument("--force", action="store_true",
                         help="take the lease at once, even one that has not expired (the "
                         "worker is known to be gone; its late writes are refused)")
    recover.add_argument("--lease", default="30", metavar="S",
                         help="the lease this worker holds while it runs a turn, in seconds "
                         "(default: 30)")
    recover.add_argument("--max-tokens", metavar="N",
                         help="the most tokens one model reply may have (--provider openai)")


def run(args: argparse.Namespace) -> int:
    if not getattr(args, "action", None):
        print(f"{PROG}: error: name an action: list, show ID, events ID, delete ID or "
              "recover [ID ...]; or fork ID --at N --as NEW, branches ID, output ID REF, "
              "trust ID [--revoke TOOL], tick",
              file=sys.stderr)
        return 2
    for stream in (sys.stdout, sys.stderr):
        # a model's text that the terminal cannot show is replaced, not a crash
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="replace")
    command = f"{PROG} {args.action}"
    try:
        from phaseflow.cli.agent_options import TERMINATED, sigterm_quits

        code = TERMINATED
        with sigterm_quits(getattr(args, "mcp", None) is not None) as term:
            code = asyncio.run(_main(args))
        return TERMINATED if term.received else code
    except Misuse as problem:
        print(f"{command}: error: {problem}", file=sys.stderr)
        return 2
    except Failed as problem:
        print(f"{command}: error: {problem}", file=sys.stderr)
        return 1
    except Reported as reported:
        return reported.code


async def _main(args: argparse.Namespace) -> int:
    from phaseflow.cli.stores import MEMORY, close_store, open_store
    from phaseflow.stores.base import StoreError
    from phaseflow.stores.codec import StoreDataError

    if args.action in ("recover", "tick"):
        # the workflow, tools and model are checked before the store is touched
        agent_parts = _agent_parts(args)
        from phaseflow.cli.telemetry import switch_on
        switch_on(Misuse)  # traces and metrics when the OTEL_* variables ask for them
    if args.action == "fork":
        _check_fork(args)  # before the store is touched
    if args.store == MEMORY:
        raise Misuse("--store memory keeps no sessions after a process ends: name the "
                     "store the sessions were run with")
    try:
        store = open_store(args.store, must_exist=True)
    except ConfigError as exc:
        raise Misuse(str(exc)) from None
    try:
        action = _STORE_ACTIONS.get(args.action)
        if action is not None:
            return await action(store, args)
        if args.action == "tick":
            return await _tick(store, args, *agent_parts)
        return await _recover(store, args, *agent_parts)
    except StoreDataError as exc:
        raise Failed(str(exc)) from None
    except StoreError as exc:  # the store names itself (a path, a host and database)
        raise Misuse(str(exc)) from None
    finally:
        await close_store(store)


# --- list, show, events, delete ----------------------------------------------------------

async def _list(store: Store, args: argparse.Namespace) -> int:
    summaries = await store.sessions()
    damaged = [s for s in summaries if s.problem is not None]
    if args.json:
        print(json.dumps([_summary_json(s) for s in summaries], ensure_ascii=False, indent=2))
    elif not summaries:
        print("no sessions stored", file=sys.stderr)
    else:
        from phaseflow.cli.render import visible

        rows = [("ID", "WORKFLOW", "STATUS", "PHASE", "TURN", "UPDATED")] + [
            (s.session_id, s.workflow, s.status, s.phase, str(s.turn), when(s.updated_at))
            if s.problem is None else (s.session_id, "-", "damaged", "-", "-", "-")
            for s in summaries]
        widths = [max(len(row[k]) for row in rows) for k in range(len(rows[0]) - 1)]
        for row in rows:
            print(visible("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False))
                          + "  " + row[-1]))
    for summary in damaged:  # listed, and an error each: exit 1
        print(f"{PROG} list: error: {summary.problem}", file=sys.stderr)
    return 1 if damaged else 0


def _summary_json(s: SessionSummary) -> dict[str, Any]:
    if s.problem is not None:
        return {"id": s.session_id, "workflow": None, "status": None, "phase": None,
                "turn": None, "version": None, "updated_at": None, "problem": s.problem}
    return {"id": s.session_id, "workflow": s.workflow, "status": s.status, "phase": s.phase,
            "turn": s.turn, "version": s.version, "updated_at": s.updated_at, "problem": None}


async def _record(store: Store, session_id: str) -> SessionRecord:
    """The stored session, read as the API opens it: a session whose stored calls
    disagree (say, a pending approval altered to show another amount than the one that
    would run) is damaged here too, never shown as the truth."""
    from phaseflow.errors import PhaseflowError
    from phaseflow.session.core_json import core_from_json

    record = await store.load(session_id)
    if record is None:
        raise Failed(f"no session {session_id!r} in the store")
    try:
        core_from_json(session_id, record.core, record.execution, record.continuation)
    except PhaseflowError as exc:
        raise Failed(str(exc)) from None
    return record


async def _show(store: Store, args: argparse.Namespace) -> int:
    record = await _record(store, args.id)
    if args.json:
        print(json.dumps(record_json(record), ensure_ascii=False, indent=2))
        return 0
    stored = await store.events(args.id)
    from phaseflow.cli.render import visible

    for line in timeline(record, stored):
        print(visible(line))  # ids, names and keys came from a model or a host too
    return 0


async def _events(store: Store, args: argparse.Namespace) -> int:
    if await store.version(args.id) == 0:
        raise Failed(f"no session {args.id!r} in the store")
    for stored in await store.events(args.id, args.after):
        data = event_json(stored)
        if args.json:
            print(json.dumps(data, ensure_ascii=False))
        else:
            from phaseflow.cli.render import visible

            label, text = describe(data)
            print(visible(f"{stored.seq:>5}  {when(data.get('at'))}  turn "
                          f"{data.get('turn', 0)}  {label:<10} {text}".rstrip()))
    return 0


async def _output(store: Store, args: argparse.Namespace) -> int:
    """``sessions output ID REF``: the captured bytes, as they were, in reads of 1 MiB."""
    from phaseflow.session.outputs import OutputNotFound, read_output

    offset, limit = _bytes_option(args.offset, "--offset", 0), None
    if args.limit is not None:
        limit = _bytes_option(args.limit, "--limit", 1)
    if await store.version(args.id) == 0:
        raise Failed(f"no session {args.id!r} in the store")
    out = sys.stdout.buffer
    while limit is None or limit > 0:
        step = 2**20 if limit is None else min(limit, 2**20)
        try:
            data, size = await read_output(store, args.id, args.reference, offset, step)
        except OutputNotFound as missing:
            raise Failed(str(missing)) from None
        out.write(data)
        offset += len(data)
        if limit is not None:
            limit -= len(data)
        if not data or offset >= size:
            break
    out.flush()
    return 0


def _bytes_option(value: str, option: str, least: int) -> int:
    text = str(value).strip()
    if not text.isascii() or not text.isdigit() or int(text) < least:
        raise Misuse(f"{option} is a number of bytes ({least} or more), not {value!r}")
    return int(text)


async def _trust(store: Store, args: argparse.Namespace) -> int:
    from phaseflow.cli.render import visible
    from phaseflow.session.trust import trusted

    record = await _record(store, args.id)
    if args.revoke is not None:
        record = await _revoke(store, record, args.revoke)
    listed = trusted(record.execution)
    if args.json:
        print(json.dumps([t.to_json() for t in listed], ensure_ascii=False, indent=2))
        return 0
    if not listed:
        print(f"session {args.id} trusts nothing: every call that needs approval asks",
              file=sys.stderr)
    for line in trust_lines(record):
        print(visible(line))
    return 0


async def _revoke(store: Store, record: SessionRecord, tool: str) -> SessionRecord:
    """Every trust of ``tool`` taken back in one commit under the session's lease (a turn
    that runs holds it: refused, nothing changed)."""
    import os
    import time

    from phaseflow.session.trust import RevokeRefused, revoke_stored

    try:
        outcome = await revoke_stored(store, record.session_id, tool,
                                      owner=f"phaseflow-cli-{os.getpid()}", now=time.time())
    except RevokeRefused as exc:
        raise Failed(str(exc)) from None
    if outcome is None:
        raise Failed(f"no session {record.session_id!r} in the store")
    after, changed = outcome
    if changed:
        print(f"revoked every trust of {tool!r} in session {record.session_id}",
              file=sys.stderr)
    else:
        print(f"session {record.session_id} does not trust {tool!r}: nothing to revoke",
              file=sys.stderr)
    return after


def trust_lines(record: SessionRecord) -> list[str]:
    """What the session trusts, one line an entry (``show`` and ``trust``)."""
    from phaseflow.session.trust import trusted

    lines = []
    for t in trusted(record.execution):
        covers = {"any_arguments": "any arguments", "same_arguments":
                  f"the same arguments (sha256 {t.detail[:12]})",
                  "same_command": f"the same command {one_line(t.detail, 60)}"}[t.covers]
        lines.append(f"  {t.tool}: {covers}, for the {t.scope}")
    return lines


async def _delete(store: Store, args: argparse.Namespace) -> int:
    if not await store.delete(args.id):
        raise Failed(f"no session {args.id!r} in the store")
    print(f"deleted session {args.id}")
    return 0


# --- fork --------------------------------------------------------------------------------

def _check_fork(args: argparse.Namespace) -> None:
    """``--at`` a turn number, ``--as`` an id every store can keep (Misuse otherwise)."""
    from phaseflow.stores.base import InvalidSessionId, check_session_id

    text = str(args.at_turn).strip()
    if not text.isascii() or not text.isdigit() or int(text) < 1:
        raise Misuse(f"--at is a turn number (1, 2, ...), not {args.at_turn!r}")
    args.at_turn = int(text)
    try:
        check_session_id(args.new_id)
    except InvalidSessionId as exc:
        raise Misuse(f"--as: {exc}") from None


async def _fork(store: Store, args: argparse.Namespace) -> int:
    import time

    from phaseflow.session.fork import ForkRefused, fork_record

    try:
        record, _ = await fork_record(store, args.id, args.new_id, args.at_turn,
                                      now=time.time())
    except ForkRefused as exc:
        raise Failed(str(exc)) from None
    from phaseflow.session.records import transcript

    print(f"forked session {args.id} at the end of turn {record.turn} as {record.session_id} "
          f"({record.status}, phase {record.phase}, {len(transcript(record))} messages)")
    return 0


async def _branches(store: Store, args: argparse.Namespace) -> int:
    from phaseflow.cli.render import visible
    from phaseflow.session.fork import branches

    if await store.version(args.id) == 0:
        raise Failed(f"no session {args.id!r} in the store")
    found = await branches(store, args.id)
    if not found:
        print(f"session {args.id} has no branches", file=sys.stderr)
        return 0
    listed = {s.session_id: s for s in await store.sessions()}
    for sid in found:
        s = listed[sid]
        print(visible(f"{sid}  turn {s.turn}  {s.status}  phase {s.phase}  updated "
                      f"{when(s.updated_at)}"))
    return 0


# --- the JSON forms ----------------------------------------------------------------------

def event_json(stored: StoredEvent) -> dict[str, Any]:
    """A stored event as printed: its JSON with the store's ``seq``."""
    return {**stored.data, "seq": stored.seq, "session_id": stored.session_id}


def record_json(record: SessionRecord) -> dict[str, Any]:
    from phaseflow.session.records import history, message_json, pending_json, transcript
    from phaseflow.session.trust import trusted

    return {
        "id": record.session_id,
        "workflow": record.workflow,
        "status": record.status,
        "phase": record.phase,
        "turn": record.turn,
        "version": record.version,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
        "next_timer_at": record.next_timer_at,
        "state": dict(record.state),
        "pending_approval": pending_json(record),
        "trust": [t.to_json() for t in trusted(record.execution)],
        "history": [message_json(m) for m in history(record)],
        "transcript": [message_json(m) for m in transcript(record)],
    }


# --- the timeline ------------------------------------------------------------------------

def when(at: object) -> str:
    """Wall-clock seconds as UTC ISO 8601 to the second (``-`` when unknown)."""
    if not isinstance(at, int | float) or isinstance(at, bool) or at <= 0:
        return "-"
    try:
        return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return "-"


def one_line(value: object, limit: int = LINE_CHARS, *, as_json: bool = False) -> str:
    """A value on one line, terminal controls escaped (``run``'s rule: stored text came
    from a model or a tool): text as it is (``as_json``: quoted), anything else as JSON,
    cut at ``limit`` characters."""
    from phaseflow.cli.render import one_line as line

    return line(value, limit, quote=as_json)


def _assignments(data: Mapping[str, Any]) -> str:
    raw = data.get("new")
    new: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    keys = data.get("keys")
    names = [str(k) for k in keys] if isinstance(keys, list) else list(new)
    parts = [f"{k} = {one_line(new.get(k), 60, as_json=True)}" for k in names]
    source = _field(data, "source")
    return ", ".join(parts) + (f" ({source})" if source else "")


def _field(data: Mapping[str, Any], key: str, limit: int = LINE_CHARS) -> str:
    """A field of a stored event as one line of text ("" when absent): a store may hold
    events a newer phaseflow wrote, or damaged ones, and showing them must not fail."""
    value = data.get(key)
    return "" if value is None else one_line(value, limit)


def describe(data: Mapping[str, Any]) -> tuple[str, str]:
    """A stored event as (label, one line of text): what the timeline and ``events``
    show."""
    kind = data.get("type")
    name = _field(data, "name", 80)
    if kind == "turn_started":
        return "user", _field(data, "message")
    if kind == "tool_call":
        return "call", f"{name} {one_line(data.get('arguments'))}"
    if kind == "tool_result":
        return _field(data, "status", 20) or "result", f"{name}: {_field(data, 'content')}"
    if kind == "approval_requested":
        reason = _field(data, "reason")
        return "approval?", f"{name} {one_line(data.get('arguments'))}" + (
            f": {reason}" if reason else "")
    if kind == "approval_resolved":
        reason = _field(data, "reason")
        return "decision", f"{_field(data, 'decision', 20)} {name}" + (
            f": {reason}" if reason else "")
    if kind == "state_changed":
        return "state", one_line(_assignments(data), 4 * LINE_CHARS)
    if kind == "phase_changed":
        return "phase", (f"{_field(data, 'from_phase', 80)} -> {_field(data, 'to_phase', 80)}"
                         f" ({_field(data, 'trigger', 40)})")
    if kind == "retrying":
        return "retry", (f"attempt {_field(data, 'attempt', 20)} in "
                         f"{_field(data, 'delay', 20)}s: {_field(data, 'message')}")
    if kind == "turn_finished":
        tokens = ""
        if data.get("input_tokens") or data.get("output_tokens"):
            tokens = (f", {_field(data, 'input_tokens', 20) or 0}+"
                      f"{_field(data, 'output_tokens', 20) or 0} tokens")
        reply = _field(data, "reply", 10 * LINE_CHARS)
        return "reply", f"[{_field(data, 'status', 20)}{tokens}] {reply}".rstrip()
    if kind == "error":
        return "error", f"{_field(data, 'code', 40)}: {_field(data, 'message')}"
    if kind == "history_compacted":
        return "compacted", (f"{_field(data, 'folded', 20)} messages folded: "
                             f"{_field(data, 'summary')}")
    if kind == "message_steered":
        return "steer", _field(data, "message")
    if kind == "turn_cancelling":
        tools = data.get("tools")
        shown = ", ".join(str(t) for t in tools) if isinstance(tools, list) else ""
        return "cancelling", one_line(f"waiting for {shown} to end")
    if kind == "reply_continued":
        return "continued", (f"reply cut at the output limit: continuation "
                             f"{_field(data, 'continuation', 20)} of {_field(data, 'of', 20)}")
    if kind == "mode_changed":
        return "mode", _field(data, "mode", 20)
    if kind == "trust_changed":
        return "trust", f"{_field(data, 'change', 20)} {_field(data, 'tool', 80)}"
    if kind == "session_forked":
        return "forked", (f"from session {_field(data, 'from_session', 80)} at the end of "
                          f"turn {_field(data, 'at_turn', 20)}")
    return one_line(kind, 20) if kind else "event", one_line(
        {k: v for k, v in data.items() if k not in ("type", "seq", "session_id", "turn", "at")})


def timeline(record: SessionRecord, stored: Sequence[StoredEvent]) -> list[str]:
    """The lines of ``show``: a header, the events grouped by turn, then what the session
    waits for and its state."""
    lines = [f"session {record.session_id}  workflow {record.workflow}",
             f"status {record.status}, phase {record.phase}, turn {record.turn}, "
             f"updated {when(record.updated_at)}"]
    if record.next_timer_at is not None:
        lines.append(f"next timer due {when(record.next_timer_at)}")
    turn: int | None = None
    for event in stored:
        data = event.data
        number = data.get("turn", 0)
        if number != turn:
            turn = number if isinstance(number, int) else 0
            lines.append("")
            heading = f"turn {turn}" if turn else "before the first turn"
            lines.append(f"{heading}  {when(data.get('at'))}")
        label, text = describe(data)
        lines.append(f"  {label:<10} {text}".rstrip())
    from phaseflow.session.records import pending_json

    pending = pending_json(record)
    lines.append("")
    if pending is not None:
        lines.append(f"waiting for approval: {pending['name']} "
                     f"{one_line(pending['arguments'])} (call {pending['call_id']})")
    if record.status == RUNNING:
        lines.append(f"turn {record.turn} is running, or was left by a worker that stopped "
                     f"(phaseflow sessions recover {record.session_id} finishes it)")
    trust = trust_lines(record)
    if trust:  # what runs without asking a human
        lines.append("trusted")
        lines.extend(trust)
    lines.append("state" if record.state else "state: empty")
    lines.extend(f"  {key} = {one_line(value, as_json=True)}"
                 for key, value in record.state.items())
    return lines


# --- recover -----------------------------------------------------------------------------

def _agent_parts(args: argparse.Namespace) -> tuple[Any, Any, Any, Any]:
    """The workflow, tools, hooks and provider of ``recover``, each checked (Misuse)."""
    from phaseflow.cli.agent_options import agent_code, positive_integer, seconds
    from phaseflow.cli.common import load_or_report
    from phaseflow.cli.providers import (
        check_provider,
        make_provider,
        make_role_providers,
        split_providers,
    )

    try:
        args.provider, role_specs = split_providers(args.provider)
        check_provider(args.provider, args.base_url)
        max_tokens = positive_integer(args.max_tokens, "--max-tokens")
        args.lease = seconds(args.lease, "--lease")
    except ConfigError as exc:
        raise Misuse(str(exc)) from None
    workflow = load_or_report(args.workflow, f"{PROG} recover")
    if isinstance(workflow, int):
        raise Reported(2)  # what is wrong with the file is printed
    try:
        tools, hooks, args.mcp = agent_code(args)
        provider = make_provider(args.provider, args.model, args.base_url,
                                 max_tokens=max_tokens)
        #: the providers of the model roles the workflow names (--provider ROLE=...)
        args.role_providers = make_role_providers(role_specs, max_tokens=max_tokens)
    except ConfigError as exc:
        raise Misuse(str(exc)) from None
    return workflow, tools, hooks, provider


async def _recover(store: Store, args: argparse.Namespace, workflow: Any, tools: Any,
                   hooks: Any, provider: Any) -> int:
    from phaseflow.cli.providers import close_provider
    from phaseflow.errors import PhaseflowError
    from phaseflow.session import Agent

    agent: Agent | None = None
    try:
        try:
            agent = Agent(workflow, provider, providers=args.role_providers, tools=tools,
                          hooks=hooks, store=store, system=args.system, model=args.model,
                          lease=args.lease, mcp=args.mcp)
        except PhaseflowError as exc:
            raise Misuse(str(exc)) from None
        ids: list[str] = list(dict.fromkeys(args.ids))
        failed = 0
        if not ids:
            summaries = await store.sessions()
            for summary in summaries:  # its status cannot be known: reported, not taken
                if summary.problem is not None:
                    print(f"{summary.session_id}: cannot be read: {summary.problem}",
                          flush=True)
                    failed += 1
            running = [s for s in summaries if s.status == RUNNING]
            ids = [s.session_id for s in running if s.workflow == agent.workflow.name]
            others = len(running) - len(ids)
            if others:
                print(f"skipped {others} running session(s) of other workflows",
                      file=sys.stderr)
            if not ids:
                print(f"nothing to recover: no session of {agent.workflow.name} is running")
                return 1 if failed else 0
        for session_id in ids:
            line, ok = await _recover_one(agent, session_id, force=args.force)
            print(line, flush=True)
            failed += not ok
        return 1 if failed else 0
    finally:
        if agent is not None:
            await agent.aclose()  # stops the MCP servers it started
        await close_provider(provider)
        for role_provider in args.role_providers.values():
            await close_provider(role_provider)


async def _tick(store: Store, args: argparse.Namespace, workflow: Any, tools: Any,
                hooks: Any, provider: Any) -> int:
    """``sessions tick``: the due timers of the workflow's sessions fired, each under its
    session's lease (a timer another worker fires at the same time fires once)."""
    from phaseflow.cli.agent_options import positive_integer
    from phaseflow.cli.providers import close_provider
    from phaseflow.errors import PhaseflowError
    from phaseflow.session import Agent

    try:
        limit = positive_integer(args.limit, "--limit") or 1000
        concurrency = positive_integer(args.concurrency, "--concurrency") or 64
    except ConfigError as exc:
        raise Misuse(str(exc)) from None
    agent: Agent | None = None
    try:
        try:
            agent = Agent(workflow, provider, tools=tools, hooks=hooks, store=store,
                          system=args.system, model=args.model, lease=args.lease,
                          mcp=args.mcp)
        except PhaseflowError as exc:
            raise Misuse(str(exc)) from None
        fired = await agent.fire_timers(limit=limit, concurrency=concurrency)
        print(f"fired {fired} timer(s) of {agent.workflow.name}")
        for session_id, problem in fired.problems:
            print(f"{session_id}: its timer cannot fire: {problem}", file=sys.stderr)
        return 1 if fired.problems else 0
    finally:
        if agent is not None:
            await agent.aclose()
        await close_provider(provider)


async def _recover_one(agent: Agent, session_id: str, *, force: bool) -> tuple[str, bool]:
    """Recover one session: the line to print and whether it went well."""
    from phaseflow.errors import PhaseflowError
    from phaseflow.session import SessionBusy
    from phaseflow.stores.base import StoreConflict
    from phaseflow.stores.codec import StoreDataError

    try:
        if await agent.store.version(session_id) == 0:
            return f"{session_id}: no such session", False
        session = await agent.session(session_id)
        before = session.status
        events = await session.recover(force=force)
    except SessionBusy:
        return f"{session_id}: busy (lease held by another worker)", False
    except StoreConflict as exc:  # fenced: another worker took it over meanwhile
        return f"{session_id}: taken over by another worker ({exc})", False
    except StoreDataError as exc:
        return f"{session_id}: cannot be read: {exc}", False
    except PhaseflowError as exc:
        return f"{session_id}: cannot be recovered: {exc}", False
    return _outcome(session_id, before, session.status, session.phase, events)


def _outcome(session_id: str, before: str, status: str, phase: str,
             events: Sequence[Event]) -> tuple[str, bool]:
    from phaseflow.session.core import INTERRUPTED_TEXT
    from phaseflow.session.events import ErrorEvent, ToolResultEvent, TurnFinished

    finished = [e for e in events if isinstance(e, TurnFinished)]
    if not finished and status == before:
        return f"{session_id}: nothing to recover ({status}, phase {phase})", True
    unknown = sum(1 for e in events if isinstance(e, ToolResultEvent)
                  and (e.status == "unknown" or e.content == INTERRUPTED_TEXT))
    turns = ", ".join(f"turn {e.turn} {e.status}" for e in finished) or "turn continued"
    line = f"{session_id}: recovered: {turns}; now {status} in phase {phase}"
    if unknown:
        line += (f"; {unknown} interrupted call(s) got 'outcome unknown' (not run again)")
    ok = not any(e.status == "failed" for e in finished)
    if not ok:
        errors = [e for e in events if isinstance(e, ErrorEvent)]
        if errors:
            line += f"; {errors[-1].code}: {one_line(errors[-1].message)}"
    return line, ok


#: the actions that need the store and nothing else (``recover`` needs an agent too)
_STORE_ACTIONS = {"list": _list, "show": _show, "events": _events, "delete": _delete,
                  "output": _output, "trust": _trust,
                  "fork": _fork, "branches": _branches}
