"""The session state and the writer effects go through.

The state is a mapping from keys to JSON values. Guards and templates only ever read it;
effects change it only through a *writer* (``set``/``unset``), so that a session can record
and persist every change in one place. :class:`State` is the default: a read-only
``Mapping`` that is also its own writer and keeps a log of what changed. A host with its
own storage passes any object with ``set``/``unset`` (the :class:`Writer` protocol) and a
mapping that reflects those writes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping
from types import MappingProxyType
from typing import Any, NamedTuple, Protocol, runtime_checkable

from phaseflow.errors import ConfigError

__all__ = ["State", "StateChange", "Writer", "readonly", "writer_for"]


@runtime_checkable
class Writer(Protocol):
    """What an effect writes through. ``unset`` of an absent key is not an error."""

    def set(self, key: str, value: Any) -> None: ...

    def unset(self, key: str) -> None: ...


class StateChange(NamedTuple):
    """One change made through a :class:`State`: ``removed`` is true for an ``unset``.
    (A named tuple: one is made per write, so it must be cheap.)"""

    key: str
    value: Any = None
    removed: bool = False


class State(Mapping[str, Any]):
    """The default state: a read-only mapping for guards, its own writer for effects.

    Reads never copy. ``changes`` is the log of every ``set``/``unset`` since the last
    :meth:`take_changes`, in order, so a host can persist exactly what a turn changed.
    The log is drained by the host, not capped, because dropping entries would lose data.
    """

    __slots__ = ("_changes", "_data")

    def __init__(self, values: Mapping[str, Any] | None = None) -> None:
        self._data: dict[str, Any] = dict(values) if values else {}
        # plain tuples on the hot path; StateChange values are made when the log is read
        self._changes: list[tuple[str, Any, bool]] = []

    # -- Mapping (the fast paths are the dict's own methods: guards call get() a lot) --
    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def get(self, key: str, default: Any = None) -> Any:
        return self._data.get(key, default)

    def __repr__(self) -> str:
        return f"State({self._data!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, State):
            return self._data == other._data
        if isinstance(other, Mapping):
            return self._data == dict(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable through set/unset

    # -- writer --
    def set(self, key: str, value: Any) -> None:
        """Put ``key`` into the state (``None`` is stored, and reads as absent)."""
        self._data[key] = value
        self._changes.append((key, value, False))

    def unset(self, key: str) -> None:
        """Remove ``key``; logged only when the key was there."""
        if key in self._data:
            del self._data[key]
            self._changes.append((key, None, True))

    # -- the change log --
    @property
    def changes(self) -> tuple[StateChange, ...]:
        """Every change since the last :meth:`take_changes`, oldest first."""
        make = StateChange._make
        return tuple(make(c) for c in self._changes)

    def take_changes(self) -> list[StateChange]:
        """Return the change log and start a new one (call it once per persisted turn)."""
        changes, self._changes = self._changes, []
        make = StateChange._make
        return [make(c) for c in changes]

    def clear_changes(self) -> None:
        """Forget the change log (for hosts that do not persist changes)."""
        self._changes.clear()

    def view(self) -> Mapping[str, Any]:
        """A live read-only view (no ``set``/``unset``): what host callables receive."""
        return MappingProxyType(self._data)

    def to_dict(self) -> dict[str, Any]:
        """A shallow copy of the values."""
        return dict(self._data)


class _MappingWriter:
    """Adapts a plain mutable mapping (e.g. a ``dict``) to the :class:`Writer` protocol."""

    __slots__ = ("_target",)

    def __init__(self, target: MutableMapping[str, Any]) -> None:
        self._target = target

    def set(self, key: str, value: Any) -> None:
        self._target[key] = value

    def unset(self, key: str) -> None:
        self._target.pop(key, None)


def writer_for(state: Mapping[str, Any], writer: Writer | None) -> Writer:
    """The writer to use: ``writer`` if given, else the state itself (a :class:`State`
    or anything with ``set``/``unset``), else a plain mutable mapping adapted.

    Raises :class:`ConfigError` when nothing can write: a host bug, not a domain outcome.
    """
    if writer is not None:
        return writer
    if isinstance(state, State):
        return state
    if callable(getattr(state, "set", None)) and callable(getattr(state, "unset", None)):
        return state  # type: ignore[return-value]
    if isinstance(state, MutableMapping):
        return _MappingWriter(state)
    raise ConfigError(
        f"cannot write to a {type(state).__name__}: pass a writer with set()/unset()"
    )


def readonly(state: Mapping[str, Any]) -> Mapping[str, Any]:
    """A read-only view of ``state`` for host callables, without copying it."""
    if isinstance(state, State):
        return state.view()
    if isinstance(state, dict):
        return MappingProxyType(state)
    if isinstance(state, MappingProxyType):
        return state
    return _ReadOnly(state)


class _ReadOnly(Mapping[str, Any]):
    """A read-only view of any mapping (hides ``set``/``unset``/``__setitem__``)."""

    __slots__ = ("_m",)

    def __init__(self, m: Mapping[str, Any]) -> None:
        self._m = m

    def __getitem__(self, key: str) -> Any:
        return self._m[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._m)

    def __len__(self) -> int:
        return len(self._m)
