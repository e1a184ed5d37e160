"""Entry-log files: format, the background writer, scanning and reading.

Owns: ``data_dir/entrylogs/<id>.log`` and writing ``<id>.idx`` (docs/decisions/0002).
Entry log = ``FOLIOE01`` | (u32 length | encoded wire entry)*; entries of many
ledgers interleaved in the order they became durable in the journal.
Rules: ``EntryLogWriter.run`` executes on the one entry-log thread, in job
order; a write or fsync error there is fatal (like the journal's), because
the journal is trimmed on the strength of these files. Scans verify each
entry's crc32c and stop at the first bad record.
"""

from __future__ import annotations

import errno
import os
import struct
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from storage import wire
from storage.node.entry_index import encode_index_file
from storage.node.journal_io import IOV_MAX, Buffer, fatal

LOG_MAGIC = b"FOLIOE01"
REC_LEN = struct.Struct(">I")
ENTRY_BYTES_MAX = 16 * 1024 * 1024


def log_path(directory: Path, log_id: int) -> Path:
    return directory / f"{log_id:010d}.log"


def idx_path(directory: Path, log_id: int) -> Path:
    return directory / f"{log_id:010d}.idx"


def list_log_ids(directory: Path) -> list[int]:
    ids = []
    for path in directory.glob("*.log"):
        try:
            ids.append(int(path.stem))
        except ValueError:
            continue
    return sorted(ids)


@dataclass(slots=True)
class FlushJob:
    """Bytes to append, in order; with ``sync`` also fsync + index files."""

    writes: list[tuple[int, list[Buffer]]] = field(default_factory=list)
    sync: bool = False
    sealed: dict[int, array] = field(default_factory=dict)  # log id -> flat idx records
    truncate: tuple[int, int] | None = None  # (log id, size) before any write


class EntryLogWriter:
    """File side of the entry logs; ``run`` and ``delete`` run on the entry-log thread."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._fds: dict[int, int] = {}
        self._dirty: set[int] = set()
        self._dir_dirty = False

    def _fd(self, log_id: int) -> int:
        fd = self._fds.get(log_id)
        if fd is None:
            path = log_path(self.directory, log_id)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            if os.fstat(fd).st_size == 0:
                os.write(fd, LOG_MAGIC)
                self._dir_dirty = True
            self._fds[log_id] = fd
        return fd

    def run(self, job: FlushJob) -> None:
        try:
            self._run(job)
        except OSError as exc:
            fatal(f"entry log write/fsync in {self.directory} failed: {exc!r}")

    def _run(self, job: FlushJob) -> None:
        if job.truncate is not None:
            log_id, size = job.truncate
            fd = self._fd(log_id)
            os.ftruncate(fd, size)
            self._dirty.add(log_id)
        for log_id, buffers in job.writes:
            fd = self._fd(log_id)
            for start in range(0, len(buffers), IOV_MAX):
                chunk = buffers[start : start + IOV_MAX]
                want = sum(len(b) for b in chunk)
                done = os.writev(fd, chunk)
                if done != want:
                    raise OSError(errno.EIO, f"short entry-log write ({done} of {want})")
            self._dirty.add(log_id)
        if not job.sync:
            return
        for log_id in sorted(self._dirty):
            os.fsync(self._fds[log_id])
        self._dirty.clear()
        for log_id, records in job.sealed.items():
            final = idx_path(self.directory, log_id)
            tmp = final.with_suffix(".idx.tmp")
            data = encode_index_file(records)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, final)
            self._dir_dirty = True
            old = self._fds.pop(log_id, None)
            if old is not None:
                os.close(old)
        if self._dir_dirty:
            fsync_dir(self.directory)
            self._dir_dirty = False

    def delete(self, log_id: int) -> None:
        fd = self._fds.pop(log_id, None)
        if fd is not None:
            os.close(fd)
        self._dirty.discard(log_id)
        log_path(self.directory, log_id).unlink(missing_ok=True)
        idx_path(self.directory, log_id).unlink(missing_ok=True)

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def scan_log(path: Path, limit: int | None = None) -> Iterator[tuple[int, int, int, int]]:
    """(ledger, entry, offset, length) of each valid entry, up to byte ``limit``."""
    data = path.read_bytes()
    if limit is not None:
        data = data[:limit]
    if data[: len(LOG_MAGIC)] != LOG_MAGIC:
        return
    view = memoryview(data)
    offset = len(LOG_MAGIC)
    while offset + REC_LEN.size <= len(data):
        (length,) = REC_LEN.unpack_from(data, offset)
        start = offset + REC_LEN.size
        if length < wire.ENTRY_HEADER.size or length > ENTRY_BYTES_MAX or start + length > len(data):
            return
        entry = view[start : start + length]
        if not wire.verify_entry(entry):
            return
        ledger_id, entry_id, _ = wire.entry_header(entry)
        yield ledger_id, entry_id, start, length
        offset = start + length


def read_at(fd: int, offset: int, length: int) -> bytes:
    data = os.pread(fd, length, offset)
    if len(data) != length:
        raise OSError(errno.EIO, f"short entry-log read at {offset} ({len(data)} of {length})")
    return data
