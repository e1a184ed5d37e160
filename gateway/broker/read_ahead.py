"""Read-ahead of catching-up reads (pure).

Owns: ``ReadAhead``, the entries of a log fetched from the storage nodes, kept
for the reads that follow, and how many entries the next fetch asks for.
Rules (docs/architecture.md §4: catching-up consumers read ahead from the storage nodes;
Pulsar's managed ledger keeps the entries it read in its cache the same way):
- a read that misses the caches fetches about ``fetch_bytes`` of entries (one
  range-read reply), judged by the average size of the entries of the last
  fetch (``first_fetch_entries`` before any), never fewer than the read asked
  for and at most ``entries_max`` (no more than a subscription's read of that
  many entries held before); the reader stops a fetch once ``fetch_bytes``
  arrived (``LedgerReader.read_range``'s ``max_bytes``), so entries larger than
  the last fetch's do not make a fetch larger. So a consumer taking one entry
  per read costs one round trip to a storage node per ``fetch_bytes``, not one
  per entry;
- at most ``bytes_max`` are kept, the oldest fetched dropped first (a reader
  moves forward, so what it passed goes first), and fewer when the gateway's
  ``CacheBudget`` needs the room.
"""

from __future__ import annotations

from gateway.broker.cache_budget import CacheBudget
from gateway.broker.log_state import EntryCache
from storage.formats.positions import Position

FETCH_BYTES = 4 * 1024 * 1024  # one range-read reply (storage.wire.RANGE_READ_BYTES_MAX)
BYTES_MAX = 16 * 1024 * 1024  # kept per log
ENTRIES_MAX = 100  # per fetch, as a subscription's read (dispatcherMaxReadBatchSize)
FIRST_FETCH_ENTRIES = 32  # before an entry size is known


class ReadAhead:
    def __init__(
        self,
        fetch_bytes: int = FETCH_BYTES,
        bytes_max: int = BYTES_MAX,
        entries_max: int = ENTRIES_MAX,
        first_fetch_entries: int = FIRST_FETCH_ENTRIES,
        budget: CacheBudget | None = None,
    ) -> None:
        assert 0 < fetch_bytes <= bytes_max and entries_max >= 1 and first_fetch_entries >= 1
        self._fetch_bytes = fetch_bytes
        self._entries_max = entries_max
        self._first_fetch_entries = first_fetch_entries
        self._entries = EntryCache(bytes_max, budget)
        self._entry_bytes = 0  # average size of the entries of the last fetch (0: none yet)

    @property
    def fetch_bytes(self) -> int:
        return self._fetch_bytes

    def get(self, position: Position) -> bytes | None:
        return self._entries.get(position)

    def clear(self) -> None:
        self._entries.clear()

    def fetch_count(self, asked: int) -> int:
        """Entries the next fetch from the storage nodes should ask for (the caller
        also stops at the end of the ledger)."""
        known = self._entry_bytes
        worth = self._fetch_bytes // known if known else self._first_fetch_entries
        return max(asked, min(self._entries_max, max(1, worth)))

    def fetched(self, ledger_id: int, first_entry: int, payloads: list[bytes]) -> None:
        """Entries ``first_entry``, ``first_entry + 1``, ... of ``ledger_id`` came from the
        storage nodes: keep them, within the byte bound."""
        for offset, payload in enumerate(payloads):
            self._entries.put(Position(ledger_id, first_entry + offset), payload)
        if payloads:
            self._entry_bytes = max(1, sum(map(len, payloads)) // len(payloads))
