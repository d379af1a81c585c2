"""Reading libpq's own trace of a connection (``pgconn.trace``): how often the client,
having sent, waited for the server."""

from __future__ import annotations


def round_trips(trace: str) -> int:
    """Each change in the trace from messages sent (``F``) to messages received
    (``B``) is one wait for the server."""
    trips, sending = 0, False
    for line in trace.splitlines():
        if line.startswith("F\t"):
            sending = True
        elif line.startswith("B\t") and sending:
            trips, sending = trips + 1, False
    return trips
