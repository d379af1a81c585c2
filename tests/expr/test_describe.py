"""The message helpers every layer words its errors with (``phaseflow.expr.describe``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from phaseflow.expr.describe import closest, did_you_mean, did_you_mean_or_list, json_kind


@pytest.mark.parametrize(("text", "words"), [
    ("null", "null"), ("true", "a boolean"), ("3", "a number"), ("2.5", "a number"),
    ('"x"', "a string"), ("[1]", "an array"), ('{"a": 1}', "an object"),
])
def test_json_kind_names_what_a_json_document_holds(text: str, words: str) -> None:
    assert json_kind(json.loads(text)) == words


def test_json_kind_names_a_value_json_cannot_hold_by_its_class() -> None:
    value: Any = {1, 2}
    assert json_kind(value) == "set"


def test_closest_is_the_likely_typo_or_none() -> None:
    assert closest("reivew", ["done", "review", "start"]) == "review"
    assert closest("zzzz", ["done", "review"]) is None
    assert closest("review", []) is None
    assert closest("r" * 201, ["r" * 201]) is None  # no typo is that long


def test_did_you_mean_words_the_closest() -> None:
    assert did_you_mean("reivew", ["start", "review", "review"]) == "; did you mean 'review'?"
    assert did_you_mean("zzzz", ["review"]) == ""


def test_did_you_mean_or_list_lists_every_candidate_in_order_when_none_is_close() -> None:
    assert did_you_mean_or_list("reivew", ("start", "review"), "phases") == (
        "; did you mean 'review'?")
    assert did_you_mean_or_list("zzzz", {"start": 1, "done": 2}, "phases") == (
        " (phases: start, done)")
