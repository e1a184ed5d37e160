"""Flow control: permits, receiver queues, unacked limits with hysteresis, and a
stateful checker against an independent model (never beyond permits, never
stalled while credit remains)."""

from __future__ import annotations

import pytest
from dispatch_harness import run_machine
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
)

from gateway.broker.flow import FlowControl, FlowLimits, FlowMode

pytestmark = pytest.mark.unit

PUSH, PULL = FlowMode.PUSH, FlowMode.PULL


def test_push_credit_is_the_receiver_queue_and_returns_on_settle() -> None:
    flow = FlowControl()
    flow.add_consumer(1, PUSH, 3)
    assert flow.available(1) == 3
    flow.on_delivered(1, 3)
    assert flow.available(1) == 0 and flow.blocked_reason(1) == "receiver queue full"
    flow.on_settled(1)  # ack or redelivery (pulsar #2731: timeouts release credit too)
    assert flow.available(1) == 1 and flow.blocked_reason(1) is None
    assert flow.grant(1, 10) == 0  # push consumers don't take explicit permits


def test_pull_credit_only_from_permits_and_capped() -> None:
    flow = FlowControl(FlowLimits(pull_permits_max=5))
    flow.add_consumer(1, PULL)
    assert flow.available(1) == 0 and flow.blocked_reason(1) == "no permits"
    assert flow.grant(1, 3) == 3
    assert flow.grant(1, 3) == 2  # 5 unused at most
    flow.on_delivered(1, 4)
    flow.on_settled(1, 4)  # acks don't give pull permits back
    assert flow.available(1) == 1 and flow.permits(1) == 1


def test_receiver_queue_size_is_clipped() -> None:
    flow = FlowControl(FlowLimits(receiver_queue_size_max=10, unacked_per_consumer_max=0))
    flow.add_consumer(1, PUSH, 1_000_000)
    assert flow.available(1) == 10


def test_consumer_limit_blocks_at_max_and_unblocks_at_half() -> None:
    flow = FlowControl(FlowLimits(unacked_per_consumer_max=4))
    flow.add_consumer(1, PUSH, 100)
    assert flow.available(1) == 4
    flow.on_delivered(1, 4)
    assert flow.is_blocked(1) and flow.blocked_reason(1) == "consumer unacked limit"
    flow.on_settled(1)
    assert flow.available(1) == 0  # 3 > half
    flow.on_settled(1)
    assert not flow.is_blocked(1) and flow.available(1) == 2


def test_subscription_limit_blocks_everyone_and_unblocks_at_half() -> None:
    flow = FlowControl(FlowLimits(unacked_per_subscription_max=6, unacked_per_consumer_max=0))
    flow.add_consumer(1, PUSH, 100)
    flow.add_consumer(2, PUSH, 100)
    flow.on_delivered(1, 4)
    assert flow.available(2) == 2 and flow.available_total() == 2
    flow.on_delivered(2, 2)
    assert flow.subscription_blocked and flow.blocked_reason(1) == "subscription unacked limit"
    flow.on_settled(1, 2)
    assert flow.available_total() == 0  # 4 > 3
    flow.remove_consumer(2)  # its unacked no longer count: 2 <= 3
    assert not flow.subscription_blocked and flow.available(1) == 4


def test_delivering_beyond_permits_is_a_programming_error() -> None:
    flow = FlowControl()
    flow.add_consumer(1, PULL)
    flow.grant(1, 1)
    with pytest.raises(AssertionError, match="beyond permits"):
        flow.on_delivered(1, 2)


def test_unknown_consumers_are_harmless() -> None:
    flow = FlowControl()
    assert flow.available(9) == 0 and flow.grant(9, 5) == 0 and flow.unacked(9) == 0
    flow.on_settled(9)  # a consumer that already left
    flow.remove_consumer(9)
    assert flow.blocked_reason(9) is None and not flow.is_blocked(9)


# ---------------------------------------------------------------- stateful checker

LIMITS = FlowLimits(
    unacked_per_consumer_max=6, unacked_per_subscription_max=10, receiver_queue_size_max=8, pull_permits_max=7
)


class FlowMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.flow = FlowControl(LIMITS)
        self.mode: dict[int, FlowMode] = {}
        self.queue: dict[int, int] = {}
        self.granted: dict[int, int] = {}
        self.delivered: dict[int, int] = {}
        self.unacked: dict[int, int] = {}
        self.blocked: dict[int, bool] = {}
        self.sub_blocked = False
        self.next_id = 1

    def pick(self, data: st.DataObject) -> int:
        return data.draw(st.sampled_from(sorted(self.mode)))

    @rule(pull=st.booleans(), queue=st.integers(1, 12))
    def add(self, pull: bool, queue: int) -> None:
        c = self.next_id
        self.next_id += 1
        self.flow.add_consumer(c, PULL if pull else PUSH, queue)
        self.mode[c] = PULL if pull else PUSH
        self.queue[c] = min(queue, LIMITS.receiver_queue_size_max)
        self.granted[c] = self.delivered[c] = self.unacked[c] = 0
        self.blocked[c] = False

    @precondition(lambda self: self.mode)
    @rule(data=st.data())
    def remove(self, data: st.DataObject) -> None:
        c = self.pick(data)
        self.flow.remove_consumer(c)
        for table in (self.mode, self.queue, self.granted, self.delivered, self.unacked, self.blocked):
            del table[c]
        self._sub_block()

    @precondition(lambda self: self.mode)
    @rule(data=st.data(), n=st.integers(-1, 6))
    def grant(self, data: st.DataObject, n: int) -> None:
        c = self.pick(data)
        accepted = self.flow.grant(c, n)
        if self.mode[c] is PULL and n > 0:
            assert accepted == min(n, LIMITS.pull_permits_max - (self.granted[c] - self.delivered[c]))
        else:
            assert accepted == 0
        self.granted[c] += accepted

    @precondition(lambda self: self.mode)
    @rule(data=st.data())
    def deliver(self, data: st.DataObject) -> None:
        c = self.pick(data)
        available = self.flow.available(c)
        if available == 0:
            return
        n = data.draw(st.integers(1, available))
        self.flow.on_delivered(c, n)
        self.delivered[c] += n
        self.unacked[c] += n
        if self.unacked[c] >= LIMITS.unacked_per_consumer_max:
            self.blocked[c] = True
        self._sub_block()

    @precondition(lambda self: any(self.unacked.values()))
    @rule(data=st.data())
    def settle(self, data: st.DataObject) -> None:
        c = data.draw(st.sampled_from(sorted(c for c, u in self.unacked.items() if u)))
        n = data.draw(st.integers(1, self.unacked[c]))
        self.flow.on_settled(c, n)
        self.unacked[c] -= n
        if self.unacked[c] <= LIMITS.unacked_per_consumer_max // 2:
            self.blocked[c] = False
        self._sub_block()

    def _sub_block(self) -> None:
        total = sum(self.unacked.values())
        if total >= LIMITS.unacked_per_subscription_max:
            self.sub_blocked = True
        elif total <= LIMITS.unacked_per_subscription_max // 2:
            self.sub_blocked = False

    @invariant()
    def never_beyond_permits(self) -> None:
        total = sum(self.unacked.values())
        assert total <= LIMITS.unacked_per_subscription_max
        assert self.flow.unacked_total == total
        for c, mode in self.mode.items():
            assert self.flow.unacked(c) == self.unacked[c] <= LIMITS.unacked_per_consumer_max
            if mode is PULL:
                assert self.delivered[c] <= self.granted[c]
            else:
                assert self.unacked[c] <= self.queue[c]

    @invariant()
    def blocked_exactly_as_modelled_and_never_stalled(self) -> None:
        assert self.flow.subscription_blocked == self.sub_blocked
        total = sum(self.unacked.values())
        for c, mode in self.mode.items():
            assert self.flow.is_blocked(c) == self.blocked[c]
            credit = self.granted[c] - self.delivered[c] if mode is PULL else self.queue[c] - self.unacked[c]
            expected = min(
                credit,
                LIMITS.unacked_per_consumer_max - self.unacked[c],
                LIMITS.unacked_per_subscription_max - total,
            )
            if self.blocked[c] or self.sub_blocked:
                expected = 0
            assert self.flow.available(c) == max(0, expected)


def test_checker_flow_model() -> None:
    run_machine(FlowMachine)
