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
the file I/O; the log is emptied afterwards (the next incarnation starts afresh).
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from pathlib import Path


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

    @property
    def unsynced_bytes(self) -> int:
        return sum(end - start for _, start, end in self.zero)


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
    return cut


def apply(log_path: Path, rng: random.Random | None = None, torn: bool = False) -> PowerCut:
    """Cut the journal files named in ``log_path`` as a power loss would (the node
    must already be dead), then empty the log."""
    text = log_path.read_text() if log_path.exists() else ""
    cut = plan(text, rng, torn)
    for name in cut.delete:
        Path(name).unlink(missing_ok=True)
    for name, start, end in cut.zero:
        try:
            fd = os.open(name, os.O_WRONLY)
        except FileNotFoundError:
            continue  # reclaimed before the cut
        try:
            size = os.fstat(fd).st_size
            if start < size:
                os.pwrite(fd, bytes(min(end, size) - start), start)
            os.fsync(fd)
        finally:
            os.close(fd)
    log_path.write_text("")
    return cut
