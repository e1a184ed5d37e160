"""The vocabulary of a topic: publish results, the policies it acts on, its host.

Owns: ``PublishResult``/``Outcome`` (what a publish call answers per message),
``TopicPolicies`` (namespace policies resolved for one topic), ``TopicHost``
(what a topic needs from its gateway), ``ProducerRecord`` and the publish
bookkeeping (``PublishGroup``: one publish call; ``PendingMessage``: one message
of it waiting for its entry). Rule: plain values; the behaviour is in topic.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from coordination.clock import Clock
from coordination.store import MetadataStore
from gateway.broker.log_policy import Retention
from gateway.broker.log_state import Quorums
from gateway.broker.stats import RateMeter
from gateway.errors import GatewayError
from gateway.names import NamespaceName
from storage.formats.entry_format import EntryMessage
from storage.formats.message_id import MessageId, duplicate_id
from storage.formats.positions import NO_BATCH

if TYPE_CHECKING:
    from gateway.broker.topic import Topic


class PublishResult:
    """Where a published message was stored (or that it was a duplicate); the
    base64 id is computed for the whole entry at once (``entry_ids_base64``)."""

    __slots__ = ("b64", "batch_index", "batch_size", "duplicate", "entry_id", "ledger_id", "partition")

    def __init__(
        self,
        ledger_id: int,
        entry_id: int,
        partition: int,
        batch_index: int,
        batch_size: int,
        b64: str,
        duplicate: bool = False,
    ) -> None:
        self.ledger_id = ledger_id
        self.entry_id = entry_id
        self.partition = partition
        self.batch_index = batch_index
        self.batch_size = batch_size
        self.b64 = b64
        self.duplicate = duplicate

    @property
    def message_id(self) -> MessageId:
        return MessageId(self.ledger_id, self.entry_id, self.partition, self.batch_index, self.batch_size)

    @classmethod
    def duplicate_of(cls, partition: int) -> PublishResult:
        dup = duplicate_id(partition)
        return cls(dup.ledger_id, dup.entry_id, partition, NO_BATCH, 0, dup.to_base64(), duplicate=True)


Outcome = PublishResult | GatewayError


@dataclass(frozen=True, slots=True)
class TopicPolicies:
    """The namespace policies a topic acts on (resolved by the service)."""

    dedup: bool = False
    retention: Retention = field(default_factory=Retention)
    ttl_seconds: int = 0
    max_consumers_per_subscription: int = 0
    max_producers: int = 0
    max_consumers: int = 0  # consumers and readers of the topic, every subscription (maxConsumersPerTopic)
    max_subscriptions: int = 0  # durable subscriptions of the topic (maxSubscriptionsPerTopic); 0: any
    backlog_limit_bytes: int = -1
    backlog_policy: str = "producer_request_hold"
    quorums: Quorums | None = None  # of the next ledger (persistence policy); None: LogConfig's


class TopicHost(Protocol):
    """What a topic needs from the gateway that owns it."""

    store: MetadataStore
    clock: Clock

    def namespace_policies(self, ns: NamespaceName) -> TopicPolicies: ...

    async def publish_to(self, topic: str, message: EntryMessage) -> None: ...

    def topic_lost(self, topic: Topic) -> None: ...

    def serves(self, topic: Topic) -> bool: ...


@dataclass(slots=True)
class ProducerRecord:
    name: str
    connected_since_ms: int
    msg_in: int = 0
    bytes_in: int = 0
    closer: Callable[[str, str], None] | None = None  # the session's close(code, reason)
    producer_id: int = 0
    address: str = ""
    access_mode: str = "Shared"
    client_version: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    meter: RateMeter = field(default_factory=RateMeter)  # (msg_in, bytes_in)


@dataclass(slots=True)
class PublishGroup:
    """The messages of one publish call; its future resolves when all are settled
    (and ``on_done`` is called with the outcomes right then, without a loop round)."""

    future: asyncio.Future[list[Outcome]]
    outcomes: list[Outcome | None]
    remaining: int
    on_done: Callable[[list[Outcome]], None] | None = None


@dataclass(slots=True)
class PendingMessage:
    group: PublishGroup
    index: int
    producer: str
    sequence_id: int
