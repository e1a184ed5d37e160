"""The compact pending tracker (runs of deliveries) against a one-object-per-message model.

Random deliveries, acks, nacks, timer expiries and consumers leaving, in any
order: every answer of ``PendingTracker`` (what was removed, what is due, the
next deadline, the look-ups) is the model's.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass

import pytest

from gateway.broker.dispatch.base import ConsumerId, Message
from gateway.broker.dispatch.redelivery import PendingTracker
from storage.formats.positions import MessagePosition


@dataclass
class _Entry:
    consumer: int
    message: Message
    count: int
    delivered: int
    nack_due: int | None = None


class _Model:
    def __init__(self) -> None:
        self.by_position: dict[MessagePosition, _Entry] = {}
        self.timeouts: dict[int, tuple[int, int]] = {}
        self.nack_order: dict[int, list[MessagePosition]] = {}

    def due(self, now: int) -> list[MessagePosition]:
        out = []
        for position, e in self.by_position.items():
            ack_timeout, _ = self.timeouts[e.consumer]
            if e.nack_due is not None:
                if e.nack_due <= now:
                    out.append(position)
            elif ack_timeout > 0 and e.delivered + ack_timeout <= now:
                out.append(position)
        return sorted(out)


def _view(p: object) -> tuple[object, ...]:
    return (p.consumer_id, p.message, p.redelivery_count, p.delivered_ms, p.nack_due_ms)  # type: ignore[attr-defined]


@pytest.mark.parametrize("seed", range(12))
def test_the_run_tracker_answers_as_a_per_message_model(seed: int) -> None:
    rng = random.Random(seed)
    tracker, model = PendingTracker(), _Model()
    now, next_entry, next_consumer = 0, 0, 0
    consumers: list[int] = []
    for _ in range(1500):
        op = rng.random()
        now += rng.choice((0, 0, 1, 5, 40))
        if op < 0.1 or not consumers:
            c = next_consumer = next_consumer + 1
            timeouts = (rng.choice((0, 0, 30, 100)), rng.choice((0, 10, 50)))
            tracker.add_consumer(ConsumerId(c), *timeouts)
            model.timeouts[c] = timeouts
            consumers.append(c)
        elif op < 0.4:  # a turn: new messages, or a redelivered one
            c = rng.choice(consumers)
            count = rng.choice((0, 0, 1, 2))
            run = []
            for _ in range(rng.randint(1, 25)):
                next_entry += 1
                run.append(Message(MessagePosition(7, next_entry), rng.randrange(4)))
            if rng.random() < 0.5:
                tracker.record_run(ConsumerId(c), run, count, now)
            else:
                for message in run:
                    tracker.record(ConsumerId(c), message, count, now)
            for message in run:
                model.by_position[message.position] = _Entry(c, message, count, now)
        elif op < 0.6 and model.by_position:
            picked = rng.sample(sorted(model.by_position), min(len(model.by_position), rng.randint(1, 30)))
            picked.append(MessagePosition(9, 9))  # never delivered
            expected = [model.by_position.pop(p) for p in picked[:-1]]
            if rng.random() < 0.5:
                removed, missing = tracker.ack(picked)
                assert [_view(p) for p in removed] == [
                    (e.consumer, e.message, e.count, e.delivered, e.nack_due) for e in expected
                ]
            else:
                settled, missing = tracker.ack_counts(picked)
                assert settled == dict(Counter(e.consumer for e in expected if e.nack_due is None))
            assert missing == [MessagePosition(9, 9)]
        elif op < 0.7 and model.by_position:
            position = rng.choice(sorted(model.by_position))
            c = rng.choice(consumers)
            e = model.by_position[position]
            got = tracker.nack(ConsumerId(c), position, now)
            if e.consumer == c and e.nack_due is None:
                e.nack_due = now + model.timeouts[c][1]
                assert got is not None and got.nack_due_ms == e.nack_due
            else:
                assert got is None
        elif op < 0.75:
            c = rng.choice(consumers)
            consumers.remove(c)
            gone = tracker.remove_consumer(ConsumerId(c))
            expected_positions = sorted(p for p, e in model.by_position.items() if e.consumer == c)
            assert [p.position for p in gone] == expected_positions
            for p in expected_positions:
                del model.by_position[p]
        else:
            due = model.due(now)
            assert [p.position for p in tracker.expire(now)] == due
            for p in due:
                del model.by_position[p]
        assert len(tracker) == len(model.by_position)
        for position, e in list(model.by_position.items())[:5]:
            got = tracker.get(position)
            assert got is not None and _view(got) == (e.consumer, e.message, e.count, e.delivered, e.nack_due)
        deadlines = [
            e.nack_due if e.nack_due is not None else e.delivered + model.timeouts[e.consumer][0]
            for e in model.by_position.values()
            if e.nack_due is not None or model.timeouts[e.consumer][0] > 0
        ]
        assert tracker.next_deadline_ms() == min(deadlines, default=None)
