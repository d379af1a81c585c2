"""``phaseflow run`` as a chat in a terminal: a real process on a pseudo-terminal, the
user's typing written to it, Ctrl-C sent as SIGINT."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.phaseflow_cli import PHASEFLOW, cli_env
from tests.support.run_cli import project

pty = pytest.importorskip("pty")
select = pytest.importorskip("select")

ANSI = re.compile(r"\x1b\[[0-9;]*m")

#: how long to wait for the chat to print what a step expects; reached only on failure
PATIENCE = 30.0


class Terminal:
    """A ``phaseflow run`` process whose standard streams are one pseudo-terminal."""

    def __init__(self, cwd: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen(
            [*PHASEFLOW, "run", *args], cwd=cwd,
            stdin=slave, stdout=slave, stderr=slave, env=env or cli_env(),
            close_fds=True)
        os.close(slave)
        self.raw = ""
        self._seen = 0

    @property
    def text(self) -> str:
        """Everything printed so far, without colour, with plain newlines."""
        return ANSI.sub("", self.raw).replace("\r\n", "\n")

    def expect(self, needle: str) -> str:
        """Wait until ``needle`` is printed (after what earlier calls found); the output
        up to and including it."""
        return self.expect_within(needle, PATIENCE)

    def expect_within(self, needle: str, patience: float) -> str:
        deadline = time.monotonic() + patience
        while True:
            text = self.text
            at = text.find(needle, self._seen)
            if at != -1:
                self._seen = at + len(needle)
                return text[: self._seen]
            left = deadline - time.monotonic()
            if left <= 0 or not self._read(left):
                raise AssertionError(f"never printed {needle!r}; got:\n{text}")

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.master], [], [], timeout)
        if not ready:
            return False
        try:
            data = os.read(self.master, 65536)
        except OSError:  # the process exited and closed the terminal
            return False
        self.raw += data.decode("utf-8", "replace")
        return bool(data)

    def type(self, line: str) -> None:
        os.write(self.master, line.encode() + b"\n")

    def interrupt(self) -> None:
        self.proc.send_signal(signal.SIGINT)

    def interrupt_prompt(self, until: str | None = None) -> None:
        """Ctrl-C at a prompt, pressed once: no press is lost, even one that lands as
        the prompt is drawn. ``until``: what the press prints; else it quits."""
        self.interrupt()
        if until is None:
            self.proc.wait(timeout=10)
        else:
            self.expect_within(until, 10)

    def finish(self) -> int:
        while self._read(0.5):
            pass
        code = self.proc.wait(timeout=PATIENCE)
        os.close(self.master)
        return code


@pytest.fixture
def terminals() -> Iterator[list[Terminal]]:
    started: list[Terminal] = []
    yield started
    for t in started:
        if t.proc.poll() is None:
            t.proc.kill()
            t.proc.wait()


CHAT_SCRIPT = """\
- calls: [{pay: {amount: 5}}]
- Paid.
"""

CANCEL_SCRIPT = """\
- calls: [{slow.wait: {}}]
- I was interrupted; what now?
"""


def test_an_approval_is_asked_inline_and_answered(tmp_path: Path,
                                                  terminals: list[Terminal]) -> None:
    cwd = project(tmp_path, CHAT_SCRIPT)
    term = Terminal(cwd, "desk.yaml", "--provider", "scripted:script.yaml", "--tools",
                    "desk_tools:TOOLS")
    terminals.append(term)
    term.expect("desk: session run-")
    term.expect("you> ")
    term.type("Please pay 5")
    term.expect('  approval needed: pay {"amount": 5}')
    term.expect('approve pay {"amount": 5}? [y]es, [n]o, this [t]urn, this [s]ession: ')
    term.type("maybe")  # not an answer: asked again
    term.expect("this [s]ession: ")
    term.type("y")
    term.expect("  approved: pay (approve)")
    term.expect("  < pay: ok")
    term.expect("[phase work -> finished] (guard)")
    term.expect("agent: Paid.")
    term.expect("finished in phase finished]")
    assert term.finish() == 0
    assert ANSI.search(term.raw) is not None  # a terminal gets colour
    assert "you: " not in term.text  # what the user typed is not echoed twice


def test_ctrl_c_cancels_the_running_turn_and_the_chat_goes_on(
        tmp_path: Path, terminals: list[Terminal]) -> None:
    cwd = project(tmp_path, CANCEL_SCRIPT)
    term = Terminal(cwd, "desk.yaml", "--provider", "scripted:script.yaml", "--tools",
                    "desk_tools:TOOLS", env=cli_env(NO_COLOR="1"))
    terminals.append(term)
    term.expect("you> ")
    term.type("wait for it")
    term.expect("  > slow.wait {}")
    term.interrupt()
    term.expect("[cancelling the turn; Ctrl-C again quits]")
    term.expect("  < slow.wait: cancelled")
    term.expect("[turn cancelled]")
    term.expect("you> ")
    term.type("hello?")
    term.expect("agent: I was interrupted; what now?")
    term.expect("you> ")
    term.interrupt_prompt()  # at the prompt: quit
    assert term.finish() == 130
    assert ANSI.search(term.raw) is None  # NO_COLOR
    assert "Traceback" not in term.text


def test_a_second_ctrl_c_quits_even_while_a_blocking_tool_runs(
        tmp_path: Path, terminals: list[Terminal]) -> None:
    cwd = project(tmp_path, "- calls: [{slow.block: {}}]\n- Done.\n")
    term = Terminal(cwd, "desk.yaml", "--provider", "scripted:script.yaml", "--tools",
                    "desk_tools:TOOLS")
    terminals.append(term)
    term.expect("you> ")
    term.type("block")
    term.expect("  > slow.block {}")
    term.interrupt()
    term.expect("cancelling the turn")
    term.interrupt()  # the second Ctrl-C quits: pressed once, however the tool sleeps
    term.proc.wait(timeout=10)
    assert term.finish() == 130  # long before the tool's 60 seconds
    assert term.text.rstrip().endswith("[cancelling the turn; Ctrl-C again quits]")


def test_quitting_in_the_middle_of_blocking_tools_leaves_nothing_behind(
        tmp_path: Path, terminals: list[Terminal]) -> None:
    # Quitting leaves the turn's task suspended (its other calls wait in a gather); on
    # Python 3.12 and later, a suspended task collected after its loop has closed runs
    # its coroutines' `finally` blocks without a loop, and each failure was printed as
    # "Exception ignored ... RuntimeError: Event loop is closed" at every quit.
    cwd = project(tmp_path, "- Hi.\n- calls: [{slow.block: {}}, {slow.block: {}}]\n"
                            "- Done.\n")
    term = Terminal(cwd, "desk.yaml", "--provider", "scripted:script.yaml", "--tools",
                    "desk_tools:TOOLS", env=cli_env(NO_COLOR="1"))
    terminals.append(term)
    term.expect("you> ")
    term.type("hello")  # a turn first: the session's store and lease are in use
    term.expect("agent: Hi.")
    term.expect("you> ")
    term.type("block")
    term.expect("  > slow.block {}")
    term.interrupt()
    term.expect("cancelling the turn")
    term.interrupt()
    term.proc.wait(timeout=10)
    assert term.finish() == 130
    for noise in ("Exception ignored", "Event loop is closed", "no running event loop",
                  "Traceback", "Task was destroyed"):
        assert noise not in term.text, term.text


def test_end_of_input_at_the_prompt_ends_the_chat(tmp_path: Path,
                                                  terminals: list[Terminal]) -> None:
    cwd = project(tmp_path, "- Hello.\n")
    term = Terminal(cwd, "desk.yaml", "--provider", "scripted:script.yaml", "--tools",
                    "desk_tools:TOOLS")
    terminals.append(term)
    term.expect("you> ")
    term.type("hi")
    term.expect("agent: Hello.")
    term.expect("you> ")
    os.write(term.master, b"\x04")  # Ctrl-D
    assert term.finish() == 0


def test_ctrl_c_at_an_approval_prompt_cancels_the_waiting_turn(
        tmp_path: Path, terminals: list[Terminal]) -> None:
    cwd = project(tmp_path, CHAT_SCRIPT.replace("Paid.", "Not paid, then."))
    term = Terminal(cwd, "desk.yaml", "--provider", "scripted:script.yaml", "--tools",
                    "desk_tools:TOOLS")
    terminals.append(term)
    term.expect("you> ")
    term.type("Please pay 5")
    term.expect("this [s]ession: ")
    term.interrupt_prompt(until="[cancelling the turn]")
    term.expect("  < pay: cancelled")
    term.expect("[turn cancelled]")
    term.expect("you> ")
    term.type("never mind")
    term.expect("agent: Not paid, then.")
    term.expect("you> ")
    os.write(term.master, b"\x04")
    assert term.finish() == 0
    assert "[phase" not in term.text  # the payment never ran
