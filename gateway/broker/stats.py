"""Topic statistics in Pulsar's JSON shape, built from plain counters (pure).

Owns: ``RateMeter`` (per-second rates of monotonically growing counters over a
sliding window), ``iso_ms``, the builders of Pulsar's ``PublisherStats``,
``ConsumerStats``, ``SubscriptionStats`` and ``TopicStats`` dicts, and
``aggregate`` (partitioned-stats: the partitions' stats summed).

Rules (docs/compatibility.md §3.3): field names exactly as Pulsar's; the hot
paths only add to plain integer counters; rates are computed here, at read
time, from samples the topic's maintenance loop takes (``RateMeter.sample``),
so a stats call costs nothing on the publish or dispatch path. A meter with no
sample old enough (``MIN_SPAN_MS``) reports 0.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from gateway.protocol.timefmt import format_iso
from gateway.subscription_type import SubscriptionType

RATE_WINDOW_MS = 10_000
MIN_SPAN_MS = 500
SAMPLES_MAX = 32


class RateMeter:
    """Rates of a fixed tuple of counters: (now - oldest sample in the window)."""

    __slots__ = ("_samples", "_window_ms")

    def __init__(
        self,
        start_ms: int | None = None,
        counters: int = 0,
        *,
        window_ms: int = RATE_WINDOW_MS,
        samples_max: int = SAMPLES_MAX,
    ) -> None:
        """``start_ms``: the counters (``counters`` of them) were all 0 then."""
        assert window_ms > 0 and samples_max >= 2
        self._window_ms = window_ms
        self._samples: deque[tuple[int, tuple[int, ...]]] = deque(maxlen=samples_max)
        if start_ms is not None:
            self._samples.append((start_ms, (0,) * counters))

    def sample(self, now_ms: int, counts: tuple[int, ...]) -> None:
        """Record the counters at ``now_ms``; keeps one sample at or beyond the window."""
        samples = self._samples
        if samples and now_ms <= samples[-1][0]:
            return
        samples.append((now_ms, counts))
        while len(samples) > 2 and now_ms - samples[1][0] >= self._window_ms:
            samples.popleft()

    def rates(self, now_ms: int, counts: tuple[int, ...]) -> tuple[float, ...]:
        """Per-second rates of ``counts`` (their values now) since the oldest sample."""
        if not self._samples:
            return tuple(0.0 for _ in counts)
        then, old = self._samples[0]
        span = now_ms - then
        if span < MIN_SPAN_MS:
            return tuple(0.0 for _ in counts)
        return tuple(max(0.0, (c - o) * 1000.0 / span) for c, o in zip(counts, old, strict=True))


def iso_ms(ms: int) -> str:
    """Epoch milliseconds as Pulsar prints ``connectedSince`` and peek's time headers:
    Java's ``ISO_OFFSET_DATE_TIME`` (the fraction with as few digits as needed), in UTC."""
    return format_iso(ms)


def publisher_stats(
    *,
    producer_id: int,
    name: str,
    rates: tuple[float, float],
    msg_in: int,
    bytes_in: int,
    connected_since_ms: int,
    address: str = "",
    access_mode: str = "Shared",
    client_version: str = "",
    metadata: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    rate, throughput = rates
    return {
        "accessMode": access_mode,
        "msgRateIn": rate,
        "msgThroughputIn": throughput,
        "averageMsgSize": bytes_in / msg_in if msg_in else 0.0,
        "chunkedMessageRate": 0.0,
        "producerId": producer_id,
        "supportsPartialProducer": False,
        "producerName": name,
        "address": address,
        "connectedSince": iso_ms(connected_since_ms),
        "clientVersion": client_version,
        "metadata": dict(metadata or {}),
    }


def _outbound(rates: tuple[float, ...], msg_out: int, bytes_out: int) -> dict[str, Any]:
    """The outbound counters and rates a consumer and a subscription both report;
    ``rates``: messages out, bytes out, redeliveries, acks (per second)."""
    rate, throughput, redeliver, acks = rates
    return {
        "msgRateOut": rate,
        "msgThroughputOut": throughput,
        "bytesOutCounter": bytes_out,
        "msgOutCounter": msg_out,
        "msgRateRedeliver": redeliver,
        "messageAckRate": acks,
    }


def consumer_stats(
    *,
    name: str,
    rates: tuple[float, float, float, float],
    msg_out: int,
    bytes_out: int,
    available_permits: int,
    unacked: int,
    blocked: bool,
    connected_since_ms: int,
    address: str = "",
    client_version: str = "",
    last_acked_ms: int = 0,
    last_consumed_ms: int = 0,
    hash_ranges: Sequence[tuple[int, int]] = (),
    metadata: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """``rates``: messages out, bytes out, redeliveries, acks (per second)."""
    return {
        **_outbound(rates, msg_out, bytes_out),
        "chunkedMessageRate": 0.0,
        "consumerName": name,
        "availablePermits": available_permits,
        "unackedMessages": unacked,
        "avgMessagesPerEntry": 1,
        "blockedConsumerOnUnackedMsgs": blocked,
        "readPositionWhenJoining": None,
        "address": address,
        "connectedSince": iso_ms(connected_since_ms),
        "clientVersion": client_version,
        "lastAckedTimestamp": last_acked_ms,
        "lastConsumedTimestamp": last_consumed_ms,
        "lastConsumedFlowTimestamp": last_consumed_ms,
        "keyHashRanges": [f"[{lo}, {hi}]" for lo, hi in hash_ranges],
        "metadata": dict(metadata or {}),
    }


def subscription_stats(
    *,
    sub_type: str | None,
    durable: bool,
    rates: tuple[float, float, float, float, float],
    msg_out: int,
    bytes_out: int,
    backlog: int,
    backlog_bytes: int,
    delayed: int,
    consumers: list[dict[str, Any]],
    active_consumer: str | None,
    total_expired: int,
    last_expire_ms: int,
    last_acked_ms: int,
    last_consumed_ms: int,
    ack_holes: int,
    key_shared_mode: str | None = None,
) -> dict[str, Any]:
    """``rates``: messages out, bytes out, redeliveries, acks, expiries (per second)."""
    out: dict[str, Any] = {
        **_outbound(rates[:4], msg_out, bytes_out),
        "chunkedMessageRate": 0,
        "msgBacklog": backlog,
        "backlogSize": backlog_bytes,
        "earliestMsgPublishTimeInBacklog": 0,
        "msgBacklogNoDelayed": max(0, backlog - delayed),
        "blockedSubscriptionOnUnackedMsgs": False,
        "msgDelayed": delayed,
        "unackedMessages": sum(int(c["unackedMessages"]) for c in consumers),
        "type": sub_type or SubscriptionType.EXCLUSIVE,
        "activeConsumerName": active_consumer,
        "msgRateExpired": rates[4],
        "totalMsgExpired": total_expired,
        "lastExpireTimestamp": last_expire_ms,
        "lastConsumedFlowTimestamp": last_consumed_ms,
        "lastConsumedTimestamp": last_consumed_ms,
        "lastAckedTimestamp": last_acked_ms,
        "lastMarkDeleteAdvancedTimestamp": last_acked_ms,
        "consumers": consumers,
        "isDurable": durable,
        "isReplicated": False,
        "allowOutOfOrderDelivery": False,
        "consumersAfterMarkDeletePosition": {},
        "nonContiguousDeletedMessagesRanges": ack_holes,
        "nonContiguousDeletedMessagesRangesSerializedSize": 0,
        "subscriptionProperties": {},
    }
    if key_shared_mode is not None:
        out["keySharedMode"] = key_shared_mode
    return out


def topic_stats(
    *,
    rates_in: tuple[float, float],
    msg_in: int,
    bytes_in: int,
    storage_size: int,
    backlog_size: int,
    publishers: list[dict[str, Any]],
    subscriptions: dict[str, dict[str, Any]],
    deduplication: bool,
) -> dict[str, Any]:
    """TopicStats; the out side is the sum over the subscriptions."""
    subs = subscriptions.values()
    return {
        "msgRateIn": rates_in[0],
        "msgThroughputIn": rates_in[1],
        "msgRateOut": sum(float(s["msgRateOut"]) for s in subs),
        "msgThroughputOut": sum(float(s["msgThroughputOut"]) for s in subs),
        "bytesInCounter": bytes_in,
        "msgInCounter": msg_in,
        "bytesOutCounter": sum(int(s["bytesOutCounter"]) for s in subs),
        "msgOutCounter": sum(int(s["msgOutCounter"]) for s in subs),
        "averageMsgSize": bytes_in / msg_in if msg_in else 0.0,
        "msgChunkPublished": False,
        "storageSize": storage_size,
        "backlogSize": backlog_size,
        "earliestMsgPublishTimeInBacklogs": 0,
        "offloadedStorageSize": 0,
        "lastOffloadLedgerId": 0,
        "lastOffloadSuccessTimeStamp": 0,
        "lastOffloadFailureTimeStamp": 0,
        "waitingPublishers": 0,
        "publishers": publishers,
        "subscriptions": subscriptions,
        "replication": {},
        "deduplicationStatus": "Enabled" if deduplication else "Disabled",
        "topicEpoch": None,
        "nonContiguousDeletedMessagesRanges": sum(int(s["nonContiguousDeletedMessagesRanges"]) for s in subs),
        "nonContiguousDeletedMessagesRangesSerializedSize": 0,
        "compaction": {"lastCompactionRemovedEventCount": 0, "lastCompactionSucceedTimestamp": 0},
    }


# ---------------------------------------------------------------- partitioned-stats

_TOPIC_SUMS = (
    "msgRateIn",
    "msgThroughputIn",
    "msgRateOut",
    "msgThroughputOut",
    "bytesInCounter",
    "msgInCounter",
    "bytesOutCounter",
    "msgOutCounter",
    "storageSize",
    "backlogSize",
    "waitingPublishers",
    "nonContiguousDeletedMessagesRanges",
)
_SUB_SUMS = (
    "msgRateOut",
    "msgThroughputOut",
    "bytesOutCounter",
    "msgOutCounter",
    "msgRateRedeliver",
    "messageAckRate",
    "msgBacklog",
    "backlogSize",
    "msgBacklogNoDelayed",
    "msgDelayed",
    "unackedMessages",
    "msgRateExpired",
    "totalMsgExpired",
    "nonContiguousDeletedMessagesRanges",
)
_SUB_LATEST = (
    "lastExpireTimestamp",
    "lastConsumedTimestamp",
    "lastAckedTimestamp",
    "lastConsumedFlowTimestamp",
)


def aggregate(partitions: Mapping[str, Mapping[str, Any]], *, per_partition: bool) -> dict[str, Any]:
    """Pulsar's partitioned-stats: the partitions' counters and rates summed, their
    publishers and consumers listed together, plus ``metadata`` and (if asked)
    ``partitions`` (name -> that partition's stats)."""
    out = topic_stats(
        rates_in=(0.0, 0.0),
        msg_in=0,
        bytes_in=0,
        storage_size=0,
        backlog_size=0,
        publishers=[],
        subscriptions={},
        deduplication=False,
    )
    dedup = False
    for stats in partitions.values():
        for field in _TOPIC_SUMS:
            out[field] += stats.get(field, 0)
        out["publishers"].extend(stats.get("publishers", []))
        dedup = dedup or stats.get("deduplicationStatus") == "Enabled"
        for name, sub in stats.get("subscriptions", {}).items():
            merged = out["subscriptions"].get(name)
            if merged is None:
                out["subscriptions"][name] = {**sub, "consumers": list(sub.get("consumers", []))}
                continue
            for field in _SUB_SUMS:
                merged[field] = merged.get(field, 0) + sub.get(field, 0)
            for field in _SUB_LATEST:
                merged[field] = max(merged.get(field, 0), sub.get(field, 0))
            merged["consumers"].extend(sub.get("consumers", []))
    out["deduplicationStatus"] = "Enabled" if dedup else "Disabled"
    out["averageMsgSize"] = out["bytesInCounter"] / out["msgInCounter"] if out["msgInCounter"] else 0.0
    out["metadata"] = {"partitions": len(partitions)}
    out["partitions"] = {name: dict(stats) for name, stats in partitions.items()} if per_partition else {}
    return out
