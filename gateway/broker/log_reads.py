"""Reading a managed log's entries: the entry cache first, then the storage nodes (asyncio shell).

Owns: ``LedgerReaders``, the bounded set of open readers of a log's ledgers
(least recently used closed first) with the log's read-ahead, and
``read_entries``. Rules (docs/architecture.md §4): a read never goes past the last
confirmed entry (the layout's end) nor crosses into the next ledger in one
call; recent entries come from the cache, older ones from the read-ahead or
else the storage nodes, fetched a read-ahead's worth at a time
(``read_ahead.ReadAhead``); the open ledger is read up to its writer's
last-add-confirmed.
"""

from __future__ import annotations

from collections import OrderedDict

from coordination.clock import Clock
from gateway.broker.cache_budget import CacheBudget
from gateway.broker.log_layout import LedgerLayout
from gateway.broker.log_state import EntryCache
from gateway.broker.read_ahead import ReadAhead
from storage.client.api import LedgerClient
from storage.client.reader import LedgerReader
from storage.client.writer import LedgerWriter
from storage.formats.positions import Position

READERS_MAX = 16  # open readers of older ledgers kept per log


class LedgerReaders:
    def __init__(
        self,
        client: LedgerClient,
        clock: Clock,
        budget: CacheBudget | None = None,
        readers_max: int = READERS_MAX,
    ) -> None:
        self._client = client
        self._clock = clock
        self._readers_max = readers_max
        self._readers: OrderedDict[int, LedgerReader] = OrderedDict()
        self.ahead = ReadAhead(budget=budget)

    async def get(self, ledger_id: int, writer: LedgerWriter | None) -> LedgerReader:
        if writer is not None and ledger_id == writer.ledger_id:
            return LedgerReader(
                writer.metadata,
                self._client.metadata,
                self._client.pool,
                self._clock,
                lac=writer.last_add_confirmed,
            )
        reader = self._readers.get(ledger_id)
        if reader is None:
            reader = await self._client.open(ledger_id)
            self._readers[ledger_id] = reader
            while len(self._readers) > self._readers_max:
                _, old = self._readers.popitem(last=False)
                await old.close()
        else:
            self._readers.move_to_end(ledger_id)
        return reader

    async def drop(self, ledger_id: int) -> None:
        reader = self._readers.pop(ledger_id, None)
        if reader is not None:
            await reader.close()

    async def close(self) -> None:
        for reader in self._readers.values():
            await reader.close()
        self._readers.clear()
        self.ahead.clear()


async def read_entries(
    layout: LedgerLayout,
    cache: EntryCache,
    readers: LedgerReaders,
    writer: LedgerWriter | None,
    start: Position,
    max_entries: int,
) -> list[tuple[Position, bytes]]:
    """Confirmed entries from ``start`` (inclusive) on, at most ``max_entries``,
    never crossing into the next ledger in one call."""
    first = layout.next_position(Position(start.ledger_id, start.entry_id - 1))
    if first is None:
        return []
    ledger_id = first.ledger_id
    count = next((n for lid, n in layout.ledgers if lid == ledger_id), 0)
    last_entry = min(count - 1, first.entry_id + max_entries - 1)
    out: list[tuple[Position, bytes]] = []
    entry_id = first.entry_id
    ahead = readers.ahead
    while entry_id <= last_entry:  # the caches first
        position = Position(ledger_id, entry_id)
        payload = cache.get(position)
        if payload is None:
            payload = ahead.get(position)
            if payload is None:
                break
        out.append((position, payload))
        entry_id += 1
    if entry_id <= last_entry and not out:
        reader = await readers.get(ledger_id, writer)
        fetch_last = min(count - 1, entry_id + ahead.fetch_count(last_entry - entry_id + 1) - 1)
        payloads = await reader.read_range(entry_id, fetch_last, ahead.fetch_bytes)
        ahead.fetched(ledger_id, entry_id, payloads)
        wanted = payloads[: last_entry - entry_id + 1]
        out.extend((Position(ledger_id, entry_id + i), p) for i, p in enumerate(wanted))
    return out


def read_cached(
    last_confirmed: Position, cache: EntryCache, start: Position, max_entries: int
) -> list[tuple[Position, bytes]]:
    """Confirmed entries from ``start`` on as far as they are cached, without waiting:
    [] unless ``start`` is a confirmed entry of the open (last) ledger."""
    last = last_confirmed
    if start.ledger_id != last.ledger_id or not 0 <= start.entry_id <= last.entry_id:
        return []
    out: list[tuple[Position, bytes]] = []
    for entry_id in range(start.entry_id, min(last.entry_id, start.entry_id + max_entries - 1) + 1):
        position = Position(start.ledger_id, entry_id)
        payload = cache.get(position)
        if payload is None:
            break
        out.append((position, payload))
    return out
