"""What a server is made of, checked by its command before it starts (``phaseflow
serve``): the served workflows and the limits and timings of the HTTP layer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from phaseflow.serve.idle import KEPT
from phaseflow.serve.logs import Log
from phaseflow.serve.served import Served

if TYPE_CHECKING:
    from phaseflow.serve.identity import AuthHook

#: the default body limit: 1 MiB
MAX_BODY = 1 << 20


@dataclass(frozen=True)
class ServeConfig:
    served: dict[str, Served]
    #: the request and turn log (default: text on standard error)
    log: Log = field(default_factory=Log)
    tokens: tuple[str, ...] = ()
    max_body: int = MAX_BODY
    #: seconds between heartbeat comments on an idle stream (at most 15)
    heartbeat: float = 15.0
    #: seconds between reads of the store for other workers' events
    poll: float = 0.5
    #: seconds running turns get to finish on a graceful stop
    grace: float = 30.0
    #: seconds between sweeps for sessions whose worker died (0: no sweep)
    sweep: float = 0.0
    #: seconds between looks at the store's index of timers for due ones (0: timers
    #: are not fired by this server; ``phaseflow sessions tick`` can fire them)
    timers: float = 0.0
    #: the longest text of a message, in characters
    max_text: int = 100_000
    #: a PostgreSQL store's DSN: its workers wake each other's streams (LISTEN/NOTIFY)
    notify_dsn: str | None = None
    #: idle sessions a worker keeps open between requests (0: none; each message then
    #: reads its session from the store), the least recently used dropped first
    kept_sessions: int = KEPT
    #: names the server answers to in ``Host`` besides the loopback ones (its bound
    #: address, names behind a proxy; ``*``: any; ``0.0.0.0``/``::``: any IP address):
    #: see :mod:`phaseflow.serve.hosts`
    allowed_hosts: tuple[str, ...] = ()
    #: a folder of the host's own front end, served at ``/app/`` (``--app``; see
    #: :mod:`phaseflow.serve.frontend`)
    app_dir: str | None = None
    #: the host's hook that turns a request into an Identity (None: refused, 401);
    #: sessions are then owned by the identity that made them
    #: (:mod:`phaseflow.serve.identity`). ``None``: no hook, every caller sees all
    auth: AuthHook | None = None
