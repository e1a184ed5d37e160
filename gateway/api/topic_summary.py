"""Per-topic summaries of the topics this gateway owns (Pulsar ``broker-stats/topics``).

Owns: ``summarize`` - the one place that turns a live ``Topic`` into the summary
the cluster overview adds up (so switching to the broker's own Pulsar stats
is a change here only) - and ``broker_topic_stats``, Pulsar's nested shape
``{namespace: {bundle: {domain: {topic: summary}}}}``. Rule: read-only over
live broker state, no awaits; everything comes from the topic's Pulsar stats
(``gateway.broker.topic_stats``): rates from its meters, backlog in messages.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gateway.api.cluster_health import TopicFact
from gateway.api.rollups import is_dashboard_reader
from gateway.broker.topic import Topic
from gateway.broker.topic_stats import topic_stats
from gateway.ownership.bundles import NamespaceBundle

SUMMED = (
    "msgRateIn",
    "msgThroughputIn",
    "msgRateOut",
    "msgThroughputOut",
    "msgInCounter",
    "bytesInCounter",
    "msgOutCounter",
    "bytesOutCounter",
    "storageSize",
)


def summarize(topic: Topic) -> dict[str, Any]:
    """The overview's summary of ``topic``, from its Pulsar stats (rates, counters,
    message backlog of the durable subscriptions; the dashboard's own readers are
    not counted as subscriptions)."""
    st = topic_stats(topic)
    subs = st["subscriptions"].values()
    return {
        "topic": str(topic.name),
        **{field: st[field] for field in SUMMED},
        "backlogSize": st["backlogSize"],
        "msgBacklog": sum(s["msgBacklog"] for s in subs if s.get("isDurable", True)),
        "producerCount": len(st["publishers"]),
        "subscriptionCount": sum(1 for name in st["subscriptions"] if not is_dashboard_reader(name)),
        "consumerCount": sum(len(s["consumers"]) for s in subs),
        "backlogQuotaExceeded": bool(topic.quota_exceeded),
    }


def broker_topic_stats(
    topics: Iterable[Topic], bundles: Iterable[NamespaceBundle]
) -> dict[str, dict[str, dict[str, dict[str, dict[str, Any]]]]]:
    """``{namespace: {bundle range: {domain: {topic: summary}}}}`` of ``topics``."""
    owned = list(bundles)
    out: dict[str, dict[str, dict[str, dict[str, dict[str, Any]]]]] = {}
    for topic in topics:
        if topic.closed:
            continue
        name = topic.name
        bundle = next((b.range.name for b in owned if b.contains(name)), "unknown")
        by_domain = out.setdefault(str(name.namespace_name), {}).setdefault(bundle, {})
        by_domain.setdefault(name.domain, {})[str(name)] = summarize(topic)
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
