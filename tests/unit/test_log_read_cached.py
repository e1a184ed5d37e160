"""``log_reads.read_cached``: the no-wait read the subscription uses at the log's tail."""

from __future__ import annotations

import pytest

from gateway.broker.log_reads import read_cached
from gateway.broker.log_state import EntryCache
from storage.formats.positions import Position

pytestmark = pytest.mark.unit


def cache_with(ledger: int, entries: range) -> EntryCache:
    cache = EntryCache(1 << 20)
    for entry in entries:
        cache.put(Position(ledger, entry), f"e{entry}".encode())
    return cache


def test_reads_confirmed_cached_entries_from_start() -> None:
    cache = cache_with(7, range(0, 10))
    got = read_cached(Position(7, 5), cache, Position(7, 3), 100)
    assert got == [(Position(7, e), f"e{e}".encode()) for e in (3, 4, 5)]  # never past the last confirmed


def test_bounded_by_max_entries() -> None:
    cache = cache_with(7, range(0, 10))
    assert [p.entry_id for p, _ in read_cached(Position(7, 9), cache, Position(7, 2), 3)] == [2, 3, 4]


def test_stops_at_the_first_entry_not_cached() -> None:
    cache = cache_with(7, range(4, 10))
    assert read_cached(Position(7, 9), cache, Position(7, 2), 100) == []
    cache.put(Position(7, 2), b"x")
    assert [p.entry_id for p, _ in read_cached(Position(7, 9), cache, Position(7, 2), 100)] == [2]


def test_nothing_beyond_the_tail_or_in_another_ledger() -> None:
    cache = cache_with(7, range(0, 10))
    assert read_cached(Position(7, 5), cache, Position(7, 6), 100) == []  # not confirmed yet
    assert read_cached(Position(8, -1), cache, Position(7, 3), 100) == []  # older ledger: the loop reads it
    assert read_cached(Position(7, -1), cache, Position(7, 0), 100) == []  # nothing confirmed
