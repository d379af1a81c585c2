"""How ``phaseflow run`` shows a session's events: a readable transcript, or JSON lines.

The transcript is written for a person following the conversation as it happens: the
reply streams in as the model writes it, and tool calls, their results, state changes,
phase changes and approvals each get one line, indented under the turn they belong to.
Colour (ANSI escapes, nothing to install) is used only when the output is a terminal and
``NO_COLOR`` is not set, so a log file or a pipe gets plain text. ``--json`` replaces the
transcript with one JSON object per event (``event.to_json()``), for programs.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Protocol, TextIO, cast

from phaseflow.expr.describe import clip
from phaseflow.session import events as ev

#: longest value shown on one transcript line before it is cut with "..."
WIDTH = 160

_CODES = {
    "bold": "1", "dim": "2", "red": "31", "green": "32", "yellow": "33", "blue": "34",
    "magenta": "35", "cyan": "36",
}

#: the colour of a tool result's status word
_STATUS_STYLE = {
    "ok": ("green",), "error": ("red",), "refused": ("yellow",), "rejected": ("yellow",),
    "cancelled": ("yellow",), "ignored": ("dim",), "unknown": ("red",),
}


#: control characters a model or a tool could use to rewrite the user's terminal (escape
#: sequences, carriage returns, C1 controls): shown as visible escapes, never written
_CONTROLS = {c: f"\\x{c:02x}" for c in [*range(0x20), 0x7F, *range(0x80, 0xA0)]
             if chr(c) not in "\n\t"}


def visible(text: str) -> str:
    """``text`` safe for a terminal: newlines and tabs kept, other controls escaped."""
    return text.translate(_CONTROLS)


def wants_colour(stream: TextIO) -> bool:
    """Colour only for a terminal, and never when ``NO_COLOR`` is set (no-color.org)."""
    if os.environ.get("NO_COLOR"):
        return False
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


def one_line(value: Any, width: int = WIDTH, *, quote: bool = False) -> str:
    """``value`` as compact JSON on one line, cut to ``width``; a string as it is, unless
    ``quote`` (a state value, where ``"1"`` and ``1`` differ)."""
    if isinstance(value, str) and not quote:
        text = value
    else:
        try:
            text = json.dumps(value, ensure_ascii=False, default=str)
        except (TypeError, ValueError):
            text = repr(value)
    text = visible(" ".join(text.split()))
    return clip(text, width)


class Sink(Protocol):
    """Where the run command sends what happens: events, and its own notices."""

    def show(self, event: ev.Event) -> None: ...

    def notice(self, text: str) -> None: ...

    def prompt(self, text: str, *, question: bool = False) -> None:
        """Ask for a line: the user's turn, or (``question``) a decision."""

    def urgent(self, text: str) -> None:
        """A notice written at once, from a signal handler: past Python's buffers."""


class Transcript:
    """The human-readable view. ``echo_user``: print the user's message when a turn
    starts (off in a chat, where the user just typed it)."""

    def __init__(self, out: TextIO, *, colour: bool, echo_user: bool) -> None:
        self.out = out
        self.colour = colour
        self.echo_user = echo_user
        self._open = False  # a streamed reply line is being written
        self._streamed = False  # this turn streamed some reply text

    def paint(self, text: str, *styles: str) -> str:
        if not self.colour or not styles:
            return text
        codes = ";".join(_CODES[s] for s in styles)
        return f"\x1b[{codes}m{text}\x1b[0m"

    def _close(self) -> None:
        if self._open:
            self.out.write("\n")
            self._open = False

    def _line(self, text: str) -> None:
        self._close()
        self.out.write(text + "\n")
        self.out.flush()

    def notice(self, text: str) -> None:
        self._line(self.paint(f"[{text}]", "dim"))

    def prompt(self, text: str, *, question: bool = False) -> None:
        self._close()
        self.out.write(self.paint(text, "bold", "yellow" if question else "green"))
        self.out.flush()

    def line_prompt(self, text: str, *, question: bool = False) -> str:
        """The prompt for ``input()`` with line editing: its colour codes marked (\\001
        ... \\002) so that readline knows how wide the prompt really is."""
        self._close()
        if not self.colour:
            return text
        style = ";".join(_CODES[s] for s in ("bold", "yellow" if question else "green"))
        return f"\001\x1b[{style}m\002{text}\001\x1b[0m\002"

    def urgent(self, text: str) -> None:
        line = ("\n" if self._open else "") + self.paint(f"[{text}]", "dim") + "\n"
        self._open = False
        _write_now(self.out, line)

    def show(self, event: ev.Event) -> None:
        event = _visible_fields(event)
        if isinstance(event, ev.TextDeltaEvent):
            if not self._open:
                self.out.write(self.paint("agent:", "bold", "blue") + " ")
                self._open = True
            self.out.write(event.text)
            self._streamed = True
            self.out.flush()
            return
        if isinstance(event, ev.TurnStartedEvent):
            self._streamed = False
            if self.echo_user:
                self._line(self.paint("you:", "bold", "green") + " " + event.message)
        elif isinstance(event, ev.ToolCallEvent):
            self._line("  " + self.paint(f"> {event.name}", "cyan") + " "
                       + one_line(event.arguments))
        elif isinstance(event, ev.ToolResultEvent):
            status = self.paint(event.status, *_STATUS_STYLE.get(event.status, ()))
            self._line(f"  < {event.name}: {status} {one_line(event.content)}".rstrip())
        elif isinstance(event, ev.StateChanged):
            shown = ", ".join(f"{k} = {one_line(event.new.get(k), 60, quote=True)}"
                              for k in event.keys)
            self._line("  " + self.paint(one_line(f"state: {shown}"), "dim"))
        elif isinstance(event, ev.PhaseChanged):
            self._line(self.paint(f"[phase {event.from_phase} -> {event.to_phase}]", "bold",
                                  "magenta") + self.paint(f" ({event.trigger})", "dim"))
        elif isinstance(event, ev.ApprovalRequested):
            self._line("  " + self.paint(f"approval needed: {event.name}", "bold", "yellow")
                       + " " + one_line(event.arguments))
        elif isinstance(event, ev.ApprovalResolvedEvent):
            word = "rejected" if event.decision == "reject" else "approved"
            why = f": {event.reason}" if event.reason else ""
            style = "yellow" if word == "rejected" else "green"
            self._line("  " + self.paint(f"{word}: {event.name}", style)
                       + self.paint(f" ({event.decision}){why}", "dim"))
        elif isinstance(event, ev.Retrying):
            self._line(self.paint(f"  retrying (attempt {event.attempt}, in "
                                  f"{event.delay:.1f} s): {one_line(event.message)}", "yellow"))
        elif isinstance(event, ev.HistoryCompacted):
            self._line(self.paint(f"[history compacted: {event.folded} older messages "
                                  "folded into a summary]", "dim"))
        elif isinstance(event, ev.ReplyContinued):
            self._close()
            self._line(self.paint(f"[reply cut at the output limit: continuing "
                                  f"({event.continuation} of {event.of})]", "dim"))
        elif isinstance(event, ev.MessageSteered):
            self._line("  " + self.paint("steering:", "bold", "green") + " "
                       + one_line(event.message))
        elif isinstance(event, ev.ModeChanged):
            self._line(self.paint(f"[mode {event.mode}]", "bold", "magenta"))
        elif isinstance(event, ev.ErrorEvent):
            self._line(self.paint(f"  error {event.code}: {one_line(event.message)}", "red"))
        elif isinstance(event, ev.TurnFinished):
            if event.reply and not self._streamed:
                self._line(self.paint("agent:", "bold", "blue") + " " + event.reply)
            self._close()
            if event.status not in ("completed", "awaiting_approval"):  # (asked next)
                style = "yellow" if event.status == "cancelled" else "red"
                self._line(self.paint(f"[turn {event.status}]", style))
            self.out.flush()


def _visible_fields(event: ev.Event) -> ev.Event:
    """The event with every text field :func:`visible` (names and reasons come from the
    model too: a made-up tool name is shown as it was called), and on one line, but for
    the texts that are shown as they are: the user's message and the reply."""
    keep_lines = isinstance(event, ev.TextDeltaEvent | ev.TurnStartedEvent | ev.TurnFinished)
    changed: dict[str, str] = {}
    for f in dataclasses.fields(event):
        value = getattr(event, f.name)
        if isinstance(value, str):
            shown = visible(value if keep_lines else value.replace("\n", " "))
            if shown != value:
                changed[f.name] = shown
    if not changed:
        return event
    shown_event: ev.Event = dataclasses.replace(cast(Any, event), **changed)
    return shown_event


#: characters that some readers take for line breaks (``str.splitlines`` does) although
#: JSON allows them raw: escaped, so one event is always one line
_LINE_BREAKS = {0x85: "\\u0085", 0x2028: "\\u2028", 0x2029: "\\u2029"}


class JsonLines:
    """One JSON object per event on ``out``; notices and prompts go to ``err``, so
    ``out`` stays machine-readable."""

    def __init__(self, out: TextIO, err: TextIO) -> None:
        self.out = out
        self.err = err

    def show(self, event: ev.Event) -> None:
        line = json.dumps(event.to_json(), ensure_ascii=False, default=str)
        self.out.write(line.translate(_LINE_BREAKS) + "\n")
        self.out.flush()

    def notice(self, text: str) -> None:
        self.err.write(f"[{text}]\n")
        self.err.flush()

    def prompt(self, text: str, *, question: bool = False) -> None:
        self.err.write(text)
        self.err.flush()

    def urgent(self, text: str) -> None:
        _write_now(self.err, f"[{text}]\n")


def _write_now(stream: TextIO, text: str) -> None:
    """Write to the stream's file descriptor directly: a signal handler must not re-enter
    a buffered write the main thread may be in the middle of. (Every sink flushes after
    each line, so nothing buffered is overtaken.)"""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # not a real file (a test's buffer)
        stream.write(text)
        return
    os.write(fd, text.encode(getattr(stream, "encoding", None) or "utf-8", "replace"))
