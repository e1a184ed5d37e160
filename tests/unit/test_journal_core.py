"""Group-commit policy: every trigger, the one-sync-in-flight rule, ack order, bounds."""

from __future__ import annotations

import pytest

from storage.node.journal_core import Ack, JournalConfig, JournalCore, Reject, Sync, Write

pytestmark = pytest.mark.unit


def core(**kw: object) -> JournalCore:
    return JournalCore(JournalConfig(**kw))  # type: ignore[arg-type]


def test_time_trigger_closes_group_after_max_wait() -> None:
    j = core(max_group_wait_ms=2)
    assert j.on_add(1, 100, now_ms=10) == []
    assert j.on_add(2, 100, now_ms=11) == []
    assert j.next_deadline_ms() == 12
    assert j.on_timer(11) == []
    assert j.on_timer(12) == [Write((1, 2)), Sync(1, (1, 2))]
    assert j.next_deadline_ms() is None


def test_bytes_threshold_closes_group_at_once() -> None:
    j = core(buffered_bytes_threshold=1000)
    assert j.on_add(1, 600, 0) == []
    assert j.on_add(2, 400, 0) == [Write((1, 2)), Sync(1, (1, 2))]


def test_entries_threshold_closes_group() -> None:
    j = core(buffered_entries_threshold=3)
    assert j.on_add(1, 1, 0) == []
    assert j.on_add(2, 1, 0) == []
    assert j.on_add(3, 1, 0) == [Write((1, 2, 3)), Sync(1, (1, 2, 3))]


def test_entries_threshold_zero_is_off() -> None:
    j = core(buffered_entries_threshold=0)
    for i in range(100):
        assert j.on_add(i, 1, 0) == []


def test_queue_empty_flushes_only_when_enabled() -> None:
    off = core(flush_when_queue_empty=False)
    off.on_add(1, 10, 0)
    assert off.on_queue_empty(0) == []
    on = core(flush_when_queue_empty=True)
    on.on_add(1, 10, 0)
    assert on.on_queue_empty(0) == [Write((1,)), Sync(1, (1,))]
    assert on.on_queue_empty(0) == []  # nothing pending any more


def test_ack_only_after_sync_done_and_in_order() -> None:
    j = core(flush_when_queue_empty=True)
    j.on_add(5, 10, 0)
    j.on_add(3, 10, 0)
    assert j.on_queue_empty(0) == [Write((5, 3)), Sync(1, (5, 3))]
    assert j.on_timer(100) == []  # no ack from time passing
    assert j.on_sync_done(101) == [Ack((5, 3))]
    assert j.idle


def test_at_most_one_sync_in_flight() -> None:
    j = core(flush_when_queue_empty=True, buffered_bytes_threshold=100)
    j.on_add(1, 10, 0)
    assert j.on_queue_empty(0) == [Write((1,)), Sync(1, (1,))]
    # idle and time triggers do nothing while the sync runs
    j.on_add(2, 10, 1)
    assert j.on_queue_empty(1) == []
    assert j.on_timer(50) == []
    assert j.next_deadline_ms() is None
    # the size trigger writes early but does not issue a second sync
    assert j.on_add(3, 95, 2) == [Write((2, 3))]
    assert j.sync_in_flight
    # completion acks the first batch and syncs what was written meanwhile
    assert j.on_sync_done(3) == [Ack((1,)), Sync(2, (2, 3))]
    assert j.on_sync_done(4) == [Ack((2, 3))]


def test_sync_done_closes_due_group_and_syncs_written_together() -> None:
    j = core(max_group_wait_ms=2, buffered_bytes_threshold=100)
    j.on_add(1, 100, 0)  # size trigger -> Write + Sync(1)
    j.on_add(2, 100, 0)  # size trigger while in flight -> Write only
    j.on_add(3, 10, 1)  # waits
    # at t=5 record 3 waited past the group wait: it joins the next sync
    assert j.on_sync_done(5) == [Ack((1,)), Write((3,)), Sync(2, (2, 3))]


def test_sync_done_keeps_young_group_waiting_for_its_deadline() -> None:
    j = core(max_group_wait_ms=2, buffered_bytes_threshold=100)
    j.on_add(1, 100, 0)
    j.on_add(2, 10, 10)
    assert j.on_sync_done(11) == [Ack((1,))]
    assert j.next_deadline_ms() == 12
    assert j.on_timer(12) == [Write((2,)), Sync(2, (2,))]


def test_queue_bound_by_records_rejects_and_recovers() -> None:
    j = core(max_queued_records=2, flush_when_queue_empty=True)
    assert j.on_add(1, 1, 0) == []
    assert j.on_add(2, 1, 0) == []
    assert j.on_add(3, 1, 0) == [Reject(3)]
    j.on_queue_empty(0)
    assert j.on_add(4, 1, 0) == [Reject(4)]  # in flight still counts
    j.on_sync_done(1)
    assert j.on_add(5, 1, 1) == []


def test_queue_bound_by_bytes() -> None:
    j = core(max_queued_bytes=1000, buffered_bytes_threshold=10_000)
    assert j.on_add(1, 900, 0) == []
    assert j.on_add(2, 101, 0) == [Reject(2)]
    assert j.on_add(3, 100, 0) == []
    assert j.queued_bytes == 1000


def test_queued_counters_cover_pending_written_and_in_flight() -> None:
    j = core(buffered_bytes_threshold=10)
    j.on_add(1, 10, 0)  # written + in flight
    j.on_add(2, 10, 0)  # written
    j.on_add(3, 5, 0)  # pending
    assert (j.queued_records, j.queued_bytes) == (3, 25)
    j.on_sync_done(0)
    assert j.on_sync_done(0) == [Ack((2,))]
    assert (j.queued_records, j.queued_bytes) == (1, 5)


def test_sync_done_without_sync_is_a_bug() -> None:
    with pytest.raises(AssertionError):
        core().on_sync_done(0)


def test_no_record_acked_twice_or_lost_in_random_schedule() -> None:
    import random

    rng = random.Random(7)
    j = core(max_group_wait_ms=2, buffered_bytes_threshold=500, buffered_entries_threshold=7)
    now, next_id, acked, written = 0, 0, [], set()
    accepted = []
    for _ in range(5000):
        now += rng.randint(0, 1)
        choice = rng.random()
        effects = []
        if choice < 0.6:
            effects = j.on_add(next_id, rng.randint(1, 120), now)
            if not any(isinstance(e, Reject) for e in effects):
                accepted.append(next_id)
            next_id += 1
        elif choice < 0.75:
            effects = j.on_timer(now)
        elif choice < 0.85:
            effects = j.on_queue_empty(now)
        elif j.sync_in_flight:
            effects = j.on_sync_done(now)
        for e in effects:
            if isinstance(e, Write):
                assert not written.intersection(e.record_ids)
                written.update(e.record_ids)
            elif isinstance(e, Sync):
                assert written.issuperset(e.record_ids)
            elif isinstance(e, Ack):
                acked.extend(e.record_ids)
    while j.sync_in_flight or j.next_deadline_ms() is not None:
        now += 10
        for e in j.on_timer(now) + (j.on_sync_done(now) if j.sync_in_flight else []):
            if isinstance(e, Ack):
                acked.extend(e.record_ids)
    assert acked == accepted  # every accepted record acked once, in arrival order


def test_explicit_flush_closes_group_but_respects_sync_in_flight() -> None:
    j = core(max_group_wait_ms=1000)
    j.on_add(1, 10, 0)
    assert j.on_flush(0) == [Write((1,)), Sync(1, (1,))]
    j.on_add(2, 10, 0)
    assert j.on_flush(0) == []
    assert j.on_sync_done(0) == [Ack((1,))]
    assert j.on_flush(0) == [Write((2,)), Sync(2, (2,))]
