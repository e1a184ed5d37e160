"""Table tests for the striping rules: write sets, ack sets, coverage."""

from __future__ import annotations

import pytest

from storage.client import schedule
from storage.client.write_core import AckSet
from storage.types import LedgerMetadata, LedgerState, Segment

pytestmark = pytest.mark.unit

E4 = ("B1", "B2", "B3", "B4")


@pytest.mark.parametrize(
    ("entry_id", "expected"),
    [
        (0, ("B1", "B2", "B3")),
        (1, ("B2", "B3", "B4")),
        (2, ("B3", "B4", "B1")),
        (3, ("B4", "B1", "B2")),
        (4, ("B1", "B2", "B3")),
    ],
)
def test_write_set_is_round_robin_from_e_mod_E(entry_id: int, expected: tuple[str, ...]) -> None:
    assert schedule.write_set(E4, entry_id, 3) == expected


def test_write_set_matches_ledger_metadata() -> None:
    md = LedgerMetadata(1, 4, 3, 2, LedgerState.OPEN, (Segment(0, E4), Segment(10, ("B1", "B5", "B3", "B4"))))
    for entry_id in range(20):
        segment = md.segment_for(entry_id)
        assert md.write_set(entry_id) == schedule.write_set(segment.ensemble, entry_id, 3)
    assert md.write_set(11) == ("B4", "B1", "B5")


def test_no_striping_when_qw_equals_e() -> None:
    sets = schedule.all_write_sets(("A", "B", "C"), 3)
    assert all(set(s) == {"A", "B", "C"} for s in sets)


def test_ack_set_reaches_quorum_once_with_distinct_acks() -> None:
    acks = AckSet(2)
    assert acks.add(0) is False
    assert acks.add(0) is False  # duplicate ack does not count twice
    assert acks.add(2) is True
    assert acks.complete
    assert acks.add(1) is False  # already complete: no second "reached"
    acks.remove(2)
    acks.remove(1)
    assert not acks.complete and acks.count == 1
    assert acks.add(1) is True


@pytest.mark.parametrize(
    ("ensemble", "qw", "qa", "answered", "covered"),
    [
        # E=Qw=3, Qa=2: need 2 of the single write set
        (("A", "B", "C"), 3, 2, {"A"}, False),
        (("A", "B", "C"), 3, 2, {"A", "C"}, True),
        # E=Qw=3, Qa=3: one answer is enough (no set can reach 3 acks without it)
        (("A", "B", "C"), 3, 3, {"B"}, True),
        # E=Qw=3, Qa=1: everybody must answer
        (("A", "B", "C"), 3, 1, {"A", "B"}, False),
        (("A", "B", "C"), 3, 1, {"A", "B", "C"}, True),
        # E=4, Qw=3, Qa=2: write sets ABC, BCD, CDA, DAB; need 2 in each
        (E4, 3, 2, {"B1", "B3"}, False),  # set (B2,B3,B4) has only B3
        (E4, 3, 2, {"B1", "B2"}, False),  # set B3,B4,B1 has only B1
        (E4, 3, 2, {"B1", "B2", "B3"}, True),
        (E4, 3, 2, {"B2", "B4"}, False),  # set (B1,B2,B3) has only B2
        (E4, 3, 2, {"B1", "B2", "B4"}, True),
        # E=4, Qw=2, Qa=2: one per write set (AB, BC, CD, DA)
        (E4, 2, 2, {"B1", "B3"}, True),
        (E4, 2, 2, {"B1", "B2"}, False),
        # E=5, Qw=3, Qa=2
        (("A", "B", "C", "D", "E"), 3, 2, {"A", "B", "C", "D"}, True),
        (("A", "B", "C", "D", "E"), 3, 2, {"A", "C", "E"}, False),  # set (B,C,D) has only C
    ],
)
def test_coverage_table(
    ensemble: tuple[str, ...], qw: int, qa: int, answered: set[str], covered: bool
) -> None:
    assert schedule.is_covered(ensemble, qw, qa, answered) is covered


def test_coverage_brute_force_matches_definition() -> None:
    """For every subset of answers: covered iff no write set can still collect
    Qa acks from the nodes that did not answer."""
    import itertools

    ensemble = ("A", "B", "C", "D", "E")
    for qw, qa in [(3, 2), (3, 3), (2, 1), (5, 3), (4, 2)]:
        for r in range(len(ensemble) + 1):
            for answered in itertools.combinations(ensemble, r):
                silent = set(ensemble) - set(answered)
                some_set_can_ack = any(
                    sum(1 for n in ws if n in silent) >= qa for ws in schedule.all_write_sets(ensemble, qw)
                )
                assert schedule.is_covered(ensemble, qw, qa, set(answered)) is (not some_set_can_ack)


@pytest.mark.parametrize(
    ("qw", "qa", "negatives", "absent"),
    [(3, 2, {"A"}, False), (3, 2, {"A", "B"}, True), (3, 3, {"C"}, True), (3, 1, {"A", "B"}, False)],
)
def test_entry_absent_needs_qw_minus_qa_plus_one_negatives(
    qw: int, qa: int, negatives: set[str], absent: bool
) -> None:
    assert schedule.entry_absent(("A", "B", "C"), qw, qa, negatives) is absent


def test_can_still_cover() -> None:
    ens = ("A", "B", "C")
    assert schedule.can_still_cover(ens, 3, 2, {"A"}, {"B"})
    assert not schedule.can_still_cover(ens, 3, 2, {"A"}, {"B", "C"})
