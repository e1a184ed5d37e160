"""Message search: filters, server-side caps, resume positions and one page's scan.

Shows: each filter (key, property, payload text, JSON field, publish time) and
their bad forms (400 with the form to use); the caps hold whatever is asked; a
page stops at its byte bound, its match limit (resuming inside a batch entry
without losing or repeating a message) and at ``before``, and reports what it
scanned. The scan runs over a fake log (unit test); tests/browser/test_dashboard_search.py
runs it against a real cluster.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field

import orjson
import pytest

from gateway.api.admin_search import search_page
from gateway.api.message_search import (
    MATCHES_MAX,
    SCAN_BYTES_MAX,
    TIME_LIMIT_MS_MAX,
    ScanBounds,
    SearchFilter,
    matches,
    parse_resume,
    resume_text,
)
from gateway.broker.log_layout import LedgerLayout
from gateway.meta.errors import InvalidArgument
from storage.formats.entry_format import EntryMessage, encode_entry
from storage.formats.positions import Position


def msg(payload: bytes | dict[str, object], t: int, key: str | None = None, **props: str) -> EntryMessage:
    body = payload if isinstance(payload, bytes) else orjson.dumps(payload)
    return EntryMessage(body, t, "p", t, key.encode() if key else None, properties=props)


def test_filters() -> None:
    order = msg({"order": {"status": "paid", "n": 3, "tags": ["a", "b"]}}, 1_000, key="k1", region="eu")
    assert matches(SearchFilter.parse(), order)
    assert matches(SearchFilter.parse(key="k1"), order) and not matches(SearchFilter.parse(key="k2"), order)
    assert matches(SearchFilter.parse(prop="region=eu"), order)
    assert not matches(SearchFilter.parse(prop="region=us"), order)
    assert matches(SearchFilter.parse(text='"paid"'), order) and not matches(
        SearchFilter.parse(text="PAID"), order
    )
    assert matches(SearchFilter.parse(json_field="order.status=paid"), order)
    assert matches(SearchFilter.parse(json_field="order.n=3"), order)
    assert matches(SearchFilter.parse(json_field="order.tags.1=b"), order)
    assert not matches(SearchFilter.parse(json_field="order.missing=paid"), order)
    assert not matches(SearchFilter.parse(json_field="order.status=paid"), msg(b"not json", 1_000))
    assert matches(SearchFilter.parse(after_ms=1_000, before_ms=1_001), order)
    assert not matches(SearchFilter.parse(before_ms=1_000), order)
    assert not matches(SearchFilter.parse(key="k1", prop="region=us"), order)  # every filter given


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"prop": "region"}, "name=value"),
        ({"json_field": "order.status"}, "dotted.path=value"),
        ({"json_field": "a..b=1"}, "dotted.path=value"),
        ({"after_ms": 5, "before_ms": 5}, "later than after"),
        ({"key": "k" * 2000}, "shorten"),
    ],
)
def test_bad_filters_say_what_to_send(kwargs: dict[str, object], says: str) -> None:
    with pytest.raises(InvalidArgument, match=says):
        SearchFilter.parse(**kwargs)  # type: ignore[arg-type]


def test_caps_and_resume() -> None:
    bounds = ScanBounds.capped(10**12, 10**9, 10**6)
    assert (bounds.max_bytes, bounds.time_limit_ms, bounds.limit) == (
        SCAN_BYTES_MAX,
        TIME_LIMIT_MS_MAX,
        MATCHES_MAX,
    )
    assert parse_resume("3:4") == (Position(3, 4), 0) and parse_resume("3:4:7") == (Position(3, 4), 7)
    assert resume_text(Position(3, 4), 7) == "3:4:7" and resume_text(Position(3, 4)) == "3:4"
    for bad in ("x", "1", "1:-2", "1:2:3:4"):
        with pytest.raises(InvalidArgument, match="ledger:entry"):
            parse_resume(bad)


@dataclass
class FakeLog:
    entries: list[tuple[Position, bytes]]
    layout: LedgerLayout = field(init=False)

    def __post_init__(self) -> None:
        self.layout = LedgerLayout([(1, len(self.entries))])

    async def read(self, start: Position, max_entries: int) -> list[tuple[Position, bytes]]:
        return [(p, b) for p, b in self.entries if p >= start][:max_entries]


@dataclass
class FakeTopic:
    log: FakeLog
    partition: int = -1

    async def first_position_at_or_after(self, timestamp_ms: int) -> Position | None:
        return Position(1, 1) if timestamp_ms > 1_002 else Position(1, 0)


def topic() -> FakeTopic:
    batch = [msg({"n": i}, 1_000 + i, key=f"k{i % 2}") for i in range(3)]  # entry 0: 3 messages
    singles = [[msg({"n": 3}, 1_010, key="k1")], [msg({"n": 4}, 1_020, key="k0")]]
    payloads = [encode_entry(batch), *(encode_entry(m) for m in singles)]
    return FakeTopic(FakeLog([(Position(1, i), p) for i, p in enumerate(payloads)]))


def clock() -> Iterator[float]:
    t = 0.0
    while True:
        yield t
        t += 0.001


def page(
    t: FakeTopic, search: SearchFilter, bounds: ScanBounds, start: str | None = None
) -> dict[str, object]:
    ticks = clock()
    return asyncio.run(search_page(t, search, bounds, start, lambda: next(ticks)))  # type: ignore[arg-type]


def test_page_stops_at_matches_and_resumes_inside_a_batch() -> None:
    t, search = topic(), SearchFilter.parse(key="k0")
    first = page(t, search, ScanBounds(limit=1))
    assert [m["position"] for m in first["messages"]] == ["1:0:0"]  # type: ignore[index]
    assert (first["stoppedBy"], first["next"], first["done"]) == ("matches", "1:0:1", False)
    second = page(t, search, ScanBounds(limit=1), first["next"])  # type: ignore[arg-type]
    assert [m["position"] for m in second["messages"]] == ["1:0:2"]  # type: ignore[index]
    assert second["next"] == "1:1"
    third = page(t, search, ScanBounds(limit=5), second["next"])  # type: ignore[arg-type]
    assert [m["position"] for m in third["messages"]] == ["1:2"]  # type: ignore[index]
    assert (third["stoppedBy"], third["next"], third["done"]) == ("end", None, True)
    assert third["scannedEntries"] == 2 and third["scannedMessages"] == 2


def test_page_stops_at_its_byte_bound_and_at_before() -> None:
    t = topic()
    small = page(t, SearchFilter.parse(), ScanBounds(max_bytes=1, limit=100))
    assert (small["stoppedBy"], small["next"], small["scannedEntries"]) == ("bytes", "1:1", 1)
    assert small["scannedBytes"] == len(t.log.entries[0][1])
    timed = page(t, SearchFilter.parse(after_ms=1_005, before_ms=1_015), ScanBounds(limit=100))
    assert [m["position"] for m in timed["messages"]] == ["1:1"]  # type: ignore[index]
    assert (timed["stoppedBy"], timed["done"]) == ("before", True)
