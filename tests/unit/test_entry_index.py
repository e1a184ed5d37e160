"""Entry index and on-disk record formats: pure data, no files."""

from __future__ import annotations

import struct
from array import array

import pytest

from storage import wire
from storage.node.entry_index import GAP_SLOTS_MAX, EntryIndex, LedgerIndex, encode_index_file
from storage.node.journal_io import MAGIC, TYPE_ADD, TYPE_FENCE, add_record_head, fence_record, scan_file

pytestmark = pytest.mark.unit


def test_index_in_order_out_of_order_and_gaps() -> None:
    idx = EntryIndex()
    for e in (5, 6, 8, 3):  # 8 leaves a hole at 7; 3 prepends below the first id seen
        idx.put(1, e, file_id=2, offset=100 * e, length=e)
    assert idx.get(1, 5) == (2, 500, 5)
    assert idx.get(1, 3) == (2, 300, 3)
    assert idx.get(1, 7) is None and idx.get(1, 4) is None and idx.get(1, 9) is None
    assert idx.get(2, 5) is None
    assert idx.last_entry_id(1) == 8 and idx.entry_count() == 4
    idx.put(1, 5, file_id=3, offset=7, length=9)  # an overwrite (recovery add) moves it
    assert idx.get(1, 5) == (3, 7, 9) and idx.entry_count() == 4
    assert idx.delete_ledger(1) and idx.get(1, 5) is None and not idx.has_ledger(1)


def test_far_away_entry_ids_do_not_allocate_huge_arrays() -> None:
    ledger = LedgerIndex(0)
    ledger.put(0, 1, 1)
    far = 10 * GAP_SLOTS_MAX
    ledger.put(far, 2, 2)
    ledger.put(-far, 3, 3)  # never valid on the wire, but still bounded here
    assert len(ledger.locs) == 1
    assert ledger.get(far) == (2, 2) and ledger.get(-far) == (3, 3)
    assert ledger.last_entry_id == far and ledger.count == 3


def test_index_file_layout() -> None:
    records = array("q", [1, 0, 8, 40, 1, 1, 52, 40])
    data = encode_index_file(records)
    assert data.startswith(b"FOLIOX01")
    assert struct.unpack_from("<Q", data, 8)[0] == 2


def _file(*records: bytes) -> bytes:
    return MAGIC + b"".join(records)


def _add(ledger: int, entry: int, payload: bytes) -> bytes:
    encoded = wire.encode_entry(ledger, entry, entry - 1, payload)
    return add_record_head(encoded) + encoded


def test_scan_reads_valid_records_in_order() -> None:
    data = _file(_add(1, 0, b"a"), fence_record(9), _add(1, 1, b"bb"))
    records = list(scan_file(data))
    assert [r[1] for r in records] == [TYPE_ADD, TYPE_FENCE, TYPE_ADD]
    assert records[-1][0] == len(data)
    assert wire.decode_entry(records[2][2]).payload == b"bb"
    assert int.from_bytes(records[1][2], "big") == 9


@pytest.mark.parametrize("cut", [1, 4, 8, 9, 20])
def test_scan_stops_at_a_torn_tail(cut: int) -> None:
    whole = _file(_add(1, 0, b"a" * 50), _add(1, 1, b"b" * 50))
    torn = whole[: len(whole) - cut]
    assert len(list(scan_file(torn))) == 1


def test_scan_stops_at_a_bad_crc_or_absurd_length() -> None:
    first, second, third = _add(1, 0, b"a"), bytearray(_add(1, 1, b"b")), _add(1, 2, b"c")
    second[-1] ^= 1
    assert len(list(scan_file(_file(first, bytes(second), third)))) == 1
    absurd = struct.pack(">IIB", 0xFFFFFFFF, 0, TYPE_ADD)
    assert len(list(scan_file(_file(first, absurd, third)))) == 1
    assert list(scan_file(b"NOTAJRNL" + first)) == []
    assert list(scan_file(_file(first, b"\x00" * 64))) != []  # zero fill after = tail ignored
