"""What a run shows: a topic's statistics and the cluster summary (pure).

Owns: ``topic_results`` (the JSON the admin API returns for one topic or
partition, built from its ``Profile``, its subscriptions' lag, the Key_Shared
prediction and, for a JSON or AVRO topic, its payload fields) and
``cluster_summary`` (hottest and largest topics, skewed keys, subscriptions
falling behind by age). Rule: every list is cut to
a fixed length, so a topic's results stay within ``RESULT_BYTES`` whatever
the topic holds; nothing here reads a clock (``now_ms`` is given).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from folio_analytics.keyshare import Share
from folio_analytics.profile import MINUTE_MS, OTHER_PRODUCERS, Profile, key_bytes
from storage.formats.key_hash import key_slot

TOP_KEYS = 20
TOP_PRODUCERS = 20
TOP_TOPICS = 10
RECENT_MS = 60 * MINUTE_MS  # "hottest" is measured over the last hour of a topic's history
RESULT_BYTES = 64 * 1024  # bound on one topic's results (tests/unit/test_analytics_core.py)
STATE_BYTES = 256 * 1024  # bound on one partition's folded state (its Profile's JSON)
PERCENTILES = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p999", 0.999))


def _distribution(hist: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"count": hist.total, "min": hist.low, "max": hist.high}
    for name, q in PERCENTILES:
        out[name] = hist.percentile(q)
    out["histogram"] = [[low, n] for low, n in hist.chart_bins()]
    return out


def recent_rate(profile: Profile, now_ms: int) -> float:
    """Messages per minute over the last hour of the topic's history."""
    since = now_ms - RECENT_MS
    width = profile.series.width
    got = 0.0
    for start, messages, _, _ in profile.series.sorted_cells():
        if start + width <= since:
            continue
        got += messages * (min(1.0, (start + width - since) / width))
    return got * MINUTE_MS / RECENT_MS


def topic_results(
    profile: Profile,
    now_ms: int,
    subscriptions: Mapping[str, dict[str, Any]],
    key_shared: Mapping[str, Iterable[Share]],
    warnings: list[str],
) -> dict[str, Any]:
    distinct = profile.distinct.estimate()
    minutes = profile.series.width / MINUTE_MS
    producers = sorted(profile.producers.items(), key=lambda kv: (kv[0] == OTHER_PRODUCERS, -kv[1][0], kv[0]))
    total = profile.messages or 1
    return {
        "messages": profile.messages,
        "bytes": profile.bytes,
        "firstPublishMs": profile.first_ms,
        "lastPublishMs": profile.last_ms,
        "recentRatePerMinute": recent_rate(profile, now_ms),
        "bucketMinutes": minutes,
        "ratePerMinute": [[s, m / minutes, b / minutes] for s, m, b, _ in profile.series.sorted_cells()],
        "sizes": _distribution(profile.sizes),
        "distinctKeys": distinct,
        "keylessMessages": profile.keyless,
        "topKeys": [
            {"key": k, "messages": n, "share": n / total, "slot": key_slot(key_bytes(k))}
            for k, n in profile.heavy.top(TOP_KEYS)
        ],
        "topKeysError": profile.heavy.error,
        "producers": [{"name": n, "messages": m, "bytes": b} for n, (m, b) in producers[:TOP_PRODUCERS]],
        "lag": {**_distribution(profile.lags), "negative": profile.negative_lags},
        "subscriptions": dict(subscriptions),
        "keyShared": {
            sub: [{"consumer": s.consumer, "messages": round(s.messages), "share": s.share} for s in shares]
            for sub, shares in key_shared.items()
        },
        "warnings": warnings,
        "fields": None if profile.fields is None else profile.fields.view(),
    }


def cluster_summary(topics: Mapping[str, dict[str, Any]], now_ms: int) -> dict[str, Any]:
    """The overview's lists, from every topic's results (keyed by topic name)."""

    def top(field: str) -> list[dict[str, Any]]:
        ranked = sorted(topics.items(), key=lambda kv: (-kv[1][field], kv[0]))
        return [{"topic": t, field: r[field]} for t, r in ranked[:TOP_TOPICS] if r[field]]

    skewed = [
        {"topic": t, "warning": w, "topKey": (r["topKeys"][0] if r["topKeys"] else None)}
        for t, r in sorted(topics.items())
        for w in r["warnings"]
    ]
    behind = sorted(
        (
            {"topic": t, "subscription": s, **lag}
            for t, r in topics.items()
            for s, lag in r["subscriptions"].items()
            if lag["backlog"]
        ),
        key=lambda row: (-(row["ageMs"] or 0), -row["backlog"], row["topic"], row["subscription"]),
    )
    return {
        "atMs": now_ms,
        "topics": len(topics),
        "messages": sum(r["messages"] for r in topics.values()),
        "bytes": sum(r["bytes"] for r in topics.values()),
        "hottest": top("recentRatePerMinute"),
        "largest": top("bytes"),
        "skewed": skewed[:TOP_TOPICS],
        "behind": behind[:TOP_TOPICS],
    }
