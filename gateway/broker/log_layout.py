"""Which entries a topic's log holds, as the cursor needs to know it (pure).

Owns: ``LogView``, the questions a cursor asks about the log (the entry after
a position, how many entries lie between two positions, the n-th entry after
one, the last one), and ``LedgerLayout``, the plain answer built from the
managed log's ledger list: ``(ledger_id, entry_count)`` in ascending id order.

Rule (Pulsar's managed ledger): a topic's ledgers have increasing ids, a
ledger holds entries ``0..count-1`` (it may hold none), and log order is
(ledger, entry) order. ``entry_id = -1`` means "before entry 0 of that ledger";
a position in a ledger the layout does not list (deleted, or not created yet)
sorts between its neighbours. A layout is an immutable value: the owner of the
managed log builds a new one when a ledger is added, grows or is trimmed
(cheap: one pass over the ledger list, which is short).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from typing import Protocol

from storage.formats.positions import EARLIEST, Position


class LogView(Protocol):
    """The cursor's view of the topic's log."""

    def next_position(self, position: Position) -> Position | None:
        """The first entry after ``position``; None if there is none yet."""
        ...

    def last_position(self) -> Position:
        """The last entry (``(last ledger, -1)`` if no ledger has entries; EARLIEST
        if there is no ledger)."""
        ...

    def entries_between(self, after: Position, upto: Position) -> int:
        """The number of entries p with ``after < p <= upto``."""
        ...

    def position_after(self, position: Position, count: int) -> Position:
        """The ``count``-th entry after ``position``; the last entry if fewer
        exist; ``position`` itself if none does."""
        ...


class LedgerLayout:
    """A ``LogView`` over ``(ledger_id, entry_count)`` pairs in ascending id order."""

    __slots__ = ("_before", "_counts", "_ids", "_total")

    def __init__(self, ledgers: Sequence[tuple[int, int]]) -> None:
        self._ids = [ledger for ledger, _ in ledgers]
        self._counts = [count for _, count in ledgers]
        assert all(a < b for a, b in zip(self._ids, self._ids[1:], strict=False)), "ledger ids must ascend"
        assert all(count >= 0 for count in self._counts), "entry counts must be >= 0"
        self._before: list[int] = []  # entries in the ledgers before index i
        total = 0
        for count in self._counts:
            self._before.append(total)
            total += count
        self._total = total

    @property
    def ledgers(self) -> list[tuple[int, int]]:
        return list(zip(self._ids, self._counts, strict=True))

    @property
    def total_entries(self) -> int:
        return self._total

    def index(self, position: Position) -> int:
        """How many entries are at or before ``position``."""
        i = bisect_left(self._ids, position.ledger_id)
        if i == len(self._ids):
            return self._total
        entries = self._before[i]
        if self._ids[i] == position.ledger_id:
            entries += min(max(position.entry_id + 1, 0), self._counts[i])
        return entries

    def at(self, index: int) -> Position:
        """The ``index``-th entry of the log (1-based)."""
        assert 1 <= index <= self._total, index
        i = bisect_right(self._before, index - 1) - 1  # the last ledger starting at or before it
        return Position(self._ids[i], index - 1 - self._before[i])

    def next_position(self, position: Position) -> Position | None:
        index = self.index(position)
        return self.at(index + 1) if index < self._total else None

    def last_position(self) -> Position:
        if self._total:
            return self.at(self._total)
        return Position(self._ids[-1], -1) if self._ids else EARLIEST

    def entries_between(self, after: Position, upto: Position) -> int:
        return max(0, self.index(upto) - self.index(after))

    def position_after(self, position: Position, count: int) -> Position:
        assert count >= 0
        index = self.index(position)
        target = min(index + count, self._total)
        return self.at(target) if target > index else position
