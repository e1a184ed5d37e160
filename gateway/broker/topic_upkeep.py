"""A topic's upkeep rules: what a visit must do, backlog bytes, the TTL cut (pure).

Owns: the decisions behind the periodic and load-time work of a ``Topic`` that
is not on the publish or delivery path (the topic does the work:
``Topic.maintain_once``, ``Topic.maintain_in_place``). Rules (docs/compatibility.md §4.9, §4.11):
- dedup state is a snapshot in etcd, written every ``DEDUP_SNAPSHOT_ENTRIES``
  entries (``snapshot_due``) and on clean close;
- TTL moves each durable cursor past the entries published before now - TTL:
  up to the entry before the first live one (``expiry_position``);
- the backlog is the share of the log's bytes after the slowest durable cursor
  (``backlog_bytes``); over the quota, ``consumer_backlog_eviction`` skips the
  slowest cursor past the oldest half of its backlog (``eviction_count``);
- a visit may wait on I/O (``needs_io``) only with an expiry to apply (TTL set
  and a subscription to expire), ledgers that might be trimmed (more than the
  open one), or a dedup snapshot due; otherwise the upkeep is done in place.
"""

from __future__ import annotations

from gateway.broker.log_layout import LedgerLayout
from gateway.broker.topic_policies import TopicPolicies
from storage.formats.positions import EARLIEST, Position

DEDUP_SNAPSHOT_ENTRIES = 1000


def snapshot_due(policies: TopicPolicies, entries_since_snapshot: int) -> bool:
    return policies.dedup and entries_since_snapshot >= DEDUP_SNAPSHOT_ENTRIES


def needs_io(policies: TopicPolicies, subscriptions: int, ledgers: int, entries_since_snapshot: int) -> bool:
    """Whether a visit's upkeep may do I/O: TTL to apply (only subscriptions expire),
    more than one ledger (the open one is never trimmed), or a dedup snapshot due."""
    return (
        (policies.ttl_seconds > 0 and subscriptions > 0)
        or ledgers > 1
        or snapshot_due(policies, entries_since_snapshot)
    )


def backlog_bytes(layout: LedgerLayout, total_bytes: int, slowest: Position | None) -> int:
    """Estimated bytes after ``slowest``, the slowest durable cursor's mark-delete
    (docs/compatibility.md §4.11); 0 without a durable subscription."""
    total = layout.total_entries
    if slowest is None or total == 0:
        return 0
    behind = layout.entries_between(slowest, layout.last_position())
    return total_bytes * behind // total


def eviction_count(layout: LedgerLayout, mark_delete: Position) -> int:
    """Messages a cursor over the backlog quota skips: the oldest half of its backlog."""
    return max(1, layout.entries_between(mark_delete, layout.last_position()) // 2)


def expiry_position(layout: LedgerLayout, first_live: Position | None) -> Position:
    """The last entry to expire: the one before ``first_live``, the first entry
    published at or after the cutoff (None: every entry is older; EARLIEST: none)."""
    if first_live is None:
        return layout.last_position()
    index = layout.index(first_live)
    return layout.at(index - 1) if index > 1 else EARLIEST
