"""Per-topic summaries of the topics this gateway owns (Pulsar ``broker-stats/topics``).

Owns: ``summarize`` - the one place that turns a live ``Topic`` into the summary
the cluster overview adds up (so switching to the broker's own Pulsar stats
is a change here only) - and ``broker_topic_stats``, Pulsar's nested shape
``{namespace: {bundle: {domain: {topic: summary}}}}``. Rule: read-only over
live broker state, no awaits; rates come from a ``RateTracker`` sampled on
each call (the topic keeps totals only), backlog counts entries after each
durable subscription's mark-delete that are not acknowledged.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gateway.api.cluster_health import RateTracker, TopicFact
from gateway.broker.topic import Topic
from gateway.ownership.bundles import NamespaceBundle


def summarize(topic: Topic, rates: RateTracker, now_ms: int) -> dict[str, Any]:
    subs = list(topic.subscriptions.values())
    layout = topic.log.layout
    msg_out = sum(s.msg_out for s in subs)
    bytes_out = sum(s.bytes_out for s in subs)
    name = str(topic.name)
    rate_in, throughput_in, rate_out, throughput_out = rates.rates(
        name, (topic.msg_in, topic.bytes_in, msg_out, bytes_out), now_ms
    )
    return {
        "topic": name,
        "msgRateIn": round(rate_in, 3),
        "msgThroughputIn": round(throughput_in, 3),
        "msgRateOut": round(rate_out, 3),
        "msgThroughputOut": round(throughput_out, 3),
        "msgInCounter": topic.msg_in,
        "bytesInCounter": topic.bytes_in,
        "msgOutCounter": msg_out,
        "bytesOutCounter": bytes_out,
        "msgBacklog": sum(s.cursor.backlog(layout) for s in subs),
        "backlogSize": topic.backlog_bytes(),
        "storageSize": topic.log.total_bytes,
        "producerCount": len(topic.producers),
        "subscriptionCount": len(subs),
        "consumerCount": sum(len(s.consumers) for s in subs),
        "backlogQuotaExceeded": bool(topic.quota_exceeded),
    }


def broker_topic_stats(
    topics: Iterable[Topic], bundles: Iterable[NamespaceBundle], rates: RateTracker, now_ms: int
) -> dict[str, dict[str, dict[str, dict[str, dict[str, Any]]]]]:
    """``{namespace: {bundle range: {domain: {topic: summary}}}}`` of ``topics``."""
    owned = list(bundles)
    out: dict[str, dict[str, dict[str, dict[str, dict[str, Any]]]]] = {}
    seen: set[str] = set()
    for topic in topics:
        if topic.closed:
            continue
        name = topic.name
        bundle = next((b.range.name for b in owned if b.contains(name)), "unknown")
        by_domain = out.setdefault(str(name.namespace_name), {}).setdefault(bundle, {})
        by_domain.setdefault(name.domain, {})[str(name)] = summarize(topic, rates, now_ms)
        seen.add(str(name))
    rates.forget_except(seen)
    return out


def flatten(stats: dict[str, Any]) -> list[dict[str, Any]]:
    """The summaries inside a ``broker_topic_stats`` answer (any gateway's), as a list."""
    out: list[dict[str, Any]] = []
    for bundles in stats.values():
        if not isinstance(bundles, dict):
            continue
        for domains in bundles.values():
            if not isinstance(domains, dict):
                continue
            for topics in domains.values():
                if not isinstance(topics, dict):
                    continue
                for name, summary in topics.items():
                    if isinstance(summary, dict):
                        out.append({**summary, "topic": str(summary.get("topic", name))})
    return out


def topic_fact(summary: dict[str, Any]) -> TopicFact:
    return TopicFact(
        topic=str(summary.get("topic", "")),
        backlog=int(summary.get("msgBacklog", 0) or 0),
        quota_exceeded=bool(summary.get("backlogQuotaExceeded", False)),
    )
