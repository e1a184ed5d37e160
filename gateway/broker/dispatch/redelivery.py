"""Delivered-but-unacked messages and their redelivery timers (pure).

Owns: for Shared and Key_Shared, which consumer each delivered message is
pending on, how often it was delivered before, and when it is due back.
Rules (docs/compatibility.md §4.4):
- a message is pending on exactly one consumer until it is acked (by anyone:
  Pulsar looks the ack owner up), nacked-and-due, timed out, or its consumer
  leaves;
- ack timeout: a message unacked ``ack_timeout_ms`` after delivery is due back
  (0 = off);
- negative ack: the message stays pending on its consumer (so Key_Shared's
  one-consumer-per-key rule still sees it) and is due back
  ``nack_redelivery_delay_ms`` later; its ack timeout no longer applies.
Both delays are fixed per consumer, so per consumer the delivery order is the
ack-timeout order and the nack order is the due order: deadlines are O(1).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from gateway.broker.dispatch.base import ConsumerId, Message
from storage.formats.positions import MessagePosition


@dataclass(slots=True)
class Pending:
    consumer_id: ConsumerId
    message: Message
    redelivery_count: int  # deliveries before this one
    delivered_ms: int
    nack_due_ms: int | None = None  # set once nacked

    @property
    def position(self) -> MessagePosition:
        return self.message.position

    @property
    def nacked(self) -> bool:
        return self.nack_due_ms is not None


@dataclass(slots=True)
class _Timers:
    ack_timeout_ms: int
    nack_delay_ms: int
    unacked: dict[MessagePosition, Pending]  # delivery order, not nacked
    nacked: deque[Pending]  # nack order (= due order); acked ones are skipped lazily


class PendingTracker:
    def __init__(self) -> None:
        self._by_position: dict[MessagePosition, Pending] = {}
        self._consumers: dict[ConsumerId, _Timers] = {}

    def add_consumer(self, consumer_id: ConsumerId, ack_timeout_ms: int, nack_delay_ms: int) -> None:
        assert consumer_id not in self._consumers
        self._consumers[consumer_id] = _Timers(ack_timeout_ms, nack_delay_ms, {}, deque())

    def remove_consumer(self, consumer_id: ConsumerId) -> list[Pending]:
        """Forget the consumer; returns everything pending on it in log order."""
        timers = self._consumers.pop(consumer_id)
        gone = [p for p in timers.unacked.values()]
        gone += [p for p in timers.nacked if self._by_position.get(p.position) is p]
        for p in gone:
            del self._by_position[p.position]
        return sorted(gone, key=lambda p: p.position)

    # ------------------------------------------------------------ inputs

    def record(
        self, consumer_id: ConsumerId, message: Message, redelivery_count: int, now_ms: int
    ) -> Pending:
        self.record_run(consumer_id, [message], redelivery_count, now_ms)
        return self._by_position[message.position]

    def record_run(
        self, consumer_id: ConsumerId, messages: list[Message], redelivery_count: int, now_ms: int
    ) -> None:
        """``record`` of each of ``messages`` (one step for a consumer's turn)."""
        by_position, unacked = self._by_position, self._consumers[consumer_id].unacked
        for message in messages:
            position = message.position
            assert position not in by_position, position
            pending = Pending(consumer_id, message, redelivery_count, now_ms)
            by_position[position] = unacked[position] = pending

    def ack(self, positions: Iterable[MessagePosition]) -> tuple[list[Pending], list[MessagePosition]]:
        """Remove each message wherever it is pending: (those removed, the positions
        that were not pending)."""
        by_position, consumers = self._by_position, self._consumers
        removed: list[Pending] = []
        missing: list[MessagePosition] = []
        for position in positions:
            pending = by_position.pop(position, None)
            if pending is None:
                missing.append(position)
                continue
            timers = consumers[pending.consumer_id]
            if pending.nack_due_ms is None:
                del timers.unacked[position]
            else:
                self._prune(timers)
            removed.append(pending)
        return removed, missing

    def nack(self, consumer_id: ConsumerId, position: MessagePosition, now_ms: int) -> Pending | None:
        """Mark a message pending on ``consumer_id`` as due back after its nack
        delay; returns it if it was pending there and not nacked already."""
        pending = self._by_position.get(position)
        if pending is None or pending.consumer_id != consumer_id or pending.nacked:
            return None
        timers = self._consumers[consumer_id]
        del timers.unacked[position]
        pending.nack_due_ms = now_ms + timers.nack_delay_ms
        timers.nacked.append(pending)
        return pending

    def expire(self, now_ms: int) -> list[Pending]:
        """Remove and return (in log order) every message due back at ``now_ms``."""
        due: list[Pending] = []
        for timers in self._consumers.values():
            while timers.nacked:
                head = timers.nacked[0]
                if self._by_position.get(head.position) is not head:
                    timers.nacked.popleft()
                    continue
                assert head.nack_due_ms is not None
                if head.nack_due_ms > now_ms:
                    break
                timers.nacked.popleft()
                due.append(head)
            if timers.ack_timeout_ms > 0:
                while timers.unacked:
                    head = next(iter(timers.unacked.values()))
                    if head.delivered_ms + timers.ack_timeout_ms > now_ms:
                        break
                    del timers.unacked[head.position]
                    due.append(head)
        for p in due:
            del self._by_position[p.position]
        return sorted(due, key=lambda p: p.position)

    # ------------------------------------------------------------ queries

    def next_deadline_ms(self) -> int | None:
        deadlines: list[int] = []
        for timers in self._consumers.values():
            if timers.nacked:
                head = timers.nacked[0]
                assert head.nack_due_ms is not None
                deadlines.append(head.nack_due_ms)
            if timers.ack_timeout_ms > 0 and timers.unacked:
                head = next(iter(timers.unacked.values()))
                deadlines.append(head.delivered_ms + timers.ack_timeout_ms)
        return min(deadlines, default=None)

    def get(self, position: MessagePosition) -> Pending | None:
        return self._by_position.get(position)

    def __contains__(self, position: MessagePosition) -> bool:
        return position in self._by_position

    def __len__(self) -> int:
        return len(self._by_position)

    def _prune(self, timers: _Timers) -> None:
        """Drop acked heads of the nack queue so its head is a live deadline."""
        while timers.nacked and self._by_position.get(timers.nacked[0].position) is not timers.nacked[0]:
            timers.nacked.popleft()
