"""The stored-figures shell (gateway.api.stored_views) over an in-memory store and fake ledger reads.

Shows: one read of the records per prefix within the cache time; topics a gateway has
loaded are skipped; a ledger a list shows open is read once (then cached) from its
metadata when closed, else from its nodes' last add confirmed, at most
``OPEN_READS_MAX`` per call; one that cannot be read leaves the topic's figures marked
not exact.
"""

from __future__ import annotations

import orjson

from coordination import keys
from coordination.clock import ManualClock
from coordination.memory_store import MemoryStore
from gateway.api import stored_views
from gateway.api.stored_views import StoredFigures, path_prefix
from storage.errors import StorageError
from storage.formats.log_record import LedgerInfo, encode_state
from storage.types import LedgerMetadata, LedgerState, Segment


class FakeReads:
    def __init__(self, closed: dict[int, int], open_: dict[int, int]) -> None:
        self.closed, self.open = closed, open_
        self.asked: list[int] = []

    async def metadata_of(self, ledger_id: int) -> LedgerMetadata:
        self.asked.append(ledger_id)
        if ledger_id in self.closed:
            n = self.closed[ledger_id]
            segments = (Segment(0, ("n1",)),)
            return LedgerMetadata(ledger_id, 1, 1, 1, LedgerState.CLOSED, segments, n - 1, 100 * n)
        if ledger_id in self.open:
            return LedgerMetadata(ledger_id, 1, 1, 1, LedgerState.OPEN, (Segment(0, ("n1",)),))
        raise StorageError("no such ledger")

    async def confirmed_entries(self, ledger_id: int) -> int:
        return self.open[ledger_id]


async def _setup(store: MemoryStore, count: int) -> None:
    for i in range(count):
        path = f"persistent/t/ns/topic{i}"
        ledgers = [LedgerInfo(10 * i + 1, 5, 500, 1_000, 5), LedgerInfo(10 * i + 2)]  # the second still open
        await store.put(keys.managed_log(path), encode_state(ledgers, 1, {}))
        snapshot = {"version": 1, "markDelete": [-1, -1], "ranges": [], "batches": []}
        record = {"cursor": snapshot, "type": "Shared", "createdMs": 2}
        await store.put(keys.cursor(path, "s"), orjson.dumps(record))


async def test_reads_bounded_cached_and_marked() -> None:
    clock = ManualClock(10_000)
    store = MemoryStore(clock)
    await _setup(store, 3)
    reads = FakeReads(closed={2: 3}, open_={12: 4})  # topic2's open ledger 22 cannot be read
    stored = StoredFigures(store, reads, clock)
    got, truncated = await stored.topics(path_prefix("t", "ns"), {"persistent://t/ns/topic1x"})
    assert not truncated and set(got) == {f"persistent://t/ns/topic{i}" for i in range(3)}
    backlog = {name.rsplit("/", 1)[-1]: t.summary["msgBacklog"] for name, t in got.items()}
    assert backlog == {"topic0": 5 + 3, "topic1": 5 + 4, "topic2": 5}
    assert [got[f"persistent://t/ns/topic{i}"].summary["exact"] for i in range(3)] == [True, True, False]
    assert got["persistent://t/ns/topic0"].summary["storageSize"] == 500 + 300
    asked = len(reads.asked)
    again, _ = await stored.topics(path_prefix("t", "ns"), {"persistent://t/ns/topic0"})  # loaded now
    assert "persistent://t/ns/topic0" not in again
    assert reads.asked[asked:] == [22]  # only the unreadable one is asked again
    await store.put(keys.cursor("persistent/t/ns/topic1", "s2"), b"{}")  # within the cache time: not seen
    assert (await stored.topics(path_prefix("t", "ns"), set()))[0]["persistent://t/ns/topic1"].summary[
        "subscriptionCount"
    ] == 1


async def test_open_ledger_reads_per_call_are_bounded() -> None:
    clock = ManualClock(10_000)
    store = MemoryStore(clock)
    await _setup(store, 5)
    reads = FakeReads(closed={}, open_={10 * i + 2: 1 for i in range(5)})
    setattr(stored_views, "OPEN_READS_MAX", 2)  # noqa: B010 - the bound under test
    try:
        got, _ = await StoredFigures(store, reads, clock).topics("", set())
    finally:
        stored_views.OPEN_READS_MAX = 64
    assert len(reads.asked) == 2 and sum(t.summary["exact"] for t in got.values()) == 2


async def test_unchanged_topics_are_not_computed_again() -> None:
    clock = ManualClock(10_000)
    store = MemoryStore(clock)
    await _setup(store, 4)
    computed: list[str] = []
    real = stored_views.stored_topic

    def counting(name: str, *args: object) -> object:
        computed.append(name)
        return real(name, *args)  # type: ignore[arg-type]

    stored_views.stored_topic = counting  # type: ignore[assignment]
    try:
        stored = StoredFigures(store, FakeReads(closed={}, open_={10 * i + 2: 1 for i in range(4)}), clock)
        await stored.topics("", set())
        assert len(computed) == 4
        clock.advance(stored_views.CACHE_MS)  # the records are read again; one topic's changed
        await store.put(keys.cursor("persistent/t/ns/topic3", "s"), b"{}")
        await stored.topics("", set())
        assert computed[4:] == ["persistent://t/ns/topic3"]
    finally:
        stored_views.stored_topic = real
