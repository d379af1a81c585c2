"""The sessions this worker served last, kept open between requests, so that a message
does not read the whole session from the store again (a read that grows with the
history: the largest cost a served turn added to the turn itself).

An idle :class:`Session` object is kept with the agent it was opened by (its worker id:
no other object of that id is ever made for the session while it is kept) and with the
*mark* of the last event it committed: that event's ``seq``, ``type`` and ``at`` (wall
clock seconds). Before it is reused, one cheap read of the store's events from that
``seq`` on tells whether the object is still the session as stored:

* the mark is the session's last event: nobody committed since (another worker's
  commit of an event, a delete). The object is reused; a commit without events that
  another worker made meanwhile (a setting) is caught up with when its turn takes the
  lease (the driver compares the lease's version with its own);
* later events exist (another worker ran a turn), or the event at that ``seq`` is
  another one (the session was deleted and created again under the same id: a new
  incarnation whose log happens to be as long has other events, stamped at other
  times), or there is no such event (deleted, or created again with a shorter log): the
  object is dropped, the session is opened from the store as if it had never been kept.

A kept object is taken out while a request uses it, so two requests never share one
(a second message while the first one's turn runs opens an object of its own, as it
always did: the multi-worker path, queued or refused in the store). The number kept is
bounded (:attr:`IdleSessions.size`, the least recently used dropped first).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from phaseflow.session import events as ev
from phaseflow.session.agent import Agent, Session
from phaseflow.stores.base import StoredEvent

if TYPE_CHECKING:
    from phaseflow.serve.served import Served

#: how many idle sessions a worker keeps by default
KEPT = 256


@dataclass(frozen=True, slots=True)
class Mark:
    """The last event a kept session committed: what identifies the stored session it
    was (its log position, and the event there)."""

    seq: int
    type: str
    at: float

    @classmethod
    def last_of(cls, events: Iterable[ev.Event]) -> Mark | None:
        """The mark of the last persisted event among ``events``; ``None`` when none
        was persisted."""
        last = None
        for event in events:
            if event.seq:
                last = event
        return None if last is None else cls(last.seq, last.type, last.at)

    def is_last(self, stored: Sequence[StoredEvent]) -> bool:
        """``stored`` (the store's events from this mark's ``seq`` on) is this mark's
        event and nothing after it."""
        if len(stored) != 1:
            return False
        data = stored[0].data
        return (stored[0].seq == self.seq and data.get("type") == self.type
                and data.get("at") == self.at)


@dataclass(frozen=True, slots=True)
class Idle:
    """A kept session: the object, the agent that opened it (and the workflow it was
    lent from, to give it back), and the mark of its last event."""

    served: Served
    agent: Agent
    session: Session
    mark: Mark


class IdleSessions:
    """At most ``size`` idle sessions by id, the least recently used dropped first.
    ``size`` 0 keeps none (every message opens its session from the store)."""

    def __init__(self, size: int = KEPT) -> None:
        self.size = size
        self._kept: OrderedDict[str, Idle] = OrderedDict()

    def __len__(self) -> int:
        return len(self._kept)

    def __contains__(self, session_id: str) -> bool:
        return session_id in self._kept

    def take(self, session_id: str) -> Idle | None:
        """The kept session of ``session_id``, taken out (the request that uses it gives
        it back with :meth:`keep` when its task is over)."""
        return self._kept.pop(session_id, None)

    def keep(self, session_id: str, idle: Idle) -> list[Idle]:
        """Keep ``idle``; what is dropped for it (their agents go back to their pools):
        an older object of the same session (the one whose mark is earlier), and the
        least recently used ones beyond :attr:`size`."""
        dropped: list[Idle] = []
        earlier = self._kept.pop(session_id, None)
        if earlier is not None and earlier.mark.seq > idle.mark.seq:
            earlier, idle = idle, earlier
        if earlier is not None:
            dropped.append(earlier)
        if self.size <= 0:
            return [*dropped, idle]
        self._kept[session_id] = idle
        while len(self._kept) > self.size:
            dropped.append(self._kept.popitem(last=False)[1])
        return dropped
