"""Cursor ack state: examples for each rule (the model-based test is test_cursor_model.py)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.broker.cursor_core import RANGES_PERSISTED_MAX, Cursor
from gateway.broker.log_layout import LedgerLayout
from gateway.errors import CorruptCursorSnapshot, GatewayError
from storage.formats.positions import EARLIEST, LATEST, NO_BATCH, MessagePosition, Position

pytestmark = pytest.mark.unit

LOG = LedgerLayout([(3, 5), (4, 0), (6, 3)])  # 3:0..3:4, (4 empty), 6:0..6:2


def m(ledger: int, entry: int, batch: int = -1) -> MessagePosition:
    return MessagePosition(ledger, entry, batch)


def read_all(cursor: Cursor, sizes: dict[Position, int] | None = None, log: LedgerLayout = LOG) -> None:
    for index in range(1, log.total_entries + 1):
        p = log.at(index)
        cursor.on_read(p, (sizes or {}).get(p, 1))


def test_in_order_acks_move_mark_delete_across_an_empty_ledger() -> None:
    c = Cursor(EARLIEST)
    read_all(c)
    for e in range(5):
        assert c.ack(m(3, e), LOG)
        assert c.mark_delete == Position(3, e)
    assert c.ack(m(6, 0), LOG)
    assert c.mark_delete == Position(6, 0)
    assert c.backlog(LOG) == 2


def test_holes_are_ranges_until_filled() -> None:
    c = Cursor(Position(3, -1))
    read_all(c)
    assert c.ack(m(3, 1), LOG) and c.ack(m(3, 2), LOG) and c.ack(m(3, 4), LOG) and c.ack(m(6, 1), LOG)
    assert c.mark_delete == Position(3, -1)
    assert c.acked_ranges() == [
        (Position(3, 1), Position(3, 2)),
        (Position(3, 4), Position(3, 4)),
        (Position(6, 1), Position(6, 1)),
    ]
    assert c.individually_deleted_messages() == "[(3:0..3:2], (3:3..3:4], (6:0..6:1]]"
    assert c.backlog(LOG) == 8 - 4
    assert c.ack(m(3, 0), LOG)
    assert c.mark_delete == Position(3, 2)
    assert c.ack(m(3, 3), LOG)
    assert c.mark_delete == Position(3, 4)  # stops at 6:0, 6:1 stays a range
    assert c.ack(m(6, 0), LOG)
    assert c.mark_delete == Position(6, 1)
    assert c.acked_ranges() == []
    assert c.backlog(LOG) == 1


def test_batch_index_acks_complete_an_entry() -> None:
    c = Cursor(Position(3, -1))
    read_all(c, {Position(3, 0): 3})
    assert c.ack(m(3, 0, 2), LOG)
    assert c.ack(m(3, 0, 0), LOG)
    assert not c.ack(m(3, 0, 0), LOG)  # idempotent
    assert c.is_acked(m(3, 0, 0)) and not c.is_acked(m(3, 0, 1)) and not c.is_acked(m(3, 0))
    assert c.acked_mask(Position(3, 0)) == 0b101 and c.acked_mask(Position(3, 1)) == 0
    assert c.partially_acked_entries == 1
    assert c.backlog(LOG) == 8  # a partly acked batch still counts
    assert c.ack(m(3, 0, 1), LOG)
    assert c.mark_delete == Position(3, 0)
    assert c.partially_acked_entries == 0
    assert c.is_acked(m(3, 0)) and c.is_acked(m(3, 0, 1)) and c.acked_mask(Position(3, 0)) == -1


def test_entry_ack_covers_a_partly_acked_batch_and_single_message_batch_index() -> None:
    c = Cursor(Position(3, -1))
    read_all(c, {Position(3, 1): 4})
    assert c.ack(m(3, 1, 3), LOG)
    assert c.ack(m(3, 1), LOG)
    assert c.is_acked(m(3, 1, 0)) and c.partially_acked_entries == 0
    assert c.ack(m(3, 0, 0), LOG)  # batch index 0 of a 1-message entry acks it
    assert c.mark_delete == Position(3, 1)


@pytest.mark.parametrize(
    "message",
    [m(3, 1), m(3, 1, 0), m(9, 0), m(3, 99), m(2, 0), m(3, 2, 2), m(3, 2, 5), m(6, 0)],
)
def test_no_op_acks(message: MessagePosition) -> None:
    c = Cursor(Position(3, 1))
    c.on_read(Position(3, 2), 2)  # 6:0 is never read
    before = (c.snapshot(), c.revision)
    assert not c.ack(message, LOG)
    assert not c.ack_cumulative(message, LOG)
    assert (c.snapshot(), c.revision) == before


def test_ack_of_never_read_entry_is_a_no_op_until_read() -> None:
    c = Cursor(EARLIEST)
    assert not c.ack(m(3, 0), LOG)
    assert not c.ack_cumulative(m(6, 2), LOG)
    assert c.mark_delete == EARLIEST
    c.on_read(Position(3, 0), 1)
    assert c.ack(m(3, 0), LOG)


def test_cumulative_ack_of_an_entry_and_of_a_batch_index() -> None:
    c = Cursor(EARLIEST)
    read_all(c, {Position(6, 0): 4})
    assert c.ack(m(6, 1), LOG)
    assert c.ack_cumulative(m(6, 0, 1), LOG)
    assert c.mark_delete == Position(6, -1)  # every entry before 6:0 is acked
    assert c.backlog(LOG) == 2  # 6:0 partly acked, 6:2
    assert c.is_acked(m(6, 0, 1)) and not c.is_acked(m(6, 0, 2))
    assert not c.ack_cumulative(m(6, 0, 0), LOG)  # already covered
    assert c.ack_cumulative(m(6, 0, 3), LOG)
    assert c.mark_delete == Position(6, 1)  # entry 6:0 complete, range 6:1 collapses
    assert c.ack_cumulative(m(6, 2), LOG)
    assert c.backlog(LOG) == 0
    assert not c.ack_cumulative(m(6, 2), LOG)


def test_cumulative_ack_to_an_already_acked_entry_moves_mark_delete() -> None:
    c = Cursor(Position(3, -1))
    read_all(c)
    c.ack(m(3, 3), LOG)
    assert c.ack_cumulative(m(3, 3, 7), LOG)  # acked entry: whole, whatever the index
    assert c.mark_delete == Position(3, 3)


def test_cumulative_ack_and_expire_inside_an_acked_range() -> None:
    c = Cursor(Position(3, -1))
    read_all(c)
    for e in (1, 2, 3):
        c.ack(m(3, e), LOG)
    assert c.backlog(LOG) == 5
    assert c.ack_cumulative(m(3, 2), LOG)  # into the middle of range 3:1..3:3
    assert c.mark_delete == Position(3, 3) and c.backlog(LOG) == 4
    d = Cursor(Position(3, -1))
    read_all(d)
    for e in (1, 2, 4):
        d.ack(m(3, e), LOG)
    assert d.expire(Position(3, 1), LOG)
    assert d.mark_delete == Position(3, 2)
    assert d.acked_ranges() == [(Position(3, 4), Position(3, 4))]
    assert d.backlog(LOG) == 4


def test_backlog_follows_the_log_as_it_grows() -> None:
    c = Cursor(Position(6, 2))
    assert c.backlog(LOG) == 0
    grown = LedgerLayout([(3, 5), (4, 0), (6, 3), (7, 2)])
    assert c.backlog(grown) == 2
    c.on_read(Position(7, 1), 1)
    assert c.ack(m(7, 1), grown) and c.backlog(grown) == 1
    c.on_read(Position(7, 0), 1)
    assert c.ack(m(7, 0), grown)
    assert c.mark_delete == Position(7, 1)


def test_skip_counts_only_unacked_entries() -> None:
    c = Cursor(Position(3, -1))
    read_all(c)
    c.ack(m(3, 1), LOG)
    c.ack(m(3, 2), LOG)
    assert c.skip(2, LOG)  # skips 3:0 and 3:3 (3:1, 3:2 already acked)
    assert c.mark_delete == Position(3, 3)
    assert not c.skip(0, LOG)
    assert c.skip(100, LOG)
    assert c.mark_delete == Position(6, 2) and c.backlog(LOG) == 0


def test_expire_is_clamped_to_the_log_end() -> None:
    c = Cursor(EARLIEST)
    assert c.expire(Position(3, 2), LOG)
    assert c.mark_delete == Position(3, 2)
    assert c.expire(LATEST, LOG)
    assert c.mark_delete == Position(6, 2)
    assert not c.expire(Position(3, 0), LOG)


def test_seek_resets_ranges_and_acks_everything_before() -> None:
    c = Cursor(Position(3, -1))
    read_all(c, {Position(6, 1): 2})
    c.ack(m(3, 3), LOG)
    c.ack(m(6, 1, 0), LOG)
    c.seek(Position(3, 2), LOG)
    assert c.mark_delete == Position(3, 1)
    assert c.acked_ranges() == [] and c.partially_acked_entries == 0 and c.tracked_entries == 0
    assert not c.ack(m(3, 3), LOG)  # must be read again first
    c.seek(Position(3, 2), LOG, inclusive=False)
    assert c.mark_delete == Position(3, 2)
    c.seek(EARLIEST, LOG)
    assert c.mark_delete == EARLIEST and c.backlog(LOG) == 8
    c.seek(LATEST, LOG)
    assert c.mark_delete == Position(6, 2) and c.backlog(LOG) == 0
    c.seek(Position(99, 5), LOG)
    assert c.mark_delete == Position(6, 2)  # never past the log's end


def test_snapshot_round_trips_through_json() -> None:
    c = Cursor(Position(3, -1))
    read_all(c, {Position(3, 4): 3, Position(6, 2): 1000})
    for message in (m(3, 1), m(3, 3), m(3, 4, 1), m(6, 1), m(6, 2, 999)):
        c.ack(message, LOG)
    snap = orjson.loads(orjson.dumps(c.snapshot()))
    r = Cursor.restore(snap)
    assert r.snapshot() == c.snapshot()
    assert r.backlog(LOG) == c.backlog(LOG)
    assert r.ack(m(3, 4, 0), LOG)  # restored batch sizes make batch acks work at once
    assert r.ack(m(3, 4, 2), LOG)
    assert r.is_acked(m(3, 4))


def test_snapshot_is_capped_and_the_rest_is_redelivered() -> None:
    log = LedgerLayout([(1, 2 * RANGES_PERSISTED_MAX + 10)])
    c = Cursor(Position(1, -1))
    read_all(c, log=log)
    for e in range(1, 2 * RANGES_PERSISTED_MAX + 10, 2):
        c.ack(m(1, e), log)
    snap = c.snapshot()
    assert len(snap["ranges"]) == RANGES_PERSISTED_MAX
    assert len(orjson.dumps(snap)) < 32 * 1024
    r = Cursor.restore(snap)
    assert r.mark_delete == c.mark_delete
    assert r.is_acked(m(1, 2 * RANGES_PERSISTED_MAX - 1))
    assert not r.is_acked(m(1, 2 * RANGES_PERSISTED_MAX + 1))  # lost: delivered again
    assert r.backlog(log) > c.backlog(log)


def test_batch_snapshot_cap() -> None:
    c = Cursor(Position(3, -1), batches_persisted_max=1)
    read_all(c, {Position(3, 1): 2, Position(3, 2): 2})
    c.ack(m(3, 1, 0), LOG)
    c.ack(m(3, 2, 1), LOG)
    snap = c.snapshot()
    assert snap["batches"] == [[3, 1, 2, "1"]]


def good_snapshot() -> dict[str, Any]:
    return {"version": 1, "markDelete": [3, 0], "ranges": [[3, 2, 2], [6, 0, 1]], "batches": [[3, 3, 3, "5"]]}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("version", 2),
        ("markDelete", [3]),
        ("markDelete", [3, "0"]),
        ("markDelete", None),
        ("ranges", [[3, 1, 2]]),  # adjacent to mark-delete: not collapsed
        ("ranges", [[3, 2, 1]]),  # first > last
        ("ranges", [[6, 0, 1], [3, 2, 2]]),  # unsorted
        ("ranges", [[3, 2, 3], [3, 4, 4]]),  # adjacent ranges: not merged
        ("ranges", [[3, 2, True]]),
        ("ranges", 5),
        ("batches", [[3, 3, 3, "7"]]),  # full mask
        ("batches", [[3, 3, 3, "0"]]),  # empty mask
        ("batches", [[3, 3, 1, "1"]]),  # a 1-message entry is never partial
        ("batches", [[3, 3, 1001, "1"]]),
        ("batches", [[3, 3, 3, "x"]]),
        ("batches", [[3, 3, 3]]),
        ("batches", [[3, 2, 3, "1"]]),  # inside an acked range
        ("batches", [[3, 0, 3, "1"]]),  # at mark-delete
    ],
)
def test_corrupt_snapshots_raise_typed_error(field: str, value: object) -> None:
    assert Cursor.restore(good_snapshot()).mark_delete == Position(3, 0)
    snap = good_snapshot()
    snap[field] = value
    with pytest.raises(CorruptCursorSnapshot) as info:
        Cursor.restore(snap)
    assert isinstance(info.value, GatewayError)


@pytest.mark.parametrize("snap", [None, [], "x", {"version": 1}])
def test_non_snapshots_raise_typed_error(snap: object) -> None:
    with pytest.raises(CorruptCursorSnapshot):
        Cursor.restore(snap)


def test_tracked_entries_bound() -> None:
    log = LedgerLayout([(1, 10)])
    c = Cursor(Position(1, -1), entries_tracked_max=3)
    for e in range(5):
        c.on_read(Position(1, e), 1)
    assert c.tracked_entries == 3
    assert not c.ack(m(1, 3), log)  # not tracked: delivered again later
    assert c.ack(m(1, 0), log) and c.ack(m(1, 1), log)
    c.on_read(Position(1, 3), 1)
    assert c.tracked_entries == 2
    assert c.ack(m(1, 3), log)
    c.on_read(Position(1, 4), 1)
    c.on_read(Position(1, 5), 1)
    c.on_read(Position(1, 6), 1)
    assert c.tracked_entries == 3  # 1:2, 1:4, 1:5; 1:6 refused
    assert not c.ack(m(1, 6), log)


def test_revision_moves_only_on_change() -> None:
    c = Cursor(Position(3, -1))
    read_all(c)
    assert c.revision == 0
    c.ack(m(3, 1), LOG)
    first = c.revision
    c.ack(m(3, 1), LOG)
    assert c.revision == first
    c.ack(m(3, 0), LOG)
    assert c.revision > first


_ACK = st.tuples(
    st.sampled_from([7, 8]),  # ledger 7 holds entries 0..5; ledger 8 is never read
    st.integers(-2, 6),  # entry (negative and past the end included)
    st.sampled_from([NO_BATCH, -3, 0, 1, 2, 3, 4, 5]),  # batch index (out of range included)
).map(lambda t: MessagePosition(*t))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_ACK, max_size=12), max_size=8))
def test_ack_many_is_ack_of_each_in_turn(calls: list[list[MessagePosition]]) -> None:
    """``ack_many`` (one mask update per run of one entry's indices) ends in the same state,
    and names the same changed messages, as ``ack`` of each message in order."""
    log = LedgerLayout([(7, 6)])
    one, many = Cursor(Position(7, -1)), Cursor(Position(7, -1))
    for cursor in (one, many):
        for entry, size in enumerate((1, 3, 3, 1, 5, 2)):
            cursor.on_read(Position(7, entry), size)
    for messages in calls:
        before = many.revision
        expected = [m for m in messages if one.ack(m, log)]
        assert many.ack_many(messages, log) == expected
        assert (many.revision > before) == bool(expected)
        assert many.snapshot() == one.snapshot() and many.backlog(log) == one.backlog(log)
