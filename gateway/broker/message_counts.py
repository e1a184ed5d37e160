"""How many messages the entries of a topic's log hold (pure).

Owns: ``MessageCounts`` - per ledger, the cumulative message count of every
entry appended while this gateway owned the topic, and the total of ledgers
known only from the ledger list - and ``CountedView``, which answers the
message-level questions of backlog, skip and peek over a ``LedgerLayout``.

Rules: Folio batches many messages into one entry (docs/architecture.md §4), but users
count messages, so stats and admin operations do too. Counts are exact for
entries this gateway appended and for whole ledgers whose total the ledger
list records; for other ledgers (recovered after a crash) a part of a ledger
is estimated pro rata, and a ledger with no recorded total counts one message
per entry (a lower bound). Recording costs one array append per entry, never
anything per message.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from typing import Protocol

from gateway.broker.log_layout import LedgerLayout
from storage.formats.positions import Position


class MessageView(Protocol):
    """Message-level questions about a log (the cursor's skip and backlog ask them)."""

    def messages_between(self, after: Position, upto: Position) -> int:
        """Messages in the entries p with ``after < p <= upto``."""
        ...

    def locate(self, after: Position, n: int) -> tuple[Position, int, int]:
        """The entry holding the ``n``-th (1-based) message after ``after``, how
        many of its messages are among the first ``n``, and its message count
        (0 if unknown). Past the end: the last entry, whole."""
        ...


class MessageCounts:
    """Messages per entry, per ledger, as far as this gateway knows them."""

    __slots__ = ("_prefix", "_totals")

    def __init__(self) -> None:
        self._prefix: dict[int, array[int]] = {}  # ledger -> cumulative messages of entries 0..n-1
        self._totals: dict[int, int] = {}  # ledger -> messages (from the ledger list), 0 = unknown

    def set_total(self, ledger_id: int, messages: int) -> None:
        if messages > 0:
            self._totals[ledger_id] = messages

    def on_entry(self, ledger_id: int, entry_id: int, count: int) -> None:
        """Entry ``entry_id`` of ``ledger_id`` holds ``count`` messages (entries arrive in order)."""
        prefix = self._prefix.get(ledger_id)
        if prefix is None:
            if entry_id != 0:
                return  # a ledger this gateway did not write from its start: no exact counts
            prefix = self._prefix[ledger_id] = array("q")
        if entry_id != len(prefix):
            return
        prefix.append((prefix[-1] if prefix else 0) + count)

    def ledger_total(self, ledger_id: int) -> int:
        """Messages of the ledger (0 if unknown)."""
        prefix = self._prefix.get(ledger_id)
        if prefix:
            return prefix[-1]
        return self._totals.get(ledger_id, 0)

    def forget(self, ledger_id: int) -> None:
        self._prefix.pop(ledger_id, None)
        self._totals.pop(ledger_id, None)

    def entry_size(self, ledger_id: int, entry_id: int) -> int:
        """Messages in one entry (0 if unknown)."""
        prefix = self._prefix.get(ledger_id)
        if prefix is None or not 0 <= entry_id < len(prefix):
            return 0
        return prefix[entry_id] - (prefix[entry_id - 1] if entry_id else 0)

    def in_range(self, ledger_id: int, entries: int, first: int, last: int) -> int:
        """Messages in entries ``first..last`` of a ledger holding ``entries`` entries."""
        if last < first:
            return 0
        prefix = self._prefix.get(ledger_id)
        if prefix is not None and len(prefix) > last:
            return prefix[last] - (prefix[first - 1] if first else 0)
        total = self._totals.get(ledger_id, 0)
        span = last - first + 1
        if total and entries:
            return total if span >= entries else max(span, round(total * span / entries))
        return span

    def view(self, layout: LedgerLayout) -> CountedView:
        return CountedView(layout, self)


def _span(ledger: int, count: int, after: Position, upto: Position) -> tuple[int, int]:
    """The entries (first, last) of ``ledger`` with ``after < p <= upto``."""
    if after.ledger_id > ledger or upto.ledger_id < ledger:
        return 0, -1
    first = after.entry_id + 1 if after.ledger_id == ledger else 0
    last = min(upto.entry_id, count - 1) if upto.ledger_id == ledger else count - 1
    return max(first, 0), last


class CountedView:
    """``MessageView`` of one layout of the log."""

    __slots__ = ("_counts", "_layout")

    def __init__(self, layout: LedgerLayout, counts: MessageCounts) -> None:
        self._layout = layout
        self._counts = counts

    @property
    def layout(self) -> LedgerLayout:
        return self._layout

    def messages_between(self, after: Position, upto: Position) -> int:
        total = 0
        for ledger, count in self._layout.ledgers:
            first, last = _span(ledger, count, after, upto)
            total += self._counts.in_range(ledger, count, first, last)
        return total

    def total(self) -> int:
        return sum(
            self._counts.in_range(ledger, count, 0, count - 1) for ledger, count in self._layout.ledgers
        )

    def locate(self, after: Position, n: int) -> tuple[Position, int, int]:
        assert n >= 1
        last = self._layout.last_position()
        remaining = n
        for ledger, count in self._layout.ledgers:
            first, end = _span(ledger, count, after, last)
            here = self._counts.in_range(ledger, count, first, end)
            if here < remaining:
                remaining -= here
                continue
            return self._inside(ledger, count, first, end, remaining)
        size = self._counts.entry_size(last.ledger_id, last.entry_id)
        return last, size, size

    def _inside(self, ledger: int, count: int, first: int, end: int, n: int) -> tuple[Position, int, int]:
        counts = self._counts
        prefix = counts._prefix.get(ledger)
        if prefix is not None and len(prefix) > end:
            base = prefix[first - 1] if first else 0
            entry = bisect_left(prefix, base + n, first, end + 1)
            before = prefix[entry - 1] if entry else 0
            size = prefix[entry] - before
            return Position(ledger, entry), base + n - before, size
        per_entry = max(1.0, counts.in_range(ledger, count, first, end) / (end - first + 1))
        entry = min(end, first + int((n - 1) // per_entry))
        return Position(ledger, entry), 0, 0  # unknown size: the whole entry
