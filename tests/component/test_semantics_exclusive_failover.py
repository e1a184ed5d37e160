"""Exclusive and Failover semantics with real WebSocket consumers on real gateways.

Shows (docs/compatibility.md §4.2-4.3, §4.6; docs/architecture.md §5):
- Exclusive: a second consumer is refused with HTTP 409 on the handshake (and
  may connect once the first has left); a cumulative ack moves the cursor, so
  a reconnecting consumer gets exactly the messages after the acked id;
  without acks everything comes back; cumulative ack is refused on Shared;
- Failover: one consumer is active (``active`` notices), it alone receives;
  when it leaves the next one takes over from the mark-delete position and
  gets every unacked message again, in order, and then the new ones;
- flow control, every type: with ``receiverQueueSize=1`` a backlog drains one
  message per ack; in pull mode only ``permit`` credit lets messages out.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from clusters import MessagingCluster
from wsclient import (
    Collector,
    consumer_url,
    eventually,
    handshake_status,
    module_cluster,
    publish_each,
    unb64,
)

pytestmark = [pytest.mark.component, pytest.mark.asyncio(loop_scope="module")]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster(
    etcd_endpoint: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[MessagingCluster]:
    async with module_cluster(etcd_endpoint, tmp_path_factory.mktemp("excl")) as made:
        yield made


def payloads(collector: Collector) -> list[str]:
    return [unb64(m["payload"]).decode() for m in collector.messages]


async def test_exclusive_second_consumer_refused_with_409(cluster: MessagingCluster) -> None:
    first = await Collector.connect(
        consumer_url(cluster.ws(0), "excl-busy", "s", "subscriptionType=Exclusive")
    )
    # through either gateway (one of them relays to the owner)
    for gateway in (0, 1):
        url = consumer_url(cluster.ws(gateway), "excl-busy", "s", "subscriptionType=Exclusive")
        assert await handshake_status(url) == 409
    # another subscription of the same topic is independent
    other = consumer_url(cluster.ws(1), "excl-busy", "other", "subscriptionType=Exclusive")
    assert await handshake_status(other) == 101
    await first.close()
    second_url = consumer_url(cluster.ws(1), "excl-busy", "s", "subscriptionType=Exclusive")
    async with asyncio.timeout(10):
        while (status := await handshake_status(second_url)) != 101:
            assert status == 409
            await asyncio.sleep(0.1)


async def test_exclusive_cumulative_ack_moves_the_cursor(cluster: MessagingCluster) -> None:
    topic = "excl-cumulative"
    query = "subscriptionType=Exclusive&subscriptionInitialPosition=Earliest"
    consumer = await Collector.connect(consumer_url(cluster.ws(1), topic, "s", query))
    sent = [f"m{i}" for i in range(12)]
    ids = await publish_each(cluster.ws(0), topic, sent)
    await consumer.wait_messages(12)
    assert payloads(consumer) == sent
    assert [m["messageId"] for m in consumer.messages] == ids
    await consumer.send({"type": "ackCumulative", "messageId": ids[6]})
    await asyncio.sleep(0.3)
    await consumer.close()

    again = await Collector.connect(consumer_url(cluster.ws(0), topic, "s", query))
    await again.wait_messages(5)
    assert payloads(again) == sent[7:]
    assert await again.nothing_for(0.8)
    # no ack at all this time: a reconnect gets the same five again, in order
    await again.close()
    third = await Collector.connect(consumer_url(cluster.ws(1), topic, "s", query))
    await third.wait_messages(5)
    assert payloads(third) == sent[7:]
    # the Folio spelling {"messageId":..,"ackType":"cumulative"} acks up to the id as well
    await third.send({"messageId": ids[9], "ackType": "cumulative"})
    await asyncio.sleep(0.3)
    await third.close()
    fourth = await Collector.connect(consumer_url(cluster.ws(0), topic, "s", query))
    await fourth.wait_messages(2)
    assert payloads(fourth) == sent[10:]
    assert await fourth.nothing_for(0.5)
    await fourth.close()


async def test_cumulative_ack_is_refused_on_shared(cluster: MessagingCluster) -> None:
    topic = "shared-no-cumulative"
    query = "subscriptionType=Shared&subscriptionInitialPosition=Earliest"
    consumer = await Collector.connect(consumer_url(cluster.ws(0), topic, "s", query))
    ids = await publish_each(cluster.ws(0), topic, ["a", "b", "c"])
    await consumer.wait_messages(3)
    await consumer.send({"type": "ackCumulative", "messageId": ids[2]})
    await consumer.wait_until(lambda: any(n.get("type") == "error" for n in consumer.notices), 5)
    await consumer.close()
    # nothing was acked: a new consumer gets all three again
    again = await Collector.connect(consumer_url(cluster.ws(1), topic, "s", query))
    await again.wait_messages(3)
    assert sorted(payloads(again)) == ["a", "b", "c"]
    assert all(m["redeliveryCount"] >= 1 for m in again.messages)
    await again.close()


async def test_failover_active_consumer_hands_over_from_the_mark_delete(cluster: MessagingCluster) -> None:
    topic = "failover-handover"
    base = "subscriptionType=Failover&subscriptionInitialPosition=Earliest&notices=true"
    consumers = [
        await Collector.connect(
            consumer_url(cluster.ws(i % 2), topic, "s", f"{base}&consumerName=fo-{i}"), f"fo-{i}"
        )
        for i in range(3)
    ]
    await eventually(lambda: all(c.active() is not None for c in consumers), 10)
    await asyncio.sleep(0.3)  # let every notice of the last join arrive
    active = [c for c in consumers if c.active()]
    assert len(active) == 1, [(c.name, c.notices) for c in consumers]
    first = active[0]
    sent = [f"m{i}" for i in range(20)]
    ids = await publish_each(cluster.ws(0), topic, sent)
    await first.wait_messages(20)
    assert payloads(first) == sent
    for c in consumers:
        if c is not first:
            assert c.messages == [], c.name
    # ack m0..m4 (cumulatively) and m7 individually; leave the rest unacked
    await first.send({"type": "ackCumulative", "messageId": ids[4]})
    await first.ack(ids[7])
    await asyncio.sleep(0.3)
    await first.close()

    rest = [c for c in consumers if c is not first]
    await eventually(lambda: any(c.active() for c in rest), 10)
    second = next(c for c in rest if c.active())
    expected = [p for i, p in enumerate(sent) if i > 4 and i != 7]
    await second.wait_messages(len(expected), 10)
    assert payloads(second) == expected
    assert all(m["redeliveryCount"] >= 1 for m in second.messages)
    # new messages follow, still only to the active one
    more = await publish_each(cluster.ws(1), topic, ["n0", "n1", "n2"])
    await second.wait_messages(len(expected) + 3)
    assert payloads(second)[len(expected) :] == ["n0", "n1", "n2"]
    third = next(c for c in rest if c is not second)
    assert third.messages == []
    assert third.active() is False
    # the second one acks everything up to n1 and leaves: the third gets only n2
    await second.send({"type": "ackCumulative", "messageId": more[1]})
    await asyncio.sleep(0.3)
    await second.close()
    await third.wait_until(lambda: third.active() is True, 10)
    await third.wait_messages(1, 10)
    assert payloads(third) == ["n2"]
    assert await third.nothing_for(0.5)
    await third.close()


@pytest.mark.parametrize("sub_type", ["Exclusive", "Failover", "Shared", "Key_Shared"])
async def test_a_backlog_drains_through_receiver_queue_size_one(
    cluster: MessagingCluster, sub_type: str
) -> None:
    """Credit freed by an ack lets the next message out even when nothing new is
    published (the subscription's read loop must notice the freed credit)."""
    topic = f"queue-one-{sub_type.lower()}"
    sent = [f"m{i}" for i in range(6)]
    await publish_each(cluster.ws(0), topic, ["before"])
    query = f"subscriptionType={sub_type}&subscriptionInitialPosition=Earliest&receiverQueueSize=1"
    consumer = await Collector.connect(consumer_url(cluster.ws(1), topic, "s", query))
    await consumer.wait_messages(1)
    await publish_each(cluster.ws(0), topic, sent)  # a backlog builds behind the one unacked message
    await asyncio.sleep(0.3)
    assert len(consumer.messages) == 1  # receiverQueueSize=1: one outstanding at a time
    for i in range(7):
        await consumer.wait_messages(i + 1, 5)
        await consumer.ack(consumer.messages[i]["messageId"])
    assert payloads(consumer) == ["before", *sent]
    await consumer.close()


async def test_pull_mode_permits_release_a_backlog(cluster: MessagingCluster) -> None:
    topic = "pull-permits"
    await publish_each(cluster.ws(0), topic, [f"m{i}" for i in range(5)])
    query = "subscriptionType=Exclusive&subscriptionInitialPosition=Earliest&pullMode=true"
    consumer = await Collector.connect(consumer_url(cluster.ws(0), topic, "s", query))
    assert await consumer.nothing_for(0.5)  # no permits, nothing comes
    await consumer.send({"type": "permit", "permitMessages": 2})
    await consumer.wait_messages(2, 5)
    assert await consumer.nothing_for(0.4)
    await consumer.send({"type": "permit", "permitMessages": 10})
    await consumer.wait_messages(5, 5)
    assert payloads(consumer) == [f"m{i}" for i in range(5)]
    await consumer.close()
