"""A topic's upkeep: dedup state persistence, TTL expiry, backlog quota, trimming.

Owns: the periodic and load-time work of a ``Topic`` that is not on the
publish or delivery path. Rules (docs/compatibility.md §4.9, §4.11):
- dedup state is a snapshot in etcd (producer -> highest persisted sequence id,
  the holes skipped below it, and the log position it covers), written by compare-and-swap every
  ``DEDUP_SNAPSHOT_ENTRIES`` entries and on clean close; a new owner restores
  it and replays the log after that position, so duplicates are recognised
  across ownership changes;
- TTL moves each durable cursor past entries published before now - TTL;
- the backlog quota (bytes after the slowest cursor) refuses publishes
  (``producer_exception``/``producer_request_hold``) or skips the slowest
  cursor forward (``consumer_backlog_eviction``);
- ledgers are trimmed by ``ManagedLog.trim`` under the retention policy;
- every visit samples the stats rate meters and the stats history;
- ``needs_io`` tells the gateway's schedule (``upkeep_schedule.py``) whether a
  visit may wait on I/O (an expiry to apply, ledgers that might be trimmed, a
  snapshot due); when it does not, ``maintain_in_place`` does the same as
  ``maintain_once`` without awaiting anything;
- a seek by time binary-searches the log (publish times grow with it).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import orjson

from coordination import keys
from gateway.broker.stats_history import StatsSample
from storage.formats.positions import EARLIEST, Position

if TYPE_CHECKING:
    from gateway.broker.subscription import Subscription
    from gateway.broker.topic import Topic
    from gateway.broker.topic_types import TopicPolicies

DEDUP_SNAPSHOT_ENTRIES = 1000


async def restore_dedup(topic: Topic) -> None:
    current = await topic.store.get(keys.dedup(topic.name.path))
    position = EARLIEST
    if current is not None:
        data = orjson.loads(current.value)
        topic.dedup.restore(data)
        ledger, entry = data.get("position", [-1, -1])
        position = Position(int(ledger), int(entry))
        topic.dedup_revision = current.mod_revision
    topic.dedup_position = position
    nxt = topic.log.layout.next_position(position)
    while nxt is not None:  # replay the log tail after the snapshot
        entries = await topic.log.read(nxt, 1000)
        if not entries:
            break
        for pos, payload in entries:
            for message in topic.decoded.messages(pos, payload):
                topic.dedup.on_persisted(message.producer_name, message.sequence_id)
        topic.dedup_position = entries[-1][0]
        nxt = topic.log.layout.next_position(entries[-1][0])


async def snapshot_dedup(topic: Topic) -> None:
    """Write the dedup state with the position it covers: the last entry whose
    messages it has taken in (never ahead of it, or a replay would skip ids)."""
    position = topic.dedup_position
    value = orjson.dumps({**topic.dedup.snapshot(), "position": [position.ledger_id, position.entry_id]})
    revision = await topic.store.compare_and_swap(keys.dedup(topic.name.path), value, topic.dedup_revision)
    if revision is None:
        topic.on_lost_ownership()
        return
    topic.dedup_revision = revision
    topic.entries_since_snapshot = 0


def needs_io(topic: Topic, policies: TopicPolicies) -> bool:
    """Whether this visit's upkeep may do I/O (else ``maintain_in_place`` covers it):
    TTL to apply (only subscriptions expire), more than one ledger (the open one
    is never trimmed), or a dedup snapshot due."""
    return (
        (policies.ttl_seconds > 0 and bool(topic.subscriptions))
        or len(topic.log.ledgers) > 1
        or (policies.dedup and topic.entries_since_snapshot >= DEDUP_SNAPSHOT_ENTRIES)
    )


def maintain_in_place(topic: Topic, policies: TopicPolicies, now_ms: int) -> None:
    """``maintain_once`` for a topic that ``needs_io`` says has no I/O due."""
    sample_stats(topic, now_ms)
    check_backlog_quota(topic, policies)


async def maintain_once(topic: Topic) -> None:
    if topic.closed or topic.log.fenced:
        return
    sample_stats(topic, topic.clock.now_ms())
    policies = topic.policies
    if policies.ttl_seconds > 0:
        await expire(topic, policies.ttl_seconds)
    check_backlog_quota(topic, policies)
    await topic.log.trim(topic.slowest_mark_delete(), policies.retention)
    if policies.dedup and topic.entries_since_snapshot >= DEDUP_SNAPSHOT_ENTRIES:
        await snapshot_dedup(topic)


def backlog_bytes(topic: Topic) -> int:
    """Estimated bytes after the slowest durable cursor (docs/compatibility.md §4.11)."""
    slowest = topic.slowest_mark_delete()
    layout = topic.log.layout
    total = layout.total_entries
    if slowest is None or total == 0:
        return 0
    behind = layout.entries_between(slowest, layout.last_position())
    return topic.log.total_bytes * behind // total


def check_backlog_quota(topic: Topic, policies: TopicPolicies) -> None:
    limit = policies.backlog_limit_bytes
    if limit < 0:
        topic.quota_exceeded = False
        return
    topic.quota_exceeded = topic.backlog_bytes() > limit
    if topic.quota_exceeded and policies.backlog_policy == "consumer_backlog_eviction":
        layout = topic.log.layout
        slowest = min(topic.subscriptions.values(), key=lambda sub: sub.cursor.mark_delete)
        behind = layout.entries_between(slowest.cursor.mark_delete, layout.last_position())
        slowest.skip(max(1, behind // 2))  # evict the oldest half of the slowest backlog


async def expiry_position(topic: Topic, seconds: int) -> Position:
    """The last entry published more than ``seconds`` ago (EARLIEST if none)."""
    cutoff = topic.clock.now_ms() - seconds * 1000
    first_live = await topic.first_position_at_or_after(cutoff)
    layout = topic.log.layout
    if first_live is None:
        return layout.last_position()
    index = layout.index(first_live)
    return layout.at(index - 1) if index > 1 else EARLIEST


async def expire(topic: Topic, ttl_seconds: int, subs: Iterable[Subscription] | None = None) -> int:
    """Expire (acknowledge) messages older than ``ttl_seconds`` on ``subs`` (default:
    every durable subscription); returns how many messages expired."""
    upto = await expiry_position(topic, ttl_seconds)
    expired = 0
    for sub in list(topic.subscriptions.values()) if subs is None else subs:
        if upto > sub.cursor.mark_delete:
            expired += sub.expire_upto(upto)
    return expired


def _sub_counts(sub: Subscription) -> tuple[int, int, int, int, int]:
    return (sub.msg_out, sub.bytes_out, sub.msg_redelivered, sub.acks, sub.expired)


def sample_stats(topic: Topic, now_ms: int) -> None:
    """Feed the rate meters (topic, producers, subscriptions, consumers) and, once
    per history interval, the topic's stats history."""
    topic.meter.sample(now_ms, (topic.msg_in, topic.bytes_in))
    for producer in topic.producers.values():
        producer.meter.sample(now_ms, (producer.msg_in, producer.bytes_in))
    for sub in [*topic.subscriptions.values(), *topic.readers.values()]:
        sub.meter.sample(now_ms, _sub_counts(sub))
        for record in sub.consumers.values():
            record.meter.sample(now_ms, (record.msg_out, record.bytes_out, record.redelivered, record.acks))
    if topic.history.due(now_ms):
        rate_in, throughput_in = topic.meter.rates(now_ms, (topic.msg_in, topic.bytes_in))
        rate_out = throughput_out = 0.0
        for sub in topic.subscriptions.values():
            rates = sub.meter.rates(now_ms, _sub_counts(sub))
            rate_out += rates[0]
            throughput_out += rates[1]
        topic.history.offer(
            StatsSample(
                now_ms,
                rate_in,
                rate_out,
                throughput_in,
                throughput_out,
                sum(sub.backlog() for sub in topic.subscriptions.values()),
                topic.log.total_bytes,
            )
        )


async def first_position_at_or_after(topic: Topic, timestamp_ms: int) -> Position | None:
    """The first entry whose publish time is >= ``timestamp_ms`` (binary search
    over the log; publish times grow with the log); None if there is none."""
    layout = topic.log.layout
    lo, hi = 1, layout.total_entries
    found: Position | None = None
    while lo <= hi:
        mid = (lo + hi) // 2
        position = layout.at(mid)
        messages = await topic.decoded.load_messages(position)
        if not messages or messages[0].publish_time_ms >= timestamp_ms:
            found = position
            hi = mid - 1
        else:
            lo = mid + 1
    return found
