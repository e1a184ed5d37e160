"""Flow control for one subscription: permits and unacked limits (pure).

Owns: per-consumer delivery credit and unacked counts, and the subscription's
unacked total. Rules (docs/compatibility.md §4.4 "Permits"/"Unacked limits", §7 row 3):
- PUSH consumer (``receiverQueueSize`` q): at most q messages outstanding, i.e.
  delivered and neither acked nor taken back. Credit returns on ack AND when
  the dispatcher takes a message back (nack, ack timeout, redelivery) - Pulsar
  #2731 stalled push consumers because only acks returned credit.
- PULL consumer: credit only from explicit permits (``grant``), one per
  delivery; unused permits are capped at ``pull_permits_max``.
- a consumer whose sink holds its pending-bytes limit (``set_writable``) gets
  no credit until it is back under it (gateway/broker/pending_rules.py);
- a consumer is blocked once its unacked count reaches
  ``unacked_per_consumer_max`` and unblocked when it drops to half; the same
  for the subscription with ``unacked_per_subscription_max`` (0 disables).
``available(c)`` respects all of these, and ``on_delivered`` asserts it, so a
dispatcher can never deliver beyond permits. Consumers are keyed by int ids.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class FlowMode(enum.Enum):
    PUSH = "push"
    PULL = "pull"


@dataclass(frozen=True, slots=True)
class FlowLimits:
    unacked_per_consumer_max: int = 50_000  # maxUnackedMessagesPerConsumer, 0 = off
    unacked_per_subscription_max: int = 200_000  # maxUnackedMessagesPerSubscription, 0 = off
    receiver_queue_size_max: int = 50_000  # larger requested queues are clipped to this
    pull_permits_max: int = 50_000  # unused pull permits beyond this are dropped


@dataclass(slots=True)
class _Consumer:
    mode: FlowMode
    queue_size: int
    permits: int = 0  # pull mode only
    unacked: int = 0
    blocked: bool = False
    writable: bool = True  # False: the consumer holds its pending-bytes limit (pending_rules.py)


class FlowControl:
    def __init__(self, limits: FlowLimits | None = None) -> None:
        self._limits = limits or FlowLimits()
        self._consumers: dict[int, _Consumer] = {}
        self._unacked_total = 0
        self._subscription_blocked = False

    # ------------------------------------------------------------ membership

    def add_consumer(self, consumer_id: int, mode: FlowMode, receiver_queue_size: int = 0) -> None:
        assert consumer_id not in self._consumers, consumer_id
        size = min(receiver_queue_size, self._limits.receiver_queue_size_max)
        assert mode is FlowMode.PULL or size >= 1, "push mode needs a receiver queue"
        self._consumers[consumer_id] = _Consumer(mode, size)

    def remove_consumer(self, consumer_id: int) -> None:
        """Forget the consumer; its unacked messages no longer count (the
        dispatcher redelivers them)."""
        consumer = self._consumers.pop(consumer_id, None)
        if consumer is not None:
            self._unacked_total -= consumer.unacked
            self._update_subscription_block()

    def __contains__(self, consumer_id: int) -> bool:
        return consumer_id in self._consumers

    # ------------------------------------------------------------ inputs

    def set_writable(self, consumer_id: int, writable: bool) -> None:
        """The consumer's sink holds its pending-bytes limit (False) or is back under it:
        no credit while it is not writable, whatever its permits."""
        consumer = self._consumers.get(consumer_id)
        if consumer is not None:
            consumer.writable = writable

    def grant(self, consumer_id: int, n: int) -> int:
        """Explicit permits (pull mode); returns how many were accepted. Push
        consumers get credit back from acks, so their grants are ignored."""
        consumer = self._consumers.get(consumer_id)
        if consumer is None or consumer.mode is FlowMode.PUSH or n <= 0:
            return 0
        accepted = max(0, min(n, self._limits.pull_permits_max - consumer.permits))
        consumer.permits += accepted
        return accepted

    def on_delivered(self, consumer_id: int, n: int = 1) -> None:
        assert 0 < n <= self.available(consumer_id), "delivery beyond permits"
        consumer = self._consumers[consumer_id]
        if consumer.mode is FlowMode.PULL:
            consumer.permits -= n
        consumer.unacked += n
        self._unacked_total += n
        limit = self._limits.unacked_per_consumer_max
        if limit and consumer.unacked >= limit:
            consumer.blocked = True
        self._update_subscription_block()

    def on_settled(self, consumer_id: int, n: int = 1) -> None:
        """``n`` messages delivered to the consumer were acked or taken back."""
        consumer = self._consumers.get(consumer_id)
        if consumer is None:
            return
        assert 0 < n <= consumer.unacked, (n, consumer.unacked)
        consumer.unacked -= n
        self._unacked_total -= n
        if consumer.blocked and consumer.unacked <= self._limits.unacked_per_consumer_max // 2:
            consumer.blocked = False
        self._update_subscription_block()

    # ------------------------------------------------------------ queries

    def available(self, consumer_id: int) -> int:
        """How many more messages may be delivered to the consumer right now."""
        consumer = self._consumers.get(consumer_id)
        if consumer is None or consumer.blocked or not consumer.writable or self._subscription_blocked:
            return 0
        if consumer.mode is FlowMode.PUSH:
            credit = consumer.queue_size - consumer.unacked
        else:
            credit = consumer.permits
        if self._limits.unacked_per_consumer_max:
            credit = min(credit, self._limits.unacked_per_consumer_max - consumer.unacked)
        if self._limits.unacked_per_subscription_max:
            credit = min(credit, self._limits.unacked_per_subscription_max - self._unacked_total)
        return max(0, credit)

    def available_total(self) -> int:
        total = sum(self.available(c) for c in self._consumers)
        if self._limits.unacked_per_subscription_max:
            total = min(total, max(0, self._limits.unacked_per_subscription_max - self._unacked_total))
        return total

    def unacked(self, consumer_id: int) -> int:
        consumer = self._consumers.get(consumer_id)
        return 0 if consumer is None else consumer.unacked

    @property
    def unacked_total(self) -> int:
        return self._unacked_total

    def permits(self, consumer_id: int) -> int:
        """Unused explicit permits (pull mode)."""
        consumer = self._consumers.get(consumer_id)
        return 0 if consumer is None else consumer.permits

    def is_blocked(self, consumer_id: int) -> bool:
        consumer = self._consumers.get(consumer_id)
        return consumer is not None and consumer.blocked

    @property
    def subscription_blocked(self) -> bool:
        return self._subscription_blocked

    def blocked_reason(self, consumer_id: int) -> str | None:
        """Why ``available`` is 0, for stats; None when it is not."""
        consumer = self._consumers.get(consumer_id)
        if consumer is None or self.available(consumer_id) > 0:
            return None
        if self._subscription_blocked or (
            self._limits.unacked_per_subscription_max
            and self._unacked_total >= self._limits.unacked_per_subscription_max
        ):
            return "subscription unacked limit"
        if consumer.blocked:
            return "consumer unacked limit"
        if not consumer.writable:
            return "consumer pending-bytes limit"
        if consumer.mode is FlowMode.PULL:
            return "no permits"
        return "receiver queue full"

    # ------------------------------------------------------------ internals

    def _update_subscription_block(self) -> None:
        limit = self._limits.unacked_per_subscription_max
        if not limit:
            return
        if self._unacked_total >= limit:
            self._subscription_blocked = True
        elif self._subscription_blocked and self._unacked_total <= limit // 2:
            self._subscription_blocked = False
