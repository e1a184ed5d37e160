"""The auditor's pure decisions: grace period, fragments, entries to copy, ensemble rewrite."""

from __future__ import annotations

import pytest

from storage.auditor.audit_core import (
    Membership,
    clear_missing,
    entries_on_node,
    plan_ledger,
    referenced_nodes,
    replace_in_segment,
    segment_last_entry,
)
from storage.types import LedgerMetadata, LedgerState, Segment

pytestmark = pytest.mark.unit


def meta(
    state: LedgerState,
    segments: list[tuple[int, tuple[str, ...]]],
    last: int = -1,
    e: int = 3,
    qw: int = 3,
    qa: int = 2,
) -> LedgerMetadata:
    return LedgerMetadata(
        ledger_id=7,
        ensemble_size=e,
        write_quorum=qw,
        ack_quorum=qa,
        state=state,
        segments=tuple(Segment(f, ens) for f, ens in segments),
        last_entry_id=last,
    )


def test_node_is_gone_only_after_grace() -> None:
    members = Membership(grace_ms=1000)
    members.on_members(live={"a", "b"}, referenced={"a", "b", "c"}, now_ms=0)
    assert members.gone(999) == frozenset()
    assert members.next_deadline_ms(10) == 1000
    assert members.gone(1000) == frozenset({"c"})


def test_node_that_returns_is_forgiven() -> None:
    members = Membership(grace_ms=1000)
    members.on_members(live={"a"}, referenced={"a", "c"}, now_ms=0)
    members.on_members(live={"a", "c"}, referenced={"a", "c"}, now_ms=500)
    assert members.gone(5000) == frozenset()
    assert members.missing() == {}


def test_entries_on_node_follow_round_robin_striping() -> None:
    m = meta(LedgerState.CLOSED, [(0, ("a", "b", "c", "d"))], last=7, e=4, qw=2, qa=2)
    # entry x goes to members x%4 and (x+1)%4
    assert entries_on_node(m, m.segments[0], 7, "a") == [0, 3, 4, 7]
    assert entries_on_node(m, m.segments[0], 7, "c") == [1, 2, 5, 6]
    for x in range(8):
        holders = [n for n in "abcd" if x in entries_on_node(m, m.segments[0], 7, n)]
        assert tuple(holders) == tuple(sorted(m.write_set(x)))


def test_closed_ledger_fragments_per_segment() -> None:
    m = meta(LedgerState.CLOSED, [(0, ("a", "b", "c")), (10, ("a", "b", "d"))], last=19)
    plan = plan_ledger(m, frozenset({"a"}))
    assert plan is not None and not plan.needs_fence
    assert [(f.segment_index, f.first_entry_id, f.last_entry_id) for f in plan.fragments] == [
        (0, 0, 9),
        (1, 10, 19),
    ]
    assert plan_ledger(m, frozenset({"c"})) is not None
    assert plan_ledger(m, frozenset({"x"})) is None


def test_open_ledger_tail_needs_fence_but_earlier_segments_copy() -> None:
    m = meta(LedgerState.OPEN, [(0, ("a", "b", "c")), (5, ("d", "b", "c"))])
    plan = plan_ledger(m, frozenset({"a", "d"}))
    assert plan is not None and plan.needs_fence
    assert [(f.segment_index, f.lost_node, f.last_entry_id) for f in plan.fragments] == [(0, "a", 4)]


def test_empty_segments_need_nothing() -> None:
    m = meta(LedgerState.CLOSED, [(0, ("a", "b", "c"))], last=-1)
    assert plan_ledger(m, frozenset({"a"})) is None
    assert segment_last_entry(m, 0) == -1


def test_replace_in_segment_is_idempotent() -> None:
    m = meta(LedgerState.CLOSED, [(0, ("a", "b", "c"))], last=3)
    new = replace_in_segment(m, 0, "a", "d")
    assert new is not None and new.segments[0].ensemble == ("d", "b", "c")
    assert replace_in_segment(new, 0, "a", "d") is None
    assert referenced_nodes([m, new]) == {"a", "b", "c", "d"}


def test_a_read_only_node_is_replaced_like_a_gone_one_but_its_open_tail_is_not_fenced() -> None:
    ro = frozenset({"a"})
    closed = meta(LedgerState.CLOSED, [(0, ("a", "b", "c"))], last=9)
    plan = plan_ledger(closed, frozenset(), ro)
    assert plan is not None and not plan.needs_fence and plan.lost_nodes == ("a",)
    assert [(f.lost_node, f.first_entry_id, f.last_entry_id) for f in plan.fragments] == [("a", 0, 9)]
    # the writer still writes to a, degraded: reported, not fenced, nothing to copy yet
    open_on_it = meta(LedgerState.OPEN, [(0, ("a", "b", "c"))])
    waiting = plan_ledger(open_on_it, frozenset(), ro)
    assert waiting is not None and not waiting.needs_fence and not waiting.fragments
    assert waiting.lost_nodes == ("a",)
    # the writer moved off it: the older segment is copied, the ledger stays open
    moved = meta(LedgerState.OPEN, [(0, ("a", "b", "c")), (5, ("d", "b", "c"))])
    plan = plan_ledger(moved, frozenset(), ro)
    assert plan is not None and not plan.needs_fence
    assert [(f.segment_index, f.lost_node, f.last_entry_id) for f in plan.fragments] == [(0, "a", 4)]
    # a gone node in the open tail is still fenced
    assert plan_ledger(open_on_it, frozenset({"b"}), ro).needs_fence  # type: ignore[union-attr]


def test_a_member_marked_missing_is_copied_back_then_cleared() -> None:
    m = LedgerMetadata(
        7,
        3,
        3,
        2,
        LedgerState.OPEN,
        (Segment(0, ("a", "b", "c"), frozenset({"c"})), Segment(5, ("a", "b", "c"))),
    )
    plan = plan_ledger(m, frozenset())
    assert plan is not None and not plan.needs_fence
    assert [(f.segment_index, f.lost_node, f.first_entry_id, f.last_entry_id) for f in plan.fragments] == [
        (0, "c", 0, 4)
    ]
    cleared = clear_missing(m, 0, "c")
    assert cleared is not None and plan_ledger(cleared, frozenset()) is None
    assert clear_missing(cleared, 0, "c") is None
    # replaced instead (c gone): the new member holds everything, no mark left
    replaced = replace_in_segment(m, 0, "c", "d")
    assert replaced is not None and replaced.segments[0] == Segment(0, ("a", "b", "d"))
    # the open tail is never copied from: its writer is still writing
    tail = LedgerMetadata(7, 3, 3, 2, LedgerState.OPEN, (Segment(0, ("a", "b", "c"), frozenset({"c"})),))
    assert plan_ledger(tail, frozenset()) is None
