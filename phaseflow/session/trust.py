"""What a session trusts, as its readers show it (``Session.trust()``, ``phaseflow
sessions show``/``trust``, the HTTP service), and a revocation written straight to a
stored record (``phaseflow sessions trust ID --revoke TOOL``, which has no agent).

A trust entry is the turn core's :class:`~phaseflow.turn.execution.TrustEntry`: a host's
grant keys the tool's name (any arguments); a human's approval for the turn or the
session keys the call's exact arguments (their SHA-256; a shell tool's whole command),
so approving one argument set never approves another.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from phaseflow.errors import PhaseflowError
from phaseflow.session import events as ev
from phaseflow.stores.base import SessionRecord, Store, StoreConflict
from phaseflow.turn.execution import TrustEntry, TrustKeyKind, TurnExecution


@dataclass(frozen=True, slots=True)
class Trusted:
    """One thing a session trusts: ``tool``; ``covers``, what of it runs without asking
    (``any_arguments``: a host's grant; ``same_arguments``: a human's approval of these
    very arguments, ``detail`` their SHA-256; ``same_command``: a shell tool's approval of
    this command, ``detail`` its canonical arguments); ``scope``, ``turn`` or
    ``session``."""

    tool: str
    covers: str
    scope: str
    detail: str = ""

    def to_json(self) -> dict[str, str]:
        return {"tool": self.tool, "covers": self.covers, "scope": self.scope,
                "detail": self.detail}


_COVERS: Mapping[TrustKeyKind, str] = {
    TrustKeyKind.NAME: "any_arguments", TrustKeyKind.ARGUMENTS: "same_arguments",
    TrustKeyKind.COMMAND: "same_command"}


def trusted(execution: TurnExecution) -> tuple[Trusted, ...]:
    """What ``execution`` trusts, ordered by tool."""
    return tuple(_trusted(e) for e in execution.trust_levels)


def _trusted(entry: TrustEntry) -> Trusted:
    key = entry.key
    return Trusted(key.tool, _COVERS[key.kind], entry.scope.value, key.detail)


def revoked_record(record: SessionRecord, tool: str, now: float
                   ) -> tuple[SessionRecord, dict[str, Any]] | None:
    """``record`` with every trust of ``tool`` taken back, as its next version, and the
    ``trust_changed`` event to commit with it; ``None`` when nothing trusted ``tool``."""
    gone = sum(1 for e in record.execution.trust if e.key.tool == tool)
    if not gone:
        return None
    record = dataclasses.replace(record, execution=record.execution.revoke(tool),
                                 version=record.version + 1, updated_at=now)
    change = ev.TrustChanged(tool=tool, change="revoked", keys=gone,
                             session_id=record.session_id, turn=record.turn, at=now)
    return record, change.to_json()


class RevokeRefused(PhaseflowError):
    """A revocation that could not be stored: a turn of the session runs (its worker
    holds the lease), or the session changed meanwhile. Nothing was revoked."""


async def revoke_stored(store: Store, session_id: str, tool: str, *, owner: str,
                        now: float) -> tuple[SessionRecord, bool] | None:
    """Take back every trust of ``tool`` in the stored session, in one commit under the
    session's lease (``owner`` takes it for the commit and lets it go): the record as it
    is after, and whether anything was revoked; ``None`` when there is no such session.
    :class:`RevokeRefused` while a turn runs or when another commit came between."""
    lease = await store.acquire(session_id, owner, 30.0, now)
    if lease is None:
        if await store.version(session_id) == 0:
            return None
        raise RevokeRefused(f"session {session_id!r} is running a turn (a worker holds "
                            f"it): revoke trust when the turn has ended")
    try:
        record = await store.load(session_id)
        if record is None:
            return None
        change = revoked_record(record, tool, now)
        if change is None:
            return record, False
        revoked, event = change
        try:
            await store.commit(revoked, [event], expected_version=record.version, lease=lease)
        except StoreConflict as exc:
            raise RevokeRefused(f"session {session_id!r} changed meanwhile ({exc}); nothing "
                                f"was revoked: try again") from None
        return revoked, True
    finally:
        await store.release(lease)
