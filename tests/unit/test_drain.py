"""Decommissioning (storage/drain.py, placement, audit_core): the drain record's state
machine, progress from ledger metadata, and that a draining node gets no ledger."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from storage import drain
from storage.auditor.audit_core import plan_ledger
from storage.client import placement
from storage.drain import DrainRecord, DrainState, Holdings
from storage.errors import NotEnoughNodes
from storage.types import LedgerMetadata, LedgerState, NodeInfo, Segment

pytestmark = pytest.mark.unit

GIB = 1 << 30


def node(name: str, free_gib: int = 10, draining: bool = False) -> NodeInfo:
    return NodeInfo(name, name, "", free_gib * GIB, 100 * GIB, 0.0, False, draining=draining)


def ledger(
    ledger_id: int, segments: tuple[Segment, ...], closed_at: int | None, length: int = 0
) -> LedgerMetadata:
    state = LedgerState.CLOSED if closed_at is not None else LedgerState.OPEN
    return LedgerMetadata(ledger_id, 3, 2, 2, state, segments, -1 if closed_at is None else closed_at, length)


def test_a_draining_node_is_never_placed_nor_a_replacement() -> None:
    nodes = [node("a", 90, draining=True), node("b"), node("c"), node("d")]
    for seed in range(20):
        assert "a" not in placement.choose_ensemble(nodes, 3, random.Random(seed))
        assert placement.choose_replacement(nodes, ("b", "c", "x"), {"x"}, random.Random(seed)) == "d"
    with pytest.raises(NotEnoughNodes):
        placement.choose_ensemble(nodes, 4, random.Random(1))


def test_a_new_node_gets_new_ledgers() -> None:
    nodes = [node("a"), node("b"), node("c")]
    fresh = node("d", 11)  # added later: more free space
    chosen = [placement.choose_ensemble([*nodes, fresh], 3, random.Random(s)) for s in range(10)]
    assert all("d" in ensemble for ensemble in chosen)


def test_holdings_count_ledgers_and_the_bytes_of_entries_on_the_node() -> None:
    closed = ledger(1, (Segment(0, ("a", "b", "c")),), closed_at=5, length=600)  # 6 entries, 100 B each
    moved = ledger(2, (Segment(0, ("b", "c", "d")),), closed_at=2, length=300)
    still_open = ledger(3, (Segment(0, ("a", "c", "d")),), closed_at=None)
    held = drain.holdings([closed, moved, still_open], "a")
    # E=3 Qw=2: entry x is on member p iff (p - x) % 3 < 2 -> member 0 holds entries 0, 2, 3, 5
    assert held == Holdings(ledgers=2, bytes=400)
    assert drain.holdings([moved], "a") == Holdings(0, 0)


def test_the_state_machine_draining_then_drained_only_when_empty_and_refusing() -> None:
    record = drain.start("a", Holdings(4, 1000), now_ms=100)
    assert record.state is DrainState.DRAINING and (record.ledgers_done, record.ledgers_total) == (0, 4)
    assert DrainRecord.from_json(record.to_json()) == record

    halfway = drain.advance(record, Holdings(2, 400), refuses_adds=True, now_ms=200)
    assert halfway is not None and halfway.state is DrainState.DRAINING
    assert (halfway.ledgers_done, halfway.ledgers_total, halfway.bytes_done, halfway.bytes_total) == (
        2,
        4,
        600,
        1000,
    )
    # empty, but the node still takes adds (it has not seen its record yet): not drained
    waiting = drain.advance(halfway, Holdings(0, 0), refuses_adds=False, now_ms=300)
    assert waiting is not None and waiting.state is DrainState.DRAINING
    done = drain.advance(halfway, Holdings(0, 0), refuses_adds=True, now_ms=400)
    assert done is not None and done.state is DrainState.DRAINED and done.drained_ms == 400
    assert (done.ledgers_done, done.ledgers_total) == (4, 4)
    assert drain.advance(done, Holdings(1, 0), refuses_adds=True, now_ms=500) is None  # final


def test_totals_grow_when_more_turns_up_than_was_counted() -> None:
    record = drain.start("a", Holdings(1, 0), now_ms=0)
    grown = drain.progress(record, Holdings(3, 50), now_ms=1)
    assert (grown.ledgers_done, grown.ledgers_total, grown.bytes_total) == (0, 3, 50)


def test_open_tails_on_a_draining_node_are_fenced_only_after_the_grace() -> None:
    record = drain.start("a", Holdings(1, 0), now_ms=1000)
    assert not drain.fence_due(record, 1000 + drain.DEFAULT_FENCE_GRACE_MS - 1)
    assert drain.fence_due(record, 1000 + drain.DEFAULT_FENCE_GRACE_MS)
    assert not drain.fence_due(replace(record, state=DrainState.DRAINED), 10**9)

    metadata = ledger(7, (Segment(0, ("a", "b", "c")), Segment(10, ("a", "b", "c"))), closed_at=None)
    waiting = plan_ledger(metadata, frozenset(), read_only=frozenset({"a"}))
    assert waiting is not None and not waiting.needs_fence  # its writer moves off by itself
    assert [f.segment_index for f in waiting.fragments] == [0]  # the fixed segment is copied now
    fenced = plan_ledger(metadata, frozenset(), read_only=frozenset({"a"}), fence=frozenset({"a"}))
    assert fenced is not None and fenced.needs_fence
