"""Key_Shared hash-range selectors: which consumer owns a hash slot (pure).

Owns: the slot -> consumer map of a Key_Shared subscription. Rules
(docs/compatibility.md §4.5 "Selectors"):
- AUTO_SPLIT (``HashRangeAutoSplitStickyKeyConsumerSelector``): ranges are
  kept as sorted "upper keys"; the first consumer owns upper key 65536 (all
  slots). A new consumer splits the *largest* range (the lowest one on a tie):
  it takes the lower half, ``upper - (upper - lower) // 2``, the owner keeps
  the upper half. A leaving consumer's slots go to the neighbour above; if it
  owned the top range, the neighbour below takes it. Lookup = ceiling(slot).
  A range of one slot cannot be split: the consumer is rejected.
- STICKY: each consumer brings explicit inclusive ranges in 0..65535; empty,
  invalid or overlapping (with its own or another consumer's) ranges are
  rejected (Pulsar: ``ConsumerAssignException``); uncovered slots have no
  owner and are not delivered until someone covers them.
Both report inclusive ranges (AUTO_SPLIT's top range ends at 65535, not at
the 65536 upper key Pulsar prints).
"""

from __future__ import annotations

import bisect
import itertools
from typing import Protocol

from gateway.broker.dispatch.base import (
    HASH_SLOTS,
    ConsumerId,
    ConsumerInfo,
    HashRange,
    KeySharedMode,
    Reject,
    RejectReason,
)

STICKY_RANGES_MAX = 1024  # ranges one STICKY consumer may bring


class HashRangeSelector(Protocol):
    def add(self, consumer_id: ConsumerId, info: ConsumerInfo) -> Reject | None:
        """Assign slots to a new consumer, or say why it cannot join."""
        ...

    def remove(self, consumer_id: ConsumerId) -> None: ...

    def select(self, slot: int) -> ConsumerId | None: ...

    def ranges(self) -> dict[ConsumerId, tuple[HashRange, ...]]: ...


class AutoSplitSelector:
    def __init__(self) -> None:
        self._uppers: list[int] = []  # sorted upper keys
        self._owner: dict[int, ConsumerId] = {}
        self._upper_of: dict[ConsumerId, int] = {}

    def add(self, consumer_id: ConsumerId, info: ConsumerInfo) -> Reject | None:
        assert consumer_id not in self._upper_of
        if not self._uppers:
            self._put(HASH_SLOTS, consumer_id)
            return None
        upper, size = HASH_SLOTS, 0
        lower = 0
        for key in self._uppers:
            if key - lower > size:
                upper, size = key, key - lower
            lower = key
        if size < 2:
            return Reject(consumer_id, RejectReason.TOO_MANY_CONSUMERS, "no hash range left to split")
        self._put(upper - (size >> 1), consumer_id)
        return None

    def remove(self, consumer_id: ConsumerId) -> None:
        upper = self._upper_of.pop(consumer_id)
        index = bisect.bisect_left(self._uppers, upper)
        if upper == HASH_SLOTS and len(self._uppers) > 1:
            below = self._uppers.pop(index - 1)
            heir = self._owner.pop(below)
            self._owner[HASH_SLOTS] = heir
            self._upper_of[heir] = HASH_SLOTS
        else:
            self._uppers.pop(index)
            del self._owner[upper]

    def select(self, slot: int) -> ConsumerId | None:
        index = bisect.bisect_left(self._uppers, slot)
        return self._owner[self._uppers[index]] if index < len(self._uppers) else None

    def ranges(self) -> dict[ConsumerId, tuple[HashRange, ...]]:
        result: dict[ConsumerId, tuple[HashRange, ...]] = {}
        start = 0
        for upper in self._uppers:
            result[self._owner[upper]] = (HashRange(start, min(upper, HASH_SLOTS - 1)),)
            start = upper + 1
        return result

    def _put(self, upper: int, consumer_id: ConsumerId) -> None:
        bisect.insort(self._uppers, upper)
        self._owner[upper] = consumer_id
        self._upper_of[consumer_id] = upper


class StickySelector:
    def __init__(self) -> None:
        self._ranges: dict[ConsumerId, tuple[HashRange, ...]] = {}
        self._starts: list[int] = []  # sorted range starts, parallel to _spans
        self._spans: list[tuple[HashRange, ConsumerId]] = []

    def add(self, consumer_id: ConsumerId, info: ConsumerInfo) -> Reject | None:
        assert consumer_id not in self._ranges
        wanted = sorted(info.sticky_ranges)
        if not 0 < len(wanted) <= STICKY_RANGES_MAX:
            detail = f"STICKY needs 1 to {STICKY_RANGES_MAX} ranges, got {len(wanted)}"
            return Reject(consumer_id, RejectReason.INVALID_HASH_RANGE, detail)
        bad = [r for r in wanted if not r.is_valid()]
        if bad:
            return Reject(consumer_id, RejectReason.INVALID_HASH_RANGE, f"range {bad[0]} outside 0..65535")
        for first, second in itertools.pairwise(wanted):
            if first.overlaps(second):
                return Reject(consumer_id, RejectReason.HASH_RANGE_CONFLICT, f"{first} overlaps {second}")
        # sorted by start, a set of ranges overlaps iff two neighbours do; ours don't
        # overlap each other and the existing ones don't either
        combined = sorted(self._spans + [(r, consumer_id) for r in wanted])
        for (first, a), (second, b) in itertools.pairwise(combined):
            if first.overlaps(second):
                theirs, owner = (first, a) if b == consumer_id else (second, b)
                mine = second if b == consumer_id else first
                detail = f"{mine} overlaps {theirs} of consumer {owner}"
                return Reject(consumer_id, RejectReason.HASH_RANGE_CONFLICT, detail)
        self._ranges[consumer_id] = tuple(wanted)
        self._rebuild()
        return None

    def remove(self, consumer_id: ConsumerId) -> None:
        del self._ranges[consumer_id]
        self._rebuild()

    def select(self, slot: int) -> ConsumerId | None:
        index = bisect.bisect_right(self._starts, slot) - 1
        if index < 0:
            return None
        span, owner = self._spans[index]
        return owner if slot <= span.end else None

    def ranges(self) -> dict[ConsumerId, tuple[HashRange, ...]]:
        return dict(self._ranges)

    def _rebuild(self) -> None:
        self._spans = sorted((r, c) for c, ranges in self._ranges.items() for r in ranges)
        self._starts = [r.start for r, _ in self._spans]


def make_selector(info: ConsumerInfo) -> HashRangeSelector:
    if info.key_shared_mode is KeySharedMode.STICKY:
        return StickySelector()
    return AutoSplitSelector()
