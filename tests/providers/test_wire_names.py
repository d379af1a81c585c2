"""Wire names: every workflow name gets a valid function name, and back, without clashes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from phaseflow.providers.wire_names import WIRE_NAME, WireNames, readable_wire_name

# names like a catalogue's, plus the characters and lengths that force collisions
_PIECES = st.sampled_from([*"ab_-.Z9", "__", "é", " ", "/", "x" * 30])
_NAME = st.lists(_PIECES, min_size=1, max_size=12).map("".join)
names = st.lists(_NAME, max_size=12)


def test_dotted_names_read_well_and_valid_names_stay() -> None:
    wire = WireNames(["crm.lookup_customer", "orders.search", "go_to_phase"])
    assert wire.to_wire("crm.lookup_customer") == "crm__lookup_customer"
    assert wire.to_wire("orders.search") == "orders__search"
    assert wire.to_wire("go_to_phase") == "go_to_phase"
    assert wire.from_wire("crm__lookup_customer") == "crm.lookup_customer"


def test_a_collision_gets_a_suffix_and_the_literal_name_keeps_itself() -> None:
    wire = WireNames(["crm.lookup", "crm__lookup", "crm_lookup", "crm lookup"])
    assert wire.to_wire("crm__lookup") == "crm__lookup"
    assert wire.to_wire("crm_lookup") == "crm_lookup"
    assert wire.to_wire("crm.lookup") == "crm__lookup_2"
    assert wire.to_wire("crm lookup") == "crm_lookup_2"
    assert {wire.from_wire(w) for _, w in wire.items()} == {
        "crm.lookup", "crm__lookup", "crm_lookup", "crm lookup"}


def test_an_unknown_wire_name_comes_back_unchanged() -> None:
    assert WireNames(["a.b"]).from_wire("invented_tool") == "invented_tool"


def test_long_names_are_cut_to_64_and_stay_apart() -> None:
    long_a, long_b = "x" * 70 + ".a", "x" * 70 + ".b"
    wire = WireNames([long_a, long_b])
    assert {len(wire.to_wire(long_a)), len(wire.to_wire(long_b))} == {64}
    assert wire.to_wire(long_a) != wire.to_wire(long_b)


@given(names)
def test_wire_names_are_valid_distinct_and_reversible(workflow_names: list[str]) -> None:
    wire = WireNames(workflow_names)
    given_out = [wire.to_wire(n) for n in set(workflow_names)]
    assert all(WIRE_NAME.fullmatch(w) for w in given_out)
    assert len(set(given_out)) == len(given_out)
    assert all(wire.from_wire(wire.to_wire(n)) == n for n in workflow_names)


@given(names)
def test_the_mapping_depends_on_the_set_not_the_order(workflow_names: list[str]) -> None:
    assert WireNames(workflow_names).items() == WireNames(reversed(workflow_names)).items()


@given(st.text(max_size=100))
def test_the_readable_form_is_always_valid(name: str) -> None:
    assert WIRE_NAME.fullmatch(readable_wire_name(name))
