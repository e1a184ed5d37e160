"""Message-level counting (pure): messages per entry, message backlog and skip on a
cursor whose entries hold several messages, and the admin bodies naming positions."""

from __future__ import annotations

import pytest

from gateway.api.admin_bodies import CursorTarget, message_headers, message_id_json, parse_target
from gateway.broker.cursor_core import Cursor
from gateway.broker.log_layout import LedgerLayout
from gateway.broker.message_counts import MessageCounts
from gateway.meta.errors import InvalidArgument
from storage.formats.entry_format import EntryMessage
from storage.formats.positions import EARLIEST, LATEST, MessagePosition, Position

pytestmark = pytest.mark.unit


def counted() -> tuple[LedgerLayout, MessageCounts]:
    """Ledger 3: closed, 4 entries, 10 messages (total only); ledger 5: entries of
    1, 3, 1, 5 messages appended here."""
    counts = MessageCounts()
    counts.set_total(3, 10)
    for entry, size in enumerate((1, 3, 1, 5)):
        counts.on_entry(5, entry, size)
    return LedgerLayout([(3, 4), (5, 4)]), counts


def test_exact_counts_for_appended_entries_and_estimates_for_the_rest() -> None:
    layout, counts = counted()
    view = counts.view(layout)
    assert view.total() == 20
    assert counts.ledger_total(5) == 10 and counts.ledger_total(3) == 10
    assert counts.entry_size(5, 1) == 3 and counts.entry_size(3, 1) == 0
    assert view.messages_between(Position(5, 0), Position(5, 2)) == 4
    assert view.messages_between(Position(3, 1), Position(3, 3)) == 5  # 2 of 4 entries of 10 messages
    assert view.messages_between(EARLIEST, Position(3, 3)) == 10
    counts.on_entry(7, 3, 2)  # not from the start of its ledger: not counted exactly
    assert counts.entry_size(7, 3) == 0
    counts.forget(5)
    assert counts.ledger_total(5) == 0


def test_locate_finds_the_entry_holding_the_nth_message() -> None:
    layout, counts = counted()
    view = counts.view(layout)
    assert view.locate(Position(3, 3), 1) == (Position(5, 0), 1, 1)
    assert view.locate(Position(3, 3), 3) == (Position(5, 1), 2, 3)
    assert view.locate(Position(3, 3), 4) == (Position(5, 1), 3, 3)
    assert view.locate(Position(5, 1), 3) == (Position(5, 3), 2, 5)
    assert view.locate(Position(3, 3), 99) == (Position(5, 3), 5, 5)  # past the end: the last, whole


def test_backlog_counts_messages_not_entries() -> None:
    layout, counts = counted()
    view = counts.view(layout)
    cursor = Cursor(Position(3, 3))
    assert cursor.backlog(layout) == 4 and cursor.backlog_messages(layout, view) == 10
    for entry, size in enumerate((1, 3, 1, 5)):
        cursor.on_read(Position(5, entry), size)
    assert cursor.ack(MessagePosition(5, 2), layout)  # a hole: 1 message
    assert cursor.ack(MessagePosition(5, 3, 0), layout) and cursor.ack(MessagePosition(5, 3, 4), layout)
    assert cursor.backlog_messages(layout, view) == 10 - 1 - 2
    assert cursor.individually_deleted_messages() == "[(5:1..5:2]]"


def test_skip_counts_messages_and_may_stop_inside_a_batch() -> None:
    layout, counts = counted()
    view = counts.view(layout)
    cursor = Cursor(Position(3, 3))
    assert cursor.skip_messages(2, layout, view)  # 5:0 whole, first message of 5:1
    assert cursor.mark_delete == Position(5, 0)
    assert cursor.is_acked(MessagePosition(5, 1, 0)) and not cursor.is_acked(MessagePosition(5, 1, 1))
    assert cursor.backlog_messages(layout, view) == 8
    assert cursor.skip_messages(2, layout, view)  # the rest of 5:1
    assert cursor.mark_delete == Position(5, 1) and cursor.backlog_messages(layout, view) == 6
    cursor.on_read(Position(5, 3), 5)
    assert cursor.ack(MessagePosition(5, 3), layout)  # a hole after 5:2
    assert cursor.skip_messages(1, layout, view)  # 5:2, which joins the hole
    assert cursor.mark_delete == Position(5, 3) and cursor.backlog_messages(layout, view) == 0
    assert not cursor.skip_messages(5, layout, view)  # nothing left


def test_skip_jumps_over_acked_holes() -> None:
    layout, counts = counted()
    view = counts.view(layout)
    cursor = Cursor(Position(3, 3))
    cursor.on_read(Position(5, 1), 3)
    assert cursor.ack(MessagePosition(5, 1), layout)
    assert cursor.skip_messages(2, layout, view)  # 5:0 and 5:2 (5:1 is acked already)
    assert cursor.mark_delete == Position(5, 2)


def test_parse_target_bodies() -> None:
    assert parse_target(None, required=False) is None
    assert parse_target("earliest") == CursorTarget(EARLIEST)
    assert parse_target("latest") == CursorTarget(LATEST)
    assert parse_target({"ledgerId": 5, "entryId": 2}) == CursorTarget(Position(5, 2))
    assert parse_target({"ledgerId": 5, "entryId": 2, "batchIndex": 3, "excluded": True}) == CursorTarget(
        Position(5, 2), 3, True
    )
    assert parse_target({"ledgerId": 5, "entryId": 2, "isExcluded": True}).excluded  # type: ignore[union-attr]
    assert parse_target({"ledgerId": -1, "entryId": -1}) == CursorTarget(EARLIEST)
    assert parse_target({"ledgerId": 2**63 - 1, "entryId": 2**63 - 1}) == CursorTarget(LATEST)
    for bad in (
        None,
        "soon",
        [1],
        {"ledgerId": 1},
        {"ledgerId": "1", "entryId": 0},
        {"ledgerId": 1, "entryId": -3},
    ):
        with pytest.raises(InvalidArgument):
            parse_target(bad)
    with pytest.raises(InvalidArgument):
        parse_target({"ledgerId": 1, "entryId": 0, "isExcluded": "yes"})


def test_message_headers_and_ids() -> None:
    message = EntryMessage(
        b"hi",
        1_700_000_000_000,
        "prod",
        7,
        key=b"k1",
        properties={"a": "1", "ü": "ö€", "b": "x\r\ny"},
        event_time_ms=1_700_000_000_001,
    )
    headers = message_headers(MessagePosition(5, 3, 2), message, 4, -1)
    assert headers["X-Pulsar-Message-ID"] == "5:3:2"
    assert headers["X-Pulsar-batch-size"] == "4"
    assert headers["X-Pulsar-PROPERTY-a"] == "1"
    assert headers["X-Pulsar-PROPERTY-%C3%BC"] == "%C3%B6%E2%82%AC"  # headers are latin-1 tokens
    assert headers["X-Pulsar-PROPERTY-b"] == "x%0D%0Ay"
    assert headers["X-Pulsar-partition-key"] == "k1"
    assert headers["X-Pulsar-producer-name"] == "prod" and headers["X-Pulsar-sequence-id"] == "7"
    assert headers["X-Pulsar-publish-time"] == "2023-11-14T22:13:20Z"
    assert headers["X-Pulsar-event-time"] == "2023-11-14T22:13:20.001Z"
    single = message_headers(MessagePosition(5, 3), message, 1, 2)
    assert single["X-Pulsar-Message-ID"] == "5:3" and "X-Pulsar-batch-size" not in single
    assert message_id_json(MessagePosition(5, 3), 2) == {"ledgerId": 5, "entryId": 3, "partitionIndex": 2}
    assert message_id_json(MessagePosition(5, 3, 1), -1)["batchIndex"] == 1
