"""Entry storage of a node: entry logs + index + write cache, off the ack path.

Owns: where every durable entry lives after the journal acked it, the bounded
in-memory write cache, background appends to entry logs, flushes for
checkpoints, and reclaiming logs of deleted ledgers (docs/decisions/0002).
Runs on the event-loop thread; file work goes to one entry-log write thread
(in submission order) and a small read pool.
Rules:
- ``append`` is called only for entries already durable in the journal; it
  never blocks: bytes are queued and written by the background thread;
- an entry stays in the cache at least until its bytes are in the log file,
  so every indexed entry is readable at every moment;
- ``flush(sync=True)`` returns the log position it made durable (with index
  files of sealed logs); only then may the journal before it be trimmed;
- a sealed log whose ledgers are all deleted is removed (logs that are only
  partly dead are kept: no compaction).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
from array import array
from collections import deque
from pathlib import Path

from storage.node.entry_index import EntryIndex, decode_index_file
from storage.node.entry_log import (
    LOG_MAGIC,
    REC_LEN,
    EntryLogWriter,
    FlushJob,
    idx_path,
    list_log_ids,
    log_path,
    read_at,
    scan_log,
)
from storage.node.journal_io import Buffer

log = logging.getLogger("folio.storage.entries")

LOG_ROTATE_BYTES = 64 * 1024 * 1024
CACHE_MAX_BYTES = 64 * 1024 * 1024
FLUSH_BYTES = 1024 * 1024
UNFLUSHED_MAX_BYTES = 128 * 1024 * 1024  # beyond this the node refuses adds (overloaded)

Key = tuple[int, int]
Location = tuple[int, int, int]  # log id, offset, length
_LEN_PACK = REC_LEN.pack


class EntryStore:
    def __init__(
        self,
        directory: Path,
        rotate_bytes: int = LOG_ROTATE_BYTES,
        cache_max_bytes: int = CACHE_MAX_BYTES,
        flush_bytes: int = FLUSH_BYTES,
        unflushed_max_bytes: int = UNFLUSHED_MAX_BYTES,
    ) -> None:
        self.directory = directory
        self.rotate_bytes = rotate_bytes
        self.cache_max_bytes = cache_max_bytes
        self.flush_bytes = flush_bytes
        self.unflushed_max_bytes = unflushed_max_bytes
        self.index = EntryIndex()
        self._writer = EntryLogWriter(directory)
        self._write_exec = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="entrylog-write")
        self._read_exec = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="entrylog-read")
        self._log_ledgers: dict[int, set[int]] = {}
        self._active_id = 1
        self._active_size = len(LOG_MAGIC)
        self._active_idx = array("q")
        self._sealed_unindexed: dict[int, array] = {}
        self._pending: list[tuple[int, list[Buffer]]] = []
        self._pending_buffers: list[Buffer] | None = None  # the active log's, in _pending
        self._pending_bytes = 0
        self._unwritten_bytes = 0  # queued or being written
        self._cache: dict[Key, tuple[int, Buffer]] = {}
        self._order: deque[tuple[int, list[Key], int]] = deque()  # (seq, keys, bytes) per batch
        self._batch_keys: list[Key] = []
        self._batch_bytes = 0
        self._cache_bytes = 0
        self._seq = 1  # batch number of the batch being appended
        self._written_seq = 0  # every batch <= this is in the log files
        self._read_fds: dict[int, int] = {}
        self._reading: dict[int, int] = {}
        self._dead: set[int] = set()
        self.bytes_appended = 0

    # ------------------------------------------------------------ start-up

    def load(self, mark: tuple[int, int] | None) -> None:
        """Rebuild the index from disk; ``mark`` = (log id, size) of the last checkpoint.
        Logs (or bytes) beyond the mark are dropped: the journal replays them."""
        for log_id in list_log_ids(self.directory):
            path = log_path(self.directory, log_id)
            if mark is None or log_id > mark[0]:
                self._writer.delete(log_id)
                continue
            if log_id == mark[0]:
                records = array("q")
                for rec in scan_log(path, mark[1]):
                    records.extend(rec)
                os.truncate(path, mark[1])
                fd = os.open(path, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
                self._active_id, self._active_size, self._active_idx = log_id, mark[1], records
            else:
                loaded = decode_index_file(idx_path(self.directory, log_id))
                if loaded is None:
                    log.warning("entry log %d has no valid index file: scanning it", log_id)
                    loaded = array("q")
                    for rec in scan_log(path):
                        loaded.extend(rec)
                    self._sealed_unindexed[log_id] = loaded
                records = loaded
            ledgers = self._log_ledgers.setdefault(log_id, set())
            for i in range(0, len(records), 4):
                ledger_id, entry_id, offset, length = records[i : i + 4]
                self.index.put(ledger_id, entry_id, log_id, offset, length)
                ledgers.add(ledger_id)
        if mark is None or mark[0] not in self._log_ledgers:
            existing = list_log_ids(self.directory)
            self._active_id = max([*existing, mark[0] if mark else 0]) + 1
            self._active_size = len(LOG_MAGIC)

    # ------------------------------------------------------------ writes

    def append(self, ledger_id: int, entry_id: int, data: Buffer) -> None:
        """Store a durable entry (called in journal order, on the loop thread).
        Cheap on purpose: bytes are queued for the log thread, the entry is
        indexed and cached; eviction order is kept per batch (``end_batch``)."""
        length = len(data)
        log_id = self._active_id
        offset = self._active_size + 4
        pending = self._pending_buffers
        if pending is None:
            pending = self._start_pending(log_id)
        pending.append(_LEN_PACK(length))
        pending.append(data)
        self._active_size = offset + length
        self.index.put(ledger_id, entry_id, log_id, offset, length)
        self._active_idx.extend((ledger_id, entry_id, offset, length))
        key = (ledger_id, entry_id)
        self._cache[key] = (self._seq, data)
        self._batch_keys.append(key)
        self._batch_bytes += length
        if self._active_size >= self.rotate_bytes:
            self._seal_active()

    def end_batch(self) -> None:
        """Close the current batch of appends: account it, maybe start a write."""
        if not self._close_batch():
            return
        if self._pending_bytes >= self.flush_bytes:
            self._submit(sync=False)
        elif self._cache_bytes > self.cache_max_bytes:
            self._evict()

    def _close_batch(self) -> bool:
        if not self._batch_keys:
            return False
        grown = self._batch_bytes + REC_LEN.size * len(self._batch_keys)
        self._order.append((self._seq, self._batch_keys, self._batch_bytes))
        self._cache_bytes += self._batch_bytes
        self.bytes_appended += self._batch_bytes
        self._pending_bytes += grown
        self._unwritten_bytes += grown
        self._batch_keys = []
        self._batch_bytes = 0
        self._seq += 1
        return True

    def _start_pending(self, log_id: int) -> list[Buffer]:
        buffers: list[Buffer] = []
        self._pending.append((log_id, buffers))
        self._pending_buffers = buffers
        return buffers

    def _seal_active(self) -> None:
        log_id = self._active_id
        records = self._active_idx
        self._sealed_unindexed[log_id] = records
        self._log_ledgers[log_id] = {lid for lid in set(records[0::4]) if self.index.has_ledger(lid)}
        self._active_idx = array("q")
        self._active_id = log_id + 1
        self._active_size = len(LOG_MAGIC)
        self._pending_buffers = None

    @property
    def overloaded(self) -> bool:
        """Entry-log writes are too far behind: refuse new adds until they catch up."""
        return self._unwritten_bytes > self.unflushed_max_bytes

    def _submit(self, sync: bool) -> asyncio.Future[None]:
        self._close_batch()
        job = FlushJob(self._pending, sync=sync)
        if sync:
            job.sealed = self._sealed_unindexed
            self._sealed_unindexed = {}
        self._pending = []
        self._pending_buffers = None
        written, self._pending_bytes = self._pending_bytes, 0
        seq = self._seq - 1
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self._write_exec, self._writer.run, job)
        future.add_done_callback(lambda _f: self._written(seq, written))
        return future

    def _written(self, seq: int, written: int) -> None:
        self._written_seq = max(self._written_seq, seq)
        self._unwritten_bytes -= written
        self._evict()

    async def flush(self, sync: bool = True) -> tuple[int, int]:
        """Write everything appended so far; with ``sync`` make it durable.
        Returns the (log id, size) position covered."""
        position = (self._active_id, self._active_size)
        await self._submit(sync)
        return position

    # ------------------------------------------------------------ cache

    def _evict(self) -> None:
        """Drop the oldest written batches while the cache is over its bound."""
        order, cache = self._order, self._cache
        while order and self._cache_bytes > self.cache_max_bytes and order[0][0] <= self._written_seq:
            seq, batch_keys, nbytes = order.popleft()
            self._cache_bytes -= nbytes
            for key in batch_keys:
                held = cache.get(key)
                if held is not None and held[0] == seq:
                    del cache[key]

    @property
    def cache_bytes(self) -> int:
        return self._cache_bytes

    # ------------------------------------------------------------ reads

    def cached(self, ledger_id: int, entry_id: int) -> Buffer | None:
        held = self._cache.get((ledger_id, entry_id))
        return held[1] if held is not None else None

    def locate(self, ledger_id: int, entry_id: int) -> Location | None:
        return self.index.get(ledger_id, entry_id)

    async def read_files(self, locations: list[Location]) -> list[bytes]:
        """Read entries from log files (not cached ones) on the read pool."""
        logs = {loc[0] for loc in locations}
        fds: dict[int, int] = {}
        for log_id in logs:
            fd = self._read_fds.get(log_id)
            if fd is None:
                fd = self._read_fds[log_id] = os.open(log_path(self.directory, log_id), os.O_RDONLY)
            fds[log_id] = fd
            self._reading[log_id] = self._reading.get(log_id, 0) + 1
        try:
            loop = asyncio.get_running_loop()
            jobs = [(fds[log_id], offset, length) for log_id, offset, length in locations]
            return await loop.run_in_executor(self._read_exec, _read_many, jobs)
        finally:
            for log_id in logs:
                self._reading[log_id] -= 1
                if not self._reading[log_id]:
                    del self._reading[log_id]
                    if log_id in self._dead:
                        self._close_read_fd(log_id)

    def _close_read_fd(self, log_id: int) -> None:
        self._dead.discard(log_id)
        fd = self._read_fds.pop(log_id, None)
        if fd is not None:
            os.close(fd)

    # ------------------------------------------------------------ reclaim

    def delete_ledger(self, ledger_id: int) -> list[int]:
        """Forget a deleted ledger; returns the log ids that became reclaimable."""
        self.index.delete_ledger(ledger_id)
        cache = self._cache
        for key in [key for key in cache if key[0] == ledger_id]:
            del cache[key]  # its bytes leave the accounting when their batch is evicted
        dead = []
        for log_id, ledgers in self._log_ledgers.items():
            ledgers.discard(ledger_id)
            if not ledgers and self._reclaimable(log_id):
                dead.append(log_id)
        return dead

    def _reclaimable(self, log_id: int) -> bool:
        pending = any(pid == log_id for pid, _ in self._pending)
        return log_id != self._active_id and log_id not in self._sealed_unindexed and not pending

    def reclaimable_logs(self) -> list[int]:
        return [lid for lid, ledgers in self._log_ledgers.items() if not ledgers and self._reclaimable(lid)]

    async def reclaim(self, log_ids: list[int]) -> None:
        """Delete dead logs (after every write queued before them)."""
        for log_id in log_ids:
            if self._log_ledgers.get(log_id):
                continue  # a ledger came back (e.g. re-added) in the meantime
            self._log_ledgers.pop(log_id, None)
            if log_id in self._reading:
                self._dead.add(log_id)
            else:
                self._close_read_fd(log_id)
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(self._write_exec, self._writer.delete, log_id)
            log.info("reclaimed entry log %d", log_id)

    def log_ids(self) -> list[int]:
        return sorted(self._log_ledgers)

    def close(self) -> None:
        self._write_exec.shutdown(wait=True)
        self._read_exec.shutdown(wait=True)
        self._writer.close()
        for fd in self._read_fds.values():
            os.close(fd)
        self._read_fds.clear()


def _read_many(jobs: list[tuple[int, int, int]]) -> list[bytes]:
    return [read_at(fd, offset, length) for fd, offset, length in jobs]
