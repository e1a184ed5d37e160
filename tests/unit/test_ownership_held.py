"""The table of bundles a gateway holds and when one is lost (ownership.held)."""

from __future__ import annotations

import pytest

from coordination.prefix_view import Entry
from gateway.names import NamespaceName
from gateway.ownership.bundles import BundleRange, NamespaceBundle
from gateway.ownership.held_bundles import HeldBundles, lost_bundles
from gateway.ownership.key_records import owner_key

pytestmark = pytest.mark.unit

NS = NamespaceName("t", "ns")
LOW = NamespaceBundle(NS, BundleRange(0x00000000, 0x80000000))
HIGH = NamespaceBundle(NS, BundleRange(0x80000000, 0xFFFFFFFF))


def test_a_loss_of_an_older_key_keeps_the_bundle_held_under_a_newer_one() -> None:
    held = HeldBundles()
    held.add(LOW, 7)
    held.add_if_absent(LOW, 9)  # held already: the revision stays
    assert held.revision(LOW) == 7 and held.covering(NS, 0x10) == (LOW.range, 7)
    assert held.covering(NS, 0x90000000) is None
    assert not held.remove(LOW, 5)  # an older key's loss
    assert held.holds(LOW)
    assert held.remove(LOW, None)  # the lease: every revision
    assert held.all() == [] and held.revision(LOW) is None


def test_a_bundle_is_lost_once_the_cache_has_seen_our_key_and_no_longer_holds_it() -> None:
    held = HeldBundles()
    held.add(LOW, 10)
    held.add(HIGH, 20)
    ours = {owner_key(LOW): Entry(b"gw", 10, 10)}
    assert lost_bundles(held, [LOW, HIGH], ours, 15) == []  # HIGH: the cache is behind our write
    assert lost_bundles(held, [LOW, HIGH], ours, 20) == [(HIGH, 20)]
    newer = {owner_key(LOW): Entry(b"gw2", 30, 30)}  # someone else's key now
    assert lost_bundles(held, [LOW], newer, 30) == [(LOW, 10)]


def test_the_generation_moves_with_every_change_of_the_table_and_only_then() -> None:
    held = HeldBundles()
    seen = [held.generation]

    def moved() -> bool:
        seen.append(held.generation)
        return seen[-1] != seen[-2]

    held.add(LOW, 7)
    assert moved()
    held.add_if_absent(LOW, 9)  # held already: nothing changes
    assert not moved()
    held.add_if_absent(HIGH, 9)
    assert moved()
    assert not held.remove(LOW, 5) and not moved()  # an older key's loss: kept
    assert held.remove(LOW, 7) and moved()
    held.add(LOW, 11)  # held again, under a new epoch
    assert moved()
