"""Model-based test of the cursor: a hypothesis state machine drives ``Cursor`` and a
deliberately naive model (the set of acked message positions over a log that
grows) with the same operations, and compares mark-delete, backlog, every
message's acked state and the mutators' return values after each step."""

from __future__ import annotations

import json

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from gateway.broker.cursor_core import Cursor
from gateway.broker.log_layout import LedgerLayout
from storage.formats.positions import EARLIEST, LATEST, NO_BATCH, MessagePosition, Position

pytestmark = pytest.mark.unit

RANGES_CAP = 2  # small persistence caps so snapshots get truncated often
BATCHES_CAP = 1
FAR_LEDGER = 10**6


class NaiveModel:
    """A log of entries with message counts and the set of acked (entry, index)."""

    def __init__(self, ledgers: list[tuple[int, list[int]]]) -> None:
        self.ledgers = ledgers  # (ledger id, message count of each entry)
        self.acked: set[tuple[Position, int]] = set()
        self.seen: set[Position] = set()

    def layout(self) -> LedgerLayout:
        return LedgerLayout([(ledger, len(sizes)) for ledger, sizes in self.ledgers])

    def entries(self) -> list[tuple[Position, int]]:
        return [(Position(ledger, e), n) for ledger, sizes in self.ledgers for e, n in enumerate(sizes)]

    def size(self, entry: Position) -> int | None:
        return dict(self.entries()).get(entry)

    def full(self, entry: Position) -> bool:
        size = self.size(entry)
        return size is not None and all((entry, i) in self.acked for i in range(size))

    def mark_delete_index(self) -> int:
        count = 0
        for entry, _ in self.entries():
            if not self.full(entry):
                break
            count += 1
        return count

    def backlog(self) -> int:
        return sum(1 for entry, _ in self.entries() if not self.full(entry))

    def add(self, messages: set[tuple[Position, int]]) -> bool:
        new = messages - self.acked
        self.acked |= new
        return bool(new)

    def upto(self, limit: Position, inclusive: bool = True) -> set[tuple[Position, int]]:
        return {
            (e, i) for e, n in self.entries() if (e <= limit if inclusive else e < limit) for i in range(n)
        }

    def ack(self, message: MessagePosition) -> bool:
        entry, index = message.entry, message.batch_index
        size = self.size(entry)
        if size is None or entry not in self.seen or self.full(entry):
            return False
        if index == NO_BATCH:
            return self.add({(entry, i) for i in range(size)})
        return 0 <= index < size and self.add({(entry, index)})

    def ack_cumulative(self, message: MessagePosition) -> bool:
        entry, index = message.entry, message.batch_index
        size = self.size(entry)
        if size is None:
            return False
        if self.full(entry):
            index = NO_BATCH
        elif entry not in self.seen or not (index == NO_BATCH or 0 <= index < size):
            return False
        last = size - 1 if index == NO_BATCH else index
        return self.add(self.upto(entry, inclusive=False) | {(entry, i) for i in range(last + 1)})


class CursorMachine(RuleBasedStateMachine):
    model: NaiveModel
    cursor: Cursor

    @initialize(
        shape=st.lists(
            st.tuples(st.integers(1, 3), st.lists(st.integers(1, 4), max_size=5)), min_size=1, max_size=4
        ),
        start=st.integers(0, 3),
    )
    def setup(self, shape: list[tuple[int, list[int]]], start: int) -> None:
        ledgers, ledger = [], 0
        for gap, sizes in shape:
            ledger += gap
            ledgers.append((ledger, sizes))
        self.model = NaiveModel(ledgers)
        layout = self.model.layout()
        start = min(start, layout.total_entries)
        mark_delete = layout.at(start) if start else EARLIEST
        self.model.add(self.model.upto(mark_delete))
        self.cursor = Cursor(mark_delete, ranges_persisted_max=RANGES_CAP, batches_persisted_max=BATCHES_CAP)

    def message(self, data: st.DataObject) -> MessagePosition:
        entries = self.model.entries()
        last = self.model.ledgers[-1][0]
        garbage = [Position(FAR_LEDGER, 0), Position(0, 0), Position(last, 50), Position(last + 1, 0)]
        seen = sorted(self.model.seen)
        prefer_seen: int = data.draw(st.integers(0, 3))
        if seen and prefer_seen:  # mostly entries that were read
            entry = data.draw(st.sampled_from(seen))
        else:
            entry = data.draw(st.sampled_from([e for e, _ in entries] + garbage))
        size = self.model.size(entry) or 1
        return MessagePosition(entry.ledger_id, entry.entry_id, data.draw(st.integers(-1, size)))

    @precondition(lambda self: self.model.layout().total_entries > 0)
    @rule(data=st.data(), count=st.integers(1, 6))
    def read(self, data: st.DataObject, count: int) -> None:
        layout = self.model.layout()
        first = data.draw(st.integers(1, layout.total_entries))
        for index in range(first, min(first + count, layout.total_entries + 1)):
            entry = layout.at(index)
            self.cursor.on_read(entry, self.model.size(entry) or 0)
            self.model.seen.add(entry)

    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        message = self.message(data)
        assert self.cursor.ack(message, self.model.layout()) == self.model.ack(message)

    @rule(data=st.data())
    def ack_cumulative(self, data: st.DataObject) -> None:
        message = self.message(data)
        assert self.cursor.ack_cumulative(message, self.model.layout()) == self.model.ack_cumulative(message)

    @rule(data=st.data())
    def expire(self, data: st.DataObject) -> None:
        upto = data.draw(st.sampled_from([self.message(data).entry, LATEST, EARLIEST]))
        expected = self.model.add(self.model.upto(upto))
        assert self.cursor.expire(upto, self.model.layout()) == expected

    @rule(count=st.integers(0, 6))
    def skip(self, count: int) -> None:
        unacked = [e for e, _ in self.model.entries() if not self.model.full(e)]
        expected = False
        if count and unacked:
            expected = self.model.add(self.model.upto(unacked[min(count, len(unacked)) - 1]))
        assert self.cursor.skip(count, self.model.layout()) == expected

    @rule(data=st.data(), inclusive=st.booleans())
    def seek(self, data: st.DataObject, inclusive: bool) -> None:
        entry = self.message(data).entry
        target = data.draw(st.sampled_from([entry, Position(entry.ledger_id, -1), EARLIEST, LATEST]))
        self.cursor.seek(target, self.model.layout(), inclusive=inclusive)
        if target == EARLIEST:
            self.model.acked = set()
        elif target == LATEST:
            self.model.acked = self.model.upto(LATEST)
        else:
            self.model.acked = self.model.upto(target, inclusive=not inclusive)
        self.model.seen = set()

    @rule(new_ledger=st.booleans(), gap=st.integers(1, 3), size=st.integers(1, 4), empty=st.booleans())
    def grow(self, new_ledger: bool, gap: int, size: int, empty: bool) -> None:
        if new_ledger:
            self.model.ledgers.append((self.model.ledgers[-1][0] + gap, [] if empty else [size]))
        else:
            self.model.ledgers[-1][1].append(size)

    @rule()
    def snapshot_and_restore(self) -> None:
        snapshot = json.loads(json.dumps(self.cursor.snapshot()))
        restored = Cursor.restore(
            snapshot, ranges_persisted_max=RANGES_CAP, batches_persisted_max=BATCHES_CAP
        )
        assert restored.mark_delete == self.cursor.mark_delete
        lossless = (
            len(self.cursor.acked_ranges()) <= RANGES_CAP
            and self.cursor.partially_acked_entries <= BATCHES_CAP
        )
        acked = set()
        for entry, size in self.model.entries():
            for i in range(size):
                now = restored.is_acked(MessagePosition(entry.ledger_id, entry.entry_id, i))
                assert not now or (entry, i) in self.model.acked  # never acks what was not acked
                assert now or not lossless or (entry, i) not in self.model.acked
                if now:
                    acked.add((entry, i))
        self.cursor = restored
        self.model.acked = acked
        self.model.seen = {
            e for e, n in self.model.entries() if 0 < sum((e, i) in acked for i in range(n)) < n
        }

    @invariant()
    def agrees_with_model(self) -> None:
        layout = self.model.layout()
        assert layout.index(self.cursor.mark_delete) == self.model.mark_delete_index()
        assert self.cursor.mark_delete <= max(layout.last_position(), self.cursor.mark_delete)
        assert self.cursor.backlog(layout) == self.model.backlog()
        for entry, size in self.model.entries():
            assert self.cursor.is_acked(MessagePosition(entry.ledger_id, entry.entry_id)) == self.model.full(
                entry
            )
            mask = self.cursor.acked_mask(entry)
            assert (mask == -1) == self.model.full(entry)
            for i in range(size):
                message = MessagePosition(entry.ledger_id, entry.entry_id, i)
                assert self.cursor.is_acked(message) == ((entry, i) in self.model.acked)
                assert self.model.full(entry) or bool(mask >> i & 1) == ((entry, i) in self.model.acked)

    @invariant()
    def ranges_are_sorted_disjoint_and_after_mark_delete(self) -> None:
        previous = self.cursor.mark_delete
        for first, last in self.cursor.acked_ranges():
            assert first.ledger_id == last.ledger_id and first <= last
            assert (previous.ledger_id, previous.entry_id + 1) < (first.ledger_id, first.entry_id)
            previous = last


CursorMachine.TestCase.settings = settings(max_examples=100, stateful_step_count=40, deadline=None)
test_cursor_against_naive_model = CursorMachine.TestCase
