"""A topic's figures from what is stored, whether or not a gateway has it loaded (pure).

Owns: ``stored_topic`` - turning a topic's etcd records (its ledger list,
``storage.formats.log_record``, and its subscriptions' persisted cursors,
``gateway.broker.cursor_core.Cursor.snapshot`` inside the subscription's record)
into the same summary and subscription rows a loaded topic gives
(``gateway.api.topic_summary``, ``gateway.api.rollups``), marked
``figures: "stored"`` with ``asOfMs``, the time of the newest record they come
from (docs/decisions/0016). Rules: the same counting a gateway does when it
loads the topic - entries from the ledger list, messages from each closed
ledger's recorded total (pro rata inside a ledger, one per entry when the total
is unknown: ``gateway.broker.message_counts``), backlog bytes pro rata of the
log's bytes; an open ledger (its gateway stopped without closing it) counts
the entries its storage nodes confirm (``OpenLedger``, read by the caller) and
``exact`` is False then, or when that could not be read; rates, producers and
consumers are 0 (nobody is connected to a topic nobody has loaded). Nothing
here does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.api.rollups import FIGURES_LIVE, FIGURES_STORED, is_dashboard_reader, subscription_row
from gateway.broker.cursor_core import Cursor
from gateway.broker.log_layout import LedgerLayout
from gateway.broker.message_counts import MessageCounts
from gateway.broker.topic_upkeep import backlog_bytes
from gateway.errors import CorruptCursorSnapshot
from storage.formats.log_record import LedgerInfo, decode_state


@dataclass(frozen=True, slots=True)
class OpenLedger:
    """What the storage nodes confirm of a ledger the list still shows open."""

    entries: int  # confirmed entries (last add confirmed + 1)
    size: int  # payload bytes (0 when unknown)


@dataclass(frozen=True, slots=True)
class StoredTopic:
    """A topic's summary (``topic_summary.summarize``'s fields) and its subscription rows."""

    summary: dict[str, Any]
    subscriptions: list[dict[str, Any]] = field(default_factory=list)


def open_ledger_id(record: bytes) -> int | None:
    """The ledger a stored list still shows open (its last, never closed), if any."""
    try:
        ledgers, _, _ = decode_state(record)
    except (ValueError, KeyError, TypeError, orjson.JSONDecodeError):
        return None
    if ledgers and ledgers[-1].timestamp_ms == 0 and ledgers[-1].entries == 0:
        return ledgers[-1].ledger_id
    return None


def _layout(ledgers: list[LedgerInfo], open_ledger: OpenLedger | None) -> tuple[LedgerLayout, int, int]:
    """The log's layout, its bytes and the newest closing time among its ledgers."""
    pairs = [(info.ledger_id, info.entries) for info in ledgers]
    size = sum(info.size for info in ledgers)
    if open_ledger is not None and pairs:
        pairs[-1] = (pairs[-1][0], open_ledger.entries)
        size += open_ledger.size
    newest = max((info.timestamp_ms for info in ledgers), default=0)
    return LedgerLayout(pairs), size, newest


def stored_topic(
    topic: str,
    record: bytes,
    cursors: Mapping[str, bytes],
    open_ledger: OpenLedger | None,
    open_ledger_read: bool,
    now_ms: int,
) -> StoredTopic | None:
    """``topic``'s figures from its ledger list ``record`` and its subscriptions'
    records (name -> value); ``open_ledger``: what the nodes confirm of a ledger the
    list shows open (``open_ledger_read`` False: there is one and it was not read).
    None when the list is not readable."""
    try:
        ledgers, created_ms, _ = decode_state(record)
    except (ValueError, KeyError, TypeError, orjson.JSONDecodeError):
        return None
    layout, total_bytes, newest = _layout(ledgers, open_ledger)
    counts = MessageCounts()
    for info in ledgers:
        counts.set_total(info.ledger_id, info.messages)
    view = counts.view(layout)
    total_messages = view.total()
    as_of = max(created_ms, newest)
    rows: list[dict[str, Any]] = []
    slowest = None
    for name, value in sorted(cursors.items()):
        if is_dashboard_reader(name):
            continue
        parsed = _cursor(value)
        if parsed is None:
            continue
        cursor, sub_type, written_ms = parsed
        as_of = max(as_of, written_ms)
        backlog = cursor.backlog_messages(layout, view)
        mark = cursor.mark_delete
        slowest = mark if slowest is None or mark < slowest else slowest
        stats: dict[str, Any] = {
            "type": sub_type,
            "isDurable": True,
            "msgBacklog": backlog,
            "backlogSize": total_bytes * backlog // total_messages if total_messages else 0,
            "consumers": [],
        }
        row = subscription_row(topic, name, stats, None, now_ms)
        rows.append({**row, "lagMs": row["lagMs"] if backlog == 0 else None, **_marks(written_ms)})
    exact = open_ledger_read and all(info.messages > 0 or info.entries == 0 for info in ledgers[:-1])
    summary = {
        "topic": topic,
        "msgRateIn": 0.0,
        "msgThroughputIn": 0.0,
        "msgRateOut": 0.0,
        "msgThroughputOut": 0.0,
        "msgInCounter": 0,
        "bytesInCounter": 0,
        "msgOutCounter": 0,
        "bytesOutCounter": 0,
        "storageSize": total_bytes,
        "backlogSize": backlog_bytes(layout, total_bytes, slowest),
        "msgBacklog": sum(r["msgBacklog"] for r in rows),
        "producerCount": 0,
        "subscriptionCount": len(rows),
        "consumerCount": 0,
        "backlogQuotaExceeded": False,
        "loaded": False,
        "exact": exact,
        **_marks(as_of),
    }
    return StoredTopic(summary, rows)


def _marks(as_of_ms: int) -> dict[str, Any]:
    return {"figures": FIGURES_STORED, "asOfMs": as_of_ms or None}


def _cursor(value: bytes) -> tuple[Cursor, str | None, int] | None:
    """A subscription record's cursor, type and write time (None: not readable)."""
    try:
        record = orjson.loads(value)
        cursor = Cursor.restore(record["cursor"])
    except (orjson.JSONDecodeError, KeyError, TypeError, CorruptCursorSnapshot):
        return None
    sub_type = record.get("type")
    written = record.get("createdMs")
    return (
        cursor,
        sub_type if isinstance(sub_type, str) else None,
        written if isinstance(written, int) else 0,
    )


def live(summary: dict[str, Any], now_ms: int) -> dict[str, Any]:
    """A loaded topic's summary (or subscription row) marked as live figures of ``now_ms``."""
    return {**summary, "figures": FIGURES_LIVE, "asOfMs": now_ms}
