"""The namespace policies one topic acts on, as the broker resolved them (pure).

Owns: ``TopicPolicies`` (deduplication, retention, TTL, producer, consumer and
subscription limits, the backlog quota, the quorums of the next ledger).
Rule: a plain frozen value, read on every publish; the broker service
refreshes it from the namespace store and each topic asks its host for the
current one (docs/compatibility.md §4).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.broker.log_policy import Retention
from gateway.broker.log_state import Quorums


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
