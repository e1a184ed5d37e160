"""The Key_Shared subscription dispatcher with per-hash draining (pure).

Owns: which consumer gets each message of a Key_Shared subscription. Rules
(docs/compatibility.md §4.5, PIP-379; §7 rows 15-17 are what it fixes):
- a message goes to the owner of its hash slot (``hash_ranges``); the first
  consumer fixes the mode (AUTO_SPLIT or STICKY), later ones must match;
- invariant: a slot is pending-unacked on at most one consumer at a time.
  When ranges move, a slot still pending on its old owner is *draining*: its
  messages wait (only that slot's) until the old owner acks them or leaves;
- per slot, messages leave in log order: a new message whose slot already has
  waiting messages waits behind them, so first deliveries of a key are in log
  order (nack / ack timeout may re-order a key's redeliveries, as in Pulsar);
- a consumer without credit holds back only its own slots: other slots keep
  flowing. Memory for waiting messages is bounded per consumer
  (``lookahead_per_consumer_max``) and per subscription (``lookahead_max``);
  beyond that, messages are dropped - and so is every later message of the
  same slot, to keep order - and re-read (``RewindTo``) once the consumers
  they wait for have made room or ranges have moved;
- consumers are told their ranges (``RangesChanged``) whenever they change.
"""

from __future__ import annotations

from collections import Counter

from gateway.broker.dispatch.base import (
    HASH_SLOTS,
    ConsumerId,
    ConsumerInfo,
    Deliver,
    DispatcherConfig,
    Effect,
    HashRange,
    KeySharedMode,
    Message,
    RangesChanged,
    Reject,
    RejectReason,
)
from gateway.broker.dispatch.hash_ranges import AutoSplitSelector, HashRangeSelector, make_selector
from gateway.broker.dispatch.multi import MultiConsumerDispatcher
from gateway.broker.dispatch.queues import HeldBySlot
from gateway.broker.dispatch.redelivery import Pending
from storage.formats.positions import MessagePosition


class KeySharedDispatcher(MultiConsumerDispatcher):
    def __init__(self, config: DispatcherConfig | None = None) -> None:
        super().__init__(config)
        self._mode: KeySharedMode | None = None
        self._selector: HashRangeSelector = AutoSplitSelector()
        self._ranges: dict[ConsumerId, tuple[HashRange, ...]] = {}
        self._held = HeldBySlot()  # messages waiting, per slot in log order
        self._held_for: Counter[ConsumerId | None] = Counter()  # waiting per slot owner
        self._slot_pending: dict[int, dict[ConsumerId, int]] = {}  # slot -> consumer -> unacked
        self._dropped_slots: set[int] = set()
        self._dropped_for: set[ConsumerId | None] = set()
        self._moved_since_drop = False

    # ------------------------------------------------------------ the guard

    def _free_for(self, slot: int, consumer_id: ConsumerId) -> bool:
        """May ``consumer_id`` receive a message of ``slot`` now? Only if no
        other consumer has that slot pending (the draining-hashes guard)."""
        holders = self._slot_pending.get(slot)
        return not holders or (len(holders) == 1 and consumer_id in holders)

    def _delivered(self, pending: Pending) -> None:
        holders = self._slot_pending.setdefault(pending.message.hash_slot, {})
        holders[pending.consumer_id] = holders.get(pending.consumer_id, 0) + 1

    def _released(self, pending: Pending) -> None:
        slot = pending.message.hash_slot
        holders = self._slot_pending[slot]
        holders[pending.consumer_id] -= 1
        if holders[pending.consumer_id] == 0:
            del holders[pending.consumer_id]
            if not holders:
                del self._slot_pending[slot]

    # ------------------------------------------------------------ membership

    def _admit(self, consumer_id: ConsumerId, info: ConsumerInfo) -> Reject | None:
        if not self._infos:
            self._mode = info.key_shared_mode
            self._selector = make_selector(info)
        elif info.key_shared_mode is not self._mode:
            assert self._mode is not None
            detail = f"subscription is {self._mode.name}, consumer asked for {info.key_shared_mode.name}"
            return Reject(consumer_id, RejectReason.KEY_SHARED_MODE_MISMATCH, detail)
        return self._selector.add(consumer_id, info)

    def _joined(self, consumer_id: ConsumerId) -> list[Effect]:
        return self._ranges_moved()

    def _left(self, consumer_id: ConsumerId) -> list[Effect]:
        self._selector.remove(consumer_id)
        return self._ranges_moved()

    def _ranges_moved(self) -> list[Effect]:
        ranges = self._selector.ranges()
        effects: list[Effect] = [RangesChanged(c, r) for c, r in ranges.items() if self._ranges.get(c) != r]
        self._ranges = ranges
        self._held_for = Counter()
        for slot in self._held.slots():
            self._held_for[self._selector.select(slot)] += self._held.slot_count(slot)
        if self._dropped_slots:
            self._moved_since_drop = True
        return effects

    # ------------------------------------------------------------ messages

    def _offer(self, message: Message, now_ms: int) -> list[Effect]:
        slot = message.hash_slot
        assert 0 <= slot < HASH_SLOTS, slot
        target = self._selector.select(slot)
        if slot in self._dropped_slots:
            self._drop(message, target)  # an earlier message of this slot was dropped
            return []
        if (
            target is not None
            and not self._held.has(slot)
            and self._free_for(slot, target)
            and self._flow.available(target) > 0
        ):
            return [self._deliver(target, message, 0, now_ms)]
        full = len(self._held) >= self._config.lookahead_max
        if full or self._held_for[target] >= self._config.lookahead_per_consumer_max:
            self._drop(message, target)
            return []
        self._hold(message, 0, target)
        return []

    def _requeue(self, message: Message, redelivery_count: int) -> None:
        self._hold(message, redelivery_count, self._selector.select(message.hash_slot))

    def _hold(self, message: Message, redelivery_count: int, target: ConsumerId | None) -> None:
        self._held.add(message, redelivery_count)
        self._held_for[target] += 1

    def _drop(self, message: Message, target: ConsumerId | None) -> None:
        self._dropped_slots.add(message.hash_slot)
        self._dropped_for.add(target)
        self._note_drop(message.position)

    def _dispatch(self, now_ms: int) -> list[Effect]:
        effects: list[Effect] = []
        if not self._held or self._flow.available_total() == 0:
            return effects
        for slot in self._held.slots():
            target = self._selector.select(slot)
            if target is None or not self._free_for(slot, target):
                continue
            credit = self._flow.available(target)
            while credit > 0 and self._held.has(slot):
                message, count = self._held.pop(slot)
                self._held_for[target] -= 1
                effect = self._deliver(target, message, count, now_ms)
                effects.append(effect)
                credit -= isinstance(effect, Deliver)
        return effects

    def _knows(self, position: MessagePosition) -> bool:
        return position in self._held

    def _forget(self, position: MessagePosition) -> None:
        slot = self._held.remove(position)
        if slot is not None:
            self._held_for[self._selector.select(slot)] -= 1

    # ------------------------------------------------------------ read-ahead

    def _budget_credit(self) -> int:
        # Credit left after _dispatch belongs to consumers whose waiting slots (if
        # any) are draining: reading on serves their other slots - unless their
        # look-ahead is full, when all we could do is drop what we read for them.
        room = self._config.lookahead_per_consumer_max
        credit = sum(self._flow.available(c) for c in self._infos if self._held_for[c] < room)
        return min(credit, self._flow.available_total())

    def _may_rewind(self) -> bool:
        if not self._dropped_slots or len(self._held) > self._config.lookahead_max // 2:
            return False
        if self._moved_since_drop:
            return True
        half = self._config.lookahead_per_consumer_max // 2
        return any(
            c is not None and c in self._infos and self._held_for[c] <= half for c in self._dropped_for
        )

    def _rewound(self) -> None:
        self._dropped_slots.clear()
        self._dropped_for.clear()
        self._moved_since_drop = False

    # ------------------------------------------------------------ queries

    def _waiting_total(self) -> int:
        return len(self._held)

    def _draining_slots(self) -> list[tuple[int, ConsumerId]]:
        """Waiting slots whose owner must wait for another consumer's acks."""
        result = []
        for slot in self._held.slots():
            target = self._selector.select(slot)
            if target is not None and not self._free_for(slot, target):
                result.append((slot, target))
        return result

    def _draining_hashes(self) -> int:
        return len(self._draining_slots())

    def _consumer_view(self, consumer_id: ConsumerId) -> tuple[tuple[HashRange, ...], int, str | None]:
        draining = sum(1 for _, target in self._draining_slots() if target == consumer_id)
        reason = f"{draining} hashes draining on other consumers" if draining else None
        return self._ranges.get(consumer_id, ()), self._held_for[consumer_id], reason

    def ranges(self) -> dict[ConsumerId, tuple[HashRange, ...]]:
        """Current slot assignment (for stats and the admin API)."""
        return dict(self._ranges)
