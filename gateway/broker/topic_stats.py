"""A loaded topic's stats and internal stats as Pulsar prints them (asyncio shell).

Owns: reading a ``Topic``'s counters, meters, cursors and ledger list into the
pure builders of ``gateway.broker.stats`` (``topic_stats``) and Pulsar's
internal-stats shape (``internal_stats``: managed log, ledgers with Folio's
``state``/``ensembles``/``messages`` additions, cursors). Rules
(docs/compatibility.md §3.3-3.4, §4.8): ``msgBacklog`` counts messages after
mark-delete that are not acknowledged; ``individuallyDeletedMessages`` is
Guava range notation; nothing here writes state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from coordination import keys
from gateway.broker import stats
from gateway.broker.stats import iso_ms
from gateway.subscription_type import SubscriptionType
from storage.errors import StorageError
from storage.types import LedgerState

if TYPE_CHECKING:
    from gateway.broker.subscription import Subscription
    from gateway.broker.topic import Topic


def _consumers(sub: Subscription, now_ms: int) -> tuple[list[dict[str, Any]], str | None]:
    dispatcher = sub.dispatcher
    view = dispatcher.stats() if dispatcher is not None else None
    by_id = {c.consumer_id: c for c in view.consumers} if view is not None else {}
    out = []
    for record in sub.consumers.values():
        seen = by_id.get(record.consumer_id)
        counts = (record.msg_out, record.bytes_out, record.redelivered, record.acks)
        out.append(
            stats.consumer_stats(
                name=record.info.name,
                rates=record.meter.rates(now_ms, counts),  # type: ignore[arg-type]
                msg_out=record.msg_out,
                bytes_out=record.bytes_out,
                available_permits=seen.available_permits if seen else 0,
                unacked=seen.unacked if seen else 0,
                blocked=bool(seen and (seen.blocked_reason or "").endswith("unacked limit")),
                connected_since_ms=record.connected_since_ms,
                address=record.address,
                client_version=record.client_version,
                last_acked_ms=sub.last_acked_ms,
                last_consumed_ms=sub.last_consumed_ms,
                hash_ranges=[(r.start, r.end) for r in seen.hash_ranges] if seen else (),
            )
        )
    active = None
    if view is not None and view.active_consumer is not None:
        holder = sub.consumers.get(view.active_consumer)
        active = holder.info.name if holder is not None else None
    return out, active


def subscription_stats(topic: Topic, sub: Subscription, now_ms: int) -> dict[str, Any]:
    consumers, active = _consumers(sub, now_ms)
    counts = (sub.msg_out, sub.bytes_out, sub.msg_redelivered, sub.acks, sub.expired)
    backlog = sub.backlog()
    total_messages = topic.log.counts.view(topic.log.layout).total()
    dispatcher = sub.dispatcher
    key_shared = None
    if sub.sub_type is SubscriptionType.KEY_SHARED and sub.consumers:
        first = next(iter(sub.consumers.values()))
        key_shared = first.info.key_shared_mode.name
    return stats.subscription_stats(
        sub_type=sub.sub_type,
        durable=sub.durable,
        rates=sub.meter.rates(now_ms, counts),  # type: ignore[arg-type]
        msg_out=sub.msg_out,
        bytes_out=sub.bytes_out,
        backlog=backlog,
        backlog_bytes=topic.log.total_bytes * backlog // total_messages if total_messages else 0,
        delayed=dispatcher.stats().delayed if dispatcher is not None else 0,
        consumers=consumers,
        active_consumer=active,
        total_expired=sub.expired,
        last_expire_ms=sub.last_expire_ms,
        last_acked_ms=sub.last_acked_ms,
        last_consumed_ms=sub.last_consumed_ms,
        ack_holes=sub.cursor.range_count,
        key_shared_mode=key_shared,
    )


def topic_stats(topic: Topic) -> dict[str, Any]:
    now_ms = topic.clock.now_ms()
    publishers = [
        stats.publisher_stats(
            producer_id=p.producer_id,
            name=p.name,
            rates=p.meter.rates(now_ms, (p.msg_in, p.bytes_in)),  # type: ignore[arg-type]
            msg_in=p.msg_in,
            bytes_in=p.bytes_in,
            connected_since_ms=p.connected_since_ms,
            address=p.address,
            access_mode=p.access_mode,
            client_version=p.client_version,
            metadata=p.metadata,
        )
        for p in topic.producers.values()
    ]
    subs = {name: subscription_stats(topic, sub, now_ms) for name, sub in topic.subscriptions.items()}
    for name, reader in topic.readers.items():
        subs[name] = subscription_stats(topic, reader, now_ms)
    return stats.topic_stats(
        rates_in=topic.meter.rates(now_ms, (topic.msg_in, topic.bytes_in)),  # type: ignore[arg-type]
        msg_in=topic.msg_in,
        bytes_in=topic.bytes_in,
        storage_size=topic.log.total_bytes,
        backlog_size=topic.backlog_bytes(),
        publishers=publishers,
        subscriptions=subs,
        deduplication=topic.policies.dedup,
    )


async def _ledger(topic: Topic, info_id: int, entries: int, size: int, is_open: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "ledgerId": info_id,
        "entries": entries,
        "size": size,
        "offloaded": False,
        "underReplicated": await topic.store.get(keys.under_replicated(info_id)) is not None,
        "state": "open" if is_open else "closed",
        "messages": topic.log.counts.ledger_total(info_id) or None,
        "ensembles": {},
    }
    try:
        metadata = await topic.log.ledger_metadata(info_id)
    except StorageError:
        return out
    out["ensembles"] = {str(s.first_entry_id): list(s.ensemble) for s in metadata.segments}
    if metadata.state is not LedgerState.OPEN:
        out["state"] = "closed"
    return out


def _cursor(topic: Topic, sub: Subscription) -> dict[str, Any]:
    layout = topic.log.layout
    cursor = sub.cursor
    backlog_entries = cursor.backlog(layout)
    return {
        "markDeletePosition": str(cursor.mark_delete),
        "readPosition": str(sub.read_position),
        "waitingReadOp": bool(sub.consumers),
        "pendingReadOps": 0,
        "messagesConsumedCounter": max(0, layout.total_entries - backlog_entries),
        "cursorLedger": -1,  # Folio keeps cursors in etcd, not in a cursor ledger
        "cursorLedgerLastEntry": -1,
        "individuallyDeletedMessages": cursor.individually_deleted_messages(),
        "lastLedgerSwitchTimestamp": "",
        "state": "Closed" if sub.closed else "Open",
        "active": bool(sub.consumers),
        "numberOfEntriesSinceFirstNotAckedMessage": layout.entries_between(
            cursor.mark_delete, sub.read_position
        ),
        "totalNonContiguousDeletedMessagesRange": cursor.range_count,
        "subscriptionHavePendingRead": False,
        "subscriptionHavePendingReplayRead": False,
        "properties": {},
    }


async def internal_stats(topic: Topic) -> dict[str, Any]:
    log = topic.log
    infos = log.ledgers
    ledgers = []
    for i, info in enumerate(infos):
        is_open = i == len(infos) - 1
        entries = log.current_ledger_entries if is_open else info.entries
        size = log.current_ledger_bytes if is_open else info.size
        ledgers.append(await _ledger(topic, info.ledger_id, entries, size, is_open))
    last = log.last_confirmed
    if log.fenced:
        state = "Fenced"
    elif log.terminated:
        state = "Terminated"
    elif log.closed:
        state = "Closed"
    else:
        state = "LedgerOpened"
    return {
        "entriesAddedCounter": log.entries_added,
        "numberOfEntries": log.total_entries,
        "totalSize": log.total_bytes,
        "currentLedgerEntries": log.current_ledger_entries,
        "currentLedgerSize": log.current_ledger_bytes,
        "lastLedgerCreatedTimestamp": iso_ms(log.created_ledger_ms),
        "lastLedgerCreationFailureTimestamp": None,
        "waitingCursorsCount": sum(1 for s in topic.subscriptions.values() if s.consumers),
        "pendingAddEntriesCount": log.pending_appends,
        "lastConfirmedEntry": str(last) if last.ledger_id >= 0 else f"{log.current_ledger_id}:-1",
        "state": state,
        "ledgers": ledgers,
        "cursors": {name: _cursor(topic, sub) for name, sub in topic.subscriptions.items()},
        "schemaLedgers": [],
        "compactedLedger": {"ledgerId": -1, "entries": -1, "size": -1, "offloaded": False},
    }
