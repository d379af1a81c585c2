"""A private PostgreSQL cluster for the tests: ``initdb`` into a temporary directory, a
server on loopback (a free port, its socket in that directory), one database; stopped
and removed at the end.

So ``pytest`` alone works on a machine with PostgreSQL installed, and CI only installs
the packages. ``initdb`` refuses to run as root: as root, the cluster runs as the
``postgres`` user (Debian's package creates it), which owns the directory.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

#: what to set to name the binaries' directory (``.../postgresql/15/bin``)
BIN_ENV = "PHASEFLOW_PG_BIN"
#: set to 1 (CI does) so that missing binaries fail the tests instead of skipping them
REQUIRE_ENV = "PHASEFLOW_REQUIRE_POSTGRES"

USER = "phaseflow"
DATABASE = "phaseflow"


class Unavailable(Exception):
    """No PostgreSQL binaries here (the tests may skip, unless told otherwise)."""


class StartFailed(Exception):
    """The binaries are there but the cluster did not start (always a failure)."""


def find_bin() -> Path | None:
    """The directory holding ``initdb``, ``pg_ctl`` and ``postgres``: ``$PHASEFLOW_PG_BIN``,
    else ``initdb`` on ``PATH``, else the newest ``/usr/lib/postgresql/*/bin``."""
    named = os.environ.get(BIN_ENV)
    if named:
        return Path(named)
    on_path = shutil.which("initdb")
    if on_path:
        return Path(on_path).resolve().parent
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    return Path(found[-1]).parent if found else None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Cluster:
    """A running private server; :meth:`stop` ends it and removes its files."""

    bin: Path
    root: Path
    port: int
    as_user: tuple[str, ...]
    started_in: float

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user={USER} dbname={DATABASE}"

    def _pg_ctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return _run(self.as_user, str(self.bin / "pg_ctl"), "-D", str(self.root / "data"),
                    *args)

    def stop(self) -> None:
        self._pg_ctl("stop", "-m", "fast", "-w")
        shutil.rmtree(self.root, ignore_errors=True)


def _run(as_user: tuple[str, ...], *cmd: str) -> subprocess.CompletedProcess[str]:
    # cwd "/": the `postgres` user may not be allowed into the current directory
    return subprocess.run([*as_user, *cmd], capture_output=True, text=True, timeout=120,
                          check=False, cwd="/")


def _check(proc: subprocess.CompletedProcess[str], what: str, log: Path | None = None
           ) -> None:
    if proc.returncode != 0:
        tail = log.read_text(errors="replace")[-2000:] if log and log.exists() else ""
        raise StartFailed(f"{what} failed ({proc.returncode}): {proc.stdout}{proc.stderr}"
                          f"{tail}")


def start(*, durable: bool = False) -> Cluster:
    """Start a cluster; :class:`Unavailable` when no binaries are found,
    :class:`StartFailed` when they do not start. ``durable``:
    the server's default syncing (for measurements) instead of ``fsync=off``."""
    began = time.monotonic()
    bindir = find_bin()
    if bindir is None or not (bindir / "initdb").exists():
        raise Unavailable(f"no PostgreSQL binaries (set {BIN_ENV}, or install PostgreSQL: "
                          "apt-get install postgresql)")
    as_root = os.geteuid() == 0
    # as root, in /tmp itself: $TMPDIR may be a directory `postgres` cannot enter
    root = Path(tempfile.mkdtemp(prefix="phaseflow-pg-", dir="/tmp" if as_root else None))
    as_user: tuple[str, ...] = ()
    if as_root:  # initdb refuses root: the cluster belongs to `postgres`
        import pwd

        try:
            pw = pwd.getpwnam("postgres")
        except KeyError:
            shutil.rmtree(root, ignore_errors=True)
            raise StartFailed("running as root and there is no `postgres` user to run "
                              "the cluster as") from None
        os.chown(root, pw.pw_uid, pw.pw_gid)
        runuser = shutil.which("runuser")
        as_user = (runuser, "-u", "postgres", "--") if runuser else (
            "setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--clear-groups")
    data, log = root / "data", root / "server.log"
    try:
        _check(_run(as_user, str(bindir / "initdb"), "-D", str(data), "-U", USER,
                    "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync",
                    "--no-instructions"), "initdb")
        port = _free_port()
        options = (f"-k {root} -c listen_addresses=127.0.0.1 -p {port}"
                   " -c max_connections=60 -c shared_buffers=32MB")
        if not durable:  # the tests check semantics, not the disk: a throwaway cluster
            options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        _check(_run(as_user, str(bindir / "pg_ctl"), "-D", str(data), "-l", str(log), "-w",
                    "-t", "60", "-o", options, "start"), "pg_ctl start", log)
        cluster = Cluster(bindir, root, port, as_user, 0.0)
        created = _run((), str(bindir / "createdb"), "-h", "127.0.0.1", "-p", str(port),
                       "-U", USER, DATABASE)
        if created.returncode != 0:
            cluster.stop()
            _check(created, "createdb")
    except BaseException:
        _run(as_user, str(bindir / "pg_ctl"), "-D", str(data), "stop", "-m", "immediate")
        shutil.rmtree(root, ignore_errors=True)
        raise
    cluster.started_in = time.monotonic() - began
    return cluster
