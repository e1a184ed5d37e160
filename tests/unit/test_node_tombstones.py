"""Deleted ledger ids: kept as few merged ranges, membership exact."""

from __future__ import annotations

import itertools
import random

import pytest

from storage.node.tombstones import Tombstones

pytestmark = pytest.mark.unit


def test_ids_merge_into_ranges_and_membership_is_exact() -> None:
    t = Tombstones()
    assert not t and 5 not in t
    for ledger_id in (5, 7, 6, 1, 3, 2):
        assert t.add(ledger_id)
    assert not t.add(6)
    assert t.ranges() == [(1, 3), (5, 7)]
    assert [i in t for i in range(9)] == [False, True, True, True, False, True, True, True, False]
    t.add(4)
    assert t.ranges() == [(1, 7)]
    t.add_range(20, 30)
    t.add_range(8, 19)
    assert t.ranges() == [(1, 30)] and len(t) == 1


def test_random_deletions_match_a_plain_set() -> None:
    rng = random.Random(3)
    t, plain = Tombstones(), set()
    for _ in range(3000):
        ledger_id = rng.randrange(500)
        assert t.add(ledger_id) == (ledger_id not in plain)
        plain.add(ledger_id)
    assert all((i in t) == (i in plain) for i in range(-2, 505))
    ranges = t.ranges()
    assert all(a[1] + 1 < b[0] for a, b in itertools.pairwise(ranges))  # disjoint, not touching
    assert Tombstones(ranges).ranges() == ranges


def test_bad_ranges_are_refused() -> None:
    with pytest.raises(ValueError):
        Tombstones([(5, 3)])
    with pytest.raises(ValueError):
        Tombstones([(-1, 3)])
