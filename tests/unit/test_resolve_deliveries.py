"""resolve_deliveries: Deliver effects are handed out per consumer, in order,
each with its message taken from its own entry (runs of one entry look it up once;
a change of entry, however small, looks again), and effects whose entry is not
at hand are handed back."""

from __future__ import annotations

import pytest

from gateway.broker.consumers import resolve_deliveries
from gateway.broker.dispatch.base import ConsumerId, Deliver, Message
from storage.formats.entry_format import EntryMessage
from storage.formats.positions import NO_BATCH, MessagePosition, Position

pytestmark = pytest.mark.unit

A, B = ConsumerId(1), ConsumerId(2)


def entry(ledger: int, entry_id: int, count: int) -> list[EntryMessage]:
    return [EntryMessage(f"{ledger}:{entry_id}:{i}".encode(), 0, "p", i) for i in range(count)]


ENTRIES = {Position(1, 0): entry(1, 0, 3), Position(1, 1): entry(1, 1, 1), Position(2, 0): entry(2, 0, 2)}


def deliver(consumer: ConsumerId, ledger: int, entry_id: int, index: int, count: int = 0) -> Deliver:
    return Deliver(consumer, Message(MessagePosition(ledger, entry_id, index)), count)


def test_runs_interleaved_consumers_entries_and_a_missing_entry() -> None:
    lookups: list[Position] = []

    def messages_at(position: MessagePosition) -> list[EntryMessage] | None:
        lookups.append(position.entry)
        return ENTRIES.get(position.entry)

    effects = [
        deliver(A, 1, 0, 0),
        deliver(A, 1, 0, 2),
        deliver(B, 1, 0, 1, 3),
        deliver(B, 2, 0, 1),  # the same entry id in another ledger
        deliver(A, 1, 1, NO_BATCH),
        deliver(A, 9, 9, NO_BATCH),  # not at hand
        deliver(A, 1, 0, 1),  # back to an earlier entry
    ]
    out, missing = resolve_deliveries(effects, messages_at)
    got = {c: [(d.content.payload.decode(), d.redelivery_count) for d in ds] for c, ds in out.items()}
    assert got == {
        A: [("1:0:0", 0), ("1:0:2", 0), ("1:1:0", 0), ("1:0:1", 0)],
        B: [("1:0:1", 3), ("2:0:1", 0)],
    }
    assert all(d is e for d, e in zip(out[B], effects[2:4], strict=True))  # the effects themselves
    assert [d.position for d in out[A]] == [
        MessagePosition(1, 0, 0),
        MessagePosition(1, 0, 2),
        MessagePosition(1, 1, NO_BATCH),
        MessagePosition(1, 0, 1),
    ]
    assert missing == [effects[5]]
    assert lookups == [Position(1, 0), Position(2, 0), Position(1, 1), Position(9, 9), Position(1, 0)]


def test_read_messages_stops_at_the_budget_and_tells_the_entry_size_it_saw() -> None:
    from typing import Any

    from gateway.broker.consumers import read_messages
    from gateway.broker.cursor_core import Cursor
    from gateway.broker.decoded_entries import DecodedEntries
    from storage.formats.entry_format import encode_entry

    log: Any = None  # messages(position, payload) decodes what it is given
    entries = [(Position(4, e), encode_entry(entry(4, e, n))) for e, n in enumerate((6, 2, 5))]
    cursor = Cursor(Position(4, -1))
    messages, last, per_entry = read_messages(entries, DecodedEntries(log), cursor, 7)
    assert last == Position(4, 1) and len(messages) == 8  # the entry reaching the budget is taken whole
    assert per_entry == 4  # (6 + 2) / 2: what the next read's entry count is judged by
    messages, last, per_entry = read_messages(entries, DecodedEntries(log), cursor, 100)
    assert last == Position(4, 2) and len(messages) == 13 and per_entry == 4
