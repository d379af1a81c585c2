"""The row codec against any damage: whatever a corrupted snapshot or message row holds,
decoding gives the session or :class:`StoreDataError` naming it, nothing else."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phaseflow.stores import codec
from phaseflow.stores.codec import StoreDataError
from tests.support.store_sessions import chat_commits, renumber

_LOG = asyncio.run(chat_commits(2, "victim")).log
_RECORD = renumber(_LOG[-1][0], 1)
_WRITTEN, _ = codec.encode(_RECORD, None)
_ROW_FIELDS = ("victim", _RECORD.workflow, _RECORD.workflow_hash, 1, _RECORD.status,
               _RECORD.phase, _RECORD.turn)
_ROW = codec.Row(*_ROW_FIELDS, _WRITTEN.snapshot, _RECORD.created_at, _RECORD.updated_at)

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                max_size=3),
    max_leaves=6)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for k, v in enumerate(value):
            out += _paths(v, (*prefix, k))
    return out


def _replace(value: Any, path: tuple[Any, ...], new: Any, delete: bool) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    copy: Any = dict(value) if isinstance(value, dict) else list(value)
    if delete and not rest:
        del copy[head]
    else:
        copy[head] = _replace(copy[head], rest, new, delete)
    return copy


_SNAPSHOT = json.loads(_WRITTEN.snapshot)
_MESSAGES = [json.loads(m) for m in _WRITTEN.messages]
_TARGETS = [("snapshot", p) for p in _paths(_SNAPSHOT)] + [
    ("message", (k, *p)) for k, m in enumerate(_MESSAGES) for p in _paths(m)]


def _decode(snapshot: str, messages: list[str]) -> None:
    row = codec.Row(*_ROW_FIELDS, snapshot, 0.0, 0.0)
    try:
        codec.decode(row, messages, list(_WRITTEN.marks))
    except StoreDataError as exc:
        assert "'victim'" in str(exc)


def test_the_undamaged_rows_decode_to_the_record() -> None:
    record, _ = codec.decode(_ROW, list(_WRITTEN.messages), list(_WRITTEN.marks))
    assert record == _RECORD


@settings(max_examples=300, deadline=None)
@given(target=st.sampled_from(_TARGETS), new=_json, delete=st.booleans())
def test_any_damaged_value_decodes_or_is_a_store_data_error(
        target: tuple[str, tuple[Any, ...]], new: Any, delete: bool) -> None:
    where, path = target
    delete = delete and bool(path)
    if where == "snapshot":
        _decode(json.dumps(_replace(_SNAPSHOT, path, new, delete)), list(_WRITTEN.messages))
    else:
        k, rest = path[0], path[1:]
        messages = list(_WRITTEN.messages)
        if rest or not delete:
            messages[k] = json.dumps(_replace(_MESSAGES[k], rest, new, delete and bool(rest)))
        _decode(_WRITTEN.snapshot, messages)


@settings(max_examples=100, deadline=None)
@given(cut=st.integers(min_value=0, max_value=len(_WRITTEN.snapshot) - 1))
def test_a_truncated_snapshot_is_a_store_data_error(cut: int) -> None:
    with pytest.raises(StoreDataError, match="'victim'"):
        codec.decode(codec.Row(*_ROW_FIELDS, _WRITTEN.snapshot[:cut], 0.0, 0.0),
                     list(_WRITTEN.messages), list(_WRITTEN.marks))
