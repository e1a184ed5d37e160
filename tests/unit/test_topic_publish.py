"""Topic.publish_many: queueing a batch at once, and message by message when it does
not all fit (the queue bound answers the rest with a retriable 429); and
Topic.publish_requests: the sequence ids the topic gives messages sent without one."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from coordination.clock import ManualClock
from gateway.broker.broker_errors import SequenceGap, TooManyRequests, TopicUnavailable
from gateway.broker.log_state import EntryCache, LogError
from gateway.broker.publish_core import BatcherConfig, PublishBatcher
from gateway.broker.publish_results import PublishResult
from gateway.broker.topic import Topic
from gateway.broker.topic_policies import TopicPolicies
from gateway.names import TopicName
from gateway.protocol.ws_frames import PublishRequest
from storage.formats.entry_format import EntryMessage, decode_entry
from storage.formats.positions import Position

pytestmark = pytest.mark.unit


class Log:
    """Takes appends; the test completes them."""

    fenced = terminated = False
    cache = EntryCache(1 << 20)
    last_confirmed = Position(5, -1)

    def __init__(self) -> None:
        self.on_fenced: Any = None
        self.appends: list[tuple[bytes, int, Callable[[asyncio.Future[Position]], None]]] = []

    def append(self, payload: bytes, count: int, done: Callable[[asyncio.Future[Position]], None]) -> None:
        self.appends.append((payload, count, done))

    def fail(self, index: int, exc: Exception) -> None:
        future: asyncio.Future[Position] = asyncio.get_running_loop().create_future()
        future.set_exception(exc)
        self.appends[index][2](future)

    def complete(self, index: int, entry_id: int) -> None:
        future: asyncio.Future[Position] = asyncio.get_running_loop().create_future()
        future.set_result(Position(5, entry_id))
        self.appends[index][2](future)


def topic(queue_messages_max: int = 50_000, dedup: bool = False) -> tuple[Topic, Log]:
    log = Log()
    host = SimpleNamespace(
        store=None,
        clock=ManualClock(1_000),
        namespace_policies=lambda _ns: TopicPolicies(dedup=dedup),
        policies_generation=0,
        serves=lambda _topic: True,
    )
    t = Topic(TopicName.parse("persistent://public/default/t"), log, host)  # type: ignore[arg-type]
    t._batcher = PublishBatcher(BatcherConfig(queue_messages_max=queue_messages_max))
    return t, log


def message(i: int, producer: str = "p") -> EntryMessage:
    return EntryMessage(b"m%d" % i, 1_000, producer, i)


async def test_a_batch_goes_into_one_entry_and_every_message_gets_its_id() -> None:
    t, log = topic()
    t.add_producer("p")
    future = t.publish_many([message(i) for i in range(5)])
    assert len(log.appends) == 1 and log.appends[0][1] == 5
    assert [m.sequence_id for m in decode_entry(log.appends[0][0])] == list(range(5))
    log.complete(0, entry_id=9)
    results = await future
    assert all(isinstance(r, PublishResult) for r in results)
    ids = [(r.entry_id, r.batch_index, r.batch_size) for r in results if isinstance(r, PublishResult)]
    assert ids == [(9, i, 5) for i in range(5)]
    assert t.msg_in == 5 and t.producers["p"].msg_in == 5 and t.producers["p"].bytes_in == 10


async def test_a_batch_larger_than_the_room_left_is_taken_in_part_the_rest_refused() -> None:
    t, log = topic(queue_messages_max=3)
    first = t.publish_many([message(0)])  # cut at once into its own entry, in flight
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert len(log.appends) == 1
    second = t.publish_many([message(i) for i in range(1, 6)])  # 5 > 3: one by one
    assert len(log.appends) == 2 and log.appends[1][1] == 3  # the three that fit, one entry
    log.complete(0, entry_id=0)
    log.complete(1, entry_id=1)
    await first
    outcomes = await second
    assert [type(o) for o in outcomes] == [PublishResult] * 3 + [TooManyRequests] * 2
    assert t.msg_in == 4


async def test_a_failed_add_fails_the_messages_queued_behind_it() -> None:
    """Appended after the failure they would be stored (in the next ledger) before
    the producer's resend of the failed message: out of its order."""
    t, log = topic()
    t._batcher = PublishBatcher(BatcherConfig(inflight_max=1))
    first = t.publish_many([message(0)])
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    behind = t.publish_many([message(1), message(2)])
    assert len(log.appends) == 1  # queued behind the add in flight
    log.fail(0, LogError("ledger 7: too few writable nodes"))
    assert len(log.appends) == 1, "a message queued behind a failed add was appended after it"
    assert [type(o) for o in await first] == [TopicUnavailable]
    assert [type(o) for o in await behind] == [TopicUnavailable] * 2


async def test_a_smaller_message_cannot_overtake_one_the_full_queue_refused_on_a_dedup_topic() -> None:
    """Stored ahead of it, it would make the resend of the refused one a "duplicate":
    answered ok, never stored."""
    t, log = topic(dedup=True)
    t._batcher = PublishBatcher(BatcherConfig(inflight_max=1, queue_bytes_max=96))
    first = t.publish_many([message(0)])
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    big = EntryMessage(b"x" * 200, 1_000, "p", 1)
    outcomes = await asyncio.wait_for(t.publish_many([big, message(2)]), 5)  # queued: never answered
    assert [type(o) for o in outcomes] == [TooManyRequests, SequenceGap]
    log.complete(0, entry_id=0)
    await first
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    resent = t.publish_many([EntryMessage(b"x" * 10, 1_000, "p", 1), message(2)])
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    log.complete(1, entry_id=1)
    done = await resent
    assert all(isinstance(o, PublishResult) and not o.duplicate for o in done), done
    assert t.dedup_position == Position(5, 1)  # what the next dedup snapshot covers


def request(i: int, sequence_id: int | None = None) -> PublishRequest:
    return PublishRequest(b"r%d" % i, sequence_id=sequence_id)


def sequences(log: Log, index: int = 0) -> list[int]:
    return [m.sequence_id for m in decode_entry(log.appends[index][0])]


async def test_a_one_off_publish_under_dedup_numbers_its_messages_after_the_producer_s_last() -> None:
    """REST retries without ids stay apart: each call continues after the last id
    the topic took from that producer; a given id is kept as it is."""
    t, log = topic(dedup=True)
    first = t.publish_requests("rest", [request(0), request(1), request(2)], 1_000)
    assert sequences(log) == [0, 1, 2]
    log.complete(0, entry_id=0)
    await first
    second = t.publish_requests("rest", [request(3), request(4, sequence_id=7)], 1_000)
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert sequences(log, 1) == [3, 7]
    log.complete(1, entry_id=1)
    assert all(isinstance(o, PublishResult) for o in await second)
    third = t.publish_requests("rest", [request(5)], 1_000)
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert sequences(log, 2) == [8]  # after 7, the highest the topic took
    log.complete(2, entry_id=2)
    assert [o.duplicate for o in await third if isinstance(o, PublishResult)] == [False]


async def test_a_one_off_publish_without_dedup_gives_sequence_id_0() -> None:
    t, log = topic()
    t.publish_requests("rest", [request(0), request(1, sequence_id=5)], 2_000)
    assert sequences(log) == [0, 5]
    assert [m.publish_time_ms for m in decode_entry(log.appends[0][0])] == [2_000, 2_000]


async def test_a_connected_producer_continues_its_own_count() -> None:
    """From initialSequenceId on, without dedup too; a given id moves the count on."""
    t, log = topic()
    record = t.add_producer("ws", initial_sequence_id=40)
    t.publish_requests(record, [request(0), request(1), request(2, sequence_id=50), request(3)], 1_000)
    assert sequences(log) == [41, 42, 50, 51]
    assert record.next_sequence == 52


async def test_a_connected_producer_under_dedup_starts_after_the_last_id_the_topic_knows() -> None:
    t, log = topic(dedup=True)
    t.dedup.on_persisted("ws", 99)
    record = t.add_producer("ws", initial_sequence_id=10)
    t.publish_requests(record, [request(0)], 1_000)
    await asyncio.sleep(0)
    await asyncio.sleep(0)  # a lone message is cut a loop round later
    assert sequences(log) == [100]
    assert t.add_producer("other", initial_sequence_id=10).next_sequence == 11


async def test_the_policies_are_looked_up_again_only_when_the_hosts_generation_moves() -> None:
    t, _ = topic()
    host: Any = t.host
    lookups: list[object] = []

    def policies(ns: object) -> TopicPolicies:
        lookups.append(ns)
        return TopicPolicies(dedup=True)

    host.namespace_policies = policies
    assert not t.policies.dedup and lookups == []  # the generation did not move: as loaded
    host.policies_generation += 1  # a policy change reached the host
    assert t.policies.dedup and t.policies.dedup and len(lookups) == 1


async def test_an_entry_stored_after_the_ownership_ended_is_not_acknowledged() -> None:
    t, log = topic()
    t.add_producer("p")
    serving = [True]
    host: Any = t.host
    host.serves = lambda _topic: serving[0]
    future = t.publish_many([message(0)])
    await asyncio.sleep(0)
    await asyncio.sleep(0)  # a lone message is cut a loop round later
    assert len(log.appends) == 1
    serving[0] = False  # e.g. the lease passed its local deadline while the add ran
    log.complete(0, entry_id=0)
    [outcome] = await future
    assert isinstance(outcome, TopicUnavailable) and "ownership ended" in str(outcome)


async def test_a_producer_answered_by_callback_gets_every_outcome_once_without_a_future() -> None:
    t, log = topic()
    record = t.add_producer("ws")
    answers: list[list[Any]] = []
    created: list[object] = []
    loop = asyncio.get_running_loop()
    make = loop.create_future
    loop.create_future = lambda: created.append(1) or make()  # type: ignore[method-assign]
    try:
        t.publish_requests_then(record, [request(0)], 1_000, answers.append)
        t.publish_requests_then(record, [request(1), request(2)], 1_000, answers.append)
    finally:
        del loop.create_future  # type: ignore[method-assign]
    assert created == []  # no future per call
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert sequences(log) == [0, 1, 2]
    assert answers == []  # nothing answered before its entry is stored
    for index in range(len(log.appends)):
        log.complete(index, entry_id=index)
    assert [[type(o) for o in a] for a in answers] == [[PublishResult], [PublishResult, PublishResult]]
    t.closed = True  # a refusal is answered through the callback too
    t.publish_requests_then(record, [request(3)], 1_000, answers.append)
    assert isinstance(answers[-1][0], TopicUnavailable)
