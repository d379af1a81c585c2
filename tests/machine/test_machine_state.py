"""State: a read-only mapping that is its own writer and logs changes."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import pytest

from phaseflow.errors import ConfigError
from phaseflow.machine import State, StateChange, Writer
from phaseflow.machine.state import readonly, writer_for


def test_state_is_a_read_only_mapping() -> None:
    s = State({"a": 1})
    assert isinstance(s, Mapping) and s["a"] == 1 and s.get("b") is None
    assert "a" in s and len(s) == 1 and list(s) == ["a"]
    with pytest.raises(TypeError):
        s["a"] = 2  # type: ignore[index]
    assert s == {"a": 1} and s == State({"a": 1}) and s != {"a": 2}
    assert repr(s) == "State({'a': 1})"


def test_values_are_copied_at_construction() -> None:
    src = {"a": 1}
    s = State(src)
    s.set("b", 2)
    assert src == {"a": 1}
    assert State() == {} and State(None) == {}


def test_changes_log_and_take() -> None:
    s = State()
    s.set("a", 1)
    s.set("a", 2)
    s.unset("a")
    s.unset("missing")  # nothing to log
    assert s.changes == (StateChange("a", 1), StateChange("a", 2), StateChange("a", None, True))
    taken = s.take_changes()
    assert len(taken) == 3 and taken[2].removed
    assert s.changes == ()


def test_state_is_a_writer() -> None:
    assert isinstance(State(), Writer)


def test_view_is_live_and_read_only() -> None:
    s = State({"a": 1})
    v = s.view()
    s.set("b", 2)
    assert dict(v) == {"a": 1, "b": 2}
    assert not hasattr(v, "set")


def test_writer_for() -> None:
    s = State()
    assert writer_for(s, None) is s
    d: dict[str, Any] = {}
    w = writer_for(d, None)
    w.set("x", 1)
    w.unset("x")
    w.unset("x")
    assert d == {}
    mine = State()
    assert writer_for(d, mine) is mine
    with pytest.raises(ConfigError):
        writer_for(MappingProxyType({}), None)


def test_readonly() -> None:
    class Custom(Mapping[str, Any]):
        def __init__(self) -> None:
            self.d = {"k": 1}

        def __getitem__(self, k: str) -> Any:
            return self.d[k]

        def __iter__(self):  # type: ignore[no-untyped-def]
            return iter(self.d)

        def __len__(self) -> int:
            return 1

        def set(self, k: str, v: Any) -> None:
            self.d[k] = v

    r = readonly(Custom())
    assert dict(r) == {"k": 1} and not hasattr(r, "set") and len(r) == 1
    p = MappingProxyType({"a": 1, "n": {"b": [1]}})
    r2 = readonly(p)  # a mapping proxy is read-only at the top only: it is wrapped too
    assert r2 == p and readonly(r2) is r2
    with pytest.raises(AttributeError):
        r2["n"]["b"].append(2)
    assert p["n"]["b"] == [1]
    with pytest.raises(TypeError):
        readonly({"a": 1})["a"] = 2  # type: ignore[index]
