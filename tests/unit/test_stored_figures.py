"""A topic's figures from its stored records (gateway.api.stored_figures), no gateway involved.

Shows: backlog per subscription from the persisted cursor (mark-delete and acked
ranges), over closed ledgers' recorded totals and an open ledger's confirmed
entries; size from the ledger list; ``exact`` false while the open ledger was not
read (then only closed ledgers count); the dashboard's readers and unreadable
records are left out; ``asOfMs`` is the newest record's time.
"""

from __future__ import annotations

import orjson

from gateway.api.stored_figures import OpenLedger, open_ledger_id, stored_topic
from storage.formats.log_record import LedgerInfo, encode_state

TOPIC = "persistent://t/ns/a"


def _record(open_ledger: bool = True) -> bytes:
    ledgers = [LedgerInfo(1, entries=10, size=1000, timestamp_ms=5_000, messages=20)]
    if open_ledger:
        ledgers.append(LedgerInfo(2))
    return encode_state(ledgers, 1_000, {"ownerEpoch": 3})


def _cursor(mark: tuple[int, int], ranges: list[list[int]], written_ms: int, kind: str = "Shared") -> bytes:
    snapshot = {"version": 1, "markDelete": list(mark), "ranges": ranges, "batches": []}
    return orjson.dumps({"cursor": snapshot, "type": kind, "createdMs": written_ms})


def test_backlog_from_cursors_and_open_ledger() -> None:
    cursors = {
        "s1": _cursor((1, 4), [], 9_000),  # ledger 1: entries 5..9 left (10 of its 20 messages)
        "s2": _cursor((1, -1), [[1, 2, 3]], 8_000, "Failover"),  # acked entries 2..3: 4 messages
        "folio-dashboard-tail-ab": _cursor((1, -1), [], 9_500),
        "broken": b"{not json",
    }
    assert open_ledger_id(_record()) == 2
    got = stored_topic(TOPIC, _record(), cursors, OpenLedger(entries=3, size=300), True, 10_000)
    assert got is not None
    rows = {r["name"]: r for r in got.subscriptions}
    assert set(rows) == {"s1", "s2"}
    # the open ledger's 3 entries count one message each (no total recorded for it)
    assert rows["s1"]["msgBacklog"] == 10 + 3
    assert rows["s2"]["msgBacklog"] == 20 - 4 + 3
    assert rows["s2"]["type"] == "Failover" and rows["s2"]["figures"] == "stored"
    summary = got.summary
    assert summary["msgBacklog"] == 13 + 19 and summary["subscriptionCount"] == 2
    assert summary["storageSize"] == 1300 and summary["backlogSize"] > 0
    assert (summary["loaded"], summary["figures"], summary["exact"]) == (False, "stored", True)
    assert summary["asOfMs"] == 9_000  # the newest record (the dashboard reader's is not counted)


def test_open_ledger_not_read_counts_closed_ledgers_and_says_so() -> None:
    got = stored_topic(TOPIC, _record(), {"s": _cursor((1, -1), [], 2_000)}, None, False, 10_000)
    assert got is not None
    assert got.summary["msgBacklog"] == 20 and got.summary["exact"] is False
    closed = stored_topic(TOPIC, _record(open_ledger=False), {}, None, True, 10_000)
    assert closed is not None and open_ledger_id(_record(open_ledger=False)) is None
    assert closed.summary["subscriptionCount"] == 0 and closed.summary["asOfMs"] == 5_000


def test_unreadable_list_is_none() -> None:
    assert stored_topic(TOPIC, b"[", {}, None, True, 0) is None
    assert open_ledger_id(b"[") is None
