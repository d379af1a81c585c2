"""The session state and the writer effects go through.

The state is a mapping from keys to JSON values. Guards and templates only ever read it;
effects change it only through a *writer* (``set``/``unset``), so that a session can record
and persist every change in one place. :class:`State` is the default: a read-only
``Mapping`` that is also its own writer and keeps a log of what changed. A host with its
own storage passes any object with ``set``/``unset`` (the :class:`Writer` protocol) and a
mapping that reflects those writes.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from typing import Any, NamedTuple, Protocol, overload, runtime_checkable

from phaseflow.errors import ConfigError

__all__ = [
    "ReadOnlyList", "ReadOnlyMapping", "State", "StateChange", "Writer", "readonly", "writer_for",
]


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
        """A live, deeply read-only view (no ``set``/``unset``; nested mappings and lists
        are read-only too): what host callables receive."""
        return ReadOnlyMapping(self._data)

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
    """A deeply read-only view of ``state`` for host callables, without copying it.

    Nested mappings and lists are read-only views too, made lazily as they are read, so a
    callable cannot change the session's state behind the writer's back
    (``ctx.state["order"]["items"].append(x)`` is a ``TypeError``/``AttributeError``, not a
    silent, unrecorded change). The view is live: it shows the writes made since.
    """
    if type(state) is State:
        return ReadOnlyMapping(state._data)
    if type(state) is ReadOnlyMapping:
        return state
    return ReadOnlyMapping(state)


_MISSING: Any = object()


def _view(value: Any) -> Any:
    """``value`` as callables may see it: a list, tuple or mapping as a read-only view,
    anything else as it is (scalars are immutable; a set, which is not JSON, as a
    ``frozenset``)."""
    t = type(value)
    if t is str or t is int or t is float or t is bool or value is None:
        return value
    if t is dict or (t is not ReadOnlyMapping and isinstance(value, Mapping)):
        return ReadOnlyMapping(value)
    if t is list or t is tuple or isinstance(value, list | tuple):
        return ReadOnlyList(value)
    if isinstance(value, set):
        return frozenset(value)
    return value


def _plain(value: Any) -> Any:
    """The value a view shows, for comparisons (a view compares like what it shows)."""
    t = type(value)
    if t is ReadOnlyMapping or t is ReadOnlyList:
        return value._target
    return value


class ReadOnlyMapping(Mapping[str, Any]):
    """A read-only, live view of a mapping whose nested mappings and lists are read-only
    views too (made on access: reading costs one small object per container read, never
    a copy). It compares equal to the mapping it shows; :meth:`copy` gives a plain,
    independent deep copy to change freely. It protects against accidents, not against
    code that digs into private attributes: host callables are the host's own code."""

    __slots__ = ("_target",)

    def __init__(self, target: Mapping[str, Any]) -> None:
        self._target = target

    def __getitem__(self, key: str) -> Any:
        return _view(self._target[key])

    def get(self, key: str, default: Any = None) -> Any:
        value = self._target.get(key, _MISSING)
        return default if value is _MISSING else _view(value)

    def __contains__(self, key: object) -> bool:
        return key in self._target

    def __iter__(self) -> Iterator[str]:
        return iter(self._target)

    def __len__(self) -> int:
        return len(self._target)

    def __eq__(self, other: object) -> bool:
        return bool(self._target == _plain(other))

    __hash__ = None  # type: ignore[assignment]  # shows a mutable mapping

    def __repr__(self) -> str:
        return repr(self._target)

    def copy(self) -> dict[str, Any]:
        """A plain deep copy (``dict``/``list``), independent of the state."""
        return copy.deepcopy(dict(self._target))


class ReadOnlyList(Sequence[Any]):
    """A read-only, live view of a list (or tuple) for host callables; see
    :class:`ReadOnlyMapping`. Slicing gives a view of the slice."""

    __slots__ = ("_target",)

    def __init__(self, target: Sequence[Any]) -> None:
        self._target = target

    @overload
    def __getitem__(self, index: int) -> Any: ...

    @overload
    def __getitem__(self, index: slice) -> ReadOnlyList: ...

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return ReadOnlyList(self._target[index])
        return _view(self._target[index])

    def __len__(self) -> int:
        return len(self._target)

    def __iter__(self) -> Iterator[Any]:
        for item in self._target:
            yield _view(item)

    def __contains__(self, value: object) -> bool:
        return _plain(value) in self._target

    def __eq__(self, other: object) -> bool:
        return bool(self._target == _plain(other))

    __hash__ = None  # type: ignore[assignment]  # shows a mutable list

    def __repr__(self) -> str:
        return repr(self._target)

    def copy(self) -> list[Any]:
        """A plain deep copy (a ``list``), independent of the state."""
        return copy.deepcopy(list(self._target))
