"""Whether a lease's holder is a process of this machine that is gone."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from phaseflow.session.workers import holder_is_gone, machine_token


def _owner(pid: int) -> str:
    return f"host:{pid}:abcd1234:{machine_token()}"


@pytest.mark.skipif(not machine_token(), reason="needs /proc (Linux)")
def test_a_killed_worker_not_yet_reaped_by_its_parent_is_gone() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert not holder_is_gone(_owner(child.pid))  # running: alive
        child.kill()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # a zombie until it is waited for
            with open(f"/proc/{child.pid}/stat", "rb") as f:
                if f.read().rpartition(b")")[2][1:2] == b"Z":
                    break
            time.sleep(0.01)
        assert holder_is_gone(_owner(child.pid))
    finally:
        child.kill()
        child.wait()
    assert holder_is_gone(_owner(child.pid))  # reaped: no such process


def test_this_process_and_foreign_ids_count_as_alive() -> None:
    assert not holder_is_gone(_owner(os.getpid()))
    assert not holder_is_gone("a worker the host named")
    assert not holder_is_gone(f"host:1:abcd1234:{'0' * 8}")  # another machine's token
