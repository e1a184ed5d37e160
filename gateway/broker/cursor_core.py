"""A durable subscription's acknowledgement state (pure).

Owns: ``Cursor`` - the mark-delete position (every entry <= it is acked),
the sorted disjoint ranges of fully acked entries beyond it
(``cursor_ranges.AckedRanges``), the batch-index
acks of partly acked entries, and the message count of every entry the
subscription has read and not yet fully acked; its bounded ``snapshot`` and
``Cursor.restore``. What it needs to know about the topic's log comes in as
a ``log_layout.LogView`` argument (``LedgerLayout`` is the plain one).

Rules (docs/compatibility.md §4.6-4.8, docs/architecture.md §4):
- Individual ack of an entry, or of its last unacked batch index, makes the
  entry acked; the mark-delete position then moves to the highest P such that
  every entry <= P is acked (holes that fill collapse into it). A partly acked
  batch entry is not acked: it counts in the backlog and is redelivered whole,
  and ``is_acked`` tells a dispatcher which of its messages to skip.
- Cumulative ack of (L, E, B) acks every message up to and including it.
- An ack is an idempotent no-op when its entry is at or before mark-delete,
  already acked, or was never seen: an entry is seen once ``on_read`` told the
  cursor its message count (so a client cannot ack entries it was never sent,
  and batch-index acks are always checked against the real batch size).
- Backlog = entries after mark-delete that are not fully acked (a batch is 1).
- ``snapshot`` persists mark-delete exactly plus the first
  ``RANGES_PERSISTED_MAX`` acked ranges and ``BATCHES_PERSISTED_MAX`` partly
  acked entries (Pulsar's managedLedgerMaxUnackedRangesToPersistInMetadataStore
  = 1000). Acks beyond the cap live in memory only: after a crash those
  messages are delivered again (at-least-once), never lost.
- Bounds: acked ranges and partial entries only ever cover seen entries, whose
  number is capped by ``ENTRIES_TRACKED_MAX`` (and in practice by the
  dispatcher's unacked limits); past the cap a read entry is not tracked and
  its acks are no-ops until it is read again (at-least-once).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from gateway.broker.cursor_ranges import AckedRanges
from gateway.broker.log_layout import LogView
from gateway.broker.message_counts import MessageView
from gateway.errors import CorruptCursorSnapshot
from storage.formats.entry_format import MESSAGES_PER_ENTRY_MAX
from storage.formats.positions import EARLIEST, LATEST, NO_BATCH, MessagePosition, Position

RANGES_PERSISTED_MAX = 1000
BATCHES_PERSISTED_MAX = 1000
ENTRIES_TRACKED_MAX = 200_000  # must exceed the dispatcher's unacked + read-ahead limits
SNAPSHOT_VERSION = 1

_HEX = re.compile(r"[0-9a-f]{1,256}")


class Cursor:
    """Ack state of one durable subscription. Mutators return True when the
    state changed (``revision`` then increases: persist when it moved)."""

    def __init__(
        self,
        mark_delete: Position,
        *,
        ranges_persisted_max: int = RANGES_PERSISTED_MAX,
        batches_persisted_max: int = BATCHES_PERSISTED_MAX,
        entries_tracked_max: int = ENTRIES_TRACKED_MAX,
    ) -> None:
        assert ranges_persisted_max >= 0 and batches_persisted_max >= 0 and entries_tracked_max >= 1
        self._mark_delete = mark_delete
        self._ranges = AckedRanges()  # beyond mark-delete
        self._partial: dict[Position, int] = {}  # entry -> bitmask of acked batch indices
        self._sizes: dict[Position, int] = {}  # seen entry -> message count (not fully acked)
        self._ranges_persisted_max = ranges_persisted_max
        self._batches_persisted_max = batches_persisted_max
        self._entries_tracked_max = entries_tracked_max
        self.revision = 0

    # -- queries ---------------------------------------------------------------

    @property
    def mark_delete(self) -> Position:
        return self._mark_delete

    def is_acked(self, message: MessagePosition) -> bool:
        """Whether ``message`` is acked (for a NO_BATCH position: the whole entry)."""
        entry = message.entry
        if entry <= self._mark_delete or entry in self._ranges:
            return True
        if message.batch_index == NO_BATCH:
            return False
        return bool(self._partial.get(entry, 0) >> message.batch_index & 1)

    def acked_mask(self, entry: Position) -> int:
        """Bitmask of the acked batch indices of ``entry``; -1 when it is wholly acked
        (one lookup per entry instead of one ``is_acked`` per message)."""
        if entry <= self._mark_delete or entry in self._ranges:
            return -1
        return self._partial.get(entry, 0)

    def backlog(self, log: LogView) -> int:
        """Entries after mark-delete that are not fully acked."""
        total = log.entries_between(self._mark_delete, log.last_position())
        return max(0, total - self._ranges.entries)

    def acked_ranges(self) -> list[tuple[Position, Position]]:
        """Fully acked entries beyond mark-delete, as inclusive (first, last) pairs."""
        return [(Position(ledger, first), Position(ledger, last)) for ledger, first, last in self._ranges]

    def individually_deleted_messages(self) -> str:
        """The ranges in Pulsar's internal-stats form, e.g. ``[(5:2..5:7], (6:-1..6:0]]``."""
        inner = ", ".join(f"({ledger}:{first - 1}..{ledger}:{last}]" for ledger, first, last in self._ranges)
        return f"[{inner}]"

    def backlog_messages(self, log: LogView, messages: MessageView) -> int:
        """Messages after mark-delete that are not acked (as exact as ``messages`` is)."""
        total = messages.messages_between(self._mark_delete, log.last_position())
        for ledger, first, last in self._ranges:
            total -= messages.messages_between(Position(ledger, first - 1), Position(ledger, last))
        return max(0, total - self.partial_acked_messages())

    def partial_acked_messages(self) -> int:
        """Acked messages of partly acked batch entries."""
        return sum(mask.bit_count() for mask in self._partial.values())

    @property
    def range_count(self) -> int:
        return len(self._ranges)

    @property
    def partially_acked_entries(self) -> int:
        return len(self._partial)

    @property
    def tracked_entries(self) -> int:
        return len(self._sizes)

    # -- inputs ----------------------------------------------------------------

    def on_read(self, entry: Position, message_count: int) -> None:
        """The subscription read ``entry`` holding ``message_count`` messages; call
        it for every entry read or re-read, before delivering its messages."""
        assert 1 <= message_count <= MESSAGES_PER_ENTRY_MAX, message_count
        if entry <= self._mark_delete or entry in self._sizes or entry in self._ranges:
            return
        if len(self._sizes) >= self._entries_tracked_max:
            self._sizes = {p: n for p, n in self._sizes.items() if p > self._mark_delete}
            if len(self._sizes) >= self._entries_tracked_max:
                return
        self._sizes[entry] = message_count

    def ack(self, message: MessagePosition, log: LogView) -> bool:
        """Individual ack of one message (NO_BATCH: of its whole entry)."""
        entry = message.entry
        size = self._sizes.get(entry)
        if size is None or entry <= self._mark_delete:
            return False  # never seen, already acked, or at/before mark-delete
        if message.batch_index != NO_BATCH:
            if not 0 <= message.batch_index < size:
                return False
            mask = self._partial.get(entry, 0)
            bit = 1 << message.batch_index
            if mask & bit:
                return False
            if mask | bit != (1 << size) - 1:
                self._partial[entry] = mask | bit
                self.revision += 1
                return True
        self._complete(entry, log)
        self.revision += 1
        return True

    def ack_many(self, messages: Iterable[MessagePosition], log: LogView) -> list[MessagePosition]:
        """``ack`` of each message in turn; returns the ones that changed the state. A run
        of batch indices of one entry (how a batch is acked) updates its mask once."""
        changed: list[MessagePosition] = []
        run: list[MessagePosition] = []
        for message in messages:
            if run and (
                message.entry_id != run[0].entry_id
                or message.ledger_id != run[0].ledger_id
                or message.batch_index == NO_BATCH
            ):
                self._ack_run(run, changed, log)
                run = []
            if message.batch_index == NO_BATCH:
                if self.ack(message, log):
                    changed.append(message)
            else:
                run.append(message)
        if run:
            self._ack_run(run, changed, log)
        return changed

    def _ack_run(self, run: list[MessagePosition], changed: list[MessagePosition], log: LogView) -> None:
        """Batch-index acks of one entry, in order (``ack`` for each, one mask update)."""
        entry = run[0].entry
        size = self._sizes.get(entry)
        if size is None or entry <= self._mark_delete:
            return
        before = mask = self._partial.get(entry, 0)
        for message in run:
            index = message.batch_index
            if 0 <= index < size and not mask >> index & 1:
                mask |= 1 << index
                changed.append(message)
        if mask == before:
            return
        self.revision += 1
        if mask != (1 << size) - 1:
            self._partial[entry] = mask
            return
        self._complete(entry, log)

    def _complete(self, entry: Position, log: LogView) -> None:
        """Every message of ``entry`` is acked now: it joins the acked ranges."""
        self._partial.pop(entry, None)
        del self._sizes[entry]
        self._ranges.add(entry)
        self._collapse(log)

    def ack_cumulative(self, message: MessagePosition, log: LogView) -> bool:
        """Cumulative ack: every message up to and including ``message``."""
        entry = message.entry
        if entry <= self._mark_delete:
            return False
        size = self._sizes.get(entry)
        if size is None:
            return entry in self._ranges and self._advance(entry, log)  # an acked entry: whole
        index = message.batch_index
        if index == NO_BATCH or index == size - 1:
            return self._advance(entry, log)
        if not 0 <= index < size:
            return False
        mask = self._partial.get(entry, 0) | (1 << index + 1) - 1
        if mask == (1 << size) - 1:
            return self._advance(entry, log)
        changed = self._advance(Position(entry.ledger_id, entry.entry_id - 1), log)
        if mask != self._partial.get(entry, 0):
            self._partial[entry] = mask
            changed = True
            self.revision += 1
        return changed

    def expire(self, upto: Position, log: LogView) -> bool:
        """Message TTL: ack every entry up to ``upto`` (clamped to the log's end)."""
        return self._advance(min(upto, log.last_position()), log)

    def _past_acked_ranges(
        self, count: int, between: Callable[[Position, Position], int]
    ) -> tuple[Position, int]:
        """Where ``count`` unacked units (entries or messages, as ``between`` counts
        them) take the mark-delete position across the acked ranges: the last acked
        range's end that the count reaches past, and what is left of the count there."""
        assert count >= 0
        remaining = count
        current = self._mark_delete
        for ledger, first, last in self._ranges:
            gap = between(current, Position(ledger, first - 1))
            if remaining <= gap:
                break
            remaining -= gap
            current = Position(ledger, last)
        return current, remaining

    def skip(self, count: int, log: LogView) -> bool:
        """Ack the next ``count`` entries that are not acked yet (admin skip)."""
        current, remaining = self._past_acked_ranges(count, log.entries_between)
        if remaining:
            current = log.position_after(current, remaining)
        return self._advance(current, log)

    def skip_messages(self, count: int, log: LogView, messages: MessageView) -> bool:
        """Ack the next ``count`` messages that are not acked yet (admin skip; a batch
        entry may end up partly acked)."""
        current, remaining = self._past_acked_ranges(count, messages.messages_between)
        if not remaining:
            return self._advance(current, log)
        if log.next_position(current) is None:
            return self._advance(current, log)
        target = remaining  # messages to pass, acked ones of partly acked entries included
        while True:
            entry, taken, size = messages.locate(current, target)
            acked = self._partly_acked_between(current, entry, taken)
            if target - acked >= remaining or taken >= size:
                break
            target = remaining + acked
        if taken >= size or size <= 1:
            return self._advance(entry, log)
        changed = self._advance(Position(entry.ledger_id, entry.entry_id - 1), log)
        if entry not in self._ranges and entry > self._mark_delete:
            self._sizes = {entry: size, **{p: n for p, n in self._sizes.items() if p != entry}}  # log order
            mask = self._partial.get(entry, 0) | (1 << taken) - 1
            if mask == (1 << size) - 1:
                return self.ack(MessagePosition(entry.ledger_id, entry.entry_id), log) or changed
            self._partial[entry] = mask
            self.revision += 1
            changed = True
        return changed

    def _partly_acked_between(self, after: Position, entry: Position, first: int) -> int:
        """Acked messages of partly acked entries after ``after`` and before ``entry``,
        plus those among the first ``first`` messages of ``entry``."""
        total = 0
        for position, mask in self._partial.items():
            if after < position < entry:
                total += mask.bit_count()
            elif position == entry:
                total += (mask & ((1 << first) - 1)).bit_count()
        return total

    def seek(self, position: Position, log: LogView, *, inclusive: bool = True) -> None:
        """Reset: everything before ``position`` (and it too unless ``inclusive``)
        is acked, everything after it is not; EARLIEST and LATEST are the log's
        ends. Never moves past the log's last entry."""
        if position == EARLIEST:
            mark_delete = EARLIEST
        elif position == LATEST:
            mark_delete = log.last_position()
        elif inclusive and position.entry_id >= 0:
            mark_delete = Position(position.ledger_id, position.entry_id - 1)
        else:
            mark_delete = position
        self._mark_delete = min(mark_delete, log.last_position())
        self._ranges.clear()
        self._partial.clear()
        self._sizes.clear()
        self.revision += 1

    def ack_batch_prefix(self, entry: Position, count: int) -> None:
        """Treat the first ``count`` messages of the batch entry ``entry`` as acked
        while the entry itself stays unacked: a reader that starts inside a batch
        (Pulsar's client skips the batch indices before its start id)."""
        if count > 0 and entry > self._mark_delete:
            self._partial[entry] = self._partial.get(entry, 0) | (1 << count) - 1
            self.revision += 1

    # -- persistence -----------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """A JSON-serialisable, bounded picture of the ack state."""
        known = [(p, mask) for p, mask in self._partial.items() if p in self._sizes]  # size needed below
        partial = sorted(known)[: self._batches_persisted_max]
        return {
            "version": SNAPSHOT_VERSION,
            "markDelete": [self._mark_delete.ledger_id, self._mark_delete.entry_id],
            "ranges": [list(r) for r in self._ranges.head(self._ranges_persisted_max)],
            "batches": [[p.ledger_id, p.entry_id, self._sizes[p], format(mask, "x")] for p, mask in partial],
        }

    @classmethod
    def restore(cls, snapshot: Any, **limits: int) -> Cursor:
        """A cursor from ``snapshot()``'s output; ``CorruptCursorSnapshot`` if invalid."""
        try:
            return cls._restore(snapshot, **limits)
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise CorruptCursorSnapshot(f"cursor snapshot unusable: {exc!r}") from exc

    @classmethod
    def _restore(cls, snapshot: Any, **limits: int) -> Cursor:
        if not isinstance(snapshot, dict) or snapshot.get("version") != SNAPSHOT_VERSION:
            raise ValueError("not a version-1 cursor snapshot")
        ledger, entry = _ints(snapshot["markDelete"], 2)
        cursor = cls(Position(ledger, entry), **limits)
        previous = (ledger, entry)
        for item in snapshot["ranges"][: cursor._ranges_persisted_max]:
            ledger, first, last = _ints(item, 3)
            if not (previous < (ledger, first - 1) and first <= last):
                raise ValueError(f"range {item} is not sorted, disjoint and after mark-delete")
            cursor._ranges.append(ledger, first, last)
            previous = (ledger, last)
        for item in snapshot["batches"][: cursor._batches_persisted_max]:
            ledger, entry, size = _ints(item[:3], 3)
            position = Position(ledger, entry)
            if not (
                isinstance(item[3], str) and _HEX.fullmatch(item[3]) and 1 < size <= MESSAGES_PER_ENTRY_MAX
            ):
                raise ValueError(f"batch {item} has a bad size or mask")
            mask = int(item[3], 16)
            if (
                not 0 < mask < (1 << size) - 1
                or position <= cursor._mark_delete
                or position in cursor._ranges
            ):
                raise ValueError(f"batch {item} is empty, full or already acked")
            cursor._partial[position] = mask
            cursor._sizes[position] = size
        return cursor

    # -- internals -------------------------------------------------------------

    def _advance(self, mark_delete: Position, log: LogView) -> bool:
        """Move mark-delete forward to ``mark_delete`` and forget what it covers
        (not if no entry lies in between: (5:99) and (6:-1) may be the same point)."""
        if mark_delete <= self._mark_delete or not log.entries_between(self._mark_delete, mark_delete):
            return False
        self._mark_delete = mark_delete
        self._ranges.drop_through(mark_delete)
        if self._partial:
            self._partial = {p: mask for p, mask in self._partial.items() if p > mark_delete}
        while self._sizes and next(iter(self._sizes)) <= mark_delete:  # read in log order: oldest first
            del self._sizes[next(iter(self._sizes))]
        self._collapse(log)
        self.revision += 1
        return True

    def _collapse(self, log: LogView) -> None:
        """Fold acked ranges that start right after mark-delete into it."""
        while (head := self._ranges.first()) is not None:
            ledger, first, last = head
            if ledger == self._mark_delete.ledger_id:
                adjacent = first == self._mark_delete.entry_id + 1
            else:
                adjacent = log.next_position(self._mark_delete) == Position(ledger, first)
            if not adjacent:
                return
            self._mark_delete = Position(ledger, last)
            self._ranges.drop_first()


def _ints(item: Any, count: int) -> tuple[int, ...]:
    if not isinstance(item, list | tuple) or len(item) != count or any(type(v) is not int for v in item):
        raise ValueError(f"expected {count} integers, got {item!r}")
    return tuple(item)
