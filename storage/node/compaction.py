"""Journal compaction: copy the live entries of mostly dead journal files forward.

Owns: one compaction round at a time (``Compactor.run_round``, driven by the
service's compaction loop; the compactor takes its node as a ``CompactionPort``).
The journal files are the only copy of entries and a file is deleted only when
no live ledger has entries in it, so one long-lived ledger would otherwise keep
every file it touched, however dead the rest
(BookKeeper compacts its entry logs for the same reason).
Rules (docs/decisions/0002, "Compaction"):
- a candidate is a sealed, indexed journal file behind the last checkpoint's mark
  whose live entry bytes are below ``threshold`` of its entry bytes
  (``EntryStore.compaction_candidates``), the emptiest first;
- its live entries (those the index points at) are read, their crc32c verified,
  and written again as ordinary ADD records through the journal (group commit,
  fdatasync); an entry's index location moves to its copy only in the durable
  callback, and only if it still points at the old place (the ledger may have
  been deleted meanwhile);
- the file gives up its ledgers only after every copy is durable; the usual
  reclaim then deletes it. A crash before that leaves two copies: start-up
  indexes the newer one and counts the older as dead, so the next round frees
  the file without copying again;
- a corrupt entry stops that file's compaction (the file stays; logged);
- a read-only node (disk nearly full) does not compact: the copies are written
  before the space they free (``NodeService.compact``);
- a round copies at most ``bytes_per_round`` (but always the first file whole);
  at most one chunk of copies waits in the journal at a time, and none while
  its queue is full, so client adds are not crowded out.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any, Protocol

from storage import wire
from storage.node.entry_store import EntryStore, Location4
from storage.node.journal_io import Buffer, add_record_head
from storage.node.metrics import NodeMetrics

log = logging.getLogger("folio.storage.compaction")

COMPACTION_THRESHOLD = 0.5  # files with less than this share of live bytes are compacted
COMPACTION_INTERVAL_S = 30.0
COMPACTION_BYTES_PER_ROUND = 64 * 1024 * 1024
RELOCATE = 3  # the durable-callback kind of a compaction copy (not a journal record type)
CHUNK_BYTES = 1 << 20  # read and copied this much at a time ...
CHUNK_ENTRIES = 256  # ... or this many entries
FULL_WAIT_S = 0.01  # journal queue full: try again after this


class JournalPort(Protocol):
    """Where the copies are written (the node's journal)."""

    def submit(self, parts: tuple[Buffer, ...], size: int, cookie: Any) -> bool: ...


class CompactionPort(Protocol):
    """What a compaction round uses of its node (``NodeService`` is one): the entry
    store, the journal (once started) and the metrics."""

    @property
    def entries(self) -> EntryStore: ...

    @property
    def journal(self) -> JournalPort: ...

    @property
    def metrics(self) -> NodeMetrics: ...


class Compactor:
    def __init__(self, service: CompactionPort, threshold: float, bytes_per_round: int) -> None:
        self.service = service
        self.threshold = threshold
        self.bytes_per_round = bytes_per_round
        self.copied_bytes = 0  # totals since start (metrics, tests)
        self.compacted_files = 0

    async def run_round(self) -> int:
        """Compact candidate files until ``bytes_per_round`` were copied; returns the bytes copied."""
        copied = 0
        for file_id in self.service.entries.compaction_candidates(self.threshold):
            if copied >= self.bytes_per_round:
                break
            done = await self.compact_file(file_id)
            if done is not None:
                copied += done
        return copied

    async def compact_file(self, file_id: int) -> int | None:
        """Copy the live entries of ``file_id`` forward; None if it stays as it is."""
        entries = self.service.entries
        live, ledgers = await entries.live_records(file_id)
        if not ledgers:
            return None
        copied = 0
        start = 0
        while start < len(live):
            end, size = start, 0
            while end < len(live) and end - start < CHUNK_ENTRIES and (size < CHUNK_BYTES or end == start):
                size += live[end][3]
                end += 1
            chunk = live[start:end]
            datas = await entries.read_files([(file_id, offset, length) for _, _, offset, length in chunk])
            if not all(wire.verify_entry(data) for data in datas):
                log.error("journal file %d: a live entry fails its crc; not compacting the file", file_id)
                return None
            await self._copy(file_id, chunk, datas)
            copied += size
            start = end
        entries.release(file_id, ledgers)
        self.copied_bytes += copied
        self.compacted_files += 1
        self.service.metrics.on_compacted(copied)
        log.info(
            "compacted journal file %d: %d live entries (%d bytes) copied forward", file_id, len(live), copied
        )
        return copied

    async def _copy(self, file_id: int, chunk: list[Location4], datas: list[bytes]) -> None:
        """Write ``chunk`` again through the journal; returns once every copy is durable."""
        service = self.service
        entries = service.entries
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        remaining = len(chunk)

        def durable(record: Location4, location: int) -> None:
            nonlocal remaining
            ledger_id, entry_id, offset, length = record
            entries.relocated(ledger_id, entry_id, (file_id, offset, length), location, length)
            remaining -= 1
            if not remaining and not done.done():
                done.set_result(None)

        for record, data in zip(chunk, datas, strict=True):
            head = add_record_head(data)
            cookie = (functools.partial(durable, record), 0, RELOCATE)
            while not service.journal.submit((head, data), len(head) + len(data), cookie):
                await asyncio.sleep(FULL_WAIT_S)  # cancelled by the service's stop
        await done
