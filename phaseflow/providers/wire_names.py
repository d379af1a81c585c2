"""Workflow tool names as function names a Chat Completions server accepts, and back.

OpenAI-compatible servers accept function names matching ``^[a-zA-Z0-9_-]{1,64}$``;
workflow names may contain ``.`` (``crm.lookup_customer``) or anything else a catalogue
allows. No fixed function can map every string into 64 such characters reversibly, so a
mapping is built for the set of names one request uses (its tools and the calls in its
history): injective, always valid, and reversed exactly, so the session only ever sees
workflow names.

Names that are already valid keep themselves (most tools, and ``go_to_phase``). Others
get a readable form (``.`` becomes ``__``, other characters ``_``), with ``_2``, ``_3``
... appended when that form is taken. Assigning in sorted order makes the mapping a
function of the set alone, so the same tools give the same wire names in every request.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["WIRE_NAME", "WireNames", "readable_wire_name"]

#: What a server accepts as a function name.
WIRE_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_INVALID = re.compile(r"[^a-zA-Z0-9_-]")
_LIMIT = 64


def readable_wire_name(name: str) -> str:
    """The preferred wire form of ``name``: valid, but not necessarily unique."""
    base = _INVALID.sub("_", name.replace(".", "__"))[:_LIMIT]
    return base or "tool"


def _is_wire(name: str) -> bool:
    return WIRE_NAME.fullmatch(name) is not None


class WireNames:
    """A reversible mapping between a set of workflow names and wire names."""

    __slots__ = ("_from_wire", "_to_wire")

    def __init__(self, names: Iterable[str]) -> None:
        unique = sorted(set(names))
        to_wire: dict[str, str] = {n: n for n in unique if _is_wire(n)}
        taken = set(to_wire)
        for name in unique:
            if name in to_wire:
                continue
            base = readable_wire_name(name)
            wire, k = base, 1
            while wire in taken:
                k += 1
                suffix = f"_{k}"
                wire = base[: _LIMIT - len(suffix)] + suffix
            to_wire[name] = wire
            taken.add(wire)
        self._to_wire = to_wire
        self._from_wire = {w: n for n, w in to_wire.items()}

    def to_wire(self, name: str) -> str:
        """The wire name of a workflow name of the set (a name outside it: its readable
        form, which may then not reverse)."""
        return self._to_wire.get(name) or readable_wire_name(name)

    def from_wire(self, wire: str) -> str:
        """The workflow name a wire name stands for; a name the mapping never gave out
        (a model inventing a tool) comes back unchanged, for the session to refuse."""
        return self._from_wire.get(wire, wire)

    def items(self) -> list[tuple[str, str]]:
        """(workflow name, wire name) pairs, sorted by workflow name."""
        return sorted(self._to_wire.items())
