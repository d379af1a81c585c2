"""Worker ids, and whether the worker that holds a lease is a process of this machine
that no longer exists.

A session's lease names the worker that runs its turn. When that worker's process is
killed, its lease stays until it expires (30 s by default): another worker could only
queue its message meanwhile. A worker on the same machine can do better: a default
worker id carries the process id and a token of the machine's kernel and process
namespace, so a worker that finds the lease held by a process of its own machine and
namespace that does not exist takes the lease over at once (replacing exactly that
lease, so two such workers cannot both win). Anything it cannot be sure of (another
machine, another namespace, a worker id chosen by the host, a process id in use again)
counts as alive: the lease then expires as usual.
"""

from __future__ import annotations

import functools
import hashlib
import os
import socket
import uuid


@functools.cache
def machine_token() -> str:
    """This kernel's boot and this process namespace, in 8 hex digits; ``""`` where they
    cannot be read (not Linux): no holder is then ever judged gone."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            boot = f.read().strip()
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return ""
    return hashlib.sha256(f"{boot}:{namespace}".encode()).hexdigest()[:8]


def new_worker_id() -> str:
    """``host:pid:random:token``: readable in ``phaseflow sessions show``, unique per
    agent, and enough for :func:`holder_is_gone`."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}:{machine_token()}"


def holder_is_gone(owner: str) -> bool:
    """The lease's ``owner`` is a default worker id of a process of this machine and
    process namespace that does not exist any more."""
    parts = owner.rsplit(":", 3)
    token = machine_token()
    if len(parts) != 4 or not token or parts[3] != token or not parts[1].isdigit():
        return False
    pid = int(parts[1])
    if pid <= 0 or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError, OSError):
        return False
    return _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    """A process that has exited but was not reaped by its parent yet (a killed worker
    whose parent has not waited for it): ``kill(pid, 0)`` still finds it, but it will
    never run again. Read from ``/proc`` where there is one (Linux); elsewhere such a
    process counts as alive, and its lease is taken when it expires."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    # "PID (COMM) STATE ...": COMM may hold spaces and parentheses; the state follows
    # the last ')'
    _, _, rest = stat.rpartition(b")")
    return rest[1:2] == b"Z"
