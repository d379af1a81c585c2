"""The commit and lease rules on their own (``phaseflow/stores/rules.py``): pure
decisions, tested without a store; the contract test drives them through all three."""

from __future__ import annotations

import pytest

from phaseflow.stores import StoreConflict, StoreFenced
from phaseflow.stores.base import Lease
from phaseflow.stores.rules import History, Stored, is_lease, plan_commit, take_lease

LEASE = Lease("s", "w1", 3, 100.0)


def test_a_first_commit_creates_the_row_and_numbers_events_from_one() -> None:
    plan = plan_commit("s", None, version=1, expected_version=0, lease=None, events=2,
                       history=History(0, 0, 4, 1))
    assert (plan.create, plan.placeholder, plan.rewrite) == (True, False, False)
    assert plan.seqs == (1, 2) and plan.event_from == 1
    assert (plan.message_count, plan.mark_count, plan.event_count) == (4, 1, 2)


def test_a_commit_on_a_lease_placeholder_creates_the_session() -> None:
    plan = plan_commit("s", Stored(0, 0, "w1", 3), version=1, expected_version=0,
                       lease=LEASE, events=1, release=True, consumed=7)
    assert (plan.create, plan.placeholder, plan.release, plan.consumed) == (
        False, True, True, 7)


def test_a_commit_extends_what_is_stored() -> None:
    stored = Stored(4, 9, "w1", 3, message_count=6, mark_count=2)
    plan = plan_commit("s", stored, version=5, expected_version=4, lease=LEASE, events=3,
                       history=History(6, 2, 2, 1))
    assert plan.seqs == (10, 11, 12) and plan.event_from == 10
    assert (plan.message_count, plan.mark_count, plan.rewrite) == (8, 3, False)
    assert not plan.release  # only when asked


def test_a_history_that_starts_again_is_a_rewrite() -> None:
    plan = plan_commit("s", Stored(4, 9, None, 3, 6, 2), version=5, expected_version=4,
                       lease=None, events=0, history=History(0, 0, 3, 1, rewrite=True))
    assert plan.rewrite and (plan.message_count, plan.mark_count) == (3, 1)


@pytest.mark.parametrize("stored", [
    None, Stored(4, 0, None, 3), Stored(4, 0, "w2", 3), Stored(4, 0, "w1", 4)])
def test_a_lease_that_is_not_the_rows_is_fenced(stored: Stored | None) -> None:
    with pytest.raises(StoreFenced, match="taken over"):
        plan_commit("s", stored, version=5, expected_version=4, lease=LEASE, events=0)


def test_the_version_is_compared_and_raised_by_one() -> None:
    with pytest.raises(StoreConflict, match="stored version is 4, this writer expected 3"):
        plan_commit("s", Stored(4, 0, None, 0), version=4, expected_version=3, lease=None,
                    events=0)
    with pytest.raises(StoreConflict, match="stored version is 0"):
        plan_commit("s", None, version=2, expected_version=1, lease=None, events=0)
    with pytest.raises(StoreConflict, match="raise the version by one"):
        plan_commit("s", Stored(4, 0, None, 0), version=6, expected_version=4, lease=None,
                    events=0)


def test_a_history_this_writer_did_not_see_is_never_appended_to() -> None:
    with pytest.raises(StoreConflict, match="not the one this writer extended"):
        plan_commit("s", Stored(4, 0, None, 0, message_count=7), version=5,
                    expected_version=4, lease=None, events=0, history=History(6, 0, 1, 0))


@pytest.mark.parametrize(("holder", "expires", "options", "epoch"), [
    (None, None, {}, 4),                      # free: a new epoch
    ("w2", 50.0, {}, 4),                      # expired
    ("w1", 200.0, {}, 3),                     # its own: renewed, same epoch
    ("w1", 200.0, {"force": True}, 4),        # forced even from itself
    ("w2", 200.0, {}, None),                  # another's, live
    ("w2", 200.0, {"force": True}, 4),
    ("w2", 200.0, {"replacing": Lease("s", "w2", 3, 0.0)}, 4),  # that very lease
    ("w2", 200.0, {"replacing": Lease("s", "w2", 2, 0.0)}, None),  # an older one
])
def test_the_lease_rule(holder: str | None, expires: float | None,
                        options: dict[str, object], epoch: int | None) -> None:
    assert take_lease(holder, expires, 3, owner="w1", now=100.0,
                      **options) == epoch  # type: ignore[arg-type]


def test_a_lease_is_its_holder_and_epoch() -> None:
    assert is_lease("w1", 3, LEASE) and not is_lease("w1", 2, LEASE)
    assert not is_lease(None, 3, LEASE) and not is_lease("w1", 3, None)
