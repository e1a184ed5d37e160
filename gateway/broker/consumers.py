"""What a subscription hands its consumers, and the dispatcher for each type.

Owns: ``Delivery`` (one message for one consumer), the ``ConsumerSink``
protocol a connected session implements (WebSocket, HTTP consume),
``ConsumerRecord`` (a consumer's settings and counters) and
``make_dispatcher``. Rule: the four subscription types are exactly Pulsar's,
spelled as Pulsar spells them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from gateway.broker.broker_errors import NotAllowed
from gateway.broker.dispatch import (
    ConsumerId,
    ConsumerInfo,
    Dispatcher,
    DispatcherConfig,
    ExclusiveDispatcher,
    FailoverDispatcher,
    KeySharedDispatcher,
    SharedDispatcher,
)
from gateway.broker.dispatch.base import HashRange
from gateway.broker.entry_format import EntryMessage
from gateway.broker.positions import MessagePosition
from gateway.broker.stats import RateMeter

SUBSCRIPTION_TYPES = ("Exclusive", "Shared", "Failover", "Key_Shared")


@dataclass(slots=True, unsafe_hash=True)  # immutable by convention, not frozen: one per delivery
class Delivery:
    position: MessagePosition
    message: EntryMessage
    redelivery_count: int
    batch_size: int  # messages in the entry (0 when the entry holds one message)


class ConsumerSink(Protocol):
    """What a subscription needs from a connected consumer session."""

    def deliver(self, deliveries: list[Delivery]) -> None: ...

    def active_changed(self, active: bool) -> None: ...

    def ranges_changed(self, ranges: tuple[HashRange, ...]) -> None: ...

    def close(self, code: str, reason: str) -> None: ...


@dataclass(slots=True)
class ConsumerRecord:
    consumer_id: ConsumerId
    info: ConsumerInfo
    sink: ConsumerSink
    connected_since_ms: int
    dead_letter_topic: str | None = None
    address: str = ""
    msg_out: int = 0
    bytes_out: int = 0
    acks: int = 0
    redelivered: int = 0
    client_version: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    meter: RateMeter = field(default_factory=RateMeter)  # (msg_out, bytes_out, redelivered, acks)


def make_dispatcher(sub_type: str, config: DispatcherConfig) -> Dispatcher:
    if sub_type == "Exclusive":
        return ExclusiveDispatcher(config)
    if sub_type == "Failover":
        return FailoverDispatcher(config)
    if sub_type == "Shared":
        return SharedDispatcher(config)
    if sub_type == "Key_Shared":
        return KeySharedDispatcher(config)
    raise NotAllowed(f"unknown subscription type {sub_type!r}")
