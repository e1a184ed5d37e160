"""Pending-bytes rules (pure) and the dispatchers' answer to a consumer that holds its limit."""

from __future__ import annotations

import pytest
from dispatch_harness import delivered, info, msgs

from gateway.broker.dispatch import ConsumerId, ExclusiveDispatcher, SharedDispatcher
from gateway.broker.pending_rules import Holding, PendingLimits, Step, consumer_step, over_budget

pytestmark = pytest.mark.unit

A, B = ConsumerId(1), ConsumerId(2)
LIMITS = PendingLimits(pause_bytes=1000, budget_bytes=10_000, stall_ms=1000)


def test_a_consumer_pauses_at_its_bytes_limit_resumes_under_half_and_is_closed_far_over_it() -> None:
    h = Holding(bytes=999)
    assert consumer_step(h, 999, 1, LIMITS) is Step.NONE
    h.bytes = 1000
    assert consumer_step(h, 1000, 1, LIMITS) is Step.PAUSE
    h.paused = True
    h.bytes = 501
    assert consumer_step(h, 501, 1, LIMITS) is Step.NONE
    h.bytes = 500
    assert consumer_step(h, 500, 1, LIMITS) is Step.RESUME
    h.bytes = 4000  # 4 x pause
    assert consumer_step(h, 4000, 1, LIMITS) is Step.CLOSE
    h.closing = True
    assert consumer_step(h, 4000, 1, LIMITS) is Step.NONE


def test_over_half_its_budget_a_consumer_over_its_fair_share_pauses() -> None:
    h = Holding(bytes=600)  # under its own limit, over 10_000 / 20 holders
    assert consumer_step(h, 5_000, 20, LIMITS) is Step.NONE
    assert consumer_step(h, 5_001, 20, LIMITS) is Step.PAUSE
    h.bytes = 500  # its share exactly
    assert consumer_step(h, 10_001, 20, LIMITS) is Step.NONE


def test_over_budget_only_stalled_holders_over_their_share_are_closed_largest_first() -> None:
    holdings = {
        "stuck-big": Holding(bytes=6000, progress_ms=0),
        "stuck-small": Holding(bytes=3500, progress_ms=0),
        "reading": Holding(bytes=5000, progress_ms=900),  # took bytes 100 ms ago
        "closing": Holding(bytes=9000, progress_ms=0, closing=True),
        "tiny": Holding(bytes=10, progress_ms=0),  # under its share
    }
    total = sum(h.bytes for h in holdings.values())
    assert over_budget(holdings, total, LIMITS, now_ms=1000) == ["stuck-big", "stuck-small"]
    assert over_budget(holdings, 12_000, LIMITS, now_ms=1000) == ["stuck-big"]  # 2,000 over
    assert over_budget(holdings, 10_000, LIMITS, now_ms=1000) == []


def test_progress_is_taking_bytes() -> None:
    h = Holding(bytes=100, progress_ms=0)
    h.measured(100, 500)
    assert h.progress_ms == 0
    h.measured(50, 600)
    assert h.progress_ms == 600


def test_a_shared_dispatcher_skips_an_unwritable_consumer_and_resumes_it() -> None:
    d = SharedDispatcher()
    d.add_consumer(A, info("a", receiver_queue_size=100), 0)
    d.add_consumer(B, info("b", receiver_queue_size=100), 0)
    assert d.on_writable(A, False, 0) == []
    assert {c for c, _, _ in delivered(d.on_messages(msgs(0, 4), 0))} == {B}
    d.on_writable(B, False, 1)
    assert d.read_budget() == 0
    assert delivered(d.on_messages(msgs(4, 2), 1)) == []
    assert [c for c, _, _ in delivered(d.on_writable(A, True, 2))] == [A, A]


def test_an_exclusive_dispatcher_waits_for_its_consumer_to_be_writable() -> None:
    d = ExclusiveDispatcher()
    d.add_consumer(A, info("a", receiver_queue_size=100), 0)
    d.on_writable(A, False, 0)
    assert d.read_budget() == 0
    assert delivered(d.on_messages(msgs(0, 2), 0)) == []
    assert [e for _, e, _ in delivered(d.on_writable(A, True, 1))] == [0, 1]
