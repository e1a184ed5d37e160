"""Ids of deleted ledgers, kept forever in a compact form (pure).

Owns: the set of ledger ids a node knows were deleted, as sorted, disjoint,
non-adjacent inclusive ranges ``[first, last]``. No I/O.
Rule (docs/decisions/0002 "Tombstones"): ledger ids are never reused, so a
deleted ledger stays deleted: the node refuses every add to it for ever, even
after its entries, its journal files and its fence are gone. Ids are deleted
mostly in runs (a topic's oldest ledgers, a block of ids at a time), so the
ranges stay few: a range per run of deleted ids that a live (or never
created) id interrupts.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable


class Tombstones:
    def __init__(self, ranges: Iterable[tuple[int, int]] = ()) -> None:
        self._firsts: list[int] = []
        self._lasts: list[int] = []
        for first, last in sorted(ranges):
            for ledger_id in (first, last):
                if ledger_id < 0 or first > last:
                    raise ValueError(f"bad tombstone range [{first}, {last}]")
            self.add_range(first, last)

    def __bool__(self) -> bool:
        return bool(self._firsts)

    def __len__(self) -> int:
        """Number of ranges (not of ids)."""
        return len(self._firsts)

    def __contains__(self, ledger_id: int) -> bool:
        i = bisect.bisect_right(self._firsts, ledger_id) - 1
        return i >= 0 and ledger_id <= self._lasts[i]

    def add(self, ledger_id: int) -> bool:
        """Mark ``ledger_id`` deleted; False if it already was."""
        if ledger_id in self:
            return False
        self.add_range(ledger_id, ledger_id)
        return True

    def add_range(self, first: int, last: int) -> None:
        """Mark ``first..last`` (inclusive) deleted, merging touching ranges."""
        firsts, lasts = self._firsts, self._lasts
        lo = bisect.bisect_left(lasts, first - 1)  # first range that touches or follows
        hi = bisect.bisect_right(firsts, last + 1)  # past the last range that touches
        if lo < hi:
            first = min(first, firsts[lo])
            last = max(last, lasts[hi - 1])
        firsts[lo:hi] = [first]
        lasts[lo:hi] = [last]

    def ranges(self) -> list[tuple[int, int]]:
        return list(zip(self._firsts, self._lasts, strict=True))
