"""The Shared subscription dispatcher (pure).

Owns: which consumer gets each message of a Shared subscription. Rules
(docs/compatibility.md §4.4, docs/architecture.md §5):
- round-robin among consumers that have credit, preferring the highest
  priority group (lowest ``priority_level``); a lower group receives only when
  every consumer of the higher ones is out of credit; each turn gives one
  consumer at most ``round_robin_batch_max`` messages;
- messages taken back from consumers (leave, nack, ack timeout) wait in the
  replay queue and go out, lowest position first, before new messages;
- every message is pending on at most one consumer at a time; redelivery
  counts, dead-lettering, delayed delivery and the look-ahead bound come from
  ``MultiConsumerDispatcher``.
New messages read beyond the current credit wait in ``_ready`` (at most one
entry's worth when the shell respects ``read_budget``; hard cap
``lookahead_max``, beyond which they are dropped and re-read later).
"""

from __future__ import annotations

from collections import deque

from gateway.broker.dispatch.base import ConsumerId, Deliver, DispatcherConfig, Effect, Message
from gateway.broker.dispatch.multi import MultiConsumerDispatcher
from gateway.broker.dispatch.queues import ReplayQueue
from storage.formats.positions import MessagePosition


class SharedDispatcher(MultiConsumerDispatcher):
    def __init__(self, config: DispatcherConfig | None = None) -> None:
        super().__init__(config)
        self._replay = ReplayQueue()
        self._ready: deque[Message] = deque()  # new messages not yet delivered, log order
        self._ready_positions: set[MessagePosition] = set()  # authority: acked ones leave it
        self._dropped_ready = False
        self._last_served: ConsumerId | None = None

    # ------------------------------------------------------------ hooks

    def _offer(self, message: Message, now_ms: int) -> list[Effect]:
        if len(self._ready_positions) >= self._config.lookahead_max:
            self._dropped_ready = True
            self._note_drop(message.position)
            return []
        self._ready.append(message)
        self._ready_positions.add(message.position)
        return []

    def _offer_all(self, messages: list[Message], now_ms: int) -> list[Effect]:
        if len(self._ready_positions) + len(messages) > self._config.lookahead_max:
            return super()._offer_all(messages, now_ms)  # one by one: the rest are dropped
        self._ready.extend(messages)
        self._ready_positions.update(message.position for message in messages)
        return []

    def _requeue(self, message: Message, redelivery_count: int) -> None:
        self._replay.add(message, redelivery_count)

    def _knows(self, position: MessagePosition) -> bool:
        return position in self._replay or position in self._ready_positions

    def _forget(self, position: MessagePosition) -> None:
        self._replay.remove(position)
        self._ready_positions.discard(position)

    def _left(self, consumer_id: ConsumerId) -> list[Effect]:
        if self._last_served == consumer_id:
            self._last_served = None
        return []

    def _budget_credit(self) -> int:
        return self._flow.available_total() - len(self._replay) - len(self._ready_positions)

    def _may_rewind(self) -> bool:
        return self._dropped_ready and len(self._ready_positions) <= self._config.lookahead_max // 2

    def _rewound(self) -> None:
        self._dropped_ready = False

    def _waiting_total(self) -> int:
        return len(self._replay) + len(self._ready_positions)

    # ------------------------------------------------------------ dispatch

    def _dispatch(self, now_ms: int) -> list[Effect]:
        effects: list[Effect] = []
        while self._replay or self._ready_positions:
            consumer_id = self._next_consumer()
            if consumer_id is None:
                break
            credit = self._flow.available(consumer_id)
            # one consumer: every turn is its turn, so one turn takes all its credit
            turn = credit if len(self._infos) == 1 else min(credit, self._config.round_robin_batch_max)
            if self._replay:
                effects += self._deliver_run(consumer_id, turn, self._next_message, now_ms)
            else:
                effects += self._deliver_new(consumer_id, turn, now_ms)
            self._last_served = consumer_id
        return effects

    def _deliver_new(self, consumer_id: ConsumerId, turn: int, now_ms: int) -> list[Effect]:
        """``_deliver_run`` of up to ``turn`` new messages (none was delivered before, so
        none is dead-lettered, and Shared has no ``_delivered`` hook): recorded as pending,
        and the credit taken, in one step."""
        ready, positions = self._ready, self._ready_positions
        run: list[Message] = []
        while ready and len(run) < turn:
            message = ready.popleft()
            if message.position in positions:
                positions.remove(message.position)
                run.append(message)
        if not run:
            return []
        self._pending.record_run(consumer_id, run, 0, now_ms)
        self._flow.on_delivered(consumer_id, len(run))
        return [Deliver(consumer_id, message, 0) for message in run]

    def _next_message(self) -> tuple[Message, int] | None:
        if self._replay:
            return self._replay.pop()
        while self._ready:
            message = self._ready.popleft()
            if message.position in self._ready_positions:
                self._ready_positions.remove(message.position)
                return message, 0
        return None

    def _next_consumer(self) -> ConsumerId | None:
        """Round-robin within the best priority group that has credit."""
        with_credit = [c for c in self._infos if self._flow.available(c) > 0]
        if not with_credit:
            return None
        best = min(self._infos[c].priority_level for c in with_credit)
        candidates = [c for c in with_credit if self._infos[c].priority_level == best]
        if self._last_served is None:
            return candidates[0]
        index = {c: i for i, c in enumerate(self._infos)}
        last = index[self._last_served]
        return min(candidates, key=lambda c: (index[c] - last - 1) % len(index))
