"""The entry index: (ledger, entry) -> (journal file, offset, length), and its files.

Owns: the in-memory per-ledger index and the ``journal/<id>.idx`` file format
(docs/decisions/0002). Pure data structures plus two small file helpers.
A location is ``file id << 32 | offset``: the offset of the entry's wire bytes
inside its journal file (just after the ADD record's 9-byte header).
Rule: an index file is written once, for a sealed journal file wholly behind a
checkpoint mark, and only trusted when its trailing crc32c matches; otherwise
the journal file itself is scanned.

Index file = ``FOLIOX01`` | u64 count | count x (i64 ledger, i64 entry,
i64 offset, i64 length) little-endian | u32 crc32c of everything before.
"""

from __future__ import annotations

import struct
import sys
from array import array
from pathlib import Path

import crc32c

from storage.ports import OS_DISK, Disk

IDX_MAGIC = b"FOLIOX01"
_COUNT = struct.Struct("<Q")
_CRC = struct.Struct("<I")
GAP_SLOTS_MAX = 65_536  # farther-away entry ids go to a small dict, not a huge array
MISSING = -1


def pack_location(file_id: int, offset: int) -> int:
    return (file_id << 32) | offset


def unpack_location(location: int) -> tuple[int, int]:
    return location >> 32, location & 0xFFFFFFFF


class LedgerIndex:
    """Dense arrays for the usual case (entry ids arrive roughly in order)."""

    __slots__ = ("base", "count", "extra", "last_entry_id", "lens", "locs")

    def __init__(self, first_entry_id: int) -> None:
        self.base = first_entry_id
        self.locs = array("q")
        self.lens = array("q")
        self.extra: dict[int, tuple[int, int]] = {}
        self.count = 0
        self.last_entry_id = -1

    def put(self, entry_id: int, location: int, length: int) -> None:
        i = entry_id - self.base
        locs = self.locs
        if i == len(locs):  # the usual case: the next entry id
            locs.append(location)
            self.lens.append(length)
            self.count += 1
            self.last_entry_id = max(self.last_entry_id, entry_id)
            return
        if i < 0:
            if -i > GAP_SLOTS_MAX:
                self._put_extra(entry_id, location, length)
                return
            self.locs = locs = array("q", [MISSING]) * (-i) + locs
            self.lens = array("q", [0]) * (-i) + self.lens
            self.base = entry_id
            i = 0
        elif i >= len(locs):
            grow = i + 1 - len(locs)
            if grow > GAP_SLOTS_MAX:
                self._put_extra(entry_id, location, length)
                return
            locs.extend([MISSING] * grow)
            self.lens.extend([0] * grow)
        if locs[i] == MISSING:
            self.count += 1
        locs[i] = location
        self.lens[i] = length
        self.last_entry_id = max(self.last_entry_id, entry_id)

    def _put_extra(self, entry_id: int, location: int, length: int) -> None:
        if entry_id not in self.extra:
            self.count += 1
        self.extra[entry_id] = (location, length)
        self.last_entry_id = max(self.last_entry_id, entry_id)

    def get(self, entry_id: int) -> tuple[int, int] | None:
        """(location, length) or None."""
        i = entry_id - self.base
        if 0 <= i < len(self.locs):
            location = self.locs[i]
            if location != MISSING:
                return location, self.lens[i]
            return None
        if self.extra:
            return self.extra.get(entry_id)
        return None


class EntryIndex:
    def __init__(self) -> None:
        self._ledgers: dict[int, LedgerIndex] = {}

    def put(self, ledger_id: int, entry_id: int, file_id: int, offset: int, length: int) -> None:
        self.put_location(ledger_id, entry_id, (file_id << 32) | offset, length)

    def put_location(self, ledger_id: int, entry_id: int, location: int, length: int) -> None:
        index = self._ledgers.get(ledger_id)
        if index is None:
            index = self._ledgers[ledger_id] = LedgerIndex(entry_id)
        index.put(entry_id, location, length)

    def get(self, ledger_id: int, entry_id: int) -> tuple[int, int, int] | None:
        """(file id, offset, length) or None."""
        index = self._ledgers.get(ledger_id)
        if index is None:
            return None
        found = index.get(entry_id)
        if found is None:
            return None
        file_id, offset = unpack_location(found[0])
        return file_id, offset, found[1]

    def has_ledger(self, ledger_id: int) -> bool:
        return ledger_id in self._ledgers

    def last_entry_id(self, ledger_id: int) -> int:
        index = self._ledgers.get(ledger_id)
        return index.last_entry_id if index is not None else -1

    def delete_ledger(self, ledger_id: int) -> bool:
        return self._ledgers.pop(ledger_id, None) is not None

    def ledger_ids(self) -> list[int]:
        return list(self._ledgers)

    def entry_count(self) -> int:
        return sum(i.count for i in self._ledgers.values())


# ---------------------------------------------------------------- files


def encode_index_file(records: array) -> bytes:
    """``records``: flat array('q') of (ledger, entry, offset, length) quadruples."""
    assert len(records) % 4 == 0
    body = records
    if sys.byteorder != "little":
        body = array("q", records)
        body.byteswap()
    data = IDX_MAGIC + _COUNT.pack(len(records) // 4) + body.tobytes()
    return data + _CRC.pack(crc32c.crc32c(data))


def decode_index_file(path: Path, disk: Disk = OS_DISK) -> array | None:
    """The flat record array, or None if the file is missing, short or corrupt."""
    try:
        data = disk.read_bytes(path)
    except FileNotFoundError:
        return None
    head = len(IDX_MAGIC) + _COUNT.size
    if len(data) < head + _CRC.size or data[: len(IDX_MAGIC)] != IDX_MAGIC:
        return None
    (count,) = _COUNT.unpack_from(data, len(IDX_MAGIC))
    if len(data) != head + count * 32 + _CRC.size:
        return None
    (crc,) = _CRC.unpack_from(data, len(data) - _CRC.size)
    if crc32c.crc32c(memoryview(data)[: len(data) - _CRC.size]) != crc:
        return None
    records = array("q")
    records.frombytes(data[head : head + count * 32])
    if sys.byteorder != "little":
        records.byteswap()
    return records
