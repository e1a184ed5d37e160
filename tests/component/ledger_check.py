"""Checker for ledger contents: confirmed entries vs what a reader got back.

Pure: given the payloads the writer had confirmed (entry id -> payload) and the
payloads read back in order (entry 0, 1, ...), count lost, duplicated,
out-of-order and corrupted entries (docs/testing.md §3 (lost, one id two payloads, order)).
Payloads start with an 8-byte big-endian sequence number so a stray or
repeated entry can be told from a corrupted one.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

_SEQ = struct.Struct(">Q")


def make_payload(seq: int, size: int = 1024) -> bytes:
    return _SEQ.pack(seq) + os.urandom(size - _SEQ.size)


def payload_seq(payload: bytes) -> int:
    return int(_SEQ.unpack_from(payload)[0]) if len(payload) >= _SEQ.size else -1


@dataclass(frozen=True)
class LedgerReport:
    confirmed: int
    read: int
    lost: int  # confirmed payloads found nowhere in what was read (C1)
    duplicated: int  # a sequence number read more than once
    out_of_order: int  # a sequence number lower than its predecessor (C4)
    corrupted: int  # read at a confirmed id with different bytes (C3)

    @property
    def ok(self) -> bool:
        return self.lost == self.duplicated == self.out_of_order == self.corrupted == 0


def check_ledger(confirmed: dict[int, bytes], read_back: list[bytes]) -> LedgerReport:
    seen: dict[int, int] = {}
    duplicated = out_of_order = corrupted = 0
    previous = -1
    for entry_id, payload in enumerate(read_back):
        seq = payload_seq(payload)
        seen[seq] = seen.get(seq, 0) + 1
        if seen[seq] > 1:
            duplicated += 1
        if seq < previous:
            out_of_order += 1
        previous = max(previous, seq)
        expected = confirmed.get(entry_id)
        if expected is not None and expected != payload:
            corrupted += 1
    present = set(read_back)
    lost = sum(1 for payload in confirmed.values() if payload not in present)
    return LedgerReport(len(confirmed), len(read_back), lost, duplicated, out_of_order, corrupted)
