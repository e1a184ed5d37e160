"""Prometheus metrics of a gateway, read from live state at scrape time.

Owns: the gateway's ``/metrics`` collector. Rule: nothing on the publish or
delivery path updates a metric; counters are the broker's own plain integers,
summed when Prometheus scrapes (so metrics cost nothing between scrapes).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from gateway.api.gateway import Gateway


class GatewayCollector(Collector):
    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        gateway = self.gateway
        topics = list(gateway.service.topics.values())
        yield GaugeMetricFamily("folio_gateway_topics", "topics loaded (owned) by this gateway", len(topics))
        yield GaugeMetricFamily("folio_gateway_sessions", "open WebSocket sessions", gateway.sessions)
        yield GaugeMetricFamily(
            "folio_gateway_bundles_owned", "namespace bundles owned", len(gateway.ownership.owned_bundles())
        )
        yield CounterMetricFamily(
            "folio_gateway_messages_in", "messages accepted for publishing", sum(t.msg_in for t in topics)
        )
        yield CounterMetricFamily(
            "folio_gateway_bytes_in", "payload bytes accepted for publishing", sum(t.bytes_in for t in topics)
        )
        subs = [s for t in topics for s in t.subscriptions.values()]
        yield CounterMetricFamily(
            "folio_gateway_messages_out", "messages delivered", sum(s.msg_out for s in subs)
        )
        yield CounterMetricFamily(
            "folio_gateway_messages_redelivered",
            "messages delivered again",
            sum(s.msg_redelivered for s in subs),
        )
        backlog = GaugeMetricFamily(
            "folio_subscription_backlog", "entries not acked", labels=["topic", "subscription"]
        )
        for topic in topics:
            layout = topic.log.layout
            for sub in topic.subscriptions.values():
                backlog.add_metric([str(topic.name), sub.name], sub.cursor.backlog(layout))
        yield backlog


def registry_for(gateway: Gateway) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(GatewayCollector(gateway))
    return registry
