"""CacheBudget: one bound on the bytes of all of a gateway's entry caches."""

from __future__ import annotations

import gc

import pytest

from gateway.broker.cache_budget import CacheBudget
from gateway.broker.decoded_entries import DecodedEntries
from gateway.broker.log_state import EntryCache
from storage.formats.entry_format import EntryMessage, encode_message, join_entry
from storage.formats.positions import Position

pytestmark = pytest.mark.unit

KIB = 1024


def fill(cache: EntryCache, ledger: int, count: int, size: int = KIB) -> None:
    for entry in range(count):
        cache.put(Position(ledger, entry), bytes(size))


def test_the_caches_together_stay_within_the_budget_and_the_largest_gives_way() -> None:
    budget = CacheBudget(100 * KIB)
    idle = EntryCache(1024 * KIB, budget)
    busy = EntryCache(1024 * KIB, budget)
    fill(idle, 1, 90)  # an idle topic filled most of the budget
    assert budget.used == 90 * KIB
    fill(busy, 2, 60)
    assert budget.used <= budget.bytes_max
    assert idle.size_bytes + busy.size_bytes == budget.used
    # the idle cache (the largest) gave way, oldest first; the busy one keeps its newest
    assert idle.size_bytes <= 50 * KIB and busy.size_bytes >= 45 * KIB
    assert idle.get(Position(1, 0)) is None and idle.get(Position(1, 89)) is not None
    assert busy.get(Position(2, 59)) is not None
    assert budget.reclaimed == 150 * KIB - budget.used >= 50 * KIB


def test_without_the_budget_each_cache_holds_up_to_its_own_bound() -> None:  # the control
    idle, busy = EntryCache(1024 * KIB), EntryCache(1024 * KIB)
    fill(idle, 1, 90)
    fill(busy, 2, 60)
    assert idle.size_bytes + busy.size_bytes == 150 * KIB


def test_a_cleared_or_dropped_cache_leaves_the_count() -> None:
    budget = CacheBudget(100 * KIB)
    closed = EntryCache(1024 * KIB, budget)
    fill(closed, 1, 80)
    closed.clear()
    assert budget.used == 0 and len(closed) == 0
    lost = EntryCache(1024 * KIB, budget)
    fill(lost, 2, 80)
    del lost  # never cleared: the count is recomputed from the caches still alive
    gc.collect()
    assert budget.held() == 0  # what is held counts only live caches at once ...
    survivor = EntryCache(1024 * KIB, budget)
    fill(survivor, 3, 90)
    assert survivor.size_bytes == 90 * KIB and budget.used == 90 * KIB == budget.held()  # ... the count later


def test_decoded_entries_share_the_budget() -> None:
    budget = CacheBudget(64 * KIB)
    log_cache = EntryCache(1024 * KIB, budget)
    decoded = DecodedEntries(None, budget)  # type: ignore[arg-type]  # messages() never touches the log
    entry = join_entry([encode_message(EntryMessage(bytes(KIB), 1, "p", i)) for i in range(8)])
    for e in range(40):
        log_cache.put(Position(1, e), entry)
        decoded.messages(Position(1, e), entry)
    assert log_cache.size_bytes + decoded.size_bytes == budget.used <= budget.bytes_max
    assert decoded.size_bytes > 0 and log_cache.size_bytes > 0
    decoded.clear()
    assert budget.used == log_cache.size_bytes
