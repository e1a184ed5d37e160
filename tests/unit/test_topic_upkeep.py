"""A topic's upkeep rules (docs/compatibility.md §4.9, §4.11): when a visit may do
I/O, the backlog in bytes, the TTL cut and the backlog eviction, as pure decisions."""

from __future__ import annotations

import pytest

from gateway.broker.log_layout import LedgerLayout
from gateway.broker.topic_policies import TopicPolicies
from gateway.broker.topic_upkeep import (
    DEDUP_SNAPSHOT_ENTRIES,
    backlog_bytes,
    eviction_count,
    expiry_position,
    needs_io,
    snapshot_due,
)
from storage.formats.positions import EARLIEST, Position

pytestmark = pytest.mark.unit

LAYOUT = LedgerLayout([(3, 4), (7, 6)])  # 3:0..3:3, then 7:0..7:5: ten entries


def test_a_visit_needs_io_only_for_ttl_trimming_or_a_dedup_snapshot() -> None:
    quiet = TopicPolicies()
    assert not needs_io(quiet, subscriptions=2, ledgers=1, entries_since_snapshot=10**6)
    assert needs_io(quiet, subscriptions=0, ledgers=2, entries_since_snapshot=0)  # a ledger to trim, maybe
    ttl = TopicPolicies(ttl_seconds=60)
    assert needs_io(ttl, subscriptions=1, ledgers=1, entries_since_snapshot=0)
    assert not needs_io(
        ttl, subscriptions=0, ledgers=1, entries_since_snapshot=0
    )  # only subscriptions expire
    dedup = TopicPolicies(dedup=True)
    assert not snapshot_due(dedup, DEDUP_SNAPSHOT_ENTRIES - 1)
    assert snapshot_due(dedup, DEDUP_SNAPSHOT_ENTRIES)
    assert needs_io(dedup, subscriptions=0, ledgers=1, entries_since_snapshot=DEDUP_SNAPSHOT_ENTRIES)


def test_the_backlog_is_the_share_of_bytes_after_the_slowest_cursor() -> None:
    assert backlog_bytes(LAYOUT, 1000, None) == 0  # no durable subscription
    assert backlog_bytes(LedgerLayout([(3, 0)]), 1000, EARLIEST) == 0  # nothing stored
    assert backlog_bytes(LAYOUT, 1000, EARLIEST) == 1000
    assert backlog_bytes(LAYOUT, 1000, Position(3, 3)) == 600  # six of ten entries behind it
    assert backlog_bytes(LAYOUT, 1000, Position(7, 5)) == 0


def test_eviction_skips_the_oldest_half_of_the_backlog_and_at_least_one() -> None:
    assert eviction_count(LAYOUT, EARLIEST) == 5
    assert eviction_count(LAYOUT, Position(7, 4)) == 1


def test_ttl_expires_up_to_the_entry_before_the_first_live_one() -> None:
    assert expiry_position(LAYOUT, None) == Position(7, 5)  # every entry is older
    assert expiry_position(LAYOUT, Position(3, 0)) == EARLIEST  # none is
    assert expiry_position(LAYOUT, Position(7, 0)) == Position(3, 3)
    assert expiry_position(LAYOUT, Position(7, 2)) == Position(7, 1)
