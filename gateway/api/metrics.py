"""Prometheus metrics of a gateway: live state read at scrape time, plus publish latency.

Owns: the gateway's ``/metrics`` collector and its one histogram, the publish
latency (request received -> acknowledgement sent). Rules: nothing on the
publish or delivery path updates a metric except that histogram, observed
once per publish request (a WebSocket frame, batch frames included, or a REST
call), never per message, into plain counts (``LatencyCounts``: a bucket
count and a sum, no lock, no metric object), exposed as a Prometheus histogram
when scraped; every other number is the broker's own plain
counters and sizes, read when Prometheus scrapes (so metrics cost nothing
between scrapes). Per-topic series carry a ``topic`` label and exist only for
the topics this gateway owns. Every metric is listed in docs/metrics.md.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Iterator
from typing import TYPE_CHECKING
from weakref import WeakKeyDictionary

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from gateway.api.http_consume import HttpConsumer

if TYPE_CHECKING:
    from gateway.broker.topic import Topic
    from gateway.process import Gateway

PUBLISH_SECONDS_BUCKETS = (
    0.0005,
    0.001,
    0.002,
    0.005,
    0.01,
    0.02,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)


_BUCKET_NAMES = [*map(floatToGoString, PUBLISH_SECONDS_BUCKETS), "+Inf"]


class LatencyCounts:
    """One API's observed latencies: a count per bucket (the last one past every bound)
    and their sum, plain numbers (an observation is a bisect and two additions)."""

    __slots__ = ("counts", "created", "sum")

    def __init__(self) -> None:
        self.counts = [0] * (len(PUBLISH_SECONDS_BUCKETS) + 1)
        self.sum = 0.0
        self.created = time.time()

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(PUBLISH_SECONDS_BUCKETS, seconds)] += 1  # le: the bound includes it
        self.sum += seconds


class PublishLatency(Collector):
    """The publish-latency histogram of one gateway, by API (``websocket`` / ``rest``)."""

    NAME = "folio_gateway_publish_latency_seconds"
    HELP = "Publish request received -> acknowledgement sent (per request or frame, not per message)"

    def __init__(self) -> None:
        self.websocket = LatencyCounts()
        self.rest = LatencyCounts()

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(self.NAME, self.HELP, labels=["api"])
        for api, counts in (("websocket", self.websocket), ("rest", self.rest)):
            cumulative, buckets = 0, []
            for name, count in zip(_BUCKET_NAMES, counts.counts, strict=True):
                cumulative += count
                buckets.append((name, float(cumulative)))
            family.add_metric([api], buckets, counts.sum)
            family.add_sample(f"{self.NAME}_created", {"api": api}, counts.created)
        yield family


_LATENCY: WeakKeyDictionary[Gateway, PublishLatency] = WeakKeyDictionary()


def publish_latency(gateway: Gateway) -> PublishLatency:
    """The histogram of ``gateway`` (created on first use; sessions keep the child they need)."""
    latency = _LATENCY.get(gateway)
    if latency is None:
        latency = _LATENCY[gateway] = PublishLatency()
    return latency


class GatewayCollector(Collector):
    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        gateway = self.gateway
        topics = [t for t in gateway.service.topics.values() if not t.closed]
        subs = [s for t in topics for s in t.subscriptions.values()]
        http_sessions = sum(
            1 for s in subs for record in s.consumers.values() if isinstance(record.sink, HttpConsumer)
        )
        yield GaugeMetricFamily("folio_gateway_topics", "topics loaded (owned) by this gateway", len(topics))
        sessions = GaugeMetricFamily("folio_gateway_sessions", "open client sessions", labels=["type"])
        sessions.add_metric(["websocket"], gateway.sessions)
        sessions.add_metric(["http"], http_sessions)
        yield sessions
        yield GaugeMetricFamily(
            "folio_gateway_bundles_owned", "namespace bundles owned", len(gateway.ownership.owned_bundles())
        )
        yield CounterMetricFamily(
            "folio_gateway_lease_rejoins",
            "etcd leases this gateway lost and replaced (stepped down, then rejoined) since it started",
            gateway.tenure.rejoins,
        )
        yield GaugeMetricFamily(
            "folio_gateway_lease_valid",
            "1 while this gateway holds a valid etcd lease (0: stepped down, waiting to rejoin)",
            1 if gateway.session.is_valid() else 0,
        )
        yield GaugeMetricFamily(
            "folio_gateway_topics_recounting",
            "topics whose message counts are being recounted after a takeover (running or queued)",
            sum(1 for t in topics if t.log.recounting),
        )
        budget = gateway.config.log.cache_budget
        yield GaugeMetricFamily(
            "folio_gateway_cache_bytes",
            "bytes held by all entry caches (bounded by the cache budget)",
            budget.held(),
        )
        yield GaugeMetricFamily("folio_gateway_cache_budget_bytes", "the cache budget", budget.bytes_max)
        yield CounterMetricFamily(
            "folio_gateway_cache_reclaimed_bytes", "cached bytes dropped to keep the budget", budget.reclaimed
        )
        yield CounterMetricFamily(
            "folio_gateway_messages_in", "messages accepted for publishing", sum(t.msg_in for t in topics)
        )
        yield CounterMetricFamily(
            "folio_gateway_bytes_in", "payload bytes accepted for publishing", sum(t.bytes_in for t in topics)
        )
        yield CounterMetricFamily(
            "folio_gateway_messages_out", "messages delivered", sum(s.msg_out for s in subs)
        )
        yield CounterMetricFamily(
            "folio_gateway_messages_redelivered",
            "messages delivered again",
            sum(s.msg_redelivered for s in subs),
        )
        yield from self._deliveries()
        yield from self._webhooks()
        yield from self._per_topic(topics)

    def _deliveries(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        budget = self.gateway.deliveries
        yield GaugeMetricFamily(
            "folio_gateway_delivery_pending_bytes",
            "bytes delivered to WebSocket consumers and not yet written to their sockets",
            budget.total,
        )
        yield GaugeMetricFamily(
            "folio_gateway_delivery_budget_bytes", "the bound on all of them", budget.limits.budget_bytes
        )
        yield GaugeMetricFamily(
            "folio_gateway_consumers_paused",
            "consumers whose deliveries wait for them to take bytes",
            budget.paused,
        )
        closes = CounterMetricFamily(
            "folio_gateway_slow_consumer_closes",
            "consumers closed as slow (4429): one far over its bytes limit, or the gateway over its budget",
            labels=["reason"],
        )
        for reason, count in budget.closed_slow.items():
            closes.add_metric([reason], count)
        yield closes
        held = self.gateway.http_held
        yield GaugeMetricFamily(
            "folio_gateway_http_consumer_held_bytes",
            "payload bytes delivered to HTTP consumers (fetch, event streams) and not yet fetched",
            held.bytes,
        )
        yield GaugeMetricFamily(
            "folio_gateway_http_consumer_budget_bytes", "the bound on all of them", held.budget
        )
        yield CounterMetricFamily(
            "folio_gateway_http_consume_refused",
            "fetches refused (429) because the HTTP consumers' budget was full",
            held.refused,
        )

    def _webhooks(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        webhooks = self.gateway.webhooks
        totals = webhooks.totals
        yield GaugeMetricFamily(
            "folio_gateway_webhooks", "webhooks this gateway is pushing", len(webhooks.running)
        )
        yield GaugeMetricFamily(
            "folio_gateway_webhooks_failing",
            "webhooks whose last POST failed, or whose pusher could not start",
            sum(1 for p in webhooks.running.values() if p.state == "backing-off") + len(webhooks.errors),
        )
        yield CounterMetricFamily("folio_gateway_webhook_posts", "webhook POSTs sent", totals.posts)
        yield CounterMetricFamily(
            "folio_gateway_webhook_failures", "webhook POSTs not answered 2xx", totals.failures
        )
        yield CounterMetricFamily(
            "folio_gateway_webhook_acked", "messages acknowledged by a webhook's 2xx", totals.acked
        )
        yield CounterMetricFamily(
            "folio_gateway_webhook_dead_lettered",
            "messages a webhook gave up on (sent to the dead-letter topic)",
            totals.dead_lettered,
        )

    @staticmethod
    def _per_topic(topics: list[Topic]) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        msg_in = CounterMetricFamily("folio_topic_messages_in", "messages published", labels=["topic"])
        bytes_in = CounterMetricFamily("folio_topic_bytes_in", "payload bytes published", labels=["topic"])
        msg_out = CounterMetricFamily(
            "folio_topic_messages_out", "messages dispatched to consumers", labels=["topic"]
        )
        bytes_out = CounterMetricFamily(
            "folio_topic_bytes_out", "payload bytes dispatched to consumers", labels=["topic"]
        )
        backlog_bytes = GaugeMetricFamily(
            "folio_topic_backlog_bytes", "bytes after the slowest durable subscription", labels=["topic"]
        )
        storage_bytes = GaugeMetricFamily(
            "folio_topic_storage_bytes", "bytes in the topic's log", labels=["topic"]
        )
        backlog = GaugeMetricFamily(
            "folio_subscription_backlog",
            "messages not acknowledged (msgBacklog)",
            labels=["topic", "subscription"],
        )
        for topic in topics:
            label = [str(topic.name)]
            subs = list(topic.subscriptions.values())
            msg_in.add_metric(label, topic.msg_in)
            bytes_in.add_metric(label, topic.bytes_in)
            msg_out.add_metric(label, sum(s.msg_out for s in subs))
            bytes_out.add_metric(label, sum(s.bytes_out for s in subs))
            backlog_bytes.add_metric(label, topic.backlog_bytes())
            storage_bytes.add_metric(label, topic.log.total_bytes)
            for sub in subs:
                backlog.add_metric([label[0], sub.name], sub.backlog())
        yield from (msg_in, bytes_in, msg_out, bytes_out, backlog_bytes, storage_bytes, backlog)


def registry_for(gateway: Gateway) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(GatewayCollector(gateway))
    registry.register(publish_latency(gateway))
    return registry
