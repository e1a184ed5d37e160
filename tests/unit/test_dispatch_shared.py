"""Shared dispatcher: round-robin, priorities, redelivery, dead letters, delayed
delivery, bounds, and a stateful checker (one consumer per message, no loss,
never beyond permits)."""

from __future__ import annotations

import pytest
from dispatch_harness import (
    EXAMPLES,
    Checker,
    MultiConsumerRules,
    Shell,
    delivered,
    info,
    msgs,
    pos,
    run_machine,
)
from hypothesis import strategies as st
from hypothesis.stateful import rule

from gateway.broker.dispatch import (
    ConsumerId,
    DeadLetter,
    DispatcherConfig,
    Reject,
    RejectReason,
    RewindTo,
    SharedDispatcher,
)
from gateway.broker.flow import FlowLimits
from storage.formats.positions import Position

pytestmark = pytest.mark.unit

A, B, C = ConsumerId(1), ConsumerId(2), ConsumerId(3)


def per_consumer(effects: list) -> dict[ConsumerId, list[int]]:
    out: dict[ConsumerId, list[int]] = {}
    for c, entry, _ in delivered(effects):
        out.setdefault(c, []).append(entry)
    return out


def test_round_robin_gives_at_most_20_per_turn() -> None:
    d = SharedDispatcher()
    d.add_consumer(A, info("a", receiver_queue_size=100), 0)
    d.add_consumer(B, info("b", receiver_queue_size=100), 0)
    effects = d.on_messages(msgs(0, 50), 0)
    turns = [c for c, _, _ in delivered(effects)]
    assert turns == [A] * 20 + [B] * 20 + [A] * 10
    assert delivered(d.on_messages(msgs(50, 1), 0)) == [(B, 50, 0)]  # the rotation continues


def test_a_re_read_of_pending_queued_or_delayed_messages_changes_nothing() -> None:
    """After a rewind the log is read again from an older position: what the
    dispatcher still holds (pending on a consumer, waiting, delayed) is skipped,
    however far the reads went before."""
    d = SharedDispatcher()
    d.add_consumer(A, info("a", receiver_queue_size=2), 0)
    assert delivered(d.on_messages(msgs(0, 4), 0)) == [(A, 0, 0), (A, 1, 0)]  # 2, 3 wait
    assert d.on_messages(msgs(4, 1, deliver_at_ms=1_000), 0) == []  # delayed
    assert delivered(d.on_messages(msgs(5, 1), 0)) == []  # waits too
    before = d.stats()
    for first in (0, 3):  # the whole read again, and a part of it
        assert delivered(d.on_messages(msgs(first, 3) + msgs(4, 1, deliver_at_ms=1_000), 0)) == []
    assert d.stats() == before
    assert delivered(d.on_ack(A, [pos(0), pos(1)], 0)) == [(A, 2, 0), (A, 3, 0)]  # once each
    assert delivered(d.on_ack(A, [pos(2), pos(3)], 0)) == [(A, 5, 0)]
    assert delivered(d.on_ack(A, [pos(5)], 1_000)) == [(A, 4, 0)]


def test_higher_priority_first_lower_only_when_it_is_out_of_permits() -> None:
    d = SharedDispatcher()
    d.add_consumer(A, info("low", priority_level=1, receiver_queue_size=10), 0)
    d.add_consumer(B, info("high", priority_level=0, receiver_queue_size=3), 0)
    assert per_consumer(d.on_messages(msgs(0, 5), 0)) == {B: [0, 1, 2], A: [3, 4]}


def test_leaving_consumer_messages_are_redelivered_before_new_ones() -> None:
    d = SharedDispatcher()
    d.add_consumer(A, info("a", receiver_queue_size=2), 0)
    d.on_messages(msgs(0, 2), 0)
    d.add_consumer(B, info("b", receiver_queue_size=2), 0)
    assert delivered(d.on_messages(msgs(2, 3), 0)) == [(B, 2, 0), (B, 3, 0)]  # 4 waits
    assert delivered(d.remove_consumer(A, 0)) == []  # B is full: 0, 1 wait in replay
    assert delivered(d.on_ack(B, [pos(2)], 0)) == [(B, 0, 1)]
    assert delivered(d.on_ack(B, [pos(3)], 0)) == [(B, 1, 1)]
    assert delivered(d.on_ack(B, [pos(0)], 0)) == [(B, 4, 0)]


def test_nack_releases_credit_at_once_and_redelivers_after_the_delay() -> None:
    d = SharedDispatcher()
    d.add_consumer(A, info("a", receiver_queue_size=1, nack_redelivery_delay_ms=100), 0)
    d.on_messages(msgs(0, 2), 0)
    assert delivered(d.on_nack(A, [pos(0)], 5)) == [(A, 1, 0)]  # credit back now (pulsar #2731)
    assert d.next_deadline_ms() == 105
    d.on_ack(A, [pos(1)], 50)
    assert delivered(d.on_timer(104)) == []
    assert delivered(d.on_timer(105)) == [(A, 0, 1)]


def test_ack_timeout_redelivers_and_releases_credit() -> None:
    d = SharedDispatcher()
    d.add_consumer(A, info("a", receiver_queue_size=1, ack_timeout_ms=1000), 0)
    d.add_consumer(B, info("b", receiver_queue_size=1), 0)
    assert delivered(d.on_messages(msgs(0, 3), 0)) == [(A, 0, 0), (B, 1, 0)]
    assert d.next_deadline_ms() == 1000
    assert d.read_budget() == 0  # everyone is full (one read but not yet delivered)
    effects = d.on_timer(1000)  # A's credit comes back with the timeout: it gets 0 again
    assert delivered(effects) == [(A, 0, 1)]
    assert delivered(d.on_ack(B, [pos(1)], 1001)) == [(B, 2, 0)]


def test_dead_letter_after_max_redeliver_count() -> None:
    d = SharedDispatcher()
    d.add_consumer(A, info("a", nack_redelivery_delay_ms=0, max_redeliver_count=2), 0)
    counts = [c for _, _, c in delivered(d.on_messages(msgs(0, 1), 0))]
    for t in range(1, 4):
        effects = d.on_nack(A, [pos(0)], t)
        counts += [c for _, _, c in delivered(effects)]
    assert counts == [0, 1, 2]  # delivered max_redeliver_count + 1 times
    assert effects == [DeadLetter(A, msgs(0, 1)[0], 3)]
    assert d.stats().waiting == 0 and d.stats().consumers[0].unacked == 0


def test_receiver_with_a_lower_max_dead_letters_instead_of_delivering() -> None:
    d = SharedDispatcher()
    d.add_consumer(A, info("a", nack_redelivery_delay_ms=0), 0)  # no DLQ
    d.on_messages(msgs(0, 1), 0)
    for t in range(1, 3):
        d.on_nack(A, [pos(0)], t)  # delivered 3 times now
    d.on_nack(A, [pos(0)], 3)
    d.remove_consumer(A, 3)
    effects = d.add_consumer(B, info("b", max_redeliver_count=1), 4)
    assert effects == [DeadLetter(B, msgs(0, 1)[0], 4)]


def test_ack_while_waiting_for_redelivery_cancels_it() -> None:
    d = SharedDispatcher()
    d.add_consumer(A, info("a", nack_redelivery_delay_ms=0, pull_mode=True), 0)
    d.on_permits(A, 1, 0)
    d.on_messages(msgs(0, 1), 0)
    d.on_nack(A, [pos(0)], 1)  # back in replay; A has no permits
    assert d.stats().waiting == 1
    d.on_ack(A, [pos(0)], 2)  # the client acked it after all
    assert d.stats().waiting == 0
    assert delivered(d.on_permits(A, 1, 3)) == []


def test_delayed_delivery_and_its_bound() -> None:
    config = DispatcherConfig(delayed_max=2)
    d = SharedDispatcher(config)
    d.add_consumer(A, info("a"), 0)
    effects = d.on_messages(msgs(0, 3, deliver_at_ms=100) + msgs(3, 1), 0)
    assert delivered(effects) == [(A, 3, 0)]
    assert d.stats().delayed == 2 and d.stats().reread_from == pos(2)  # index full: 2 dropped
    assert d.next_deadline_ms() == 100
    effects = d.on_timer(100)
    assert delivered(effects) == [(A, 0, 0), (A, 1, 0)]
    assert effects[-1] == RewindTo(Position(1, 2))  # room again: re-read the dropped one
    assert delivered(d.on_messages(msgs(2, 2, deliver_at_ms=100), 100)) == [(A, 2, 0)]  # 3 is known


def test_ready_bound_drops_and_rereads() -> None:
    d = SharedDispatcher(DispatcherConfig(lookahead_max=2))
    d.add_consumer(A, info("a", pull_mode=True), 0)
    d.on_messages(msgs(0, 4), 0)  # shell ignored the budget (0): 2 kept, 2 dropped
    assert d.stats().waiting == 2 and d.stats().reread_from == pos(2)
    effects = d.on_permits(A, 2, 1)
    assert delivered(effects) == [(A, 0, 0), (A, 1, 0)] and effects[-1] == RewindTo(Position(1, 2))


def test_read_budget_bounds_read_ahead() -> None:
    d = SharedDispatcher(DispatcherConfig(read_batch_max=100))
    assert d.read_budget() == 0  # no consumers: read nothing
    d.add_consumer(A, info("a", receiver_queue_size=30), 0)
    d.add_consumer(B, info("b", receiver_queue_size=1000), 0)
    assert d.read_budget() == 100
    d.remove_consumer(B, 0)
    assert d.read_budget() == 30
    d.on_messages(msgs(0, 25), 0)
    assert d.read_budget() == 5


def test_pull_consumer_gets_nothing_without_permits_and_permits_are_capped() -> None:
    d = SharedDispatcher(DispatcherConfig(flow=FlowLimits(pull_permits_max=3)))
    d.add_consumer(A, info("a", pull_mode=True), 0)
    assert delivered(d.on_messages(msgs(0, 5), 0)) == []
    assert len(delivered(d.on_permits(A, 10, 0))) == 3


def test_unacked_limits_block_at_the_limit_and_unblock_at_half() -> None:
    limits = FlowLimits(unacked_per_consumer_max=4, unacked_per_subscription_max=6)
    d = SharedDispatcher(DispatcherConfig(flow=limits))
    d.add_consumer(A, info("a"), 0)
    assert len(delivered(d.on_messages(msgs(0, 10), 0))) == 4
    assert d.stats().consumers[0].blocked_reason == "consumer unacked limit"
    assert delivered(d.on_ack(A, [pos(0)], 0)) == []  # 3 unacked: still blocked
    assert len(delivered(d.on_ack(A, [pos(1)], 0))) == 2  # 2 = half: unblocked, up to 4 again
    assert per_consumer(d.add_consumer(B, info("b"), 0)) == {B: [6, 7]}  # subscription: 4 + 2 = 6
    assert d.stats().consumers[1].blocked_reason == "subscription unacked limit"


def test_rejects_bad_config_and_too_many_consumers() -> None:
    d = SharedDispatcher(DispatcherConfig(consumers_max=1))
    [reject] = d.add_consumer(A, info("a", receiver_queue_size=0), 0)
    assert isinstance(reject, Reject) and reject.reason is RejectReason.INVALID_CONFIG
    assert d.add_consumer(A, info("a"), 0) == []
    [reject] = d.add_consumer(B, info("b"), 0)
    assert isinstance(reject, Reject) and reject.reason is RejectReason.TOO_MANY_CONSUMERS


def test_rereading_pending_or_queued_messages_is_ignored() -> None:
    d = SharedDispatcher()
    d.add_consumer(A, info("a", receiver_queue_size=1), 0)
    d.on_messages(msgs(0, 2), 0)
    assert delivered(d.on_messages(msgs(0, 2), 0)) == []
    assert d.stats().waiting == 1


# ---------------------------------------------------------------- stateful checker

CHECKER_CONFIG = DispatcherConfig(
    flow=FlowLimits(unacked_per_consumer_max=4, unacked_per_subscription_max=7, pull_permits_max=5),
    read_batch_max=4,
    round_robin_batch_max=2,
    lookahead_max=3,
    delayed_max=2,
)


class SharedMachine(MultiConsumerRules):
    def __init__(self) -> None:
        super().__init__()
        self.checker = Checker(CHECKER_CONFIG)
        self.shell = Shell(SharedDispatcher(CHECKER_CONFIG), self.checker)
        self.next_id = 1

    @rule(
        priority=st.integers(0, 1),
        pull=st.booleans(),
        queue=st.integers(1, 3),
        ack_timeout=st.sampled_from([0, 0, 30]),
        nack_delay=st.sampled_from([0, 10]),
        max_redeliver=st.sampled_from([0, 0, 1, 3]),
    )
    def join(
        self, priority: int, pull: bool, queue: int, ack_timeout: int, nack_delay: int, max_redeliver: int
    ) -> None:
        if len(self.checker.infos) < 4:
            consumer = info(
                f"c{self.next_id}",
                priority_level=priority,
                pull_mode=pull,
                receiver_queue_size=queue,
                ack_timeout_ms=ack_timeout,
                nack_redelivery_delay_ms=nack_delay,
                max_redeliver_count=max_redeliver,
            )
            self.shell.add(ConsumerId(self.next_id), consumer)
            self.next_id += 1

    @rule(count=st.integers(1, 4), batch=st.booleans(), delay=st.sampled_from([None, None, None, 20]))
    def publish(self, count: int, batch: bool, delay: int | None) -> None:
        if len(self.shell.log) < 80:
            self.shell.publish(["k"] * count, batch, None if delay is None else self.shell.now_ms + delay)

    def teardown(self) -> None:
        self.shell.drain(info("drain", receiver_queue_size=50))


def test_checker_one_consumer_per_message_no_loss_within_permits() -> None:
    run_machine(SharedMachine, EXAMPLES)
