"""Delivered-but-unacked messages and their redelivery timers (pure).

Owns: for Shared and Key_Shared, which consumer each delivered message is
pending on, how often it was delivered before, and when it is due back.
Rules (docs/compatibility.md §4.4):
- a message is pending on exactly one consumer until it is acked (by anyone:
  Pulsar looks the ack owner up), nacked-and-due, timed out, or its consumer
  leaves;
- ack timeout: a message unacked ``ack_timeout_ms`` after delivery is due back
  (0 = off);
- negative ack: the message stays pending on its consumer (so Key_Shared's
  one-consumer-per-key rule still sees it) and is due back
  ``nack_redelivery_delay_ms`` later; its ack timeout no longer applies.
Both delays are fixed per consumer, so per consumer the delivery order is the
ack-timeout order and the nack order is the due order: deadlines are O(1).

Memory (1,000 consumers that never ack hold 1,000 messages each): a consumer's
turn is kept as one ``_Run`` (the consumer, count, time and the turn's
messages, which are shared with every other subscription of the topic); a
message pending in a run costs one dict slot (position -> run) and one list
slot, not an object of its own. ``Pending`` is built only when a message
leaves a run (ack, nack, expiry, its consumer leaving) or is looked up. A run
whose messages are mostly gone is compacted; an empty one is dropped.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import pairwise

from gateway.broker.dispatch.base import ConsumerId, Message
from storage.formats.positions import MessagePosition

COMPACT_MIN = 16  # a run this long or longer is compacted once half its messages are gone


@dataclass(slots=True)
class Pending:
    consumer_id: ConsumerId
    message: Message
    redelivery_count: int  # deliveries before this one
    delivered_ms: int
    nack_due_ms: int | None = None  # set once nacked

    @property
    def position(self) -> MessagePosition:
        return self.message.position

    @property
    def nacked(self) -> bool:
        return self.nack_due_ms is not None


@dataclass(slots=True, eq=False)
class _Run:
    """Messages delivered to one consumer in one turn, in log order; a message is
    still pending here while the tracker maps its position to this run."""

    consumer_id: ConsumerId
    redelivery_count: int
    delivered_ms: int
    messages: list[Message]
    live: int  # messages of ``messages`` still pending here
    after_found: int = 0  # index after the last ``find``: acks come in delivery order, mostly

    def find(self, position: MessagePosition) -> Message:
        messages = self.messages
        index = self.after_found
        if index >= len(messages) or messages[index].position != position:
            index = bisect.bisect_left(messages, position, key=_position)
        self.after_found = index + 1
        return messages[index]

    def pending(self, message: Message) -> Pending:
        return Pending(self.consumer_id, message, self.redelivery_count, self.delivered_ms)


def _position(message: Message) -> MessagePosition:
    return message.position


@dataclass(slots=True)
class _Timers:
    ack_timeout_ms: int
    nack_delay_ms: int
    runs: deque[_Run]  # delivery order; runs with nothing left are skipped lazily
    nacked: deque[Pending]  # nack order (= due order); acked ones are skipped lazily
    dead: int = 0  # runs in ``runs`` with nothing left (dropped once they are most of it)


class PendingTracker:
    def __init__(self) -> None:
        self._by_position: dict[MessagePosition, _Run | Pending] = {}  # Pending: nacked
        self._consumers: dict[ConsumerId, _Timers] = {}

    def add_consumer(self, consumer_id: ConsumerId, ack_timeout_ms: int, nack_delay_ms: int) -> None:
        assert consumer_id not in self._consumers
        self._consumers[consumer_id] = _Timers(ack_timeout_ms, nack_delay_ms, deque(), deque())

    def remove_consumer(self, consumer_id: ConsumerId) -> list[Pending]:
        """Forget the consumer; returns everything pending on it in log order."""
        timers = self._consumers.pop(consumer_id)
        by_position = self._by_position
        gone = [run.pending(m) for run in timers.runs for m in self._live(run)]
        gone += [p for p in timers.nacked if by_position.get(p.position) is p]
        for p in gone:
            del by_position[p.position]
        return sorted(gone, key=_position_of)

    # ------------------------------------------------------------ inputs

    def record(
        self, consumer_id: ConsumerId, message: Message, redelivery_count: int, now_ms: int
    ) -> Pending:
        """``message`` was delivered to ``consumer_id`` (joins the consumer's last run when
        it was delivered in the same step, with the same count, after it)."""
        runs = self._consumers[consumer_id].runs
        tail = runs[-1] if runs else None
        if (
            tail is not None
            and tail.live
            and tail.delivered_ms == now_ms
            and tail.redelivery_count == redelivery_count
            and tail.messages[-1].position < message.position
        ):
            assert message.position not in self._by_position, message.position
            tail.messages.append(message)
            tail.live += 1
            self._by_position[message.position] = tail
        else:
            self.record_run(consumer_id, [message], redelivery_count, now_ms)
        return Pending(consumer_id, message, redelivery_count, now_ms)

    def record_run(
        self, consumer_id: ConsumerId, messages: list[Message], redelivery_count: int, now_ms: int
    ) -> None:
        """``record`` of each of ``messages`` (one step for a consumer's turn)."""
        if not messages:
            return
        by_position = self._by_position
        if any(a.position >= b.position for a, b in pairwise(messages)):
            messages = sorted(messages, key=_position)
        else:
            messages = messages[:]  # the run may grow (``record``): not the caller's list
        run = _Run(consumer_id, redelivery_count, now_ms, messages, len(messages))
        for message in messages:
            position = message.position
            assert position not in by_position, position
            by_position[position] = run
        self._consumers[consumer_id].runs.append(run)

    def ack(self, positions: Iterable[MessagePosition]) -> tuple[list[Pending], list[MessagePosition]]:
        """Remove each message wherever it is pending: (those removed, the positions
        that were not pending)."""
        by_position, consumers = self._by_position, self._consumers
        removed: list[Pending] = []
        missing: list[MessagePosition] = []
        for position in positions:
            held = by_position.pop(position, None)
            if held is None:
                missing.append(position)
            elif isinstance(held, _Run):
                removed.append(held.pending(held.find(position)))
                self._left_run(held, consumers[held.consumer_id])
            else:
                self._prune(consumers[held.consumer_id])
                removed.append(held)
        return removed, missing

    def ack_counts(
        self, positions: Iterable[MessagePosition]
    ) -> tuple[dict[ConsumerId, int], list[MessagePosition]]:
        """``ack`` for a caller that needs no ``Pending``: per consumer, how many of the
        messages removed from it were not nacked; and the positions that were not pending."""
        by_position, consumers = self._by_position, self._consumers
        settled: dict[ConsumerId, int] = {}
        missing: list[MessagePosition] = []
        for position in positions:
            held = by_position.pop(position, None)
            if held is None:
                missing.append(position)
            elif isinstance(held, _Run):
                consumer_id = held.consumer_id
                settled[consumer_id] = settled.get(consumer_id, 0) + 1
                self._left_run(held, consumers[consumer_id])
            else:
                self._prune(consumers[held.consumer_id])
        return settled, missing

    def nack(self, consumer_id: ConsumerId, position: MessagePosition, now_ms: int) -> Pending | None:
        """Mark a message pending on ``consumer_id`` as due back after its nack
        delay; returns it if it was pending there and not nacked already."""
        run = self._by_position.get(position)
        if not isinstance(run, _Run) or run.consumer_id != consumer_id:
            return None
        timers = self._consumers[consumer_id]
        pending = run.pending(run.find(position))
        pending.nack_due_ms = now_ms + timers.nack_delay_ms
        self._by_position[position] = pending
        self._left_run(run, timers)
        timers.nacked.append(pending)
        return pending

    def expire(self, now_ms: int) -> list[Pending]:
        """Remove and return (in log order) every message due back at ``now_ms``."""
        by_position = self._by_position
        due: list[Pending] = []
        for timers in self._consumers.values():
            while timers.nacked:
                head = timers.nacked[0]
                if by_position.get(head.position) is not head:
                    timers.nacked.popleft()
                    continue
                assert head.nack_due_ms is not None
                if head.nack_due_ms > now_ms:
                    break
                timers.nacked.popleft()
                del by_position[head.position]
                due.append(head)
            if timers.ack_timeout_ms > 0:
                runs = timers.runs
                while runs and (not runs[0].live or runs[0].delivered_ms + timers.ack_timeout_ms <= now_ms):
                    run = runs.popleft()
                    if not run.live:
                        timers.dead -= 1
                        continue
                    for message in self._live(run):
                        del by_position[message.position]
                        due.append(run.pending(message))
                    run.live, run.messages = 0, []
        return sorted(due, key=_position_of)

    # ------------------------------------------------------------ queries

    def next_deadline_ms(self) -> int | None:
        deadlines: list[int] = []
        for timers in self._consumers.values():
            if timers.nacked:
                head = timers.nacked[0]
                assert head.nack_due_ms is not None
                deadlines.append(head.nack_due_ms)
            if timers.ack_timeout_ms > 0:
                runs = timers.runs
                while runs and not runs[0].live:
                    runs.popleft()
                    timers.dead -= 1
                if runs:
                    deadlines.append(runs[0].delivered_ms + timers.ack_timeout_ms)
        return min(deadlines, default=None)

    def get(self, position: MessagePosition) -> Pending | None:
        held = self._by_position.get(position)
        if isinstance(held, _Run):
            return held.pending(held.find(position))
        return held

    def __contains__(self, position: MessagePosition) -> bool:
        return position in self._by_position

    def __len__(self) -> int:
        return len(self._by_position)

    def _live(self, run: _Run) -> Iterator[Message]:
        """The messages still pending in ``run``."""
        by_position = self._by_position
        return (m for m in run.messages if by_position.get(m.position) is run)

    def _left_run(self, run: _Run, timers: _Timers) -> None:
        """A message left ``run``: compact it once half its messages are gone; once none
        is left, drop its messages, and drop the consumer's empty runs once they are
        most of its queue (one message never acked must not keep every later run)."""
        run.live -= 1
        if run.live:
            if len(run.messages) >= COMPACT_MIN and run.live * 2 <= len(run.messages):
                run.messages = list(self._live(run))
                run.after_found = 0
            return
        run.messages = []
        timers.dead += 1
        if timers.dead >= COMPACT_MIN and timers.dead * 2 >= len(timers.runs):
            timers.runs = deque(r for r in timers.runs if r.live)
            timers.dead = 0

    def _prune(self, timers: _Timers) -> None:
        """Drop acked heads of the nack queue so its head is a live deadline."""
        while timers.nacked and self._by_position.get(timers.nacked[0].position) is not timers.nacked[0]:
            timers.nacked.popleft()


def _position_of(pending: Pending) -> MessagePosition:
    return pending.position
