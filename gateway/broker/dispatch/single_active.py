"""Exclusive and Failover dispatchers: one active consumer, log order (pure).

Owns: which consumer of an Exclusive or Failover subscription receives
messages, and when the log must be re-read. Rules (docs/compatibility.md §4.2-4.3,
docs/architecture.md §5):
- Exclusive: one consumer; a second is rejected with ``ConsumerBusy``.
- Failover: candidates are the consumers of the best (lowest) priority level,
  sorted by name (then join order); the active one is
  ``partition_index mod count`` on a partitioned topic, else the first point
  at or after murmur3(topic name) on a ring of 100 points per candidate
  (murmur3(name + i)), so single-partition topics spread over consumers.
  Every consumer is told whether it is active (``ActiveChanged``).
- Messages go to the active consumer in log order, within its credit; no
  delayed delivery (docs/compatibility.md §4.10) and no dead-lettering.
- Redelivery keeps order: it is always a rewind (``RewindTo``) to the first
  unacked message, after which the log is re-read. It happens when the
  active consumer changes (after ``failover_delay_ms`` if the old one is
  still attached with unacked messages - time to finish its acks; at once
  otherwise), when it leaves (Exclusive), after a nack's delay, or on ack
  timeout. Re-sent messages carry a redelivery count, which Pulsar's
  single-active dispatcher does not track.
- Memory: messages read beyond the active consumer's credit wait in a buffer
  (cap ``lookahead_max``); past it, or while nobody may receive, messages are
  skipped - and so is everything after them, to keep order - and re-read.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gateway.broker.dispatch.base import (
    ActiveChanged,
    ConsumerId,
    ConsumerInfo,
    ConsumerStats,
    Deliver,
    DispatcherConfig,
    DispatcherStats,
    Effect,
    Message,
    Reject,
    RejectReason,
    RewindTo,
    validate_info,
)
from gateway.broker.flow import FlowControl, FlowMode
from storage.formats.key_hash import key_hash
from storage.formats.positions import MessagePosition

RING_POINTS_PER_CONSUMER = 100


@dataclass(slots=True)
class _Sent:
    consumer_id: ConsumerId
    redelivery_count: int
    delivered_ms: int
    nacked: bool = False


class _SingleActiveDispatcher:
    def __init__(self, config: DispatcherConfig | None = None) -> None:
        self._config = config or DispatcherConfig()
        self._infos: dict[ConsumerId, ConsumerInfo] = {}  # join order
        self._flow = FlowControl(self._config.flow)
        self._active: ConsumerId | None = None  # receives messages now
        self._holder: ConsumerId | None = None  # who ``_sent`` belongs to
        self._sent: dict[MessagePosition, _Sent] = {}  # delivered, unacked, log order
        self._buffer: deque[Message] = deque()
        self._buffered: set[MessagePosition] = set()
        self._skipped_from: MessagePosition | None = None  # first message read but not kept
        self._redelivered: dict[MessagePosition, int] = {}  # counts for re-reads after a rewind
        self._rewind_due_ms: int | None = None  # nack: redeliver everything at this time
        self._switch_due_ms: int | None = None  # Failover switch-over

    # ------------------------------------------------------------ inputs

    def on_permits(self, consumer_id: ConsumerId, n: int, now_ms: int) -> list[Effect]:
        self._flow.grant(consumer_id, n)
        return self._pump(now_ms)

    def on_writable(self, consumer_id: ConsumerId, writable: bool, now_ms: int) -> list[Effect]:
        self._flow.set_writable(consumer_id, writable)
        return self._pump(now_ms) if writable else []

    def on_messages(self, messages: Sequence[Message], now_ms: int) -> list[Effect]:
        if self._redelivered and messages:
            first = messages[0].position  # counts of messages the cursor skipped (acked) are stale
            self._redelivered = {p: c for p, c in self._redelivered.items() if p >= first}
        for message in messages:
            position = message.position
            if position in self._sent or position in self._buffered:
                continue  # re-read of a message we still hold
            if (
                self._active is None
                or self._skipped_from is not None
                or len(self._buffer) >= self._config.lookahead_max
            ):
                if self._skipped_from is None:
                    self._skipped_from = position
                continue
            self._buffer.append(message)
            self._buffered.add(position)
        return self._pump(now_ms)

    def on_ack(
        self, consumer_id: ConsumerId, positions: Iterable[MessagePosition], now_ms: int
    ) -> list[Effect]:
        for position in positions:
            self._settle(position)
        return self._pump(now_ms)

    def on_cumulative_ack(
        self, consumer_id: ConsumerId, position: MessagePosition, now_ms: int
    ) -> list[Effect]:
        """Everything up to and including ``position`` is acked."""
        for acked in [p for p in self._sent if p <= position]:
            self._settle(acked)
        self._redelivered = {p: c for p, c in self._redelivered.items() if p > position}
        return self._pump(now_ms)

    def on_nack(
        self, consumer_id: ConsumerId, positions: Iterable[MessagePosition], now_ms: int
    ) -> list[Effect]:
        info = self._infos.get(consumer_id)
        if info is None:
            return []
        nacked = False
        for position in positions:
            sent = self._sent.get(position)
            if sent is not None and sent.consumer_id == consumer_id and not sent.nacked:
                sent.nacked = True
                self._flow.on_settled(consumer_id)
                nacked = True
        if nacked:
            due = now_ms + info.nack_redelivery_delay_ms
            self._rewind_due_ms = due if self._rewind_due_ms is None else min(self._rewind_due_ms, due)
        return self._pump(now_ms)

    def on_timer(self, now_ms: int) -> list[Effect]:
        return self._pump(now_ms)

    # ------------------------------------------------------------ queries

    def next_deadline_ms(self) -> int | None:
        deadlines = [
            d for d in (self._switch_due_ms, self._rewind_due_ms, self._ack_deadline()) if d is not None
        ]
        return min(deadlines, default=None)

    def read_budget(self) -> int:
        if self._active is None or self._skipped_from is not None:
            return 0
        credit = self._flow.available(self._active) - len(self._buffer)
        return max(0, min(self._config.read_batch_max, credit))

    def stats(self) -> DispatcherStats:
        consumers = []
        for consumer_id, info in self._infos.items():
            if consumer_id == self._active:
                reason = self._flow.blocked_reason(consumer_id)
            else:
                reason = "switching over" if self._switch_due_ms is not None else "standby"
            consumers.append(
                ConsumerStats(
                    consumer_id,
                    info.name,
                    self._flow.available(consumer_id),
                    sum(1 for s in self._sent.values() if s.consumer_id == consumer_id and not s.nacked),
                    reason,
                )
            )
        return DispatcherStats(
            tuple(consumers),
            active_consumer=self._active,
            waiting=len(self._buffer),
            reread_from=self._skipped_from,
        )

    # ------------------------------------------------------------ internals

    def _register(self, consumer_id: ConsumerId, info: ConsumerInfo) -> Reject | None:
        assert consumer_id not in self._infos, consumer_id
        reject = validate_info(consumer_id, info)
        if reject is None and len(self._infos) >= self._config.consumers_max:
            reject = Reject(consumer_id, RejectReason.TOO_MANY_CONSUMERS, f"max {self._config.consumers_max}")
        if reject is None:
            self._infos[consumer_id] = info
            mode = FlowMode.PULL if info.pull_mode else FlowMode.PUSH
            self._flow.add_consumer(consumer_id, mode, info.receiver_queue_size)
        return reject

    def _settle(self, position: MessagePosition) -> None:
        sent = self._sent.pop(position, None)
        if sent is None:
            self._redelivered.pop(position, None)
        elif not sent.nacked:
            self._flow.on_settled(sent.consumer_id)

    def _ack_deadline(self) -> int | None:
        info = self._infos.get(self._holder) if self._holder is not None else None
        if info is None or info.ack_timeout_ms <= 0:
            return None
        oldest = next((s for s in self._sent.values() if not s.nacked), None)
        return None if oldest is None else oldest.delivered_ms + info.ack_timeout_ms

    def _pump(self, now_ms: int) -> list[Effect]:
        """Common tail of every input: timers, then delivery."""
        effects: list[Effect] = []
        if self._switch_due_ms is not None and self._switch_due_ms <= now_ms:
            effects += self._complete_switch()
        ack_deadline = self._ack_deadline()
        if (self._rewind_due_ms is not None and self._rewind_due_ms <= now_ms) or (
            ack_deadline is not None and ack_deadline <= now_ms
        ):
            effects += self._rewind()
        effects += self._dispatch(now_ms)
        if (
            self._skipped_from is not None
            and self._active is not None
            and len(self._buffer) <= self._config.lookahead_max // 2
        ):
            effects.append(RewindTo(self._skipped_from.entry))  # room again: re-read the skipped
            self._skipped_from = None
        return effects

    def _dispatch(self, now_ms: int) -> list[Effect]:
        effects: list[Effect] = []
        active = self._active
        if active is None:
            return effects
        credit = self._flow.available(active)
        while credit > 0 and self._buffer:
            message = self._buffer.popleft()
            self._buffered.remove(message.position)
            count = self._redelivered.pop(message.position, 0)
            self._sent[message.position] = _Sent(active, count, now_ms)
            self._flow.on_delivered(active)
            effects.append(Deliver(active, message, count))
            credit -= 1
        return effects

    def _rewind(self) -> list[Effect]:
        """Take back everything unacked and re-read from the first of it."""
        candidates = [p for p in (next(iter(self._sent), None), self._skipped_from) if p is not None]
        if self._buffer:
            candidates.append(self._buffer[0].position)
        for position, sent in self._sent.items():
            if not sent.nacked:
                self._flow.on_settled(sent.consumer_id)  # no-op if it left
            self._redelivered[position] = sent.redelivery_count + 1
        self._sent.clear()
        self._buffer.clear()
        self._buffered.clear()
        self._skipped_from = None
        self._rewind_due_ms = None
        self._holder = self._active
        return [RewindTo(min(candidates).entry)] if candidates else []

    def _complete_switch(self) -> list[Effect]:
        self._switch_due_ms = None
        return []


class ExclusiveDispatcher(_SingleActiveDispatcher):
    def add_consumer(self, consumer_id: ConsumerId, info: ConsumerInfo, now_ms: int) -> list[Effect]:
        if self._infos:
            owner = next(iter(self._infos.values())).name
            return [Reject(consumer_id, RejectReason.CONSUMER_BUSY, f"exclusive consumer {owner!r} attached")]
        reject = self._register(consumer_id, info)
        if reject is not None:
            return [reject]
        self._active = consumer_id
        return self._rewind() + self._pump(now_ms)  # re-read what arrived while nobody was attached

    def remove_consumer(self, consumer_id: ConsumerId, now_ms: int) -> list[Effect]:
        if self._infos.pop(consumer_id, None) is None:
            return []
        self._flow.remove_consumer(consumer_id)
        self._active = None
        return self._rewind() + self._pump(now_ms)


class FailoverDispatcher(_SingleActiveDispatcher):
    def __init__(self, config: DispatcherConfig | None = None) -> None:
        super().__init__(config)
        self._chosen: ConsumerId | None = None  # who should be active

    def add_consumer(self, consumer_id: ConsumerId, info: ConsumerInfo, now_ms: int) -> list[Effect]:
        reject = self._register(consumer_id, info)
        if reject is not None:
            return [reject]
        return self._reselect(now_ms, joined=consumer_id)

    def remove_consumer(self, consumer_id: ConsumerId, now_ms: int) -> list[Effect]:
        if self._infos.pop(consumer_id, None) is None:
            return []
        self._flow.remove_consumer(consumer_id)
        if self._active == consumer_id:
            self._active = None
        return self._reselect(now_ms)

    def active_consumer(self) -> ConsumerId | None:
        return self._chosen

    def _reselect(self, now_ms: int, joined: ConsumerId | None = None) -> list[Effect]:
        chosen = self._choose()
        effects: list[Effect] = []
        if chosen != self._chosen:
            self._chosen = chosen
            effects += [ActiveChanged(c, c == chosen) for c in self._infos]
            effects += self._begin_switch(now_ms)
        else:
            if joined is not None:
                effects.append(ActiveChanged(joined, False))
            if self._switch_due_ms is not None and self._holder not in self._infos:
                effects += self._complete_switch()  # nobody left to finish acks: don't wait
        return effects + self._pump(now_ms)

    def _begin_switch(self, now_ms: int) -> list[Effect]:
        self._active = None
        holder_attached = self._holder is not None and self._holder in self._infos
        if holder_attached and self._chosen == self._holder:
            self._switch_due_ms = None  # switched back before the switch-over: nothing to redo
            self._active = self._holder
            return []
        if holder_attached and self._sent and self._chosen is not None and self._config.failover_delay_ms > 0:
            self._switch_due_ms = now_ms + self._config.failover_delay_ms
            return []
        return self._complete_switch()

    def _complete_switch(self) -> list[Effect]:
        self._switch_due_ms = None
        self._active = None
        effects = self._rewind()
        self._active = self._holder = self._chosen
        return effects

    def _choose(self) -> ConsumerId | None:
        if not self._infos:
            return None
        best = min(info.priority_level for info in self._infos.values())
        order = {c: i for i, c in enumerate(self._infos)}
        candidates = sorted(
            (c for c, info in self._infos.items() if info.priority_level == best),
            key=lambda c: (self._infos[c].name, order[c]),
        )
        if self._config.partition_index >= 0:
            return candidates[self._config.partition_index % len(candidates)]
        ring = sorted(
            (_hash(f"{self._infos[c].name}{i}"), rank, c)
            for rank, c in enumerate(candidates)
            for i in range(RING_POINTS_PER_CONSUMER)
        )
        index = bisect.bisect_left(ring, (_hash(self._config.topic_name), -1, ConsumerId(-1)))
        return ring[index % len(ring)][2]


def _hash(text: str) -> int:
    """Pulsar's ``Murmur3_32Hash.makeHash``: murmur3 x86_32, seed 0, top bit masked."""
    return key_hash(text.encode())
