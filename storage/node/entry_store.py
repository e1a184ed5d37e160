"""Entry storage of a node: the index over the journal files, index files, reads, reclaim.

Owns: where every durable entry lives (inside its ADD record in a journal file:
the journal is the only copy), the per-journal-file index records and live
bytes per ledger, the ``journal/<id>.idx`` files of sealed journal files, the
read fds, and deleting journal files of deleted ledgers (docs/decisions/0002);
for compaction (compaction.py): which sealed files are mostly dead, their live
records, and moving an entry's location to its copy.
Runs on the event-loop thread; file work goes to a small read pool and to one
file thread (index files, deletes), every file call through the ``Disk`` port
(storage/ports.py).
Rules:
- ``put`` is called only for entries already durable in the journal (after the
  fdatasync covering their record), so every indexed entry is readable;
- an index file is written (tmp + fsync + rename, then fsync of the directory)
  for each journal file wholly before a checkpoint's mark, before that
  checkpoint.json is written; a write or fsync error there is fatal;
- a journal file is deleted (with its index file) only when it is wholly before
  the mark of the last *completed* checkpoint, its index file is durable and all
  its ledgers are deleted: never the active file nor the mark's file, so
  restart (which replays from the mark's file) never misses a record. A partly
  dead file becomes deletable once compaction has copied its live entries
  into the journal (durably) and pointed the index at the copies;
- a file's live bytes count each entry whose ledger lives once; an entry written
  again (a recovery re-add, a compaction copy) is taken off its older file at
  start-up (``put_replayed``), at run time only by compaction (``relocated``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import errno
import logging
import os
from array import array
from collections.abc import Iterable
from pathlib import Path

from storage import wire
from storage.errors import ProtocolViolation
from storage.node.entry_index import EntryIndex, decode_index_file, encode_index_file
from storage.node.journal_io import (
    TYPE_ADD,
    fatal,
    index_path,
    journal_path,
    list_journal_ids,
    scan_file,
    write_atomically,
)
from storage.ports import OS_DISK, Disk

log = logging.getLogger("folio.storage.entries")

Location = tuple[int, int, int]  # journal file id, offset of the wire entry, length
Location4 = tuple[int, int, int, int]  # ledger, entry, offset of the wire entry in its file, length
_LOW32 = 0xFFFFFFFF


class EntryStore:
    def __init__(self, directory: Path, disk: Disk = OS_DISK) -> None:
        self.directory = directory  # the journal dir
        self.disk = disk
        self.index = EntryIndex()
        self._file_exec = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="journal-index")
        self._read_exec = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="journal-read")
        # file id -> flat (ledger, entry, offset, length) of files without an index file yet
        self._records: dict[int, array] = {}
        # file id -> live ledger -> bytes of its entries in the file; file id -> all entry bytes
        self._file_ledgers: dict[int, dict[int, int]] = {}
        self._file_bytes: dict[int, int] = {}
        self._indexed: set[int] = set()  # files whose index file is durable
        self._behind_mark = 0  # files with a lower id are wholly before the last completed checkpoint
        self._cur_file = -1
        self._cur_records = array("q")
        self._cur_ledgers: dict[int, int] = {}
        self._read_fds: dict[int, int] = {}
        self._reading: dict[int, int] = {}
        self._dead: set[int] = set()

    # ------------------------------------------------------------ start-up

    def load_sealed(self, mark_file_id: int) -> None:
        """Index the journal files before the checkpoint mark's file: from their index
        files, or by scanning them (crcs verified) when the index file is missing or bad."""
        for file_id in list_journal_ids(self.directory, self.disk):
            if file_id >= mark_file_id:
                break
            records = decode_index_file(index_path(self.directory, file_id), self.disk)
            if records is None:
                log.warning("journal file %d has no valid index file: scanning it", file_id)
                records = scan_adds(journal_path(self.directory, file_id), self.disk)
                self._records[file_id] = records
            else:
                self._indexed.add(file_id)
            self._file_ledgers.setdefault(file_id, {})
            for i in range(0, len(records), 4):
                ledger_id, entry_id, offset, length = records[i : i + 4]
                self._put_loaded(ledger_id, entry_id, file_id << 32 | offset, length)

    def _put_loaded(self, ledger_id: int, entry_id: int, location: int, length: int) -> None:
        """Index an entry found in a sealed file at start-up."""
        file_id = location >> 32
        self._discount_older(ledger_id, entry_id, file_id)
        self.index.put_location(ledger_id, entry_id, location, length)
        usage = self._file_ledgers.setdefault(file_id, {})
        usage[ledger_id] = usage.get(ledger_id, 0) + length
        self._file_bytes[file_id] = self._file_bytes.get(file_id, 0) + length

    def put_replayed(self, ledger_id: int, entry_id: int, location: int, length: int) -> None:
        """``put`` for a record replayed from the journal at start-up."""
        self._discount_older(ledger_id, entry_id, location >> 32)
        self.put(ledger_id, entry_id, location, length)

    def _discount_older(self, ledger_id: int, entry_id: int, file_id: int) -> None:
        """An entry is found again (a compaction copy, a recovery re-add): its copy in an
        older file stops counting as live there."""
        old = self.index.get(ledger_id, entry_id)
        if old is None or old[0] == file_id:
            return
        usage = self._file_ledgers.get(old[0])
        if usage is not None and ledger_id in usage:
            usage[ledger_id] -= old[2]
            if usage[ledger_id] <= 0:
                del usage[ledger_id]

    # ------------------------------------------------------------ writes

    def put(self, ledger_id: int, entry_id: int, location: int, length: int) -> None:
        """Index a durable entry at ``location`` (file id << 32 | offset of the wire entry)."""
        self.index.put_location(ledger_id, entry_id, location, length)
        file_id = location >> 32
        if file_id != self._cur_file:
            self._switch(file_id)
        self._cur_records.extend((ledger_id, entry_id, location & _LOW32, length))
        ledgers = self._cur_ledgers
        ledgers[ledger_id] = ledgers.get(ledger_id, 0) + length
        self._file_bytes[file_id] += length

    def _switch(self, file_id: int) -> None:
        assert file_id not in self._indexed, f"journal file {file_id} is indexed already"
        self._cur_file = file_id
        self._cur_records = self._records.setdefault(file_id, array("q"))
        self._cur_ledgers = self._file_ledgers.setdefault(file_id, {})
        self._file_bytes.setdefault(file_id, 0)

    # ------------------------------------------------------------ checkpoints

    async def write_index_files(self, mark_file_id: int) -> None:
        """Make the index file of every journal file before ``mark_file_id`` durable."""
        sealed: dict[int, array] = {}
        for file_id in list_journal_ids(self.directory, self.disk):
            if file_id < mark_file_id and file_id not in self._indexed:
                sealed[file_id] = self._records.pop(file_id, array("q"))
                self._file_ledgers.setdefault(file_id, {})
                if file_id == self._cur_file:
                    self._cur_file = -1
        if not sealed:
            return
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._file_exec, self._write_index_files, sealed)
        self._indexed.update(sealed)

    def _write_index_files(self, sealed: dict[int, array]) -> None:
        try:
            for file_id, records in sealed.items():
                name = index_path(self.directory, file_id).name
                write_atomically(self.directory, name, encode_index_file(records), self.disk)
        except OSError as exc:
            fatal(f"writing journal index files in {self.directory} failed: {exc!r}")

    def checkpointed(self, mark_file_id: int) -> None:
        """A checkpoint with this mark is durable: files before its file may be reclaimed."""
        self._behind_mark = max(self._behind_mark, mark_file_id)

    # ------------------------------------------------------------ reads

    def locate(self, ledger_id: int, entry_id: int) -> Location | None:
        return self.index.get(ledger_id, entry_id)

    async def read_files(self, locations: list[Location]) -> list[bytes]:
        """pread entries from journal files on the read pool."""
        files = {loc[0] for loc in locations}
        fds: dict[int, int] = {}
        for file_id in files:
            fd = self._read_fds.get(file_id)
            if fd is None:
                path = journal_path(self.directory, file_id)
                fd = self._read_fds[file_id] = self.disk.open(path, os.O_RDONLY)
            fds[file_id] = fd
            self._reading[file_id] = self._reading.get(file_id, 0) + 1
        try:
            loop = asyncio.get_running_loop()
            jobs = [(fds[file_id], offset, length) for file_id, offset, length in locations]
            return await loop.run_in_executor(self._read_exec, _read_many, self.disk, jobs)
        finally:
            for file_id in files:
                self._reading[file_id] -= 1
                if not self._reading[file_id]:
                    del self._reading[file_id]
                    if file_id in self._dead:
                        self._close_read_fd(file_id)

    def _close_read_fd(self, file_id: int) -> None:
        self._dead.discard(file_id)
        fd = self._read_fds.pop(file_id, None)
        if fd is not None:
            self.disk.close(fd)

    # ------------------------------------------------------------ reclaim

    def delete_ledger(self, ledger_id: int) -> list[int]:
        """Forget a deleted ledger; returns the journal file ids that became reclaimable."""
        self.index.delete_ledger(ledger_id)
        for ledgers in self._file_ledgers.values():
            ledgers.pop(ledger_id, None)
        return self.reclaimable_files()

    def _reclaimable(self, file_id: int) -> bool:
        return (
            file_id < self._behind_mark and file_id in self._indexed and not self._file_ledgers.get(file_id)
        )

    def reclaimable_files(self) -> list[int]:
        return sorted(fid for fid in self._indexed if self._reclaimable(fid))

    async def reclaim(self, file_ids: Iterable[int]) -> None:
        """Delete dead journal files and their index files."""
        for file_id in file_ids:
            if not self._reclaimable(file_id):
                continue  # a ledger came back (e.g. re-added) in the meantime
            self._indexed.discard(file_id)
            self._file_ledgers.pop(file_id, None)
            self._file_bytes.pop(file_id, None)
            if file_id in self._reading:
                self._dead.add(file_id)
            else:
                self._close_read_fd(file_id)
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(self._file_exec, _delete_files, self.disk, self.directory, file_id)
            log.info("reclaimed journal file %d (all its ledgers are deleted)", file_id)

    # ------------------------------------------------------------ compaction

    def live_ratio(self, file_id: int) -> float:
        """Live entry bytes / all entry bytes of a journal file (1.0 if it has none)."""
        total = self._file_bytes.get(file_id, 0)
        return sum(self._file_ledgers.get(file_id, {}).values()) / total if total else 1.0

    def compaction_candidates(self, threshold: float) -> list[int]:
        """Sealed, indexed files behind the mark that still hold live entries but
        less than ``threshold`` of their bytes, the emptiest first."""
        found = [
            fid
            for fid in self._indexed
            if fid < self._behind_mark and self._file_ledgers.get(fid) and self.live_ratio(fid) < threshold
        ]
        return sorted(found, key=lambda fid: (self.live_ratio(fid), fid))

    async def live_records(self, file_id: int) -> tuple[list[Location4], list[int]]:
        """The entries of ``file_id`` the index still points at (ledger, entry, offset,
        length), and the file's live ledgers they were taken from."""
        ledgers = list(self._file_ledgers.get(file_id, {}))
        loop = asyncio.get_running_loop()
        records = await loop.run_in_executor(
            self._file_exec, decode_index_file, index_path(self.directory, file_id), self.disk
        )
        if records is None:  # never indexed, or damaged: the file is not touched
            return [], []
        alive = set(self._file_ledgers.get(file_id, {}))
        live: list[Location4] = []
        get = self.index.get
        for i in range(0, len(records), 4):
            ledger_id, entry_id, offset, length = records[i : i + 4]
            if ledger_id in alive and get(ledger_id, entry_id) == (file_id, offset, length):
                live.append((ledger_id, entry_id, offset, length))
        return live, [lid for lid in ledgers if lid in alive]

    def relocated(self, ledger_id: int, entry_id: int, old: Location, location: int, length: int) -> bool:
        """A compaction copy of an entry is durable at ``location``: the index points
        there, unless the entry moved or its ledger went meanwhile (False)."""
        if self.index.get(ledger_id, entry_id) != old:
            return False
        self.put(ledger_id, entry_id, location, length)
        return True

    def release(self, file_id: int, ledgers: Iterable[int]) -> None:
        """Every live entry of ``ledgers`` in ``file_id`` has a durable copy: the file
        no longer holds them (it is reclaimable once it holds no ledger)."""
        usage = self._file_ledgers.get(file_id)
        if usage is not None:
            for ledger_id in ledgers:
                usage.pop(ledger_id, None)

    def file_ids(self) -> list[int]:
        """Journal files this store knows (tests, diagnostics)."""
        return sorted(self._file_ledgers)

    def close(self) -> None:
        self._file_exec.shutdown(wait=True)
        self._read_exec.shutdown(wait=True)
        for fd in self._read_fds.values():
            self.disk.close(fd)
        self._read_fds.clear()


def scan_adds(path: Path, disk: Disk = OS_DISK) -> array:
    """Flat (ledger, entry, offset, length) of each ADD in a journal file, up to its
    first bad record (every record's crc32c verified)."""
    records = array("q")
    for end, rtype, body in scan_file(disk.read_bytes(path)):
        if rtype == TYPE_ADD:
            try:
                ledger_id, entry_id, _ = wire.entry_header(body)
            except ProtocolViolation:  # shorter than an entry header: not indexed
                continue
            records.extend((ledger_id, entry_id, end - len(body), len(body)))
    return records


def _delete_files(disk: Disk, directory: Path, file_id: int) -> None:
    disk.unlink(journal_path(directory, file_id))
    disk.unlink(index_path(directory, file_id))


def _read_many(disk: Disk, jobs: list[tuple[int, int, int]]) -> list[bytes]:
    return [read_at(disk, fd, offset, length) for fd, offset, length in jobs]


def read_at(disk: Disk, fd: int, offset: int, length: int) -> bytes:
    data = disk.pread(fd, length, offset)
    if len(data) != length:
        raise OSError(errno.EIO, f"short journal read at {offset} ({len(data)} of {length})")
    return data
