"""Catching-up reads: ``ReadAhead`` sizing and bounds, and ``read_entries`` going to
the storage nodes once per read-ahead, not once per entry asked for."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.broker.log_layout import LedgerLayout
from gateway.broker.log_reads import read_entries
from gateway.broker.log_state import EntryCache
from gateway.broker.read_ahead import ReadAhead
from storage.formats.positions import Position

pytestmark = pytest.mark.unit


def test_first_fetch_then_sized_by_the_last_fetch() -> None:
    ahead = ReadAhead(fetch_bytes=1000, bytes_max=10_000, entries_max=50, first_fetch_entries=8)
    assert ahead.fetch_count(1) == 8
    assert ahead.fetch_count(20) == 20  # never fewer than asked
    ahead.fetched(1, 0, [b"x" * 100] * 4)
    assert ahead.fetch_count(1) == 10  # 1000 bytes of 100-byte entries
    ahead.fetched(1, 4, [b"x" * 10] * 4)
    assert ahead.fetch_count(1) == 50  # 100 would fit: capped at entries_max
    ahead.fetched(1, 8, [b"x" * 5000])
    assert ahead.fetch_count(1) == 1  # larger than a fetch: one at a time


def test_keeps_within_bytes_max_dropping_the_oldest_fetched() -> None:
    ahead = ReadAhead(fetch_bytes=100, bytes_max=300, entries_max=10, first_fetch_entries=1)
    ahead.fetched(3, 0, [b"a" * 100, b"b" * 100])
    ahead.fetched(3, 2, [b"c" * 100, b"d" * 100])
    assert ahead.get(Position(3, 0)) is None  # 400 bytes fetched: the oldest went
    assert [ahead.get(Position(3, e)) for e in (1, 2, 3)] == [b"b" * 100, b"c" * 100, b"d" * 100]
    ahead.fetched(3, 3, [b"e" * 50])  # fetched again: replaced and counted once (250 bytes held) ...
    ahead.fetched(3, 4, [b"f" * 50])  # ... so 300 fit and nothing goes
    assert ahead.get(Position(3, 1)) == b"b" * 100
    assert ahead.get(Position(3, 3)) == b"e" * 50 and ahead.get(Position(3, 4)) == b"f" * 50
    ahead.fetched(3, 5, [b"g"])
    assert ahead.get(Position(3, 1)) is None and ahead.get(Position(3, 2)) == b"c" * 100


class Reader:
    def __init__(self, entries: dict[int, bytes]) -> None:
        self.entries = entries
        self.ranges: list[tuple[int, int]] = []
        self.bounds: list[int | None] = []

    async def read_range(self, first: int, last: int, max_bytes: int | None = None) -> list[bytes]:
        """As LedgerReader.read_range: with ``max_bytes``, stops once that many arrived."""
        self.ranges.append((first, last))
        self.bounds.append(max_bytes)
        out: list[bytes] = []
        for e in range(first, last + 1):
            if max_bytes is not None and sum(map(len, out)) >= max_bytes:
                break
            out.append(self.entries[e])
        return out


class Readers:
    def __init__(self, reader: Reader, ahead: ReadAhead) -> None:
        self.reader = reader
        self.ahead = ahead

    async def get(self, ledger_id: int, writer: Any) -> Reader:
        return self.reader


def test_one_entry_at_a_time_costs_one_fetch_per_read_ahead() -> None:
    entries = {e: f"entry-{e:04d}".encode() * 10 for e in range(100)}  # 100 bytes each
    reader = Reader(entries)
    readers: Any = Readers(reader, ReadAhead(fetch_bytes=1000, bytes_max=5000, first_fetch_entries=4))
    layout = LedgerLayout([(5, 100)])
    cache = EntryCache(1 << 20)

    async def main() -> list[tuple[Position, bytes]]:
        got = []
        for e in range(100):
            one = await read_entries(layout, cache, readers, None, Position(5, e), 1)
            assert len(one) == 1
            got += one
        return got

    got = asyncio.run(main())
    assert got == [(Position(5, e), entries[e]) for e in range(100)]
    # 4 entries before the size is known, then 10 (1000 bytes) a fetch; never past the ledger's end
    assert reader.ranges[:3] == [(0, 3), (4, 13), (14, 23)]
    assert len(reader.ranges) == 11 and reader.ranges[-1] == (94, 99)


def test_a_read_asks_for_at_least_what_it_wants_and_gets_only_that() -> None:
    entries = {e: b"y" * 100 for e in range(30)}
    reader = Reader(entries)
    readers: Any = Readers(reader, ReadAhead(fetch_bytes=200, bytes_max=5000, first_fetch_entries=1))
    layout = LedgerLayout([(5, 30)])
    got = asyncio.run(read_entries(layout, EntryCache(1 << 20), readers, None, Position(5, 2), 6))
    assert reader.ranges == [(2, 7)] and reader.bounds == [200]
    assert [p.entry_id for p, _ in got] == [2, 3]  # what the fetch's byte bound let through


def test_a_fetch_stays_near_its_bytes_when_entry_sizes_jump() -> None:
    entries = {e: b"s" * 100 if e < 20 else b"L" * 100_000 for e in range(60)}
    reader = Reader(entries)
    readers: Any = Readers(reader, ReadAhead(fetch_bytes=1000, bytes_max=1 << 20, first_fetch_entries=10))
    layout = LedgerLayout([(5, 60)])

    async def main() -> None:
        for e in range(30):
            assert len(await read_entries(layout, EntryCache(1 << 20), readers, None, Position(5, e), 1)) == 1

    asyncio.run(main())
    assert set(reader.bounds) == {1000}  # every fetch is bounded ...
    # ... so once the entries grew, a fetch that asked for 10 took one entry, not 1 MB,
    # and the fetches after it ask for one entry at a time
    assert reader.ranges[2:5] == [(20, 29), (21, 21), (22, 22)]
