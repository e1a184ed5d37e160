"""The connector's planning, positions, pushdown and row decoding on plain data (no Spark session)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pyspark.sql.datasource import EqualTo, GreaterThan, GreaterThanOrEqual, In, LessThan, Not
from pyspark_folio.names import TopicPartition
from pyspark_folio.plan import (
    DataLoss,
    LedgerSpan,
    LogSnapshot,
    ReadRange,
    RowFilter,
    durable_prefix,
    plan_ranges,
    resolve_end,
    resolve_start,
)
from pyspark_folio.positions import EARLIEST, Pos, parse_offsets
from pyspark_folio.pushdown import push_filters
from pyspark_folio.rows import ARROW_SCHEMA, RowsBuilder, batches

from storage.formats.entry_format import EntryMessage, encode_entry
from storage.formats.message_id import MessageId

pytestmark = pytest.mark.unit

LOG = TopicPartition("persistent://t/n/x-partition-1", "persistent://t/n/x", 1)
SNAP = LogSnapshot(LOG, (LedgerSpan(3, 9, 10_000, 5_000), LedgerSpan(7, 99, 0, 0), LedgerSpan(9, 4)))


def covered(ranges: list[ReadRange]) -> list[tuple[int, int]]:
    return [(r.ledger_id, e) for r in ranges for e in range(r.first_entry, r.last_entry + 1)]


def test_plan_covers_every_entry_once_and_stops_at_the_end():
    ranges = plan_ranges([(SNAP, EARLIEST, SNAP.end)], entries_per_range=7)
    entries = covered(ranges)
    assert entries == [(3, e) for e in range(10)] + [(7, e) for e in range(100)] + [(9, e) for e in range(5)]
    assert max(r.entries for r in ranges) <= 7
    assert SNAP.end == Pos(9, 5, 0)


def test_plan_splits_by_bytes_of_closed_ledgers():
    ranges = plan_ranges([(SNAP, EARLIEST, Pos(3, 10, 0))], bytes_per_range=2_500)
    assert [r.entries for r in ranges] == [3, 3, 3, 1]


def test_plan_cuts_inside_entries_at_both_ends():
    ranges = plan_ranges([(SNAP, Pos(3, 8, 2), Pos(7, 1, 3))])
    assert [(r.ledger_id, r.first_entry, r.last_entry, r.first_batch, r.stop_batch) for r in ranges] == [
        (3, 8, 9, 2, None),
        (7, 0, 1, 0, 3),
    ]
    assert plan_ranges([(SNAP, Pos(7, 1, 3), Pos(7, 1, 3))]) == []


def test_plan_prunes_ledgers_closed_before_the_first_publish_time_wanted():
    ranges = plan_ranges([(SNAP, EARLIEST, SNAP.end)], RowFilter(publish_min_ms=6_000))
    assert {r.ledger_id for r in ranges} == {7, 9}
    assert plan_ranges([(SNAP, EARLIEST, SNAP.end)], RowFilter(keys=frozenset())) == []


def test_offsets_resolve_and_data_loss():
    assert resolve_start(SNAP, "earliest", True) == EARLIEST
    assert resolve_start(SNAP, "latest", True) == SNAP.end
    assert resolve_end(SNAP, Pos(99, 0, 0)) == SNAP.end
    with pytest.raises(DataLoss):
        resolve_start(SNAP, Pos(1, 5, 0), True)  # ledger 1 is gone
    assert resolve_start(SNAP, Pos(1, 5, 0), False) == Pos(3, 0, 0)
    _, specs = parse_offsets(
        '{"persistent://t/n/x": {"1": "3:4", "2": -2}, "persistent://t/n/y": -1}', "earliest"
    )
    assert specs == {
        LOG.name: Pos(3, 4, 0),
        "persistent://t/n/x-partition-2": "earliest",
        "persistent://t/n/y": "latest",
    }
    with pytest.raises(ValueError):
        parse_offsets("{nope", "earliest")


def test_durable_prefix_passes_the_lac_only_over_entries_on_an_ack_quorum():
    nodes = ["a", "b", "c"]
    every = lambda entry: nodes  # noqa: E731 - E = Qw = 3
    assert durable_prefix(4, 0, every, 2, {"a": 7, "b": 6, "c": 4}) == 6
    assert durable_prefix(4, 0, every, 2, {"a": 7, "b": 4, "c": 4}) == 4
    assert durable_prefix(4, 0, every, 2, {}) == 4
    striped = lambda entry: [nodes[entry % 3], nodes[(entry + 1) % 3]]  # noqa: E731 - E 3, Qw 2
    assert durable_prefix(-1, 0, striped, 2, {"a": 3, "b": 1, "c": 2}) == 2  # entry 3 is on a only
    # a segment from entry 1 (an ensemble change on a quiet ledger): entry 0 was confirmed
    # though no node heard its LAC, and the walk goes on from there
    assert durable_prefix(-1, 1, every, 2, {"a": 0, "b": 0, "c": 0}) == 0
    assert durable_prefix(-1, 1, every, 2, {"a": 2, "b": 1, "c": 0}) == 1


def test_pushdown_keeps_what_it_applies_and_hands_back_the_rest():
    t = datetime(2026, 1, 1, tzinfo=UTC)
    ms = int(t.timestamp() * 1000)
    other = Not(EqualTo(("key",), "a"))
    pushed, rejected = push_filters(
        [
            EqualTo(("topic",), "persistent://t/n/x"),
            In(("partition",), [1, 2]),
            In(("key",), ["a", "b"]),
            GreaterThan(("publish_time",), t),
            LessThan(("publish_time",), t.replace(year=2027)),
            other,
            GreaterThanOrEqual(("sequence_id",), 3),
        ]
    )
    assert rejected == [other, GreaterThanOrEqual(("sequence_id",), 3)]
    assert pushed.topics == {"persistent://t/n/x"} and pushed.partitions == {1, 2}
    assert pushed.rows.keys == {"a", "b"} and pushed.rows.publish_min_ms == ms + 1
    assert pushed.selects("persistent://t/n/x", 2) and not pushed.selects("persistent://t/n/x", 0)


def test_rows_decode_entries_with_ids_as_websocket_consumers_see_them():
    entry0 = encode_entry(
        [
            EntryMessage(b"\x00\xff", 1_000, "p", 1, key=b"k", properties={"a": "b"}, event_time_ms=5),
            EntryMessage(b"two", 2_000, "p", 2),
        ]
    )
    entry1 = encode_entry([EntryMessage(b"three", 3_000, "q", 3, schema_version=2)])
    read = ReadRange(LOG, 3, 0, 1, rows=RowFilter(publish_max_ms=2_500))
    out = list(batches(read, iter([(0, entry0), (1, entry1)]), RowsBuilder(read)))
    assert len(out) == 1 and out[0].schema == ARROW_SCHEMA
    rows = out[0].to_pylist()
    assert [r["value"] for r in rows] == [b"\x00\xff", b"two"]
    assert rows[0]["key"] == "k" and rows[0]["properties"] == [("a", "b")]
    assert MessageId.from_base64(rows[1]["message_id"]) == MessageId(3, 0, 1, 1)
    single = list(batches(ReadRange(LOG, 3, 1, 1), iter([(1, entry1)]), RowsBuilder(ReadRange(LOG, 3, 1, 1))))
    assert MessageId.from_base64(single[0].to_pylist()[0]["message_id"]) == MessageId(3, 1, 1)
    # the schema version comes from the log itself (Pulsar's 8-byte form); none: null
    assert [r["schema_version"] for r in rows] == [None, None]
    assert single[0].to_pylist()[0]["schema_version"] == (2).to_bytes(8, "big")


def test_rows_are_cut_into_bounded_batches():
    entry = encode_entry([EntryMessage(b"x" * 100, 1, "p", i) for i in range(1000)])
    read = ReadRange(LOG, 3, 0, 4)
    sizes = [
        b.num_rows
        for b in batches(read, iter([(e, entry) for e in range(5)]), RowsBuilder(read, rows_max=1500))
    ]
    assert sum(sizes) == 5000 and max(sizes) <= 2000  # cut at the entry that passes the bound
    by_bytes = [
        b.num_rows
        for b in batches(read, iter([(e, entry) for e in range(5)]), RowsBuilder(read, bytes_max=150_000))
    ]
    assert sum(by_bytes) == 5000 and max(by_bytes) == 2000
