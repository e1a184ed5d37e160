"""Key_Shared dispatcher: selectors, per-hash draining, bounded look-ahead, and
a stateful checker (plus a control proving the checker catches a broken guard)."""

from __future__ import annotations

import pytest
from dispatch_harness import (
    Checker,
    MultiConsumerRules,
    Shell,
    Violation,
    delivered,
    info,
    run_machine,
    slot_of,
)
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule

from gateway.broker.dispatch import (
    ConsumerId,
    DispatcherConfig,
    HashRange,
    KeySharedDispatcher,
    KeySharedMode,
    Message,
    RangesChanged,
    Reject,
    RejectReason,
    RewindTo,
)
from gateway.broker.dispatch.hash_ranges import STICKY_RANGES_MAX, AutoSplitSelector
from gateway.broker.flow import FlowLimits
from storage.formats.positions import MessagePosition

pytestmark = pytest.mark.unit

A, B, C = ConsumerId(1), ConsumerId(2), ConsumerId(3)
STICKY = KeySharedMode.STICKY


def msg(entry: int, slot: int, deliver_at_ms: int | None = None) -> Message:
    return Message(MessagePosition(1, entry), slot, deliver_at_ms)


# ---------------------------------------------------------------- selectors


def test_hash_test_vectors() -> None:
    assert slot_of("Order-3459134") == 6067
    assert slot_of("NONE_KEY") == 48803
    assert slot_of("key-1") == 5536


def test_auto_split_halves_the_largest_range_and_gives_the_lower_half_to_the_newcomer() -> None:
    sel = AutoSplitSelector()
    assert sel.add(A, info("a")) is None
    assert sel.ranges() == {A: (HashRange(0, 65535),)}
    sel.add(B, info("b"))
    assert sel.ranges() == {B: (HashRange(0, 32768),), A: (HashRange(32769, 65535),)}
    sel.add(C, info("c"))  # tie between the two halves: the lowest is split
    assert sel.ranges() == {
        C: (HashRange(0, 16384),),
        B: (HashRange(16385, 32768),),
        A: (HashRange(32769, 65535),),
    }
    assert (sel.select(0), sel.select(16384), sel.select(16385), sel.select(65535)) == (C, C, B, A)


def test_auto_split_removal_gives_slots_to_the_neighbour_above_or_below_for_the_top() -> None:
    sel = AutoSplitSelector()
    for c in (A, B, C):
        sel.add(c, info(str(c)))
    sel.remove(B)  # middle: the range above (A) takes it
    assert sel.ranges() == {C: (HashRange(0, 16384),), A: (HashRange(16385, 65535),)}
    sel.remove(A)  # top: the neighbour below extends to the top
    assert sel.ranges() == {C: (HashRange(0, 65535),)}


def test_auto_split_rejects_when_no_range_can_be_split() -> None:
    sel = AutoSplitSelector()
    for i in range(17):  # 65536 = 2**16: after 16 halvings of one chain the bottom range is 1 slot
        sel.add(ConsumerId(i), info(str(i)))
    sizes = sorted(r.end - r.start + 1 for rs in sel.ranges().values() for r in rs)
    assert sum(sizes) == 65536
    d = KeySharedDispatcher(DispatcherConfig(consumers_max=2))
    d.add_consumer(A, info("a"), 0)
    d.add_consumer(B, info("b"), 0)
    [reject] = d.add_consumer(C, info("c"), 0)
    assert isinstance(reject, Reject) and reject.reason is RejectReason.TOO_MANY_CONSUMERS


@pytest.mark.parametrize(
    ("ranges", "reason"),
    [
        ((), RejectReason.INVALID_HASH_RANGE),
        ((HashRange(5, 4),), RejectReason.INVALID_HASH_RANGE),
        ((HashRange(0, 65536),), RejectReason.INVALID_HASH_RANGE),
        ((HashRange(0, 10), HashRange(10, 20)), RejectReason.HASH_RANGE_CONFLICT),
        ((HashRange(90, 200),), RejectReason.HASH_RANGE_CONFLICT),  # overlaps A's [100, 199]
    ],
)
def test_sticky_rejects_bad_or_overlapping_ranges(
    ranges: tuple[HashRange, ...], reason: RejectReason
) -> None:
    d = KeySharedDispatcher()
    assert not any(
        isinstance(e, Reject)
        for e in d.add_consumer(A, info("a", key_shared_mode=STICKY, sticky_ranges=(HashRange(100, 199),)), 0)
    )
    [reject] = d.add_consumer(B, info("b", key_shared_mode=STICKY, sticky_ranges=ranges), 0)
    assert isinstance(reject, Reject) and reject.reason is reason


def test_sticky_ranges_per_consumer_are_bounded() -> None:
    d = KeySharedDispatcher()
    ranges = tuple(HashRange(i, i) for i in range(STICKY_RANGES_MAX + 1))
    [reject] = d.add_consumer(A, info("a", key_shared_mode=STICKY, sticky_ranges=ranges), 0)
    assert isinstance(reject, Reject) and reject.reason is RejectReason.INVALID_HASH_RANGE
    assert d.add_consumer(A, info("a", key_shared_mode=STICKY, sticky_ranges=ranges[:-1]), 0)[
        0
    ] == RangesChanged(A, ranges[:-1])


def test_mode_is_fixed_by_the_first_consumer() -> None:
    d = KeySharedDispatcher()
    d.add_consumer(A, info("a"), 0)
    [reject] = d.add_consumer(B, info("b", key_shared_mode=STICKY, sticky_ranges=(HashRange(0, 9),)), 0)
    assert isinstance(reject, Reject) and reject.reason is RejectReason.KEY_SHARED_MODE_MISMATCH
    d.remove_consumer(A, 0)
    assert d.add_consumer(B, info("b", key_shared_mode=STICKY, sticky_ranges=(HashRange(0, 9),)), 0) == [
        RangesChanged(B, (HashRange(0, 9),))
    ]


def test_sticky_uncovered_slots_wait_until_covered() -> None:
    d = KeySharedDispatcher()
    d.add_consumer(A, info("a", key_shared_mode=STICKY, sticky_ranges=(HashRange(0, 99),)), 0)
    assert delivered(d.on_messages([msg(0, 500), msg(1, 50)], 0)) == [(A, 1, 0)]
    assert d.stats().consumers[0].waiting == 0 and d.stats().waiting == 1
    effects = d.add_consumer(B, info("b", key_shared_mode=STICKY, sticky_ranges=(HashRange(400, 599),)), 0)
    assert RangesChanged(B, (HashRange(400, 599),)) in effects
    assert delivered(effects) == [(B, 0, 0)]


def test_ranges_changed_is_reported_to_every_consumer_whose_ranges_moved() -> None:
    d = KeySharedDispatcher()
    assert d.add_consumer(A, info("a"), 0) == [RangesChanged(A, (HashRange(0, 65535),))]
    effects = d.add_consumer(B, info("b"), 0)
    assert set(effects) == {
        RangesChanged(A, (HashRange(32769, 65535),)),
        RangesChanged(B, (HashRange(0, 32768),)),
    }
    assert d.remove_consumer(B, 0) == [RangesChanged(A, (HashRange(0, 65535),))]


# ---------------------------------------------------------------- draining


def test_moved_hash_waits_for_the_old_owner_and_only_that_hash() -> None:
    d = KeySharedDispatcher()
    d.add_consumer(A, info("a"), 0)
    assert delivered(d.on_messages([msg(0, 100), msg(1, 200)], 0)) == [(A, 0, 0), (A, 1, 0)]
    d.add_consumer(B, info("b"), 0)  # B now owns [0, 32768]: slots 100 and 200 move to B
    d.on_ack(A, [MessagePosition(1, 1)], 0)  # slot 200 is free, slot 100 still pending on A
    effects = d.on_messages([msg(2, 100), msg(3, 200), msg(4, 40000)], 0)
    assert delivered(effects) == [(B, 3, 0), (A, 4, 0)]  # only slot 100 is held back
    stats = d.stats()
    assert stats.draining_hashes == 1
    assert {c.consumer_id: c.blocked_reason for c in stats.consumers}[
        B
    ] == "1 hashes draining on other consumers"
    assert delivered(d.on_ack(A, [MessagePosition(1, 0)], 0)) == [(B, 2, 0)]
    assert d.stats().draining_hashes == 0


def test_old_owner_leaving_releases_the_hash_in_order() -> None:
    d = KeySharedDispatcher()
    d.add_consumer(A, info("a"), 0)
    d.on_messages([msg(0, 100), msg(1, 100)], 0)
    d.add_consumer(B, info("b"), 0)
    d.on_messages([msg(2, 100)], 0)
    effects = d.remove_consumer(A, 0)  # 0 and 1 come back (count 1), ahead of the new 2
    assert delivered(effects) == [(B, 0, 1), (B, 1, 1), (B, 2, 0)]


def test_consumer_without_credit_holds_back_only_its_own_hashes() -> None:
    d = KeySharedDispatcher()
    d.add_consumer(A, info("a", pull_mode=True), 0)  # A never grants permits
    d.add_consumer(B, info("b"), 0)  # B: [0, 32768], A: the rest
    effects = d.on_messages([msg(0, 40000), msg(1, 100), msg(2, 40001), msg(3, 200)], 0)
    assert delivered(effects) == [(B, 1, 0), (B, 3, 0)]
    assert d.read_budget() > 0  # B still has credit: reading goes on
    assert {c.consumer_id: c.waiting for c in d.stats().consumers} == {A: 2, B: 0}
    assert delivered(d.on_permits(A, 5, 0)) == [(A, 0, 0), (A, 2, 0)]


def test_lookahead_per_consumer_bound_drops_then_rereads_in_order() -> None:
    config = DispatcherConfig(lookahead_per_consumer_max=2)
    checker = Checker(config, key_shared=True)
    shell = Shell(KeySharedDispatcher(config), checker)
    shell.add(A, info("a", pull_mode=True))
    shell.add(B, info("b"))
    shell.publish(["k3", "k0", "k3", "k5", "k3", "k1", "k3"])  # k3/k5 -> A (upper half), k0/k1 -> B
    shell.read()
    assert [p.entry_id for p in shell.held_by(B)] == [1, 5]  # B is not held back by A
    stats = shell.d.stats()
    assert stats.consumers[0].waiting == 2 and stats.reread_from == MessagePosition(1, 3, -1)
    effects = shell.grant(A, 10)
    assert RewindTo(MessagePosition(1, 3, -1).entry) in effects  # A made room: re-read the dropped ones
    shell.read()
    assert [p.entry_id for p in shell.held_by(A)] == [0, 2, 3, 4, 6]
    assert shell.d.stats().reread_from is None


def test_lookahead_subscription_bound() -> None:
    d = KeySharedDispatcher(DispatcherConfig(lookahead_max=2, lookahead_per_consumer_max=100))
    d.add_consumer(A, info("a", pull_mode=True), 0)
    d.on_messages([msg(0, 1), msg(1, 2), msg(2, 3), msg(3, 1)], 0)
    stats = d.stats()
    assert stats.waiting == 2 and stats.reread_from == MessagePosition(1, 2)
    effects = d.on_permits(A, 10, 0)
    assert delivered(effects) == [(A, 0, 0), (A, 1, 0)] and effects[-1] == RewindTo(
        MessagePosition(1, 2).entry
    )


def test_delayed_messages_wait_in_the_time_index() -> None:
    d = KeySharedDispatcher()
    d.add_consumer(A, info("a"), 0)
    assert delivered(d.on_messages([msg(0, 5, deliver_at_ms=100), msg(1, 5)], 0)) == [(A, 1, 0)]
    assert d.next_deadline_ms() == 100 and d.stats().delayed == 1
    assert delivered(d.on_timer(99)) == []
    assert delivered(d.on_timer(100)) == [(A, 0, 0)]


def test_nack_and_dead_letter_after_max_redeliver_count() -> None:
    d = KeySharedDispatcher()
    d.add_consumer(A, info("a", nack_redelivery_delay_ms=10, max_redeliver_count=1), 0)
    d.on_messages([msg(0, 7)], 0)
    d.on_nack(A, [MessagePosition(1, 0)], 0)
    assert d.next_deadline_ms() == 10
    assert delivered(d.on_timer(10)) == [(A, 0, 1)]
    d.on_nack(A, [MessagePosition(1, 0)], 10)
    [dead] = d.on_timer(20)
    assert dead.message.position == MessagePosition(1, 0) and dead.deliveries == 2  # type: ignore[union-attr]
    assert d.stats().consumers[0].unacked == 0


# ---------------------------------------------------------------- stateful checker

KEYS = ["k0", "k1", "k2", "k3", "k4", "k5", "k9", "k11"]
STICKY_CHOICES = [
    (HashRange(0, 16383),),
    (HashRange(16384, 32767),),
    (HashRange(32768, 49151), HashRange(60000, 65535)),
    (HashRange(49152, 65535),),
    (HashRange(0, 32767),),
    (HashRange(20000, 30000),),
    (HashRange(0, 65535),),
]
CHECKER_CONFIG = DispatcherConfig(
    flow=FlowLimits(unacked_per_consumer_max=5, unacked_per_subscription_max=9, pull_permits_max=6),
    read_batch_max=4,
    lookahead_max=5,
    lookahead_per_consumer_max=2,
    delayed_max=2,
)


def key_shared_machine(
    dispatcher_cls: type[KeySharedDispatcher], mode: KeySharedMode
) -> type[RuleBasedStateMachine]:
    class KeySharedMachine(MultiConsumerRules):
        def __init__(self) -> None:
            super().__init__()
            self.checker = Checker(CHECKER_CONFIG, key_shared=True)
            self.shell = Shell(dispatcher_cls(CHECKER_CONFIG), self.checker)
            self.next_id = 1

        @rule(
            pull=st.booleans(),
            queue=st.integers(1, 4),
            ack_timeout=st.sampled_from([0, 0, 30]),
            nack_delay=st.sampled_from([0, 10]),
            max_redeliver=st.sampled_from([0, 0, 2]),
            ranges=st.sampled_from(STICKY_CHOICES),
        )
        def join(
            self,
            pull: bool,
            queue: int,
            ack_timeout: int,
            nack_delay: int,
            max_redeliver: int,
            ranges: tuple[HashRange, ...],
        ) -> None:
            if len(self.checker.infos) >= 4:
                return
            consumer = info(
                f"c{self.next_id}",
                pull_mode=pull,
                receiver_queue_size=queue,
                ack_timeout_ms=ack_timeout,
                nack_redelivery_delay_ms=nack_delay,
                max_redeliver_count=max_redeliver,
                key_shared_mode=mode,
                sticky_ranges=ranges if mode is STICKY else (),
            )
            self.shell.add(ConsumerId(self.next_id), consumer)
            self.next_id += 1

        @rule(
            keys=st.lists(st.sampled_from(KEYS), min_size=1, max_size=4),
            batch=st.booleans(),
            delay=st.sampled_from([None, None, None, 20]),
        )
        def publish(self, keys: list[str], batch: bool, delay: int | None) -> None:
            if len(self.shell.log) < 80:
                keys = [keys[0]] * len(keys) if batch else keys  # key-based batching
                self.shell.publish(keys, batch, None if delay is None else self.shell.now_ms + delay)

        def teardown(self) -> None:
            sticky = (HashRange(0, 65535),) if mode is STICKY else ()
            self.shell.drain(
                info("drain", receiver_queue_size=50, key_shared_mode=mode, sticky_ranges=sticky)
            )

    return KeySharedMachine


@pytest.mark.parametrize("mode", [KeySharedMode.AUTO_SPLIT, STICKY])
def test_checker_key_order_and_one_consumer_per_hash(mode: KeySharedMode) -> None:
    run_machine(key_shared_machine(KeySharedDispatcher, mode))


class NoDrainingGuard(KeySharedDispatcher):
    """Deliberately broken: hands a moved hash to its new owner at once."""

    def _free_for(self, slot: int, consumer_id: ConsumerId) -> bool:
        return True


def test_checker_catches_a_selector_without_the_draining_guard() -> None:
    with pytest.raises(Violation, match=r"slot \d+: .* pending on|first delivered after"):
        broken = key_shared_machine(NoDrainingGuard, KeySharedMode.AUTO_SPLIT)
        run_machine(broken, 300, shrink=False, steps=60)
