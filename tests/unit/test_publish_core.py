"""Adaptive entry batching and dedup decisions (publish_core)."""

from __future__ import annotations

import orjson
import pytest

from gateway.broker.publish_core import HOLES_MAX, BatcherConfig, Dedup, DedupVerdict, PublishBatcher
from storage.formats.entry_format import ENTRY_HEADER_BYTES

pytestmark = pytest.mark.unit


def test_first_message_is_cut_at_once_then_batches_while_a_heavy_add_is_in_flight() -> None:
    batcher: PublishBatcher[int] = PublishBatcher()
    for i in range(5):
        assert batcher.offer(b"a", i)
    first = batcher.cut()
    assert first is not None and first[1] == [0, 1, 2, 3, 4]  # five messages: a heavy entry
    for i in range(5, 10):
        assert batcher.offer(b"x", i)
    assert batcher.cut() is None  # a heavy add in flight, batch not worth pipelining yet
    batcher.on_entry_done(5)
    second = batcher.cut()
    assert second is not None and second[1] == [5, 6, 7, 8, 9]


def test_behind_a_light_add_a_small_entry_goes_at_once_up_to_light_inflight() -> None:
    batcher: PublishBatcher[int] = PublishBatcher(BatcherConfig(light_inflight=2, light_messages=4))
    batcher.offer(b"a", 0)
    assert batcher.cut() == ([b"a"], [0])
    batcher.offer(b"b", 1)
    assert batcher.cut() == ([b"b"], [1])  # the add in flight is light: no waiting behind it
    batcher.offer(b"c", 2)
    assert batcher.cut() is None  # two adds in flight: light_inflight reached
    batcher.on_entry_done(1)
    assert batcher.cut() == ([b"c"], [2])
    for i in range(3, 8):
        batcher.offer(b"d", i)
    batcher.on_entry_done(1)
    heavy = batcher.cut()
    assert heavy is not None and heavy[1] == [3, 4, 5, 6, 7]  # five: heavy
    batcher.on_entry_done(1)
    batcher.offer(b"e", 8)
    assert batcher.cut() is None  # a heavy add in flight: the load is up, batch behind it
    batcher.on_entry_done(5)
    assert batcher.cut() == ([b"e"], [8])


def test_light_inflight_one_keeps_one_add_at_a_time() -> None:
    batcher: PublishBatcher[int] = PublishBatcher(BatcherConfig(light_inflight=1))
    batcher.offer(b"a", 0)
    assert batcher.cut() is not None
    batcher.offer(b"b", 1)
    assert batcher.cut() is None
    batcher.on_entry_done(1)
    assert batcher.cut() == ([b"b"], [1])


def test_a_full_batch_is_cut_even_while_an_add_is_in_flight() -> None:
    batcher: PublishBatcher[int] = PublishBatcher(BatcherConfig(entry_messages_max=3, inflight_max=2))
    batcher.offer(b"a", 0)
    assert batcher.cut() is not None
    for i in range(1, 7):
        batcher.offer(b"b", i)
    cut = batcher.cut()
    assert cut is not None and cut[1] == [1, 2, 3]
    assert batcher.cut() is None  # inflight_max reached
    batcher.on_entry_done(1)
    cut = batcher.cut()
    assert cut is not None and cut[1] == [4, 5, 6]


def test_a_worthwhile_entry_is_pipelined_behind_an_add_in_flight() -> None:
    config = BatcherConfig(pipeline_messages=4, pipeline_bytes=1000, inflight_max=3, light_inflight=1)
    batcher: PublishBatcher[int] = PublishBatcher(config)
    batcher.offer(b"a", 0)
    assert batcher.cut() is not None  # nothing in flight: at once
    for i in range(1, 4):
        batcher.offer(b"b", i)
    assert batcher.cut() is None  # three wait behind the add in flight: not worth an entry yet
    batcher.offer(b"b", 4)
    cut = batcher.cut()
    assert cut is not None and cut[1] == [1, 2, 3, 4]  # four: pipelined, two adds in flight
    batcher.offer(b"x" * 1000, 5)  # one big message is worth an entry by its bytes
    cut = batcher.cut()
    assert cut is not None and cut[1] == [5]
    for i in range(6, 10):
        batcher.offer(b"c", i)
    assert batcher.cut() is None  # inflight_max reached
    batcher.on_entry_done(1)
    cut = batcher.cut()
    assert cut is not None and cut[1] == [6, 7, 8, 9]


def test_entry_bytes_bound_splits_batches() -> None:
    config = BatcherConfig(entry_bytes_max=ENTRY_HEADER_BYTES + 10, inflight_max=8)
    batcher: PublishBatcher[int] = PublishBatcher(config)
    for i in range(4):
        batcher.offer(b"12345", i)
    cuts = []
    while (cut := batcher.cut()) is not None:
        cuts.append(cut[1])
    assert cuts == [[0, 1], [2, 3]]
    assert batcher.queued == 0 and batcher.queued_bytes == 0


def test_queue_bounds_refuse_beyond_limits() -> None:
    batcher: PublishBatcher[int] = PublishBatcher(BatcherConfig(queue_messages_max=2, queue_bytes_max=100))
    assert batcher.offer(b"a", 0) and batcher.offer(b"b", 1)
    assert not batcher.offer(b"c", 2)
    small: PublishBatcher[int] = PublishBatcher(BatcherConfig(queue_bytes_max=4))
    assert small.offer(b"abcd", 0)
    assert not small.offer(b"e", 1)
    assert small.drain() == [0] and small.queued == 0


def test_dedup_duplicate_in_flight_and_failure() -> None:
    dedup = Dedup()
    assert dedup.check("p", 1) is DedupVerdict.NEW
    dedup.on_pushed("p", 1)
    assert dedup.check("p", 1) is DedupVerdict.IN_FLIGHT  # never a silent drop (pulsar #5218)
    dedup.on_persisted("p", 1)
    assert dedup.check("p", 1) is DedupVerdict.DUPLICATE
    assert dedup.check("p", 0) is DedupVerdict.DUPLICATE
    dedup.on_pushed("p", 2)
    dedup.on_failed("p", 2)
    assert dedup.check("p", 2) is DedupVerdict.NEW  # a failed add may be retried
    assert dedup.check("q", 0) is DedupVerdict.NEW  # per producer


def test_dedup_refuses_what_was_pipelined_behind_a_failure_until_it_is_resent() -> None:
    # a 1 h fault run: 1322 failed, 1323-1324 (sent behind it) were stored, and the
    # resend of 1322 was answered as a duplicate - acknowledged, never stored
    dedup = Dedup()
    for seq in (1322, 1323, 1324):
        dedup.on_pushed("p", seq)
    for seq in (1322, 1323, 1324):  # their adds fail (queued ones fail with the first)
        dedup.on_failed("p", seq)
    assert dedup.gap("p") == 1322
    assert dedup.check("p", 1323) is DedupVerdict.GAP  # pipelined before the error was read
    assert dedup.check("p", 1322) is DedupVerdict.NEW
    dedup.on_pushed("p", 1322)
    assert dedup.gap("p") is None
    assert dedup.check("p", 1323) is DedupVerdict.NEW
    dedup.on_pushed("p", 1323)
    dedup.on_persisted("p", 1322)
    dedup.on_persisted("p", 1323)
    assert dedup.check("p", 1322) is DedupVerdict.DUPLICATE  # now truly stored


def test_a_new_id_refused_before_it_was_queued_opens_a_gap() -> None:
    dedup = Dedup()
    dedup.on_pushed("p", 3)
    dedup.on_refused("p", 3)  # in flight already: its add decides, no gap
    assert dedup.gap("p") is None
    dedup.on_refused("p", 5)
    dedup.on_refused("p", 4)
    assert dedup.gap("p") == 4
    assert dedup.check("p", 6) is DedupVerdict.GAP
    assert dedup.check("p", 4) is DedupVerdict.NEW
    dedup.on_pushed("p", 4)
    assert dedup.gap("p") is None


def test_a_gap_left_unfilled_is_given_up_and_its_late_resend_refused() -> None:
    dedup = Dedup(gap_refusals_max=2)
    dedup.on_pushed("p", 5)
    dedup.on_failed("p", 5)
    assert [dedup.check("p", 6) for _ in range(2)] == [DedupVerdict.GAP] * 2
    assert dedup.check("p", 6) is DedupVerdict.NEW  # the producer moved on: 5 is given up
    dedup.on_pushed("p", 6)
    dedup.on_persisted("p", 6)
    assert dedup.check("p", 5) is DedupVerdict.ABANDONED  # refused, not acknowledged as stored
    assert dedup.check("p", 4) is DedupVerdict.DUPLICATE


def test_dedup_snapshot_restore_and_producer_bound() -> None:
    dedup = Dedup(producers_max=2)
    for name, seq in (("a", 5), ("b", 6), ("c", 7)):
        dedup.on_persisted(name, seq)
    assert dedup.snapshot() == {"producers": {"b": 6, "c": 7}, "holes": {}}  # least recently used dropped
    other = Dedup()
    other.restore(dedup.snapshot())
    assert other.check("c", 7) is DedupVerdict.DUPLICATE and other.last_persisted("b") == 6
    older = Dedup()
    older.restore({"producers": {"c": 7}})  # a snapshot written before holes were kept
    assert older.check("c", 7) is DedupVerdict.DUPLICATE


def test_an_id_that_failed_on_the_old_owner_is_not_a_duplicate_on_the_new_one() -> None:
    """5 failed on the old owner (its gap lived there); 6, pipelined behind it, reached
    the new owner first and was stored. The resend of 5 was answered as a duplicate:
    acknowledged, never stored. Now 5 is in a hole: refused, and the hole survives
    the next snapshot and move."""
    old = Dedup()
    for seq in range(5):
        old.on_pushed("p", seq)
        old.on_persisted("p", seq)
    new = Dedup()
    new.restore(old.snapshot())  # the new owner: snapshot (and replay) up to 4
    assert new.check("p", 6) is DedupVerdict.NEW
    new.on_pushed("p", 6)
    new.on_persisted("p", 6)
    assert new.check("p", 5) is DedupVerdict.ABANDONED
    assert new.check("p", 4) is DedupVerdict.DUPLICATE and new.check("p", 6) is DedupVerdict.DUPLICATE
    third = Dedup()
    third.restore(orjson.loads(orjson.dumps(new.snapshot())))
    assert third.check("p", 5) is DedupVerdict.ABANDONED and third.check("p", 4) is DedupVerdict.DUPLICATE


def test_holes_are_bounded_per_producer() -> None:
    dedup = Dedup()
    for seq in range(0, 2 * (HOLES_MAX + 4), 2):  # every other id skipped
        dedup.on_persisted("p", seq)
    holes = dedup.snapshot()["holes"]["p"]
    assert len(holes) == HOLES_MAX and holes[-1] == [2 * (HOLES_MAX + 3) - 1] * 2
    assert dedup.check("p", 1) is DedupVerdict.DUPLICATE  # forgotten: the oldest go first


def test_offer_all_queues_all_or_nothing() -> None:
    batcher: PublishBatcher[int] = PublishBatcher(BatcherConfig(queue_messages_max=5, queue_bytes_max=100))
    assert batcher.offer_all([b"a", b"b", b"c"], [0, 1, 2], 3)
    assert not batcher.offer_all([b"d", b"e", b"f"], [3, 4, 5], 3)  # 6 messages > 5: none queued
    assert batcher.queued == 3 and batcher.queued_bytes == 3
    assert not batcher.offer_all([b"x" * 98], [6], 98)  # bytes bound
    assert batcher.offer_all([b"d", b"e"], [3, 4], 2)
    assert batcher.cut() == ([b"a", b"b", b"c", b"d", b"e"], [0, 1, 2, 3, 4])
    assert batcher.queued == 0 and batcher.queued_bytes == 0


@pytest.mark.parametrize(("messages_max", "bytes_max"), [(1000, 10_000), (4, 10_000), (1000, 3 + 3 * 10)])
def test_a_cut_takes_the_whole_queue_only_when_it_fits_one_entry(messages_max: int, bytes_max: int) -> None:
    batcher: PublishBatcher[int] = PublishBatcher(
        BatcherConfig(entry_messages_max=messages_max, entry_bytes_max=bytes_max)
    )
    for i in range(10):
        batcher.offer(b"m" * 10, i)
    cut = batcher.cut()
    assert cut is not None
    expected = min(10, messages_max, (bytes_max - ENTRY_HEADER_BYTES) // 10)
    assert cut[1] == list(range(expected))
    assert batcher.queued == 10 - expected and batcher.queued_bytes == 10 * (10 - expected)
