"""Quotas: their names and the count of refusals (the one counter every quota check bumps).

Owns: ``Quota`` (each quota by its Pulsar policy or setting name) and the
``folio_gateway_quota_refused{quota}`` counter. Rule (docs/decisions/0009-security-model.md):
a refused create or connection is answered with a clear error naming the quota
(Pulsar's error kind: ProducerBusy, ConsumerBusy, 412 / 429 on REST) and counted
here; nothing already accepted is touched.
"""

from __future__ import annotations

import enum

from prometheus_client import CollectorRegistry, Counter


class Quota(enum.Enum):
    TENANTS = "maxTenants"
    NAMESPACES_PER_TENANT = "maxNamespacesPerTenant"
    TOPICS_PER_NAMESPACE = "maxTopicsPerNamespace"
    PRODUCERS_PER_TOPIC = "maxProducersPerTopic"
    CONSUMERS_PER_TOPIC = "maxConsumersPerTopic"
    CONSUMERS_PER_SUBSCRIPTION = "maxConsumersPerSubscription"
    SUBSCRIPTIONS_PER_TOPIC = "maxSubscriptionsPerTopic"
    SESSIONS_PER_ROLE = "sessionsPerRole"


REFUSED = Counter(
    "folio_gateway_quota_refused",
    "Creates and connections refused by a quota, by quota",
    ["quota"],
    registry=CollectorRegistry(),  # shown in each gateway's registry (``gateway.api.app``)
)


def refused(quota: Quota) -> None:
    REFUSED.labels(quota.value).inc()
