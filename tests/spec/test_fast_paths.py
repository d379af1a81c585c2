"""The shortcuts taken for speed give what the general code gives.

``compose`` reads most plain words without resolving them, pairs most mappings inline and
records whether a mapping has a merge key; the source map's per-phase lists start as shared
empty tuples. Each property below holds the shortcut to the general path it skips.
"""

from __future__ import annotations

import dataclasses
import gc
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phaseflow.spec.loader import check_file, check_text
from phaseflow.spec.model import Phase, Position, Transition
from phaseflow.spec.schema import entries
from phaseflow.spec.sourcemap import PhaseNodes
from phaseflow.spec.yamlnodes import Mapping, Scalar, compose, resolve_plain, to_python
from tests.support.bundled import bundled_workflows

_REPO = Path(__file__).resolve().parents[2]

#: Words made of the letters of null/true/false in every case (and the long s, which a
#: case-insensitive match takes for an s), at and around the lengths those words have.
_LETTERS = "nNuUlLtTrReEfFaAsSſ"
words = st.text(alphabet=_LETTERS + "xo_-", min_size=1, max_size=8).filter(
    lambda w: w[0] in "nNtTfF"
)


@given(word=words)
def test_a_plain_word_reads_as_the_core_schema_resolves_it(word: str) -> None:
    document = compose(f"key: {word}\n{word}: value\n")
    root = document.root
    assert isinstance(root, Mapping)
    value = root.pairs[0][1]
    assert isinstance(value, Scalar)
    assert value.value == resolve_plain(word)
    assert type(value.value) is type(resolve_plain(word))
    # as a key: a name that is a string, whatever the word resolves to
    assert root.pairs[1][0].value == word


def test_the_words_that_are_not_strings() -> None:
    data = to_python(compose("a: true\nb: FALSE\nc: null\nd: falſe\ne: nulls\nf: tru\n").root)
    assert data == {"a": True, "b": False, "c": None, "d": False, "e": "nulls", "f": "tru"}


keys = st.sampled_from(["a", "b", "<<", "'<<'", "1", "true", "null", "'a'", '"b"'])
flow_values = st.sampled_from(["1", "x", "[1, 2]", "{c: 3}", "*base", "'q'"])


@settings(max_examples=300)
@given(pairs=st.lists(st.tuples(keys, flow_values), max_size=6))
def test_a_mapping_pairs_and_data_as_the_general_path_makes_them(
    pairs: list[tuple[str, str]],
) -> None:
    body = ", ".join(f"{k}: {v}" for k, v in pairs)
    text = f"base: &base {{c: 3, d: 4}}\nm: {{{body}}}\n"
    result = check_text(text)  # never raises, whatever the mapping holds
    assert result.diagnostics
    try:
        document = compose(text)
    except Exception:  # a merge of a non-mapping, etc.: reported by check_text above
        return
    root = document.root
    assert isinstance(root, Mapping)
    mapping = root.get("m")
    assert isinstance(mapping, Mapping)
    # the flag compose records is what a look at the pairs finds
    looked = any(k.value == "<<" and k.style is None for k, _ in mapping.pairs)
    assert mapping.merges is looked
    # entries() reads the flag; without it (a mapping made by hand) it looks: same pairs
    by_hand = Mapping(mapping.line, mapping.column, list(mapping.pairs))
    assert [(k.value, v) for k, v in entries(mapping)] == [
        (k.value, v) for k, v in entries(by_hand)
    ]
    # the plain data built while composing is to_python's
    assert mapping.data == to_python(by_hand)
    # each name once, in the order written, the first of a repeated key kept
    names = [k.value for k, _ in mapping.pairs]
    assert len(names) == len(set(names)) or "<<" in names


def test_phase_nodes_lists_are_never_shared() -> None:
    first = PhaseNodes(Scalar(1, 1, "a", "a"))
    second = PhaseNodes(Scalar(2, 1, "b", "b"))
    assert first.tools == () and first.unchecked_transitions == frozenset()
    first.tools = [("t", first.key)]
    assert second.tools == ()
    # a default is immutable: appending to one is an error, never a change to all phases
    assert not hasattr(second.sets, "append")


def test_effects_of_one_phase_stay_in_that_phase() -> None:
    text = """\
phaseflow: 1
name: w
initial: a
state:
  k: {type: integer}
  s: {type: string}
phases:
  a:
    goal: A.
    on_enter: [{set: {k: "one"}}, {unset: [nope]}]
    transitions: [{to: b}]
  b:
    goal: B.
    on_exit: [{set: {s: 2}}]
    terminal: true
"""
    codes = sorted((d.line, d.code) for d in check_text(text, "w.yaml").diagnostics)
    assert codes == [(10, "PF305"), (10, "PF404"), (14, "PF305")]


def _rebuilt(phase: Phase) -> Phase:
    """``phase`` made again by the public constructors, from its own fields."""
    return Phase(
        name=phase.name,
        goal=phase.goal,
        instructions=phase.instructions,
        needs=phase.needs,
        requires=phase.requires,
        guard=phase.guard,
        prepare=phase.prepare,
        on_enter=phase.on_enter,
        on_exit=phase.on_exit,
        tools=phase.tools,
        clear_on_enter=phase.clear_on_enter,
        terminal=phase.terminal,
        transitions=[
            Transition(
                t.to,
                t.when,
                t.description,
                t.trigger,
                None if t.position is None else Position(*dataclasses.astuple(t.position)),
            )
            for t in phase.transitions
        ],
        position=None if phase.position is None else Position(*dataclasses.astuple(phase.position)),
        collect=phase.collect,
    )


_WORKFLOWS = [str(p) for p in bundled_workflows()]


@pytest.mark.parametrize("path", _WORKFLOWS)
def test_compiled_phases_are_what_the_constructors_make(path: str) -> None:
    workflow = check_file(path).workflow
    assert workflow is not None
    for phase in workflow.phases.values():
        again = _rebuilt(phase)
        assert again == phase
        assert repr(again) == repr(phase)  # positions too (they are not compared)
        for made, built in zip(again.transitions, phase.transitions, strict=True):
            assert made == built and repr(made) == repr(built)
            assert type(built.position) is Position and hash(built.position) == hash(
                made.position
            )


_SMALL = "phaseflow: 1\nname: w\ninitial: a\nphases:\n  a: {goal: A., terminal: true}\n"


def test_checking_leaves_the_collector_as_it_found_it() -> None:
    running = gc.isenabled()
    try:
        gc.enable()
        assert check_text(_SMALL).workflow is not None
        assert gc.isenabled() and gc.get_freeze_count() == 0  # promoted, nothing left frozen
        gc.disable()
        assert check_text(_SMALL).workflow is not None
        assert not gc.isenabled()  # a host that paused it keeps it paused
        gc.enable()
        gc.freeze()  # a host that froze its objects (before forking) keeps them frozen
        frozen = gc.get_freeze_count()
        assert check_text(_SMALL).workflow is not None
        assert gc.get_freeze_count() == frozen and gc.isenabled()
    finally:
        gc.unfreeze()
        if running:
            gc.enable()
        else:
            gc.disable()
