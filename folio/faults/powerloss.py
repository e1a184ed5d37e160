"""Power loss of a storage node: drop exactly what its journal had not made durable.

Owns: reading a node's sync log (``storage/node/sync_log.py``: ``C``/``W``/``S``/``D``
lines) and cutting its journal files back to what an fdatasync or directory
fsync covered, after the node was killed with SIGKILL.
Rules: a byte written at or past the last ``S`` end of its file is unsynced; a
file created after the last ``D`` of its directory is gone. ``plan`` is pure
(text in, cuts out): each unsynced file keeps its synced prefix plus, when a
seeded ``torn`` fraction is given, that share of its unsynced bytes (a kernel
may have written some back; a torn tail is what replay must cope with); the
rest reads as zeros, as an unwritten preallocated block does. ``apply`` does
the file I/O and counts what the cut took: bytes (zeroed, or in deleted files)
and journal records (a record is dropped when any of its bytes is, so a torn
record counts); the log is emptied afterwards (the next incarnation starts afresh).
"""

from __future__ import annotations

import os
import random
import struct
from dataclasses import dataclass, field
from pathlib import Path

from storage.node.journal_io import MAGIC, scan_file

LENGTH = struct.Struct(">I")  # a journal record's length field (journal_io.py)


@dataclass
class _File:
    created_unsynced: bool = False
    synced_end: int = 0
    written_end: int = 0


@dataclass
class PowerCut:
    """What a power cut takes: files to delete, (file, from, to) ranges to zero."""

    delete: list[str] = field(default_factory=list)
    zero: list[tuple[str, int, int]] = field(default_factory=list)
    synced: dict[str, int] = field(default_factory=dict)  # zeroed file -> its synced end
    deleted_bytes: int = 0  # filled in by ``apply``
    dropped_records: int = 0  # filled in by ``apply``

    @property
    def unsynced_bytes(self) -> int:
        return sum(end - start for _, start, end in self.zero)

    @property
    def dropped_bytes(self) -> int:
        return self.unsynced_bytes + self.deleted_bytes


def plan(log_text: str, rng: random.Random | None = None, torn: bool = False) -> PowerCut:
    files: dict[str, _File] = {}
    for line in log_text.splitlines():
        parts = line.split(" ")
        if len(parts) < 2:
            continue  # a line torn by the kill: it noted nothing durable
        op, path = parts[0], parts[1]
        if op == "C":
            files[path] = _File(created_unsynced=True)
        elif op == "D":
            for name, f in files.items():
                if os.path.dirname(name) == path:
                    f.created_unsynced = False
        elif op == "W" and len(parts) == 4:
            f = files.setdefault(path, _File())
            f.written_end = max(f.written_end, int(parts[2]) + int(parts[3]))
        elif op == "S" and len(parts) == 3:
            f = files.setdefault(path, _File())
            f.synced_end = max(f.synced_end, int(parts[2]))
    cut = PowerCut()
    for name, f in sorted(files.items()):
        if f.created_unsynced:
            cut.delete.append(name)
        elif f.written_end > f.synced_end:
            start = f.synced_end
            if torn and rng is not None:
                start += int(rng.random() * (f.written_end - f.synced_end))
            cut.zero.append((name, start, f.written_end))
            cut.synced[name] = f.synced_end
    return cut


def records_cut(data: bytes, base: int, cut_from: int) -> int:
    """Records in ``data`` (a file's bytes from ``base``, a record boundary) that
    reach past ``cut_from``: the ones a cut there drops or tears."""
    offset = max(0, len(MAGIC) - base)
    count = 0
    while offset + LENGTH.size <= len(data):
        (length,) = LENGTH.unpack_from(data, offset)
        if length == 0:
            break  # nothing written here (a kill mid-write, or preallocated zeros)
        offset += 8 + length
        if base + offset > cut_from:
            count += 1
    return count


def apply(log_path: Path, rng: random.Random | None = None, torn: bool = False) -> PowerCut:
    """Cut the journal files named in ``log_path`` as a power loss would (the node
    must already be dead), then empty the log."""
    text = log_path.read_text() if log_path.exists() else ""
    cut = plan(text, rng, torn)
    for name in cut.delete:
        try:
            data = Path(name).read_bytes()
        except FileNotFoundError:
            continue
        cut.deleted_bytes += len(data.rstrip(b"\0"))
        cut.dropped_records += sum(1 for _ in scan_file(data))
        Path(name).unlink()
    for name, start, end in cut.zero:
        try:
            fd = os.open(name, os.O_RDWR)
        except FileNotFoundError:
            continue  # reclaimed before the cut
        try:
            size = os.fstat(fd).st_size
            synced = cut.synced[name]
            cut.dropped_records += records_cut(os.pread(fd, end - synced, synced), synced, start)
            if start < size:
                os.pwrite(fd, bytes(min(end, size) - start), start)
            os.fsync(fd)
        finally:
            os.close(fd)
    log_path.write_text("")
    return cut
