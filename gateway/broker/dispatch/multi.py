"""What Shared and Key_Shared have in common: consumers, flow, redelivery,
dead-lettering, delayed delivery and bounded look-ahead (pure).

Owns: the ``Dispatcher`` inputs for subscriptions with many receiving
consumers; subclasses decide who gets a message (``_offer``, ``_requeue``,
``_dispatch``). Rules (docs/compatibility.md §4.4, §4.10):
- a consumer's pending messages come back (redelivery count + 1) when it
  leaves, when a nack's delay has passed, or on ack timeout; credit is
  released at that point, or at nack time (pulsar #2731);
- a message due back whose count has reached the holder's
  ``max_redeliver_count`` becomes ``DeadLetter`` instead, so it is delivered
  at most ``max_redeliver_count + 1`` times; so does one that is about to go
  to a consumer whose maximum it already exceeds;
- a message with ``deliver_at_ms`` in the future waits in the delayed index
  and is offered like a new message once due;
- memory is bounded: a new message that cannot be kept (look-ahead or delayed
  index full) is dropped and its position remembered; once there is room again
  the dispatcher emits ``RewindTo`` and the log is re-read from there
  (already pending or queued messages are recognised and skipped). A rewind
  never moves the read position forward: a dropped message the read has not
  reached since the last rewind (a due delayed one) needs none.
Every input ends in ``_settle``: expire timers, release due delayed messages,
dispatch, maybe rewind.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence

from gateway.broker.dispatch.base import (
    ConsumerId,
    ConsumerInfo,
    ConsumerStats,
    DeadLetter,
    Deliver,
    DispatcherConfig,
    DispatcherStats,
    Effect,
    HashRange,
    Message,
    Reject,
    RejectReason,
    RewindTo,
    validate_info,
)
from gateway.broker.dispatch.queues import DelayedIndex
from gateway.broker.dispatch.redelivery import Pending, PendingTracker
from gateway.broker.flow import FlowControl, FlowMode
from storage.formats.positions import MessagePosition, Position


class MultiConsumerDispatcher(ABC):
    def __init__(self, config: DispatcherConfig | None = None) -> None:
        self._config = config or DispatcherConfig()
        self._infos: dict[ConsumerId, ConsumerInfo] = {}  # join order
        self._flow = FlowControl(self._config.flow)
        self._pending = PendingTracker()
        self._delayed = DelayedIndex()
        self._reread_from: MessagePosition | None = None
        self._dropped_delayed = False
        self._read_next: Position | None = None  # where the shell's next read starts
        # the highest position ever given to ``on_messages``: one beyond it is new to
        # this dispatcher (not pending, delayed or queued), so it needs no look-ups
        self._seen_to: MessagePosition | None = None
        # Key_Shared's ``_released`` needs each acked message; Shared has no such hook
        self._hooks_released = type(self)._released is not MultiConsumerDispatcher._released

    # ------------------------------------------------------------ inputs

    def add_consumer(self, consumer_id: ConsumerId, info: ConsumerInfo, now_ms: int) -> list[Effect]:
        assert consumer_id not in self._infos, consumer_id
        reject = validate_info(consumer_id, info)
        if reject is None and len(self._infos) >= self._config.consumers_max:
            reject = Reject(consumer_id, RejectReason.TOO_MANY_CONSUMERS, f"max {self._config.consumers_max}")
        if reject is None:
            reject = self._admit(consumer_id, info)
        if reject is not None:
            return [reject]
        self._infos[consumer_id] = info
        mode = FlowMode.PULL if info.pull_mode else FlowMode.PUSH
        self._flow.add_consumer(consumer_id, mode, info.receiver_queue_size)
        self._pending.add_consumer(consumer_id, info.ack_timeout_ms, info.nack_redelivery_delay_ms)
        effects = self._joined(consumer_id)
        return effects + self._settle(now_ms)

    def remove_consumer(self, consumer_id: ConsumerId, now_ms: int) -> list[Effect]:
        info = self._infos.pop(consumer_id, None)
        if info is None:
            return []
        self._flow.remove_consumer(consumer_id)
        gone = self._pending.remove_consumer(consumer_id)
        effects = self._left(consumer_id)
        effects += self._take_back(gone, info)
        return effects + self._settle(now_ms)

    def on_permits(self, consumer_id: ConsumerId, n: int, now_ms: int) -> list[Effect]:
        self._flow.grant(consumer_id, n)
        return self._settle(now_ms)

    def on_writable(self, consumer_id: ConsumerId, writable: bool, now_ms: int) -> list[Effect]:
        self._flow.set_writable(consumer_id, writable)
        return self._settle(now_ms) if writable else []

    def on_messages(self, messages: Sequence[Message], now_ms: int) -> list[Effect]:
        effects: list[Effect] = []
        delayed_on = self._config.delayed_delivery_enabled
        if messages:  # they come in log order, as read: the read has passed the last one
            newest = messages[-1].position
            after = Position(newest.ledger_id, newest.entry_id + 1)
            if self._read_next is None or after > self._read_next:
                self._read_next = after
        seen_to = self._seen_to
        fresh: list[Message] = []
        for message in messages:
            position = message.position
            if (
                seen_to is not None
                and position <= seen_to
                and (position in self._pending or position in self._delayed or self._knows(position))
            ):
                continue  # a re-read of something we still hold
            if delayed_on and message.deliver_at_ms is not None and message.deliver_at_ms > now_ms:
                if len(self._delayed) >= self._config.delayed_max:
                    self._dropped_delayed = True
                    self._note_drop(position)
                else:
                    self._delayed.add(message)
                continue
            fresh.append(message)
        if messages and (seen_to is None or messages[-1].position > seen_to):
            self._seen_to = messages[-1].position
        effects += self._offer_all(fresh, now_ms)
        return effects + self._settle(now_ms)

    def on_ack(
        self, consumer_id: ConsumerId, positions: Iterable[MessagePosition], now_ms: int
    ) -> list[Effect]:
        settled: dict[ConsumerId, int]  # credit back per consumer, released once
        removed: list[Pending] = []
        if self._hooks_released:
            removed, missing = self._pending.ack(positions)
            settled = {}
        else:  # no ``_released`` hook to call: no ``Pending`` is built per acked message
            settled, missing = self._pending.ack_counts(positions)
        for position in missing:
            self._forget(position)  # acked while queued for redelivery: don't resend
            self._delayed.remove(position)
        released = self._released
        for pending in removed:
            if pending.nack_due_ms is None:  # a nacked one gave its credit back already
                settled[pending.consumer_id] = settled.get(pending.consumer_id, 0) + 1
            released(pending)
        for holder, n in settled.items():
            self._flow.on_settled(holder, n)
        return self._settle(now_ms)

    def on_nack(
        self, consumer_id: ConsumerId, positions: Iterable[MessagePosition], now_ms: int
    ) -> list[Effect]:
        if consumer_id not in self._infos:
            return []
        for position in positions:
            if self._pending.nack(consumer_id, position, now_ms) is not None:
                self._flow.on_settled(consumer_id)
        return self._settle(now_ms)

    def on_timer(self, now_ms: int) -> list[Effect]:
        return self._settle(now_ms)

    # ------------------------------------------------------------ queries

    def next_deadline_ms(self) -> int | None:
        deadlines = (self._pending.next_deadline_ms(), self._delayed.next_deadline_ms())
        return min((d for d in deadlines if d is not None), default=None)

    def read_budget(self) -> int:
        if not self._infos:
            return 0
        return max(0, min(self._config.read_batch_max, self._budget_credit()))

    def stats(self) -> DispatcherStats:
        consumers = []
        for consumer_id, info in self._infos.items():
            ranges, waiting, reason = self._consumer_view(consumer_id)
            consumers.append(
                ConsumerStats(
                    consumer_id,
                    info.name,
                    self._flow.available(consumer_id),
                    self._flow.unacked(consumer_id),
                    self._flow.blocked_reason(consumer_id) or reason,
                    ranges,
                    waiting,
                )
            )
        return DispatcherStats(
            tuple(consumers),
            waiting=self._waiting_total(),
            delayed=len(self._delayed),
            draining_hashes=self._draining_hashes(),
            reread_from=self._reread_from,
        )

    # ------------------------------------------------------------ shared steps

    def _deliver(
        self, consumer_id: ConsumerId, message: Message, count: int, now_ms: int
    ) -> Deliver | DeadLetter:
        """Deliver, unless the message was already delivered more often than the
        consumer's ``max_redeliver_count`` allows (possible when consumers differ):
        then dead-letter it without using credit, as newer Pulsar clients do."""
        effect = self._hand_over(
            consumer_id, self._infos[consumer_id].max_redeliver_count, message, count, now_ms
        )
        if isinstance(effect, Deliver):
            self._flow.on_delivered(consumer_id)
        return effect

    def _hand_over(
        self, consumer_id: ConsumerId, limit: int, message: Message, count: int, now_ms: int
    ) -> Deliver | DeadLetter:
        """``_deliver`` without taking the credit (``limit``: the consumer's
        ``max_redeliver_count``)."""
        if 0 < limit < count:
            return DeadLetter(consumer_id, message, count)
        self._delivered(self._pending.record(consumer_id, message, count, now_ms))
        return Deliver(consumer_id, message, count)

    def _deliver_run(
        self,
        consumer_id: ConsumerId,
        turn: int,
        next_message: Callable[[], tuple[Message, int] | None],
        now_ms: int,
    ) -> list[Effect]:
        """``_deliver`` for up to ``turn`` messages taken from ``next_message`` in a row
        (dead letters use no credit and do not count); the credit is taken once."""
        effects: list[Effect] = []
        limit = self._infos[consumer_id].max_redeliver_count
        sent = 0
        while sent < turn:
            item = next_message()
            if item is None:
                break
            effect = self._hand_over(consumer_id, limit, item[0], item[1], now_ms)
            effects.append(effect)
            sent += isinstance(effect, Deliver)
        if sent:
            self._flow.on_delivered(consumer_id, sent)
        return effects

    def _take_back(self, items: list[Pending], holder: ConsumerInfo | None = None) -> list[Effect]:
        """Messages leaving their consumer unacked: redeliver or dead-letter."""
        effects: list[Effect] = []
        for pending in items:
            if not pending.nacked:
                self._flow.on_settled(pending.consumer_id)  # no-op if the consumer is gone
            self._released(pending)
            info = holder or self._infos[pending.consumer_id]
            limit = info.max_redeliver_count
            if limit > 0 and pending.redelivery_count >= limit:
                effects.append(DeadLetter(pending.consumer_id, pending.message, pending.redelivery_count + 1))
            else:
                self._requeue(pending.message, pending.redelivery_count + 1)
        return effects

    def _settle(self, now_ms: int) -> list[Effect]:
        effects = self._take_back(self._pending.expire(now_ms))
        for message in self._delayed.pop_due(now_ms):
            effects += self._offer(message, now_ms)
        effects += self._dispatch(now_ms)
        return effects + self._maybe_rewind()

    def _note_drop(self, position: MessagePosition) -> None:
        if self._reread_from is None or position < self._reread_from:
            self._reread_from = position

    def _maybe_rewind(self) -> list[Effect]:
        if self._reread_from is None:
            return []
        delayed_room = self._dropped_delayed and len(self._delayed) <= self._config.delayed_max // 2
        if not (delayed_room or self._may_rewind()):
            return []
        position = self._reread_from
        self._reread_from = None
        self._dropped_delayed = False
        self._rewound()
        if self._read_next is not None and position.entry >= self._read_next:
            return []  # a due delayed message the read has not reached again yet: no need
        self._read_next = position.entry
        return [RewindTo(position.entry)]

    # ------------------------------------------------------------ policy hooks

    def _admit(self, consumer_id: ConsumerId, info: ConsumerInfo) -> Reject | None:
        """Type-specific admission check (None = accept)."""
        return None

    def _joined(self, consumer_id: ConsumerId) -> list[Effect]:
        return []

    def _left(self, consumer_id: ConsumerId) -> list[Effect]:
        return []

    def _delivered(self, pending: Pending) -> None:  # noqa: B027 - optional hook
        """``pending`` was just delivered."""

    def _released(self, pending: Pending) -> None:  # noqa: B027 - optional hook
        """``pending`` is no longer pending on its consumer (acked or taken back)."""

    @abstractmethod
    def _offer(self, message: Message, now_ms: int) -> list[Effect]:
        """A message to deliver for the first time (new, re-read or due delayed):
        deliver, queue, or drop it via ``_note_drop``."""

    def _offer_all(self, messages: list[Message], now_ms: int) -> list[Effect]:
        """``_offer`` of each message in turn (a subclass may do it in one step)."""
        effects: list[Effect] = []
        for message in messages:
            effects += self._offer(message, now_ms)
        return effects

    @abstractmethod
    def _requeue(self, message: Message, redelivery_count: int) -> None:
        """Queue a message taken back from a consumer (never dropped)."""

    @abstractmethod
    def _dispatch(self, now_ms: int) -> list[Effect]:
        """Deliver queued messages to consumers with credit."""

    @abstractmethod
    def _knows(self, position: MessagePosition) -> bool:
        """Is the message queued here?"""

    @abstractmethod
    def _forget(self, position: MessagePosition) -> None:
        """Remove a queued message (it was acked)."""

    @abstractmethod
    def _budget_credit(self) -> int:
        """Messages worth reading now, before the read batch cap."""

    @abstractmethod
    def _may_rewind(self) -> bool:
        """Did ``_offer`` drop messages, and is there room to re-read them now?"""

    @abstractmethod
    def _rewound(self) -> None:
        """A ``RewindTo`` was emitted: forget the drops."""

    @abstractmethod
    def _waiting_total(self) -> int: ...

    def _draining_hashes(self) -> int:
        return 0

    def _consumer_view(self, consumer_id: ConsumerId) -> tuple[tuple[HashRange, ...], int, str | None]:
        """(hash ranges, messages waiting for it, why they wait) for stats."""
        return (), 0, None
