"""Journal files: record format, appending writer, fdatasync jobs, replay.

Owns: ``data_dir/journal/*.journal`` (docs/decisions/0002). The journal files are
the node's only copy of entries: the index points into them (entry_store.py).
Also the durable-file helpers the node's other files use (``fsync_dir``,
``write_atomically``: index files, checkpoint.json, the node-id cookie).
File   = 8-byte magic ``FOLIOJ01`` | record*
Record = u32 length | u32 crc32c | record-bytes        (length/crc of record-bytes)
record-bytes = u8 type | body:  ADD -> an encoded wire entry; FENCE -> u64 ledger id
(an ADD's wire entry starts ``HEAD.size`` = 9 bytes after its record's start)
Rules:
- every file call goes through the ``Disk`` port (storage/ports.py: the ``os``
  calls in production, the simulated disk in tests/sim);
- appends go through one fd with ``pwritev`` at the writer's offset (a whole
  group per call); durability comes only from ``fdatasync`` (plus an fsync of
  the directory after a new file is created); a write or fdatasync error is FATAL
  (``fatal``): one clear log line, then ``os._exit(70)``; nothing is retried or acked;
- the file is preallocated ahead of the write offset (``fallocate``, in steps of
  ``prealloc_bytes``), so an fdatasync flushes data only, not a new file size per
  group; a sealed file is truncated to its last record; an unsealed file ends in
  zeros, which read as a record of length 0 (the end);
- files rotate at ``rotate_bytes`` (a group never spans two files); a file is
  never appended to after a restart; files are deleted only by reclaim
  (entry_store.py), never by the writer;
- replay reads each file until the first record whose length or crc is wrong
  (a torn tail, or the zeros of preallocation), then goes on with the next file.
Failpoints (tests only, read from the environment once):
``FOLIO_FAILPOINT_FSYNC_ERROR_AFTER=N`` -> the N-th journal fdatasync raises EIO;
``FOLIO_FAILPOINT_FSYNC_DELAY_MS=D`` -> each journal fdatasync sleeps D ms first;
``FOLIO_TEST_SYNC_LOG=path`` -> creates, writes and syncs are noted for power-loss
tests (sync_log.py; observation only); with it, ``FOLIO_TEST_SYNC_LAG_MS=D`` delays
each fdatasync as the delay failpoint does (the larger of the two counts).
"""

from __future__ import annotations

import errno
import logging
import os
import struct
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import crc32c

from storage.node.drop_behind import DROP_LAG_BYTES, DropBehind, Range
from storage.node.sync_log import SYNC_LAG_MS, SYNC_LOG
from storage.ports import OS_DISK, Disk

log = logging.getLogger("folio.storage.journal")

MAGIC = b"FOLIOJ01"
HEAD = struct.Struct(">IIB")  # length, crc32c, type
FENCE_BODY = struct.Struct(">Q")
TYPE_ADD = 1
TYPE_FENCE = 2
TYPE_DELETE = 3  # the ledger was deleted: a tombstone (docs/decisions/0002)
RECORD_BYTES_MAX = 16 * 1024 * 1024  # a longer length field is a torn/corrupt record
ROTATE_BYTES = 64 * 1024 * 1024
PREALLOC_BYTES = 16 * 1024 * 1024  # allocated ahead of the write offset (BookKeeper: 16 MB)
IOV_MAX = 1024
FATAL_EXIT_CODE = 70
_CRC_ADD = crc32c.crc32c(bytes([TYPE_ADD]))
_CRC_FENCE = crc32c.crc32c(bytes([TYPE_FENCE]))
_CRC_DELETE = crc32c.crc32c(bytes([TYPE_DELETE]))

Buffer = bytes | memoryview


def fatal(message: str) -> NoReturn:
    """An unrecoverable storage error: one clear line, then exit without acking."""
    line = f"FATAL folio storage node: {message}; exiting without acknowledging anything more\n"
    try:
        os.write(2, line.encode())  # straight to stderr: no buffering, no logging machinery
    finally:
        os._exit(FATAL_EXIT_CODE)


def add_record_head(entry: Buffer) -> bytes:
    """The 9 bytes that precede an encoded entry in an ADD record."""
    return HEAD.pack(len(entry) + 1, crc32c.crc32c(entry, _CRC_ADD), TYPE_ADD)


def fence_record(ledger_id: int) -> bytes:
    body = FENCE_BODY.pack(ledger_id)
    return HEAD.pack(len(body) + 1, crc32c.crc32c(body, _CRC_FENCE), TYPE_FENCE) + body


def delete_record(ledger_id: int) -> bytes:
    body = FENCE_BODY.pack(ledger_id)  # same body as a fence: the ledger id
    return HEAD.pack(len(body) + 1, crc32c.crc32c(body, _CRC_DELETE), TYPE_DELETE) + body


def record_ledger_id(body: Buffer) -> int:
    """The ledger id of a FENCE or DELETE record's body."""
    (ledger_id,) = FENCE_BODY.unpack_from(body)
    return int(ledger_id)


@dataclass(frozen=True, slots=True)
class Failpoints:
    fsync_error_after: int = 0  # 0 = off
    fsync_delay_ms: int = 0

    @staticmethod
    def from_env() -> Failpoints:
        return Failpoints(
            fsync_error_after=int(os.environ.get("FOLIO_FAILPOINT_FSYNC_ERROR_AFTER", "0") or 0),
            fsync_delay_ms=max(int(os.environ.get("FOLIO_FAILPOINT_FSYNC_DELAY_MS", "0") or 0), SYNC_LAG_MS),
        )


@dataclass(slots=True)
class SyncJob:
    """What one sync must make durable; built on the loop, run on the sync thread."""

    fds: list[int] = field(default_factory=list)
    close_after: list[int] = field(default_factory=list)
    sync_dir: bool = False
    drops: list[Range] = field(default_factory=list)  # (fd, offset, length): leave the page cache after
    noted: dict[int, tuple[str, int]] = field(default_factory=dict)  # fd -> (path, end): SYNC_LOG only


def journal_path(directory: Path, file_id: int) -> Path:
    return directory / f"{file_id:010d}.journal"


def index_path(directory: Path, file_id: int) -> Path:
    """The index file of a sealed journal file (entry_index.py's format)."""
    return directory / f"{file_id:010d}.idx"


def fsync_dir(directory: Path, disk: Disk = OS_DISK) -> None:
    fd = disk.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        disk.fsync(fd)
    finally:
        disk.close(fd)


def write_atomically(directory: Path, name: str, data: bytes, disk: Disk = OS_DISK) -> None:
    """``directory/name`` = ``data``, durably: tmp file + fsync + rename + fsync(dir)."""
    tmp = directory / (name + ".tmp")
    fd = disk.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        if disk.write(fd, data) != len(data):
            raise OSError(errno.EIO, f"short write to {tmp}")
        disk.fsync(fd)
    finally:
        disk.close(fd)
    disk.replace(tmp, directory / name)
    fsync_dir(directory, disk)


def list_journal_ids(directory: Path, disk: Disk = OS_DISK) -> list[int]:
    ids = []
    for name in disk.listdir(directory) if disk.exists(directory) else ():
        stem, dot, suffix = name.rpartition(".")
        if not dot or suffix != "journal":
            continue
        try:
            ids.append(int(stem))
        except ValueError:
            continue
    return sorted(ids)


class JournalWriter:
    """Appends groups of records to the current journal file; hands out sync jobs.

    Used from the event-loop thread only, except ``run_sync`` (the sync thread),
    which touches nothing but the fds of the job it was given."""

    def __init__(
        self,
        directory: Path,
        first_file_id: int,
        rotate_bytes: int = ROTATE_BYTES,
        fsync: bool = True,
        failpoints: Failpoints | None = None,
        cache_bytes: int | None = DROP_LAG_BYTES,
        prealloc_bytes: int = PREALLOC_BYTES,
        disk: Disk = OS_DISK,
    ) -> None:
        self.directory = directory
        self.disk = disk
        self.rotate_bytes = rotate_bytes
        self.prealloc_bytes = prealloc_bytes  # 0: the file grows with each write
        self._allocated = 0  # bytes of the current file allocated (its size)
        # None: journal pages stay in the page cache; else drop-behind (drop_behind.py)
        self._behind = DropBehind(cache_bytes) if cache_bytes is not None else None
        self._file_start = 0  # journal position of the current file's offset 0
        self.fsync = fsync
        self.failpoints = failpoints or Failpoints()
        self._syncs = 0
        disk.makedirs(directory)
        self._dir_fd = disk.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        self.file_id = first_file_id - 1
        self._fd = -1
        self.offset = 0
        self._job = SyncJob()
        self._noted: dict[int, tuple[str, int]] = {}  # fd -> (path, bytes written): SYNC_LOG only
        self._open_next()

    @property
    def position(self) -> tuple[int, int]:
        return self.file_id, self.offset

    def _open_next(self) -> None:
        if self._fd >= 0:
            if self._allocated > self.offset:
                self._truncate()
            if self._behind is not None:
                self._behind.sealed(self._fd, self.offset)  # closed once dropped
            else:
                self._job.close_after.append(self._fd)
            self._file_start += self.offset
        self.file_id += 1
        path = journal_path(self.directory, self.file_id)
        try:
            self._fd = self.disk.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            if SYNC_LOG is not None:
                SYNC_LOG.note("C", path)
                SYNC_LOG.note("W", path, 0, len(MAGIC))
                self._noted[self._fd] = (str(path), len(MAGIC))
            self.disk.write(self._fd, MAGIC)
        except OSError as exc:
            fatal(f"cannot create journal file {path}: {exc}")
        self.offset = self._allocated = len(MAGIC)
        if self._behind is not None:
            self._behind.opened(self._fd, self._file_start, self.offset)
        self._job.fds.append(self._fd)
        self._job.sync_dir = True

    def write(self, buffers: Sequence[Buffer]) -> tuple[int, int]:
        """Append ``buffers`` (whole records) to the journal; returns the end position."""
        fd = self._fd
        pwritev = self.disk.pwritev
        total = 0
        try:
            for start in range(0, len(buffers), IOV_MAX):
                chunk = buffers[start : start + IOV_MAX]
                want = sum(len(b) for b in chunk)
                at = self.offset + total
                if at + want > self._allocated and self.prealloc_bytes:
                    self._preallocate(at + want)
                if SYNC_LOG is not None:
                    noted_path = self._noted[fd][0]
                    SYNC_LOG.note("W", noted_path, at, want)
                    self._noted[fd] = (noted_path, at + want)
                done = pwritev(fd, chunk, at)
                if done != want:
                    raise OSError(errno.EIO, f"short journal write ({done} of {want} bytes)")
                total += done
        except OSError as exc:
            fatal(f"journal write to {journal_path(self.directory, self.file_id)} failed: {exc}")
        self.offset += total
        if fd not in self._job.fds:
            self._job.fds.append(fd)
        end = (self.file_id, self.offset)
        if self.offset >= self.rotate_bytes:
            self._open_next()
        return end

    def _preallocate(self, needed: int) -> None:
        """Grow the current file to at least ``needed`` bytes, a whole step ahead (not
        past ``rotate_bytes`` unless ``needed`` is). A refusal (a file system without
        fallocate, no space for the step) turns preallocation off for the rest of
        this run: each write then grows its file, and fails fatally if it cannot."""
        target = max(needed, min(self._allocated + self.prealloc_bytes, self.rotate_bytes))
        try:
            self.disk.posix_fallocate(self._fd, self._allocated, target - self._allocated)
            self._allocated = target
        except OSError as exc:
            log.warning("journal preallocation of %d bytes refused (%s): files grow per write", target, exc)
            self.prealloc_bytes = 0
            self._allocated = self.disk.fsize(self._fd)

    def _truncate(self) -> None:
        """Cut a sealed file's preallocated tail (its records are all before ``offset``)."""
        try:
            self.disk.ftruncate(self._fd, self.offset)
        except OSError as exc:  # only space is lost: replay stops at the zeros
            log.warning("journal file %d: cannot cut its preallocated tail: %s", self.file_id, exc)

    def take_sync_job(self) -> SyncJob:
        job, self._job = self._job, SyncJob()
        if SYNC_LOG is not None:
            job.noted = {fd: self._noted[fd] for fd in job.fds if fd in self._noted}
        if self._behind is not None:
            job.drops, closes = self._behind.plan(self._file_start + self.offset)
            job.close_after += closes
        return job

    def run_sync(self, job: SyncJob) -> float:
        """Runs on the sync thread; returns the seconds spent syncing.
        Raises OSError on failure (the caller exits)."""
        started = time.perf_counter()
        disk = self.disk
        if self.fsync:
            for fd in job.fds:
                self._syncs += 1
                fp = self.failpoints
                if fp.fsync_delay_ms:
                    time.sleep(fp.fsync_delay_ms / 1000)
                if fp.fsync_error_after and self._syncs >= fp.fsync_error_after:
                    raise OSError(errno.EIO, f"failpoint: fdatasync #{self._syncs} fails")
                disk.fdatasync(fd)
                if SYNC_LOG is not None and fd in job.noted:
                    SYNC_LOG.note("S", *job.noted[fd])
            if job.sync_dir:
                disk.fsync(self._dir_fd)
                if SYNC_LOG is not None:
                    SYNC_LOG.note("D", self.directory)
        for fd, offset, length in job.drops:  # written before this sync: durable (or fsync is off)
            try:
                disk.posix_fadvise(fd, offset, length, os.POSIX_FADV_DONTNEED)
            except OSError as exc:  # advice only: the data is safe either way
                log.warning("journal page-cache drop failed: %r", exc)
        for fd in job.close_after:
            disk.close(fd)
        return time.perf_counter() - started

    def close(self) -> None:
        if self._fd >= 0 and self._allocated > self.offset:
            self._truncate()  # a clean stop leaves no preallocated tail
        held = self._behind.fds() if self._behind is not None else [self._fd]
        for fd in {*held, self._fd, self._dir_fd}:
            try:
                self.disk.close(fd)
            except OSError:
                pass
        self._fd = -1


@dataclass(frozen=True, slots=True)
class ReplayedRecord:
    file_id: int
    end_offset: int
    rtype: int
    body: memoryview

    @property
    def body_offset(self) -> int:
        """Where ``body`` (an ADD's wire entry) starts in the file."""
        return self.end_offset - len(self.body)


def scan_file(data: bytes) -> Iterator[tuple[int, int, memoryview]]:
    """(end_offset, type, body) for each valid record, stopping at the first bad one."""
    if data[: len(MAGIC)] != MAGIC:
        return
    view = memoryview(data)
    offset = len(MAGIC)
    size = len(data)
    while offset + 8 <= size:
        length, crc, _ = HEAD.unpack_from(data, offset) if offset + 9 <= size else (0, 0, 0)
        if length < 1 or length > RECORD_BYTES_MAX or offset + 8 + length > size:
            return
        record = view[offset + 8 : offset + 8 + length]
        if crc32c.crc32c(record) != crc:
            return
        offset += 8 + length
        yield offset, record[0], record[1:]


def cut_tail(directory: Path, file_id: int, end: int, disk: Disk = OS_DISK) -> None:
    """Cut a file left unsealed by a crash to ``end`` (where its valid records end):
    its preallocated zeros, or a torn tail no ack ever covered, would otherwise stay
    on disk for as long as the file holds a live entry - a step of preallocation per
    crash. Only for a file that is never appended to again (every file at start)."""
    path = journal_path(directory, file_id)
    try:
        if disk.size(path) > end:
            disk.truncate(path, end)
    except OSError as exc:
        log.warning("journal file %d: cannot cut its tail: %s", file_id, exc)


def replay(directory: Path, first_file_id: int, disk: Disk = OS_DISK) -> Iterator[ReplayedRecord]:
    """Every valid record of every file with id >= ``first_file_id``, oldest first
    (whole files: the caller decides which records lie after its mark)."""
    ids = list_journal_ids(directory, disk)
    for fid in ids:
        if fid < first_file_id:
            continue
        data = disk.read_bytes(journal_path(directory, fid))
        end = len(MAGIC)
        for end, rtype, body in scan_file(data):
            yield ReplayedRecord(fid, end, rtype, body)
        if end < len(data) and data.count(0, end) != len(data) - end:  # zeros: preallocated
            log.warning(
                "journal %s: ignoring %d bytes after offset %d (torn or corrupt tail)",
                journal_path(directory, fid).name,
                len(data) - end,
                end,
            )
