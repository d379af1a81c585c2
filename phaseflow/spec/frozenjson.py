"""Deeply immutable JSON values, and plain copies of them for the outside world.

A compiled workflow is shared by every conversation and thread, so a value it holds must
not be changeable through a nested list or mapping (a tool's ``parameters`` schema is
such a value). :func:`freeze` turns mappings into read-only mappings and lists into
tuples, all the way down; :func:`thaw` gives back fresh plain ``dict``/``list`` values, as
``json.dumps`` and providers' tool schemas want them.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

__all__ = ["freeze", "thaw"]


def freeze(value: Any) -> Any:
    """``value`` with every mapping read-only (keys kept in order) and every list a tuple."""
    if isinstance(value, Mapping):
        return MappingProxyType({k: freeze(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """A fresh plain copy of ``value``: mappings become ``dict``, lists and tuples ``list``."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [thaw(v) for v in value]
    return value
