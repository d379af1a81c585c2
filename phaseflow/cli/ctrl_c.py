"""Ctrl-C while a turn runs, counted where no press can be missed.

A Python-level signal handler runs only when the main thread next executes bytecode. A
tool that blocks the main thread in a system call (``time.sleep``, a socket read) is
interrupted by the signal and CPython then runs the handler, except when the signal lands
in the instant before the call starts sleeping (or restarts it after an earlier signal):
then the handler waits until the call returns, and a person's Ctrl-C seems ignored. On a
loaded machine that instant is wide enough to hit.

So the presses are counted by a watchdog thread from the signal wakeup file descriptor,
to which CPython's C-level handler writes a byte at the moment of every signal, whatever
the main thread is doing. The first press is acted on by the watchdog (say so at once,
cancel the turn when the loop can). From the second press on, the main thread must stop:
the watchdog sets ``quit`` and signals the main thread every 50 ms until the handler has
raised ``KeyboardInterrupt`` there (once), so a signal lost in that instant is sent again.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any

#: how often the watchdog looks for the end of the turn, and re-signals a main thread that
#: has not quit yet (seconds)
TICK = 0.05


class CtrlC:
    """Count Ctrl-C presses between ``__enter__`` and ``__exit__`` (in the main thread).

    ``on_first`` runs in the watchdog thread at the first press; it must be thread-safe
    (write to a file descriptor, ``loop.call_soon_threadsafe``). ``quit`` is set at press
    number ``quit_after`` (the second by default; the first at a prompt, where Ctrl-C
    quits); the main thread then gets one ``KeyboardInterrupt``, signalled again every
    ``TICK`` until the handler has raised it. ``presses`` counts them all, those that land
    as the block ends included. ``__exit__`` never raises ``KeyboardInterrupt`` and always
    restores the handler and the wakeup descriptor. Outside the main thread nothing is
    installed and Ctrl-C stays Python's plain ``KeyboardInterrupt``.
    """

    def __init__(self, on_first: Callable[[], None] | None = None, *,
                 quit_after: int = 2) -> None:
        self._on_first = on_first
        self._quit_after = quit_after
        self.quit = threading.Event()
        self.presses = 0
        self._raised = False  # the handler raised the quit (set in the main thread)
        self._exiting = False  # __exit__ began: the handler raises no more
        self._stop = threading.Event()
        self._sending = threading.Lock()  # held while the watchdog decides to signal
        self._thread: threading.Thread | None = None
        self._previous: Any = None
        self._previous_fd = -1
        self._pipe: tuple[int, int] | None = None
        self.installed = False

    def __enter__(self) -> CtrlC:
        if threading.current_thread() is not threading.main_thread():
            return self
        read_end, write_end = os.pipe()
        os.set_blocking(read_end, False)
        os.set_blocking(write_end, False)
        self._pipe = (read_end, write_end)
        self._previous = signal.signal(signal.SIGINT, self._handler)
        self._previous_fd = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
        self.installed = True
        self._thread = threading.Thread(
            target=self._watch, args=(threading.main_thread().ident,),
            name="phaseflow-ctrl-c", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """What ``__exit__`` does; may be called again (the quit's one
        ``KeyboardInterrupt`` can land as ``__exit__`` begins: the caller closes again)."""
        self._exiting = True
        while self.installed:
            try:
                self._close()
            except KeyboardInterrupt:  # our handler, before _exiting was seen: again
                continue

    def _close(self) -> None:
        """Stop the watchdog, count the presses it did not read, restore what was there.
        Every step may be run again (a ``KeyboardInterrupt`` can stop it anywhere)."""
        with self._sending:
            self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        # A signal the watchdog sent before it stopped has reached this thread by now
        # (joining made system calls); restoring the handler runs pending handlers first.
        signal.set_wakeup_fd(self._previous_fd, warn_on_full_buffer=False)
        previous = self._previous if self._previous is not None else signal.SIG_DFL
        signal.signal(signal.SIGINT, previous)
        if self._pipe is not None:
            self._count(_drain(self._pipe[0]))  # presses as the block ended
            for fd in self._pipe:
                os.close(fd)
            self._pipe = None
        self.installed = False

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        if self.quit.is_set() and not self._raised and not self._exiting:
            self._raised = True
            raise KeyboardInterrupt

    def _count(self, data: bytes) -> bool:
        """Count the SIGINTs in ``data`` (before the quit: after it, the bytes are the
        watchdog's own signals); whether this was the first press."""
        pressed = data.count(signal.SIGINT)
        if not pressed or self.quit.is_set():
            return False
        first = self.presses == 0
        self.presses += pressed
        if self.presses >= self._quit_after:
            self.quit.set()
        return first

    def _watch(self, main: int | None) -> None:
        assert self._pipe is not None and main is not None
        read_end = self._pipe[0]
        signalled = 0.0  # when the watchdog last signalled the main thread
        while not self._stop.is_set():
            ready, _, _ = select.select([read_end], [], [], TICK)
            if ready and self._count(_drain(read_end)) and self._on_first is not None:
                with contextlib.suppress(Exception):  # (the output may be gone: go on)
                    self._on_first()
            now = time.monotonic()
            if self.quit.is_set() and not self._raised and now - signalled >= TICK:
                with self._sending:
                    if self._stop.is_set():
                        return
                    signal.pthread_kill(main, signal.SIGINT)
                signalled = now


def _drain(fd: int) -> bytes:
    """What the wakeup descriptor holds now (it is non-blocking)."""
    data = b""
    while True:
        try:
            chunk = os.read(fd, 512)
        except BlockingIOError:
            return data
        if not chunk:
            return data
        data += chunk
