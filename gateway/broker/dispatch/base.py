"""The dispatcher interface shared by all four subscription types (pure).

Owns: the vocabulary every dispatcher speaks - consumer identity and settings
(``ConsumerInfo``), the messages it is handed (``Message``), the effects it
returns (``Deliver``, ``Reject``, ``ActiveChanged``, ``DeadLetter``,
``RewindTo``, ``RangesChanged``), its bounds (``DispatcherConfig``) and the
``Dispatcher`` protocol. Rule (docs/architecture.md §5, §11): a dispatcher
decides which consumer gets which message given permits, acks and failures;
it does no I/O, takes time as ``now_ms`` and says what to do as effects,
which the subscription actor carries out in the order returned.

Contract with the subscription actor (the shell):
- ``read_budget()`` is how many more messages to read from the log now; the
  shell may overshoot by the rest of one entry (batches), never more.
- ``on_messages`` gets messages in log order and never messages the cursor
  already acked (the cursor skips acked ones on every read, re-reads included).
- ``RewindTo(p)``: set the read position back to entry ``p`` and drop results
  of reads issued before the rewind (an epoch, as Pulsar's consumer epoch).
- ``Deliver`` names a message by position; the shell resolves the payload
  (entry cache, else a storage read) into its ``content`` and hands the effect
  to the consumer's sink, which sends it with ``redelivery_count``.
- ``DeadLetter``: publish the message to the consumer's dead-letter topic,
  then ack it on the cursor; the dispatcher has already forgotten it.
- the shell applies an ack to the cursor before calling ``on_ack``.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import NewType, Protocol

from gateway.broker.flow import FlowLimits
from storage.formats.entry_format import EntryMessage
from storage.formats.key_hash import HASH_RANGE_SIZE
from storage.formats.positions import MessagePosition, Position

ConsumerId = NewType("ConsumerId", int)

HASH_SLOTS = HASH_RANGE_SIZE  # Key_Shared slots 0..65535 (key_hash.key_slot)


class KeySharedMode(enum.Enum):
    AUTO_SPLIT = 0  # KeySharedMeta.keySharedMode values
    STICKY = 1


@dataclass(frozen=True, slots=True, order=True)
class HashRange:
    """Inclusive range of hash slots ``[start, end]``."""

    start: int
    end: int

    def is_valid(self) -> bool:
        return 0 <= self.start <= self.end < HASH_SLOTS

    def overlaps(self, other: HashRange) -> bool:
        return self.start <= other.end and other.start <= self.end

    def __str__(self) -> str:
        return f"[{self.start}, {self.end}]"


@dataclass(frozen=True, slots=True)
class ConsumerInfo:
    """What a consumer asked for when it subscribed."""

    name: str
    priority_level: int = 0  # 0 = highest
    receiver_queue_size: int = 1000  # push mode: max messages outstanding at the consumer
    pull_mode: bool = False  # True: credit only from explicit permits (``on_permits``)
    ack_timeout_ms: int = 0  # 0 = off; unacked this long -> redelivered
    nack_redelivery_delay_ms: int = 60_000
    max_redeliver_count: int = 0  # 0 = no dead-letter topic
    key_shared_mode: KeySharedMode = KeySharedMode.AUTO_SPLIT
    sticky_ranges: tuple[HashRange, ...] = ()  # STICKY only


@dataclass(slots=True, unsafe_hash=True)  # immutable by convention, not frozen: per message
class Message:
    """A message as read from the log: what a dispatcher needs to route it, and the
    size of its entry's batch (its message id carries it)."""

    position: MessagePosition
    hash_slot: int = 0  # Key_Shared slot (see key_hash.py); ignored by the other types
    deliver_at_ms: int | None = None  # delayed delivery (Shared, Key_Shared only)
    batch_size: int = 0  # messages in its entry (0 when the entry holds one message)

    @property
    def entry(self) -> Position:
        return self.position.entry


# ---------------------------------------------------------------- effects


@dataclass(slots=True, unsafe_hash=True)  # not frozen: per message, and the shell sets ``content``
class Deliver:
    """Send ``message`` to ``consumer_id``; it was delivered ``redelivery_count`` times before.
    The shell sets ``content`` (the message itself) once it has the entry at hand, and
    hands the effect as it is to the consumer's sink: one object per delivered message."""

    consumer_id: ConsumerId
    message: Message
    redelivery_count: int
    content: EntryMessage = field(init=False, compare=False, repr=False)  # unset until resolved

    @property
    def position(self) -> MessagePosition:
        return self.message.position


class RejectReason(enum.Enum):
    CONSUMER_BUSY = "ConsumerBusy"  # Exclusive already has a consumer (HTTP 409)
    TOO_MANY_CONSUMERS = "TooManyConsumers"
    HASH_RANGE_CONFLICT = "ConsumerAssignException"  # STICKY range overlaps another consumer's
    INVALID_HASH_RANGE = "InvalidHashRange"
    KEY_SHARED_MODE_MISMATCH = "KeySharedModeMismatch"
    INVALID_CONFIG = "InvalidConsumerConfig"


@dataclass(frozen=True, slots=True)
class Reject:
    """``add_consumer`` refused ``consumer_id``; it was not added."""

    consumer_id: ConsumerId
    reason: RejectReason
    detail: str = ""


@dataclass(frozen=True, slots=True)
class ActiveChanged:
    """Failover: tell ``consumer_id`` whether it is now the active consumer."""

    consumer_id: ConsumerId
    is_active: bool


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """``message`` was delivered ``deliveries`` times, more than ``consumer_id``'s
    ``max_redeliver_count`` allows for another one: publish it to that consumer's
    dead-letter topic, then ack it. Decided when the message leaves that consumer
    unacked, or when it would be delivered to a consumer with a lower maximum."""

    consumer_id: ConsumerId
    message: Message
    deliveries: int


@dataclass(frozen=True, slots=True)
class RewindTo:
    """Re-read the log from entry ``position`` (see the module docstring)."""

    position: Position


@dataclass(frozen=True, slots=True)
class RangesChanged:
    """Key_Shared: ``consumer_id`` now owns ``ranges`` (docs/compatibility.md §7 row 17)."""

    consumer_id: ConsumerId
    ranges: tuple[HashRange, ...]


Effect = Deliver | Reject | ActiveChanged | DeadLetter | RewindTo | RangesChanged


@dataclass(frozen=True, slots=True)
class DispatcherConfig:
    flow: FlowLimits = field(default_factory=FlowLimits)
    read_batch_max: int = 100  # dispatcherMaxReadBatchSize
    round_robin_batch_max: int = 20  # dispatcherMaxRoundRobinBatchSize (Shared)
    consumers_max: int = 1000  # consumers per subscription
    lookahead_max: int = 20_000  # read but undelivered messages kept in memory per subscription
    lookahead_per_consumer_max: int = 2_000  # Key_Shared: ... waiting for one consumer
    delayed_max: int = 100_000  # delayed messages kept in the time index
    delayed_delivery_enabled: bool = True
    failover_delay_ms: int = 1_000  # activeConsumerFailoverDelayTimeMillis
    partition_index: int = -1  # Failover: -1 = non-partitioned topic
    topic_name: str = ""  # Failover on a non-partitioned topic: hash-ring key


# ---------------------------------------------------------------- queries


@dataclass(frozen=True, slots=True)
class ConsumerStats:
    consumer_id: ConsumerId
    name: str
    available_permits: int
    unacked: int
    blocked_reason: str | None  # why nothing is being delivered to it, if so
    hash_ranges: tuple[HashRange, ...] = ()
    waiting: int = 0  # messages held in memory for it (Key_Shared)


@dataclass(frozen=True, slots=True)
class DispatcherStats:
    consumers: tuple[ConsumerStats, ...]
    active_consumer: ConsumerId | None = None
    waiting: int = 0  # read or redelivered, not yet delivered, in memory
    delayed: int = 0
    draining_hashes: int = 0  # slots waiting for an old owner's acks (Key_Shared)
    reread_from: MessagePosition | None = None  # dropped for memory, will be re-read


class Dispatcher(Protocol):
    """One subscription's delivery decisions; every input returns effects in order."""

    def add_consumer(self, consumer_id: ConsumerId, info: ConsumerInfo, now_ms: int) -> list[Effect]: ...

    def remove_consumer(self, consumer_id: ConsumerId, now_ms: int) -> list[Effect]: ...

    def on_permits(self, consumer_id: ConsumerId, n: int, now_ms: int) -> list[Effect]: ...

    def on_writable(self, consumer_id: ConsumerId, writable: bool, now_ms: int) -> list[Effect]:
        """The consumer's sink is over its pending-bytes limit (False) or back under it."""
        ...

    def on_messages(self, messages: Sequence[Message], now_ms: int) -> list[Effect]:
        """Messages as read from the log, in log order (the dispatchers rely on it)."""
        ...

    def on_ack(
        self, consumer_id: ConsumerId, positions: Iterable[MessagePosition], now_ms: int
    ) -> list[Effect]: ...

    def on_nack(
        self, consumer_id: ConsumerId, positions: Iterable[MessagePosition], now_ms: int
    ) -> list[Effect]: ...

    def on_timer(self, now_ms: int) -> list[Effect]: ...

    def next_deadline_ms(self) -> int | None: ...

    def read_budget(self) -> int: ...

    def stats(self) -> DispatcherStats: ...


def validate_info(consumer_id: ConsumerId, info: ConsumerInfo) -> Reject | None:
    """Settings every dispatcher refuses (they come from clients, so no asserts)."""
    if not info.pull_mode and info.receiver_queue_size < 1:
        return Reject(consumer_id, RejectReason.INVALID_CONFIG, "receiverQueueSize must be >= 1")
    if info.ack_timeout_ms < 0 or info.nack_redelivery_delay_ms < 0 or info.max_redeliver_count < 0:
        return Reject(consumer_id, RejectReason.INVALID_CONFIG, "negative timeout or count")
    return None
