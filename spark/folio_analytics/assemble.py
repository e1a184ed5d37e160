"""From a run's folded profiles to what is stored in etcd (pure).

Owns: ``GatewayView`` (what the topic's owner says of a subscription: type,
consumers and their Key_Shared ranges, Failover's active consumer, consume
rate), ``partition_record`` (one log's record: results, folded state,
positions, what this run read), ``topic_record`` (a partitioned topic's
partitions summed) and ``needs_full_read`` (retention trimmed a ledger the
stored state indexes). Rule: time comes in as ``now_ms``; every record keeps
the bounds of ``results`` (docs/decisions/0012).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from folio_analytics.backlog import subscription_lag
from folio_analytics.keyshare import Range, Share, predict, skew_warnings
from folio_analytics.profile import Profile
from folio_analytics.results import topic_results

_RANGE = re.compile(r"^\[(\d+),\s*(\d+)\]$")


@dataclass(frozen=True, slots=True)
class GatewayView:
    """A subscription as its topic's owner reports it (``/admin/v2/.../stats``)."""

    type: str = ""
    rate_out: float | None = None
    active_consumer: str | None = None
    consumers: tuple[tuple[str, tuple[Range, ...]], ...] = ()

    @classmethod
    def from_stats(cls, sub: Mapping[str, Any]) -> GatewayView:
        consumers = []
        for c in sub.get("consumers") or []:
            ranges = []
            for text in c.get("keyHashRanges") or []:
                match = _RANGE.match(str(text))
                if match:
                    ranges.append((int(match.group(1)), int(match.group(2))))
            consumers.append((str(c.get("consumerName", "")), tuple(ranges)))
        rate = sub.get("msgRateOut")
        return cls(
            str(sub.get("type", "")),
            float(rate) if isinstance(rate, int | float) else None,
            sub.get("activeConsumerName"),
            tuple(consumers),
        )


@dataclass(frozen=True, slots=True)
class LogInput:
    profile: Profile  # stored state with this run's partial folded in
    cursors: Mapping[str, dict[str, Any]]  # subscription -> cursor JSON from etcd
    views: Mapping[str, GatewayView] = field(default_factory=dict)  # subscription -> owner's view
    previous: Mapping[str, Any] = field(default_factory=dict)  # last run's results["subscriptions"]
    read: Mapping[str, Any] = field(default_factory=dict)


def needs_full_read(stored: Profile, ledgers: Sequence[int]) -> bool:
    """Did retention delete a ledger the stored state still indexes?"""
    live = set(ledgers)
    return any(lid not in live for lid in stored.index)


def _subscriptions(log: LogInput, now_ms: int) -> tuple[dict[str, Any], dict[str, list[Share]]]:
    subs: dict[str, Any] = {}
    shares: dict[str, list[Share]] = {}
    for name, cursor in sorted(log.cursors.items()):
        view = log.views.get(name, GatewayView())
        lag = subscription_lag(log.profile, cursor).to_json(now_ms, view.rate_out, log.previous.get(name))
        lag["type"] = view.type or str(cursor.get("type", ""))
        lag["activeConsumer"] = view.active_consumer
        lag["consumers"] = len(view.consumers)
        subs[name] = lag
        ranged = [(c, r) for c, r in view.consumers if r]
        if view.type == "Key_Shared" and ranged:
            shares[name] = predict(log.profile, ranged)
    return subs, shares


def partition_record(log: LogInput, run_id: int, now_ms: int) -> dict[str, Any]:
    subs, shares = _subscriptions(log, now_ms)
    distinct = log.profile.distinct.estimate()
    warnings: list[str] = []
    for sub_shares in shares.values() or [[]]:
        for warning in skew_warnings(log.profile, sub_shares, distinct):
            if warning not in warnings:
                warnings.append(warning)
    return {
        "runId": run_id,
        "atMs": now_ms,
        "positions": {"last": list(log.profile.last) if log.profile.last else None},
        "read": dict(log.read),
        "results": topic_results(log.profile, now_ms, subs, shares, warnings),
        "state": log.profile.to_json(),
    }


def topic_record(partitions: Mapping[int, dict[str, Any]], run_id: int, now_ms: int) -> dict[str, Any]:
    """A partitioned topic: its partitions' states merged, subscriptions summed."""
    merged = Profile()
    subs: dict[str, dict[str, Any]] = {}
    for record in partitions.values():
        merged.merge(Profile.from_json(record["state"]))
        for name, lag in record["results"]["subscriptions"].items():
            have = subs.setdefault(
                name,
                {**lag, "backlog": 0, "backlogBytes": 0, "consumeRate": None, "ageMs": None, "consumers": 0},
            )
            have["backlog"] += lag["backlog"]
            have["backlogBytes"] += lag["backlogBytes"]
            have["consumers"] += lag["consumers"]
            if lag["consumeRate"] is not None:
                have["consumeRate"] = (have["consumeRate"] or 0.0) + lag["consumeRate"]
            if lag["ageMs"] is not None:
                have["ageMs"] = max(have["ageMs"] or 0, lag["ageMs"])
                have["oldestUnackedMs"] = now_ms - have["ageMs"]
    for lag in subs.values():
        rate = lag["consumeRate"]
        lag["drainSeconds"] = 0.0 if not lag["backlog"] else (lag["backlog"] / rate if rate else None)
    warnings = skew_warnings(merged, [], merged.distinct.estimate())
    warnings += sorted({w for r in partitions.values() for w in r["results"]["warnings"]} - set(warnings))
    results = topic_results(merged, now_ms, subs, {}, warnings)
    return {
        "runId": run_id,
        "atMs": now_ms,
        "positions": {str(i): r["positions"]["last"] for i, r in sorted(partitions.items())},
        "read": {str(i): r["read"] for i, r in sorted(partitions.items())},
        "results": results,
    }
