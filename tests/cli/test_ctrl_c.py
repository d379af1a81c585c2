"""Ctrl-C presses are never lost while the main thread sleeps in a system call: real
processes, real SIGINTs, sent at the moments CPython's own handler can miss."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tests.support.phaseflow_cli import cli_env

select = pytest.importorskip("select")

CHILD = textwrap.dedent("""\
    import os, signal, sys, time
    from phaseflow.cli.ctrl_c import CtrlC

    mode = sys.argv[1]
    try:
        with CtrlC(lambda: os.write(1, b"first\\n")):
            os.write(1, b"ready\\n")
            if mode == "sleep":
                time.sleep(60)
            elif mode == "masked":  # the main thread does not take SIGINT at all
                signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGINT])
                time.sleep(60)
            else:  # a short turn that ends by itself
                time.sleep(0.01)
    except KeyboardInterrupt:
        os.write(1, b"quit\\n")
        sys.exit(130)
    restored = (signal.getsignal(signal.SIGINT) is signal.default_int_handler
                and signal.set_wakeup_fd(-1) == -1)
    try:
        os.write(1, b"restored\\n" if restored else b"not restored\\n")
        time.sleep(60)
    except KeyboardInterrupt:  # Python's own Ctrl-C again
        os.write(1, b"plain interrupt\\n")
        sys.exit(0)
""")


class Child:
    def __init__(self, mode: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", CHILD, mode],
                                     stdout=subprocess.PIPE, env=cli_env())
        assert self.proc.stdout is not None
        self.fd = self.proc.stdout.fileno()
        self.out = b""

    def expect(self, word: bytes, patience: float = 10.0) -> None:
        deadline = time.monotonic() + patience
        while word + b"\n" not in self.out:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.fd], [], [], max(left, 0))
            if not ready:
                raise AssertionError(f"never printed {word!r}; got {self.out!r}")
            data = os.read(self.fd, 4096)
            if not data:
                raise AssertionError(f"exited before {word!r}; got {self.out!r}")
            self.out += data

    def press(self) -> None:
        self.proc.send_signal(signal.SIGINT)

    def close(self) -> int:
        code = self.proc.wait(timeout=10)
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        return code


@pytest.mark.parametrize("delay", [0.0, 0.0005, 0.001, 0.002, 0.004, 0.008])
def test_both_presses_are_seen_while_the_main_thread_sleeps(delay: float) -> None:
    # The first press lands around the moment ``time.sleep`` starts sleeping, the second
    # at once after the first was handled (when the sleep restarts): the two instants in
    # which a Python-level handler alone can wait for the whole sleep.
    child = Child("sleep")
    try:
        child.expect(b"ready")
        time.sleep(delay)
        child.press()
        child.expect(b"first", patience=5.0)
        child.press()
        child.expect(b"quit", patience=5.0)
        assert child.close() == 130
        assert child.out.count(b"first") == 1
    finally:
        if child.proc.poll() is None:
            child.proc.kill()
            child.proc.wait()


def test_a_press_the_main_thread_cannot_take_is_still_seen() -> None:
    # What a Python-level handler alone cannot see at all: the signal goes to another
    # thread while the main one sleeps (here because the main thread blocks it).
    child = Child("masked")
    try:
        child.expect(b"ready")
        child.press()
        child.expect(b"first", patience=5.0)
    finally:
        child.proc.kill()
        child.proc.wait()
        assert child.proc.stdout is not None
        child.proc.stdout.close()


def test_afterwards_ctrl_c_is_pythons_own_again() -> None:
    child = Child("short")
    try:
        child.expect(b"restored")
        child.press()
        child.expect(b"plain interrupt")
        assert child.close() == 0
        assert b"first" not in child.out
    finally:
        if child.proc.poll() is None:
            child.proc.kill()
            child.proc.wait()


STORM = textwrap.dedent("""\
    import os, signal, sys, threading, time
    from phaseflow.cli.ctrl_c import CtrlC

    def between(signum, frame):  # Ctrl-C outside the blocks: ignored
        pass

    signal.signal(signal.SIGINT, between)
    os.write(1, b"ready\\n")
    quits = presses = 0
    for i in range(300):
        block = CtrlC(quit_after=1 + i % 2)
        try:
            try:
                with block:
                    if i % 3:  # short and busy: presses land as it begins and ends
                        until = time.monotonic() + 0.004
                        while time.monotonic() < until:
                            pass
                    else:  # long enough for the watchdog's turn (the GIL's switch
                        # interval is 5 ms): the quit's KeyboardInterrupt lands in it
                        until = time.monotonic() + 0.2
                        while time.monotonic() < until:
                            time.sleep(0.001)
            finally:
                block.close()
        except KeyboardInterrupt:
            quits += 1
        presses += block.presses
    clean = (threading.active_count() == 1 and signal.getsignal(signal.SIGINT) is between
             and signal.set_wakeup_fd(-1) == -1)
    os.write(1, f"done {quits} {presses} {clean}\\n".encode())
    sys.stdin.read()  # until the test has stopped pressing (Python's exit restores SIG_DFL)
""")


def test_presses_as_blocks_begin_and_end_never_escape_nor_leave_anything_behind() -> None:
    # Signals land everywhere: in a block, as it is entered, as it closes (the quit's one
    # KeyboardInterrupt among them), between blocks.
    proc = subprocess.Popen([sys.executable, "-c", STORM], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_env())
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"ready\n"
    sent = 0
    while not select.select([proc.stdout], [], [], 0.001)[0] and sent < 20_000:
        proc.send_signal(signal.SIGINT)
        sent += 1
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()
    assert b"Traceback" not in err, err.decode()
    words = out.decode().split()
    assert words[0] == "done" and words[3] == "True", out
    assert int(words[1]) > 0 and int(words[2]) > 0  # presses were seen, quits happened
