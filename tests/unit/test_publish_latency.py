"""The publish-latency histogram: plain counts exposed as the Prometheus histogram it replaces."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Histogram, generate_latest

from gateway.api.metrics import PUBLISH_SECONDS_BUCKETS, PublishLatency


def test_the_exposition_is_a_prometheus_histograms_for_the_same_observations() -> None:
    ours = PublishLatency()
    reference = Histogram(
        PublishLatency.NAME, PublishLatency.HELP, ["api"], registry=None, buckets=PUBLISH_SECONDS_BUCKETS
    )
    samples = [0.0, 0.0005, 0.00050001, 0.001, 0.0123, 9.99, 10.0, 10.5, 250.0]  # bounds are inclusive
    for api, values in (("websocket", samples), ("rest", samples[:3])):
        for value in values:
            getattr(ours, api).observe(value)
            reference.labels(api).observe(value)
    reference.labels("websocket")._created = ours.websocket.created  # the one figure that differs
    reference.labels("rest")._created = ours.rest.created
    exposed = []
    for collector in (ours, reference):
        registry = CollectorRegistry()
        registry.register(collector)
        exposed.append(generate_latest(registry).decode())
    assert exposed[0] == exposed[1]
    assert 'folio_gateway_publish_latency_seconds_bucket{api="websocket",le="0.0005"} 2.0' in exposed[0]
