"""Topic, managed log and subscriptions in-process over real etcd and real storage nodes.

These drive the broker shells directly (no HTTP) to pin the publish path,
delivery, acks, cursor persistence, rollover, trimming and fencing of a
previous owner.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from clusters import LedgerCluster

from coordination.clock import WallClock
from gateway.broker import log_takeover
from gateway.broker.broker_errors import TopicTerminated, TopicUnavailable
from gateway.broker.dispatch import ConsumerInfo
from gateway.broker.dispatch.base import Deliver, HashRange
from gateway.broker.log_policy import Retention, RolloverPolicy
from gateway.broker.log_state import LogConfig, TopicNotFound
from gateway.broker.service import BrokerService, NamespaceView
from gateway.broker.topic import Topic
from gateway.broker.topic_policies import TopicPolicies
from gateway.names import NamespaceName, TopicName
from gateway.subscription_type import SubscriptionType
from storage.client.api import LedgerClient
from storage.formats.entry_format import EntryMessage

pytestmark = pytest.mark.component


class Sink:
    def __init__(self) -> None:
        self.got: list[Deliver] = []
        self.event = asyncio.Event()
        self.closed: str | None = None
        self.active: list[bool] = []

    def deliver(self, deliveries: list[Deliver]) -> None:
        self.got.extend(deliveries)
        self.event.set()

    def active_changed(self, active: bool) -> None:
        self.active.append(active)

    def ranges_changed(self, ranges: tuple[HashRange, ...]) -> None:
        pass

    def close(self, code: str, reason: str) -> None:
        self.closed = code

    async def wait_for(self, n: int, timeout: float = 10.0) -> list[Deliver]:
        async def loop() -> None:
            while len(self.got) < n:
                self.event.clear()
                await self.event.wait()

        await asyncio.wait_for(loop(), timeout)
        return self.got


def message(i: int, producer: str = "p1", key: bytes | None = None) -> EntryMessage:
    return EntryMessage(
        payload=f"m{i}".encode(),
        publish_time_ms=WallClock().now_ms(),
        producer_name=producer,
        sequence_id=i,
        key=key,
    )


Factory = Callable[..., Awaitable[BrokerService]]


@pytest.fixture
async def services(ledger_cluster: Callable[[int], Awaitable[LedgerCluster]]) -> AsyncIterator[Factory]:
    cluster = await ledger_cluster(3)
    made: list[tuple[BrokerService, LedgerClient]] = []

    async def make(
        policies: TopicPolicies | None = None, log_config: LogConfig | None = None
    ) -> BrokerService:
        store = await cluster.store()
        client = LedgerClient(store)
        view = NamespaceView(True, policies=policies or TopicPolicies())

        async def source(ns: NamespaceName) -> NamespaceView:
            return view

        service = BrokerService(store, client, WallClock(), source, log_config)
        made.append((service, client))
        return service

    yield make
    for service, client in made:
        await service.close()
        await client.close()


TOPIC = TopicName.parse("persistent://public/default/t1")


async def test_publish_deliver_ack_and_resume(services: Factory) -> None:
    service = await services()
    topic = await service.topic(TOPIC)
    sink = Sink()
    sub, cid = await topic.subscribe(
        "s", SubscriptionType.EXCLUSIVE, ConsumerInfo("c", receiver_queue_size=100), sink, initial="Earliest"
    )
    results = await asyncio.gather(*(topic.publish(message(i)) for i in range(50)))
    assert len({r.message_id for r in results}) == 50
    got = await sink.wait_for(50)
    assert [d.content.payload for d in got] == [f"m{i}".encode() for i in range(50)]
    sub.ack(cid, [d.position for d in got[:30]])
    await sub.persist()
    await service.unload(TOPIC)
    topic2 = await service.topic(TOPIC)
    sink2 = Sink()
    await topic2.subscribe("s", SubscriptionType.EXCLUSIVE, ConsumerInfo("c"), sink2)
    got2 = await sink2.wait_for(20)
    assert [d.content.payload for d in got2] == [f"m{i}".encode() for i in range(30, 50)]


async def test_lone_messages_of_one_loop_round_share_an_entry(services: Factory) -> None:
    # one-message frames that arrive together are cut into one entry at the end of
    # the round, not the first alone with the rest waiting for its add
    service = await services()
    topic = await service.topic(TOPIC)
    first = [topic.publish(message(i)) for i in range(5)]  # same round, no await between
    results = await asyncio.gather(*first)
    assert {(r.ledger_id, r.entry_id) for r in results} == {(results[0].ledger_id, results[0].entry_id)}
    assert [r.batch_index for r in results] == [0, 1, 2, 3, 4]
    later = await topic.publish(message(5))  # a later round: its own entry
    assert (later.ledger_id, later.entry_id) != (results[0].ledger_id, results[0].entry_id)


async def test_takeover_fences_old_owner(services: Factory) -> None:
    old = await services()
    new = await services()
    topic_old = await old.topic(TOPIC)
    acked = [r.message_id for r in await asyncio.gather(*(topic_old.publish(message(i)) for i in range(10)))]
    topic_new = await new.topic(TOPIC)  # recovery fences the old owner's ledger
    with pytest.raises(TopicUnavailable):
        await topic_old.publish(message(99))
    await asyncio.sleep(0.1)
    assert topic_old.closed
    sink = Sink()
    await topic_new.subscribe("s", SubscriptionType.EXCLUSIVE, ConsumerInfo("c"), sink, initial="Earliest")
    got = await sink.wait_for(10)
    assert {(d.position.ledger_id, d.position.entry_id) for d in got} >= {
        (m.ledger_id, m.entry_id) for m in acked
    }


async def test_rollover_and_trim(services: Factory) -> None:
    service = await services(
        TopicPolicies(retention=Retention(0, 0)), LogConfig(rollover=RolloverPolicy(entries_max=5))
    )
    topic = await service.topic(TOPIC)
    sink = Sink()
    sub, cid = await topic.subscribe(
        "s", SubscriptionType.SHARED, ConsumerInfo("c"), sink, initial="Earliest"
    )
    for i in range(23):
        await topic.publish(message(i))
    await asyncio.sleep(0.2)
    assert len(topic.log.ledgers) >= 4
    got = await sink.wait_for(23)
    assert sorted(d.content.payload for d in got) == sorted(f"m{i}".encode() for i in range(23))
    sub.ack(cid, [d.position for d in got])
    await topic.maintain_once()
    assert len(topic.log.ledgers) <= 2


async def test_one_upkeep_schedule_serves_every_topic(services: Factory) -> None:
    """Loaded topics get no task each (there was one sleeping loop per topic); a
    pass does an idle topic's upkeep in place and starts a task only for I/O."""
    service = await services(
        TopicPolicies(retention=Retention(0, 0)), LogConfig(rollover=RolloverPolicy(entries_max=5))
    )
    service.start()
    topics = [
        await service.topic(TopicName.parse(f"persistent://public/default/upkeep-{i}")) for i in range(8)
    ]
    for topic in topics:
        await topic.publish(message(0))
    upkeep_loops = [t for t in asyncio.all_tasks() if "maintain" in repr(t.get_coro())]
    assert upkeep_loops == [], "a sleeping upkeep task per loaded topic"
    assert service.upkeep.visit_all(service.clock.now_ms()) == 0  # one ledger each: nothing to trim
    assert all(len(topic.history) == 1 for topic in topics)  # the stats were sampled in place
    busy = topics[0]
    for i in range(1, 12):
        await busy.publish(message(i))
    deadline = asyncio.get_running_loop().time() + 10
    while len(busy.log.ledgers) < 3:  # the rolls after every 5 entries complete in the background
        assert asyncio.get_running_loop().time() < deadline, len(busy.log.ledgers)
        await asyncio.sleep(0.02)
    assert service.upkeep.visit_all(service.clock.now_ms()) == 1  # the trim is a task of its own
    assert busy.upkeep_task is not None
    await busy.upkeep_task
    assert len(busy.log.ledgers) == 1  # no subscription: every closed ledger was consumed


async def test_dedup_survives_reload(services: Factory) -> None:
    service = await services(TopicPolicies(dedup=True))
    topic = await service.topic(TOPIC)
    first = await topic.publish(message(1))
    again = await topic.publish(message(1))
    assert not first.duplicate and again.duplicate
    await service.unload(TOPIC)
    other = await services(TopicPolicies(dedup=True))
    topic2 = await other.topic(TOPIC)
    assert (await topic2.publish(message(1))).duplicate
    assert not (await topic2.publish(message(2))).duplicate


async def test_no_publish_is_accepted_once_terminate_has_begun(services: Factory) -> None:
    """Publishes racing a terminate: those accepted before it began are stored and
    answered; every one made after it began is refused, also while the seal is being
    written to etcd (an accepted one there would be acknowledged past the end)."""
    service = await services()
    topic = await service.topic(TOPIC)
    before = [topic.publish(message(i)) for i in range(20)]  # accepted, not yet stored
    terminating = asyncio.ensure_future(topic.terminate())
    await asyncio.sleep(0)  # terminate() has begun
    refused = 0
    while not terminating.done():  # keep publishing through the drain and the etcd write
        with pytest.raises(TopicTerminated):
            await topic.publish(message(1000))
        refused += 1
        await asyncio.sleep(0)
    last = await terminating
    stored = await asyncio.gather(*before)
    assert refused > 0
    assert max((r.message_id.ledger_id, r.message_id.entry_id) for r in stored) <= (
        last.ledger_id,
        last.entry_id,
    )
    with pytest.raises(TopicTerminated):
        await topic.publish(message(2000))
    assert topic.log.last_confirmed == last  # nothing was appended after the seal


async def test_message_counts_of_a_dead_owners_ledger_are_recounted(services: Factory) -> None:
    """A ledger closed by recovery (its owner died) is known in entries only; the new
    owner reads its entry headers, counts messages exactly again and records the total
    in the ledger list, so a third owner knows it at once."""
    old = await services()
    topic_old = await old.topic(TOPIC)
    sub, _ = await topic_old.subscribe(
        "s", SubscriptionType.SHARED, ConsumerInfo("c"), Sink(), initial="Earliest"
    )
    await sub.persist()  # a durable cursor at the start keeps the ledgers (retention 0)
    stored = await asyncio.gather(*(topic_old.publish(message(i)) for i in range(300)))
    entries = len({(r.message_id.ledger_id, r.message_id.entry_id) for r in stored})
    assert entries < 300  # batched: one message per entry would miscount
    dead_ledger = stored[0].message_id.ledger_id

    new = await services()  # takes over with recovery; the old owner never closed the ledger
    topic_new = await new.topic(TOPIC)
    log = topic_new.log

    def counted() -> tuple[int, int, int]:
        recorded = next(info.messages for info in log.ledgers if info.ledger_id == dead_ledger)
        return log.counts.view(log.layout).total(), recorded, topic_new.subscriptions["s"].backlog()

    deadline = asyncio.get_running_loop().time() + 10
    while counted() != (300, 300, 300):
        assert asyncio.get_running_loop().time() < deadline, counted()
        await asyncio.sleep(0.02)

    third = await services()  # the total comes from the list: exact without any read
    topic_third = await third.topic(TOPIC)
    assert topic_third.log.counts.ledger_total(dead_ledger) == 300
    assert (await topic_third.publish(message(300))).message_id is not None
    assert topic_third.log.counts.view(topic_third.log.layout).total() == 301


async def test_recounts_after_a_takeover_are_bounded_and_paced(
    services: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A gateway that inherits many topics from a dead owner recounts their ledgers
    at most ``RECOUNTS_AT_ONCE`` at a time, each paced to a byte rate."""
    monkeypatch.setattr(log_takeover, "RECOUNT_BYTES_PER_S", 8_000)  # ~0.3 s per ledger here
    names = [TopicName.parse(f"persistent://public/default/rc{i}") for i in range(4)]
    old = await services()
    for name in names:
        topic = await old.topic(name)
        sub, _ = await topic.subscribe(
            "s", SubscriptionType.SHARED, ConsumerInfo("c"), Sink(), initial="Earliest"
        )
        await sub.persist()  # keeps the ledger (retention 0)
        await asyncio.gather(*(topic.publish(message(i)) for i in range(60)))

    new = await services()  # takes all four over with recovery: four ledgers to recount
    topics = await asyncio.gather(*(new.topic(name) for name in names))
    assert all(t.log.recounting for t in topics)  # two running, two waiting for a slot
    most = 0
    deadline = asyncio.get_running_loop().time() + 20
    while any(t.log.counts.view(t.log.layout).total() != 60 for t in topics):
        most = max(most, log_takeover.active)
        assert asyncio.get_running_loop().time() < deadline, [
            t.log.counts.view(t.log.layout).total() for t in topics
        ]
        await asyncio.sleep(0.01)
    assert most == log_takeover.RECOUNTS_AT_ONCE == 2  # they overlapped, and no more than two
    while any(t.log.recounting for t in topics):  # the last ones record their totals
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.01)


async def test_redeliveries_whose_entries_must_be_read_back_are_not_overtaken(services: Factory) -> None:
    """A consumer leaves with 10 messages unacked whose entries are no longer cached:
    their redelivery to the other consumer waits for the entries to be read back from
    the storage nodes, and neither a part of them that is still at hand nor a message
    published meanwhile goes ahead of them."""
    service = await services()
    topic = await service.topic(TOPIC)
    first, second = Sink(), Sink()
    sub, leaving = await topic.subscribe(
        "s", SubscriptionType.SHARED, ConsumerInfo("a", receiver_queue_size=100), first, initial="Earliest"
    )
    for i in range(10):  # one entry each
        await topic.publish(message(i))
    await first.wait_for(10)
    await topic.subscribe("s", SubscriptionType.SHARED, ConsumerInfo("b", receiver_queue_size=100), second)
    evicted = topic.decoded.shrink(1 << 40) + topic.log.cache.shrink(1 << 40)  # as the cache budget would
    assert evicted > 0
    sub.remove_consumer(leaving)  # its 10 unacked messages go to the other consumer
    late = topic.publish(message(10))  # published while they are read back
    await late
    got = await second.wait_for(11)
    assert [d.content.payload for d in got] == [f"m{i}".encode() for i in range(11)]
    assert [d.redelivery_count for d in got] == [1] * 10 + [0]


async def test_a_load_that_may_create_does_not_share_a_concurrent_refusal(services: Factory) -> None:
    """A stats request (may not create) and a consumer (may) asking for a new topic at
    once: the consumer gets the topic, the stats request its 404. Before, the consumer
    awaited the stats request's load and was refused 'auto-creation is off'."""
    service = await services()
    name = TopicName.parse("persistent://public/default/created-by-the-second-caller")
    stats, consumer = await asyncio.gather(
        service.topic(name, create=False), service.topic(name, create=True), return_exceptions=True
    )
    assert isinstance(stats, TopicNotFound), stats
    assert "does not exist yet: namespace public/default creates it on the first publish" in str(stats)
    assert isinstance(consumer, Topic), consumer
    assert await service.topic(name, create=False) is consumer
