"""The fully acked entries beyond a cursor's mark-delete, as sorted disjoint ranges (pure).

Owns: ``AckedRanges`` - ranges ``(ledger, first, last)`` of entries, inclusive,
sorted and disjoint, and the number of entries they hold. Rules: adding an
entry joins it to the range before and/or after it in the same ledger, so
ranges never touch within a ledger; ``drop_through`` forgets everything at or
before a new mark-delete (cutting a range it falls inside); the cursor
(``cursor_core``) folds the first range into its mark-delete when they meet.
"""

from __future__ import annotations

from bisect import bisect_right, insort
from collections.abc import Iterator

from storage.formats.positions import Position

_AFTER_ANY = 2**64  # sorts after every entry id in a (ledger, entry, _AFTER_ANY) probe

Range = tuple[int, int, int]  # (ledger, first, last), inclusive


class AckedRanges:
    def __init__(self) -> None:
        self._ranges: list[Range] = []
        self.entries = 0  # entries in the ranges

    def __iter__(self) -> Iterator[Range]:
        return iter(self._ranges)

    def __len__(self) -> int:
        return len(self._ranges)

    def __contains__(self, entry: Position) -> bool:
        i = bisect_right(self._ranges, (entry.ledger_id, entry.entry_id, _AFTER_ANY)) - 1
        if i < 0:
            return False
        ledger, first, last = self._ranges[i]
        return ledger == entry.ledger_id and first <= entry.entry_id <= last

    def first(self) -> Range | None:
        return self._ranges[0] if self._ranges else None

    def head(self, count: int) -> list[Range]:
        """The first ``count`` ranges (a snapshot's bounded share)."""
        return self._ranges[:count]

    def add(self, entry: Position) -> None:
        """``entry`` (not in a range) is acked."""
        ledger, e = entry.ledger_id, entry.entry_id
        i = bisect_right(self._ranges, (ledger, e, _AFTER_ANY))
        joins_previous = i > 0 and self._ranges[i - 1][0] == ledger and self._ranges[i - 1][2] == e - 1
        joins_next = i < len(self._ranges) and self._ranges[i][0] == ledger and self._ranges[i][1] == e + 1
        if joins_previous and joins_next:
            self._ranges[i - 1] = (ledger, self._ranges[i - 1][1], self._ranges[i][2])
            del self._ranges[i]
        elif joins_previous:
            self._ranges[i - 1] = (ledger, self._ranges[i - 1][1], e)
        elif joins_next:
            self._ranges[i] = (ledger, e, self._ranges[i][2])
        else:
            insort(self._ranges, (ledger, e, e))
        self.entries += 1

    def append(self, ledger: int, first: int, last: int) -> None:
        """A range after every one held (restoring a snapshot checked for order)."""
        self._ranges.append((ledger, first, last))
        self.entries += last - first + 1

    def drop_first(self) -> None:
        _, first, last = self._ranges.pop(0)
        self.entries -= last - first + 1

    def drop_through(self, mark_delete: Position) -> None:
        """Forget the entries at or before ``mark_delete``."""
        covered = 0
        for ledger, first, last in self._ranges:
            if (ledger, last) > (mark_delete.ledger_id, mark_delete.entry_id):
                break
            covered += 1
            self.entries -= last - first + 1
        del self._ranges[:covered]
        if (
            self._ranges
            and self._ranges[0][0] == mark_delete.ledger_id
            and self._ranges[0][1] <= mark_delete.entry_id
        ):
            ledger, first, last = self._ranges[0]
            self._ranges[0] = (ledger, mark_delete.entry_id + 1, last)
            self.entries -= mark_delete.entry_id + 1 - first

    def clear(self) -> None:
        self._ranges.clear()
        self.entries = 0
