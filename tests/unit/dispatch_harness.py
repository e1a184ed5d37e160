"""Test shell and checker for the multi-consumer dispatchers.

``Shell`` plays the subscription actor: a log of entries, a cursor (the acked
set, skipped on every read), a read position that ``RewindTo`` moves back, and
time. ``Checker`` models, independently of the dispatcher, what each consumer
holds and raises ``Violation`` on every effect that breaks a rule:
- a message is pending on at most one consumer at a time (a message stops
  being pending when acked, when its consumer leaves, or once its nack delay
  or ack timeout has passed);
- Key_Shared: a hash slot is pending on at most one consumer at a time, and
  first deliveries of each key (non-delayed messages) are in log order;
- never beyond permits: push consumers never hold more than their receiver
  queue, pull consumers never get more than they were granted; unacked limits;
- redelivery counts are right; a message is delivered at most
  ``max_redeliver_count + 1`` times (of its last holder and of its receiver),
  and dead-lettered only once it was delivered more than its consumer allows;
- no loss: ``drain`` must get every message acked or dead-lettered.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule, run_state_machine_as_test

from gateway.broker.dispatch import (
    ConsumerId,
    ConsumerInfo,
    DeadLetter,
    Deliver,
    Dispatcher,
    DispatcherConfig,
    Effect,
    Message,
    Reject,
    RewindTo,
)
from storage.formats.key_hash import key_slot
from storage.formats.positions import MessagePosition

EXAMPLES = int(os.environ.get("FOLIO_DISPATCH_EXAMPLES", "100"))  # raise it to search harder


def run_machine(
    machine: type[RuleBasedStateMachine], examples: int = EXAMPLES, shrink: bool = True, steps: int = 40
) -> None:
    """Run a checker deterministically (same examples on every run)."""
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=examples,
            stateful_step_count=steps,
            phases=list(Phase) if shrink else [Phase.explicit, Phase.generate],
            deadline=None,
            derandomize=True,
            database=None,
            report_multiple_bugs=False,
            suppress_health_check=list(HealthCheck),
        ),
    )


def info(name: str, **kw: object) -> ConsumerInfo:
    return ConsumerInfo(name=name, **kw)  # type: ignore[arg-type]


def msgs(first: int, count: int, deliver_at_ms: int | None = None) -> list[Message]:
    return [Message(MessagePosition(1, e), 0, deliver_at_ms) for e in range(first, first + count)]


def pos(entry: int) -> MessagePosition:
    return MessagePosition(1, entry)


def delivered(effects: list[Effect]) -> list[tuple[ConsumerId, int, int]]:
    """(consumer, entry id, redelivery count) of each Deliver."""
    return [
        (e.consumer_id, e.message.position.entry_id, e.redelivery_count)
        for e in effects
        if isinstance(e, Deliver)
    ]


def rewinds(effects: list[Effect]) -> list[int]:
    return [e.position.entry_id for e in effects if isinstance(e, RewindTo)]


class Violation(Exception):
    """The checker found a broken rule (distinct from the cores' own asserts)."""


def slot_of(key: str) -> int:
    return key_slot(key.encode())


@dataclass
class _Held:
    consumer_id: ConsumerId
    delivered_ms: int
    nacked_ms: int | None = None


@dataclass
class Checker:
    config: DispatcherConfig
    key_shared: bool = False
    infos: dict[ConsumerId, ConsumerInfo] = field(default_factory=dict)  # attached
    history: dict[ConsumerId, ConsumerInfo] = field(default_factory=dict)  # ever attached
    held: dict[MessagePosition, _Held] = field(default_factory=dict)
    deliveries: dict[MessagePosition, int] = field(default_factory=dict)
    granted: dict[ConsumerId, int] = field(default_factory=dict)
    used: dict[ConsumerId, int] = field(default_factory=dict)
    last_first: dict[str, MessagePosition] = field(default_factory=dict)
    keys: dict[MessagePosition, str] = field(default_factory=dict)
    delayed: set[MessagePosition] = field(default_factory=set)
    acked: set[MessagePosition] = field(default_factory=set)
    dead: set[MessagePosition] = field(default_factory=set)

    def deadline(self, held: _Held) -> float:
        info = self.history[held.consumer_id]
        if held.nacked_ms is not None:
            return held.nacked_ms + info.nack_redelivery_delay_ms
        return held.delivered_ms + info.ack_timeout_ms if info.ack_timeout_ms > 0 else math.inf

    def live(self, position: MessagePosition, now_ms: int) -> _Held | None:
        """Who the message is pending on now, if anyone."""
        held = self.held.get(position)
        if held is None or held.consumer_id not in self.infos or now_ms >= self.deadline(held):
            return None
        return held

    def outstanding(self, consumer_id: ConsumerId, now_ms: int) -> int:
        """Delivered to it and neither acked, nacked nor timed out: what uses its credit."""
        return sum(
            1
            for p, h in self.held.items()
            if h.consumer_id == consumer_id and h.nacked_ms is None and self.live(p, now_ms)
        )

    # ------------------------------------------------------------ events

    def joined(self, consumer_id: ConsumerId, info: ConsumerInfo) -> None:
        self.infos[consumer_id] = info
        self.history[consumer_id] = info
        self.granted[consumer_id] = self.used[consumer_id] = 0

    def left(self, consumer_id: ConsumerId) -> None:
        del self.infos[consumer_id]

    def on_deliver(self, d: Deliver, now_ms: int) -> None:
        c, pos = d.consumer_id, d.message.position
        if c not in self.infos:
            raise Violation(f"{pos} delivered to detached consumer {c}")
        if pos in self.acked or pos in self.dead:
            raise Violation(f"{pos} delivered after ack / dead letter")
        holder = self.live(pos, now_ms)
        if holder is not None:
            raise Violation(f"{pos} delivered to {c} while pending on {holder.consumer_id}")
        seen = self.deliveries.get(pos, 0)
        if d.redelivery_count != seen:
            raise Violation(f"{pos}: redelivery_count {d.redelivery_count}, delivered {seen} times before")
        info = self.infos[c]
        limits = [info.max_redeliver_count]  # the receiver's, and the last holder's
        if seen > 0:
            limits.append(self.history[self.held[pos].consumer_id].max_redeliver_count)
        for limit in limits:
            if limit and seen > limit:
                raise Violation(f"{pos} delivered {seen + 1} times, max_redeliver_count {limit}")
        self._check_flow(c, info, now_ms)
        if self.key_shared:
            self._check_key(d, now_ms, first=seen == 0)
        self.deliveries[pos] = seen + 1
        self.held[pos] = _Held(c, now_ms)
        self.used[c] += 1

    def _check_flow(self, c: ConsumerId, info: ConsumerInfo, now_ms: int) -> None:
        outstanding = self.outstanding(c, now_ms)
        if info.pull_mode and self.used[c] >= self.granted[c]:
            raise Violation(f"pull consumer {c} got more than its {self.granted[c]} permits")
        if not info.pull_mode and outstanding >= info.receiver_queue_size:
            raise Violation(
                f"push consumer {c} has {outstanding} outstanding, queue {info.receiver_queue_size}"
            )
        limits = self.config.flow
        if limits.unacked_per_consumer_max and outstanding >= limits.unacked_per_consumer_max:
            raise Violation(f"consumer {c} over the unacked limit")
        total = sum(self.outstanding(x, now_ms) for x in self.infos)
        if limits.unacked_per_subscription_max and total >= limits.unacked_per_subscription_max:
            raise Violation("subscription over the unacked limit")

    def _check_key(self, d: Deliver, now_ms: int, first: bool) -> None:
        pos = d.message.position
        slot = d.message.hash_slot
        for other, held in self.held.items():
            rival = held.consumer_id != d.consumer_id and other != pos and self.keys_slot(other) == slot
            if rival and self.live(other, now_ms):
                raise Violation(
                    f"slot {slot}: {pos} to {d.consumer_id} while {other} pending on {held.consumer_id}"
                )
        key = self.keys[pos]
        if first and pos not in self.delayed:
            last = self.last_first.get(key)
            if last is not None and pos < last:
                raise Violation(f"key {key}: {pos} first delivered after {last}")
            self.last_first[key] = pos

    def keys_slot(self, position: MessagePosition) -> int:
        return slot_of(self.keys[position])

    def on_dead_letter(self, d: DeadLetter, now_ms: int) -> None:
        pos = d.message.position
        if self.live(pos, now_ms) is not None:
            raise Violation(f"{pos} dead-lettered while still pending")
        limit = self.history[d.consumer_id].max_redeliver_count
        seen = self.deliveries.get(pos, 0)
        if not limit or seen <= limit or d.deliveries != seen:
            raise Violation(f"{pos} dead-lettered after {seen} deliveries ({d.deliveries}), max {limit}")
        self.dead.add(pos)
        self.held.pop(pos, None)

    def on_ack(self, position: MessagePosition) -> None:
        self.acked.add(position)
        self.held.pop(position, None)

    def on_nack(self, position: MessagePosition, consumer_id: ConsumerId, now_ms: int) -> None:
        held = self.live(position, now_ms)
        if held is not None and held.consumer_id == consumer_id and held.nacked_ms is None:
            held.nacked_ms = now_ms


class Shell:
    """The subscription actor, synchronously: log, cursor, read position, time."""

    def __init__(self, dispatcher: Dispatcher, checker: Checker) -> None:
        self.d = dispatcher
        self.checker = checker
        self.log: list[Message] = []
        self.read_index = 0
        self.now_ms = 0
        self.next_entry = 0
        self.failed = False

    def apply(self, effects: list[Effect]) -> list[Effect]:
        try:
            self._apply(effects)
        except Violation:
            self.failed = True  # the model is now out of step: no drain afterwards
            raise
        return effects

    def _apply(self, effects: list[Effect]) -> None:
        for effect in effects:
            if isinstance(effect, Deliver):
                self.checker.on_deliver(effect, self.now_ms)
            elif isinstance(effect, DeadLetter):
                self.checker.on_dead_letter(effect, self.now_ms)
            elif isinstance(effect, RewindTo):
                self.read_index = next(
                    (i for i, m in enumerate(self.log) if m.entry >= effect.position), len(self.log)
                )

    def publish(self, keys: list[str], batch: bool = False, deliver_at_ms: int | None = None) -> None:
        """Append one entry per key, or one batch entry (key-based batching: one key)."""
        groups = [keys] if batch else [[k] for k in keys]
        for group in groups:
            entry = self.next_entry
            self.next_entry += 1
            for index, key in enumerate(group):
                pos = MessagePosition(1, entry, index if batch else -1)
                self.log.append(Message(pos, slot_of(key), deliver_at_ms))
                self.checker.keys[pos] = key
                if deliver_at_ms is not None:
                    self.checker.delayed.add(pos)

    def read(self) -> list[Effect]:
        budget = self.d.read_budget()
        batch: list[Message] = []
        while self.read_index < len(self.log) and len(batch) < budget:
            entry = self.log[self.read_index].entry
            while self.read_index < len(self.log) and self.log[self.read_index].entry == entry:
                message = self.log[self.read_index]
                if message.position not in self.checker.acked and message.position not in self.checker.dead:
                    batch.append(message)
                self.read_index += 1
        if not batch:
            return []
        return self.apply(self.d.on_messages(batch, self.now_ms))

    def add(self, consumer_id: ConsumerId, info: ConsumerInfo) -> list[Effect]:
        effects = self.d.add_consumer(consumer_id, info, self.now_ms)
        if not any(isinstance(e, Reject) and e.consumer_id == consumer_id for e in effects):
            self.checker.joined(consumer_id, info)
        return self.apply(effects)

    def remove(self, consumer_id: ConsumerId) -> list[Effect]:
        self.checker.left(consumer_id)
        return self.apply(self.d.remove_consumer(consumer_id, self.now_ms))

    def grant(self, consumer_id: ConsumerId, n: int) -> list[Effect]:
        if self.checker.infos[consumer_id].pull_mode:
            room = self.checker.config.flow.pull_permits_max - (
                self.checker.granted[consumer_id] - self.checker.used[consumer_id]
            )
            self.checker.granted[consumer_id] += max(0, min(n, room))
        return self.apply(self.d.on_permits(consumer_id, n, self.now_ms))

    def ack(self, consumer_id: ConsumerId, positions: list[MessagePosition]) -> list[Effect]:
        for position in positions:
            self.checker.on_ack(position)
        return self.apply(self.d.on_ack(consumer_id, positions, self.now_ms))

    def nack(self, consumer_id: ConsumerId, positions: list[MessagePosition]) -> list[Effect]:
        for position in positions:
            self.checker.on_nack(position, consumer_id, self.now_ms)
        return self.apply(self.d.on_nack(consumer_id, positions, self.now_ms))

    def advance(self, ms: int) -> list[Effect]:
        self.now_ms += ms
        return self.apply(self.d.on_timer(self.now_ms))

    def held_by(self, consumer_id: ConsumerId) -> list[MessagePosition]:
        """What the consumer has and has not acked (it may ack even after a timeout)."""
        return sorted(p for p, h in self.checker.held.items() if h.consumer_id == consumer_id)

    def drain(self, rejoin: ConsumerInfo, steps_max: int = 400) -> None:
        """Replace every consumer by one that acks everything; all must end acked or dead."""
        if self.failed:
            return
        for consumer_id in list(self.checker.infos):
            self.remove(consumer_id)
        self.add(ConsumerId(10_000), rejoin)
        for _ in range(steps_max):
            self.advance(1_000_000)
            self.read()
            held = self.held_by(ConsumerId(10_000))
            if held:
                self.ack(ConsumerId(10_000), held)
            if all(m.position in self.checker.acked or m.position in self.checker.dead for m in self.log):
                return
        missing = [m.position for m in self.log if m.position not in self.checker.acked | self.checker.dead]
        raise Violation(f"lost messages: {missing[:5]} ({len(missing)} in all)")


class MultiConsumerRules(RuleBasedStateMachine):
    """The rules Shared and Key_Shared model checks share: consumers leave,
    the shell reads, consumers grant permits, ack, nack, and time passes.
    Subclasses set ``checker`` and ``shell`` and add join / publish / teardown."""

    checker: Checker
    shell: Shell

    def pick(self, data: st.DataObject) -> ConsumerId:
        return data.draw(st.sampled_from(sorted(self.checker.infos)))

    @precondition(lambda self: self.checker.infos)
    @rule(data=st.data())
    def leave(self, data: st.DataObject) -> None:
        self.shell.remove(self.pick(data))

    @rule()
    def read(self) -> None:
        self.shell.read()

    @precondition(lambda self: self.checker.infos)
    @rule(data=st.data(), n=st.integers(1, 4))
    def permits(self, data: st.DataObject, n: int) -> None:
        self.shell.grant(self.pick(data), n)

    @precondition(lambda self: self.checker.infos)
    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        consumer = self.pick(data)
        held = self.shell.held_by(consumer)
        if held:
            self.shell.ack(
                consumer, data.draw(st.lists(st.sampled_from(held), min_size=1, max_size=3, unique=True))
            )

    @precondition(lambda self: self.checker.infos)
    @rule(data=st.data())
    def nack(self, data: st.DataObject) -> None:
        consumer = self.pick(data)
        held = self.shell.held_by(consumer)
        if held:
            self.shell.nack(
                consumer, data.draw(st.lists(st.sampled_from(held), min_size=1, max_size=2, unique=True))
            )

    @rule(ms=st.sampled_from([1, 5, 15, 40]))
    def advance(self, ms: int) -> None:
        self.shell.advance(ms)
