"""Exclusive and Failover dispatchers: admission, active-consumer choice,
switch-over with rewind, order-keeping redelivery, bounds; plus a stateful
checker (only the active consumer receives, log order, within permits, no loss)."""

from __future__ import annotations

import pytest
from dispatch_harness import delivered, info, msgs, pos, rewinds, run_machine
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

from gateway.broker.dispatch import (
    ActiveChanged,
    ConsumerId,
    ConsumerInfo,
    Deliver,
    DispatcherConfig,
    ExclusiveDispatcher,
    FailoverDispatcher,
    Reject,
    RejectReason,
    RewindTo,
)
from gateway.broker.flow import FlowLimits
from storage.formats.positions import MessagePosition

pytestmark = pytest.mark.unit

A, B, C = ConsumerId(1), ConsumerId(2), ConsumerId(3)


# ---------------------------------------------------------------- Exclusive


def test_exclusive_rejects_a_second_consumer() -> None:
    d = ExclusiveDispatcher()
    assert d.add_consumer(A, info("a"), 0) == []
    [reject] = d.add_consumer(B, info("b"), 0)
    assert isinstance(reject, Reject) and reject.reason is RejectReason.CONSUMER_BUSY


def test_exclusive_delivers_in_order_within_credit() -> None:
    d = ExclusiveDispatcher(DispatcherConfig(read_batch_max=10))
    d.add_consumer(A, info("a", receiver_queue_size=3), 0)
    assert d.read_budget() == 3
    assert delivered(d.on_messages(msgs(0, 4), 0)) == [(A, 0, 0), (A, 1, 0), (A, 2, 0)]
    assert d.read_budget() == 0
    assert delivered(d.on_ack(A, [pos(1)], 0)) == [(A, 3, 0)]
    assert delivered(d.on_messages(msgs(0, 4), 0)) == []  # a re-read of held messages is ignored


def test_exclusive_reconnect_rewinds_to_the_first_unacked() -> None:
    d = ExclusiveDispatcher()
    d.add_consumer(A, info("a"), 0)
    d.on_messages(msgs(0, 4), 0)
    d.on_ack(A, [pos(0), pos(2)], 0)
    assert rewinds(d.remove_consumer(A, 0)) == [1]
    assert d.read_budget() == 0
    d.add_consumer(B, info("b"), 0)
    # the cursor skips acked 2 on the re-read
    assert delivered(d.on_messages([msgs(1, 1)[0], msgs(3, 2)[0], msgs(4, 1)[0]], 0)) == [
        (B, 1, 1),
        (B, 3, 1),
        (B, 4, 0),
    ]


def test_messages_read_while_nobody_is_attached_are_reread() -> None:
    d = ExclusiveDispatcher()
    assert d.on_messages(msgs(0, 2), 0) == []  # a read that was in flight
    assert rewinds(d.add_consumer(A, info("a"), 0)) == [0]


def test_nack_rewinds_after_the_delay_and_keeps_order() -> None:
    d = ExclusiveDispatcher()
    d.add_consumer(A, info("a", receiver_queue_size=2, nack_redelivery_delay_ms=100), 0)
    d.on_messages(msgs(0, 3), 0)
    assert delivered(d.on_nack(A, [pos(1)], 10)) == [(A, 2, 0)]  # credit back at nack time
    assert d.next_deadline_ms() == 110
    assert d.on_timer(109) == []
    assert rewinds(d.on_timer(110)) == [0]  # everything unacked comes back, in order
    assert delivered(d.on_messages(msgs(0, 3), 110)) == [(A, 0, 1), (A, 1, 1)]


def test_ack_timeout_rewinds() -> None:
    d = ExclusiveDispatcher()
    d.add_consumer(A, info("a", ack_timeout_ms=500), 0)
    d.on_messages(msgs(0, 2), 0)
    d.on_ack(A, [pos(0)], 1)
    assert d.next_deadline_ms() == 500
    assert rewinds(d.on_timer(500)) == [1]
    assert d.stats().consumers[0].unacked == 0  # credit released (pulsar #2731)


def test_cumulative_ack() -> None:
    d = ExclusiveDispatcher()
    d.add_consumer(A, info("a", receiver_queue_size=3), 0)
    d.on_messages(msgs(0, 5), 0)
    assert delivered(d.on_cumulative_ack(A, pos(1), 0)) == [(A, 3, 0), (A, 4, 0)]
    assert rewinds(d.remove_consumer(A, 0)) == [2]


def test_lookahead_bound_skips_then_rereads_in_order() -> None:
    d = ExclusiveDispatcher(DispatcherConfig(lookahead_max=2))
    d.add_consumer(A, info("a", pull_mode=True), 0)
    d.on_messages(msgs(0, 4), 0)  # shell overshot: 2 kept, 2 skipped
    assert d.stats().reread_from == pos(2) and d.read_budget() == 0
    effects = d.on_permits(A, 5, 0)
    assert delivered(effects) == [(A, 0, 0), (A, 1, 0)] and rewinds(effects) == [2]


# ---------------------------------------------------------------- Failover


@pytest.mark.parametrize(
    ("partition", "active"),
    [(0, "A"), (1, "B"), (2, "C"), (3, "A"), (4, "B"), (5, "C"), (6, "A"), (7, "B"), (8, "C")],
)
def test_failover_partition_assignment(partition: int, active: str) -> None:
    d = FailoverDispatcher(DispatcherConfig(partition_index=partition))
    for consumer_id, name in ((C, "C"), (A, "A"), (B, "B")):  # join order does not matter
        d.add_consumer(consumer_id, info(name), 0)
    assert d.active_consumer() == {"A": A, "B": B, "C": C}[active]


def test_failover_consumers_are_bounded_and_config_is_checked() -> None:
    d = FailoverDispatcher(DispatcherConfig(consumers_max=2))
    [reject] = d.add_consumer(A, info("a", ack_timeout_ms=-1), 0)
    assert isinstance(reject, Reject) and reject.reason is RejectReason.INVALID_CONFIG
    d.add_consumer(A, info("a"), 0)
    d.add_consumer(B, info("b"), 0)
    [reject] = d.add_consumer(C, info("c"), 0)
    assert isinstance(reject, Reject) and reject.reason is RejectReason.TOO_MANY_CONSUMERS


def test_failover_only_the_best_priority_level_is_a_candidate() -> None:
    d = FailoverDispatcher(DispatcherConfig(partition_index=1))
    d.add_consumer(A, info("a", priority_level=1), 0)
    d.add_consumer(B, info("b", priority_level=0), 0)
    assert d.active_consumer() == B  # alone in the best level, whatever the partition


def test_failover_non_partitioned_ring_is_stable_and_spreads() -> None:
    chosen = []
    for topic in range(60):
        d = FailoverDispatcher(DispatcherConfig(topic_name=f"persistent://t/n/topic-{topic}"))
        for consumer_id, name in ((A, "x"), (B, "y"), (C, "z")):
            d.add_consumer(consumer_id, info(name), 0)
        again = FailoverDispatcher(DispatcherConfig(topic_name=f"persistent://t/n/topic-{topic}"))
        for consumer_id, name in ((C, "z"), (B, "y"), (A, "x")):
            again.add_consumer(consumer_id, info(name), 0)
        assert again.active_consumer() == d.active_consumer()
        chosen.append(d.active_consumer())
    assert min(chosen.count(c) for c in (A, B, C)) >= 10  # 60 topics over 3 consumers


def test_failover_tells_every_consumer_who_is_active() -> None:
    d = FailoverDispatcher(DispatcherConfig(partition_index=0))
    assert d.add_consumer(B, info("b"), 0) == [ActiveChanged(B, True)]
    assert d.add_consumer(C, info("c"), 0) == [ActiveChanged(C, False)]
    assert set(d.add_consumer(A, info("a"), 0)) == {
        ActiveChanged(B, False),
        ActiveChanged(C, False),
        ActiveChanged(A, True),
    }
    assert [c.blocked_reason for c in d.stats().consumers] == ["standby", "standby", None]  # B, C, A


def test_failover_switch_over_waits_then_rewinds_to_the_first_unacked() -> None:
    d = FailoverDispatcher(DispatcherConfig(partition_index=0, failover_delay_ms=1000))
    d.add_consumer(B, info("b"), 0)
    d.on_messages(msgs(0, 3), 0)
    d.on_ack(B, [pos(0)], 0)
    effects = d.add_consumer(A, info("a"), 10)  # A sorts first: it becomes active
    assert rewinds(effects) == [] and d.read_budget() == 0
    assert d.next_deadline_ms() == 1010
    assert delivered(d.on_messages(msgs(3, 1), 20)) == []  # an in-flight read: skipped
    d.on_ack(B, [pos(1)], 500)  # the old active finishes some work meanwhile
    assert rewinds(d.on_timer(1010)) == [2]
    assert delivered(d.on_messages(msgs(2, 2), 1010)) == [(A, 2, 1), (A, 3, 0)]


def test_failover_no_wait_when_the_old_active_is_gone() -> None:
    d = FailoverDispatcher(DispatcherConfig(partition_index=0))
    d.add_consumer(A, info("a"), 0)
    d.add_consumer(B, info("b"), 0)
    d.on_messages(msgs(0, 2), 0)
    effects = d.remove_consumer(A, 5)
    assert ActiveChanged(B, True) in effects and rewinds(effects) == [0]
    assert delivered(d.on_messages(msgs(0, 2), 5)) == [(B, 0, 1), (B, 1, 1)]


def test_failover_old_active_leaving_during_the_delay_ends_it() -> None:
    d = FailoverDispatcher(DispatcherConfig(partition_index=0))
    d.add_consumer(B, info("b"), 0)
    d.on_messages(msgs(0, 1), 0)
    d.add_consumer(A, info("a"), 0)
    assert rewinds(d.remove_consumer(B, 10)) == [0] and d.next_deadline_ms() is None


def test_failover_switching_back_before_the_delay_redoes_nothing() -> None:
    d = FailoverDispatcher(DispatcherConfig(partition_index=0))
    d.add_consumer(B, info("b"), 0)
    d.on_messages(msgs(0, 2), 0)
    d.add_consumer(A, info("a"), 0)
    effects = d.remove_consumer(A, 10)
    assert ActiveChanged(B, True) in effects and rewinds(effects) == []
    assert d.next_deadline_ms() is None and d.read_budget() > 0
    assert delivered(d.on_ack(B, [pos(0), pos(1)], 11)) == []


# ---------------------------------------------------------------- stateful checker

CHECKER_CONFIG = DispatcherConfig(
    flow=FlowLimits(unacked_per_consumer_max=4, pull_permits_max=5),
    read_batch_max=3,
    lookahead_max=2,
    failover_delay_ms=20,
    partition_index=1,
)


class FailoverMachine(RuleBasedStateMachine):
    """Plays the shell (log, acked set, read position) and checks every effect."""

    exclusive = False

    def __init__(self) -> None:
        super().__init__()
        self.d: ExclusiveDispatcher | FailoverDispatcher = (
            ExclusiveDispatcher(CHECKER_CONFIG) if self.exclusive else FailoverDispatcher(CHECKER_CONFIG)
        )
        self.log = msgs(0, 0)
        self.acked: set[MessagePosition] = set()
        self.read_index = self.now = 0
        self.infos: dict[ConsumerId, ConsumerInfo] = {}
        self.active: dict[ConsumerId, bool] = {}
        self.outstanding: dict[ConsumerId, list[MessagePosition]] = {}  # delivered, not acked / taken back
        self.granted: dict[ConsumerId, int] = {}
        self.deliveries: dict[MessagePosition, int] = {}
        self.last: dict[ConsumerId, MessagePosition] = {}  # last delivery since the last rewind
        self.next_id = 1

    def apply(self, effects: list) -> None:
        for e in effects:
            if isinstance(e, ActiveChanged):
                self.active[e.consumer_id] = e.is_active
            elif isinstance(e, RewindTo):
                self.read_index = next(
                    (i for i, m in enumerate(self.log) if m.entry >= e.position), len(self.log)
                )
                # a full rewind (to the first unacked) takes every sent message back; a
                # partial one (to the first skipped) takes nothing back
                self.outstanding = {
                    c: [q for q in h if q.entry < e.position] for c, h in self.outstanding.items()
                }
                self.last = {c: q for c, q in self.last.items() if q.entry < e.position}
            elif isinstance(e, Deliver):
                c, p = e.consumer_id, e.message.position
                assert self.active.get(c), f"{p} to {c}, which is not the active consumer"
                assert p not in self.acked
                assert c not in self.last or p > self.last[c], f"{p} after {self.last[c]}: out of order"
                assert e.redelivery_count == self.deliveries.get(p, 0), (e, self.deliveries.get(p, 0))
                info = self.infos[c]
                if info.pull_mode:
                    assert self.granted[c] > 0, "beyond permits"
                    self.granted[c] -= 1
                else:
                    assert len(self.outstanding[c]) < info.receiver_queue_size, "beyond receiver queue"
                self.outstanding[c].append(p)
                self.deliveries[p] = self.deliveries.get(p, 0) + 1
                self.last[c] = p

    @rule(
        pull=st.booleans(),
        queue=st.integers(1, 3),
        priority=st.integers(0, 1),
        timeout=st.sampled_from([0, 0, 30]),
    )
    def join(self, pull: bool, queue: int, priority: int, timeout: int) -> None:
        if len(self.infos) < 3:
            c = ConsumerId(self.next_id)
            self.next_id += 1
            consumer = info(
                f"c{c}",
                pull_mode=pull,
                receiver_queue_size=queue,
                priority_level=priority,
                ack_timeout_ms=timeout,
                nack_redelivery_delay_ms=10,
            )
            effects = self.d.add_consumer(c, consumer, self.now)
            if self.exclusive and self.infos:
                assert [type(e) for e in effects] == [Reject]
                return
            self.infos[c], self.outstanding[c], self.granted[c] = consumer, [], 0
            self.active[c] = self.exclusive or self.active.get(c, False)
            self.apply(effects)

    @precondition(lambda self: self.infos)
    @rule(data=st.data())
    def leave(self, data: st.DataObject) -> None:
        c = data.draw(st.sampled_from(sorted(self.infos)))
        del self.infos[c], self.outstanding[c]
        self.active.pop(c, None)
        self.apply(self.d.remove_consumer(c, self.now))

    @rule(count=st.integers(1, 3))
    def publish(self, count: int) -> None:
        if len(self.log) < 40:
            self.log += msgs(len(self.log), count)

    @rule()
    def read(self) -> None:
        budget = self.d.read_budget()
        batch = []
        while self.read_index < len(self.log) and len(batch) < budget:
            if self.log[self.read_index].position not in self.acked:
                batch.append(self.log[self.read_index])
            self.read_index += 1
        if batch:
            self.apply(self.d.on_messages(batch, self.now))

    @precondition(lambda self: self.infos)
    @rule(data=st.data(), n=st.integers(1, 3))
    def permits(self, data: st.DataObject, n: int) -> None:
        c = data.draw(st.sampled_from(sorted(self.infos)))
        if self.infos[c].pull_mode:
            self.granted[c] += min(n, 5 - self.granted[c])
        self.apply(self.d.on_permits(c, n, self.now))

    @precondition(lambda self: any(self.outstanding.values()))
    @rule(data=st.data(), how=st.sampled_from(["ack", "nack", "cumulative"]))
    def settle(self, data: st.DataObject, how: str) -> None:
        c = data.draw(st.sampled_from(sorted(c for c, held in self.outstanding.items() if held)))
        p = data.draw(st.sampled_from(self.outstanding[c]))
        done = [q for q in self.outstanding[c] if q <= p] if how == "cumulative" else [p]
        self.outstanding[c] = [q for q in self.outstanding[c] if q not in done]
        if how == "nack":
            self.apply(self.d.on_nack(c, done, self.now))
            return
        if how == "cumulative":  # the cursor's mark-delete moves: everything up to p is acked
            done = [m.position for m in self.log if m.position <= p]
            self.outstanding[c] = [q for q in self.outstanding[c] if q > p]
        self.acked.update(done)
        self.apply(
            self.d.on_cumulative_ack(c, p, self.now)
            if how == "cumulative"
            else self.d.on_ack(c, done, self.now)
        )

    @rule(ms=st.sampled_from([1, 10, 25]))
    def advance(self, ms: int) -> None:
        self.now += ms
        self.apply(self.d.on_timer(self.now))

    def teardown(self) -> None:
        for c in list(self.infos):
            self.leave_consumer(c)
        c = ConsumerId(999)
        self.infos[c], self.outstanding[c], self.granted[c] = info("drain", receiver_queue_size=50), [], 0
        self.active[c] = self.exclusive
        self.apply(self.d.add_consumer(c, self.infos[c], self.now))
        for _ in range(100):
            self.now += 1000
            self.apply(self.d.on_timer(self.now))
            self.read()
            self.acked.update(self.outstanding[c])
            self.apply(self.d.on_ack(c, self.outstanding[c], self.now))
            self.outstanding[c] = []
        lost = [m.position for m in self.log if m.position not in self.acked]
        assert not lost, f"lost {lost}"

    def leave_consumer(self, c: ConsumerId) -> None:
        del self.infos[c], self.outstanding[c]
        self.active.pop(c, None)
        self.apply(self.d.remove_consumer(c, self.now))


class ExclusiveMachine(FailoverMachine):
    exclusive = True


@pytest.mark.parametrize("machine", [FailoverMachine, ExclusiveMachine])
def test_checker_active_only_in_order_within_permits_no_loss(machine: type[FailoverMachine]) -> None:
    run_machine(machine)
