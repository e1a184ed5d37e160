"""In-memory message queues of the multi-consumer dispatchers (pure).

Owns three containers, each keyed by message position so re-reads can be
recognised and acks can cancel a queued redelivery:
- ``ReplayQueue`` (Shared): messages to (re)deliver, lowest position first -
  Pulsar's replay set, which has priority over new reads;
- ``DelayedIndex`` (Shared, Key_Shared): messages whose ``deliver_at_ms`` is in
  the future, released in time order (Pulsar's in-memory
  ``DelayedDeliveryTracker``, docs/compatibility.md §4.10; released when due, never
  early, so no tick imprecision);
- ``HeldBySlot`` (Key_Shared): messages waiting per hash slot, in log order
  per slot, so a slot's messages leave in order.
Bounds are enforced by the dispatchers (``DispatcherConfig``), not here.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterator
from typing import Generic, TypeVar

from gateway.broker.dispatch.base import Message
from storage.formats.positions import MessagePosition

H = TypeVar("H")  # heap element
V = TypeVar("V")  # queued item


class _LazyHeap(Generic[H, V]):
    """Items by position plus a heap of keys; removal drops the item at once
    and the stale heap entry is skipped when it surfaces."""

    def __init__(self) -> None:
        self._heap: list[H] = []
        self._items: dict[MessagePosition, V] = {}

    def remove(self, position: MessagePosition) -> bool:
        """Cancel a queued message; False if it was not queued."""
        if self._items.pop(position, None) is None:
            return False
        if not self._items:
            self._heap.clear()
        return True

    def __contains__(self, position: MessagePosition) -> bool:
        return position in self._items

    def __len__(self) -> int:
        return len(self._items)


class ReplayQueue(_LazyHeap[MessagePosition, Message | tuple[Message, int]]):
    """A message delivered once before (the usual case: its consumer left or was closed
    as slow) is kept as the message alone; any other count as (message, count): a
    subscription whose 1,000 unacked messages came back holds no object per message."""

    def add(self, message: Message, redelivery_count: int) -> None:
        assert message.position not in self._items, message.position
        self._items[message.position] = message if redelivery_count == 1 else (message, redelivery_count)
        heapq.heappush(self._heap, message.position)

    def pop(self) -> tuple[Message, int]:
        """The lowest-position message and its redelivery count."""
        while True:
            position = heapq.heappop(self._heap)
            item = self._items.pop(position, None)
            if item is not None:
                return item if isinstance(item, tuple) else (item, 1)


class DelayedIndex(_LazyHeap[tuple[int, MessagePosition], Message]):
    def add(self, message: Message) -> None:
        assert message.deliver_at_ms is not None
        assert message.position not in self._items, message.position
        self._items[message.position] = message
        heapq.heappush(self._heap, (message.deliver_at_ms, message.position))

    def pop_due(self, now_ms: int) -> list[Message]:
        """Messages with ``deliver_at_ms <= now_ms``, in time then log order."""
        due: list[Message] = []
        while self._heap and self._heap[0][0] <= now_ms:
            _, position = heapq.heappop(self._heap)
            message = self._items.pop(position, None)
            if message is not None:
                due.append(message)
        return due

    def next_deadline_ms(self) -> int | None:
        while self._heap and self._heap[0][1] not in self._items:
            heapq.heappop(self._heap)  # cancelled entry
        return self._heap[0][0] if self._heap else None


class HeldBySlot:
    def __init__(self) -> None:
        self._slots: dict[int, list[tuple[MessagePosition, Message, int]]] = {}
        self._slot_of: dict[MessagePosition, int] = {}

    def add(self, message: Message, redelivery_count: int) -> None:
        position = message.position
        assert position not in self._slot_of, position
        queue = self._slots.setdefault(message.hash_slot, [])
        bisect.insort(queue, (position, message, redelivery_count), key=lambda item: item[0])
        self._slot_of[position] = message.hash_slot

    def pop(self, slot: int) -> tuple[Message, int]:
        """The lowest-position message waiting in ``slot``."""
        queue = self._slots[slot]
        position, message, count = queue.pop(0)
        if not queue:
            del self._slots[slot]
        del self._slot_of[position]
        return message, count

    def remove(self, position: MessagePosition) -> int | None:
        """Cancel a waiting message; returns its slot."""
        slot = self._slot_of.pop(position, None)
        if slot is None:
            return None
        queue = self._slots[slot]
        queue.pop(next(i for i, item in enumerate(queue) if item[0] == position))
        if not queue:
            del self._slots[slot]
        return slot

    def has(self, slot: int) -> bool:
        return slot in self._slots

    def slot_count(self, slot: int) -> int:
        return len(self._slots.get(slot, ()))

    def slots(self) -> Iterator[int]:
        """Slots with waiting messages (a snapshot: safe to pop while iterating)."""
        return iter(list(self._slots))

    def __contains__(self, position: MessagePosition) -> bool:
        return position in self._slot_of

    def __len__(self) -> int:
        return len(self._slot_of)
