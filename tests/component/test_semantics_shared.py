"""Shared subscription semantics with real WebSocket consumers on real gateways.

Shows (docs/compatibility.md §4.4; docs/architecture.md §5):
- messages are spread round-robin over the consumers, each to exactly one;
- a consumer that disconnects hands its unacked messages to the others
  (``redeliveryCount`` >= 1) and nothing is lost;
- a nack brings the message back after ``negativeAckRedeliveryDelay``, not before;
- ``ackTimeoutMillis`` brings an unacked message back after the timeout; an
  acked one never comes back;
- with ``maxRedeliverCount`` a message is delivered at most N+1 times, then
  published to the dead-letter topic (default ``<topic>-<sub>-DLQ`` or
  ``deadLetterTopic``) and not delivered again.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from clusters import MessagingCluster
from wsclient import Collector, consumer_url, decode_id, eventually, module_cluster, publish_each, unb64

pytestmark = [pytest.mark.component, pytest.mark.asyncio(loop_scope="module")]

SHARED = "subscriptionType=Shared&subscriptionInitialPosition=Earliest"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster(
    etcd_endpoint: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[MessagingCluster]:
    async with module_cluster(etcd_endpoint, tmp_path_factory.mktemp("shared")) as made:
        yield made


def text(frame: dict[str, object]) -> str:
    payload = frame["payload"]
    assert isinstance(payload, str)
    return unb64(payload).decode()


def auto_ack(collector: Collector) -> None:
    """Ack every message as it is read."""

    def on_message(c: Collector, frame: dict[str, object]) -> None:
        asyncio.get_running_loop().create_task(c.ack(str(frame["messageId"])))

    collector.on_message = on_message


async def test_round_robin_over_consumers(cluster: MessagingCluster) -> None:
    topic = "shared-rr"
    consumers = [
        await Collector.connect(consumer_url(cluster.ws(i % 2), topic, "s", f"{SHARED}&consumerName=c{i}"))
        for i in range(3)
    ]
    for c in consumers:
        auto_ack(c)
    sent = [f"m{i}" for i in range(60)]
    await publish_each(cluster.ws(0), topic, sent)
    await eventually(lambda: sum(len(c.messages) for c in consumers) >= 60, 15)
    await asyncio.sleep(0.3)
    got = [text(m) for c in consumers for m in c.messages]
    assert sorted(got) == sorted(sent)  # each message to exactly one consumer
    counts = [len(c.messages) for c in consumers]
    assert min(counts) >= 10, counts  # spread, not all to one
    assert all(m["redeliveryCount"] == 0 for c in consumers for m in c.messages)
    for c in consumers:
        await c.close()


async def test_unacked_messages_of_a_closed_consumer_go_to_another(cluster: MessagingCluster) -> None:
    topic = "shared-disconnect"
    holder = await Collector.connect(consumer_url(cluster.ws(0), topic, "s", f"{SHARED}&consumerName=holder"))
    acker = await Collector.connect(consumer_url(cluster.ws(1), topic, "s", f"{SHARED}&consumerName=acker"))
    auto_ack(acker)
    sent = [f"m{i}" for i in range(30)]
    await publish_each(cluster.ws(0), topic, sent)
    await eventually(lambda: len(holder.messages) + len(acker.messages) >= 30, 15)
    held = [text(m) for m in holder.messages]
    assert held, "the holder got nothing: no round robin"
    await holder.close()  # never acked anything
    await eventually(lambda: len(acker.messages) >= 30, 10)
    await asyncio.sleep(0.3)
    got = [text(m) for m in acker.messages]
    assert sorted(got) == sorted(sent)
    redelivered = {text(m): m["redeliveryCount"] for m in acker.messages[30 - len(held) :]}
    assert sorted(redelivered) == sorted(held)
    assert all(count >= 1 for count in redelivered.values()), redelivered
    # all acked: a new consumer of the subscription gets nothing
    await acker.close()
    late = await Collector.connect(consumer_url(cluster.ws(0), topic, "s", SHARED))
    assert await late.nothing_for(1.0)
    await late.close()


async def test_nack_redelivers_after_the_delay(cluster: MessagingCluster) -> None:
    topic = "shared-nack"
    query = f"{SHARED}&negativeAckRedeliveryDelay=700"
    consumer = await Collector.connect(consumer_url(cluster.ws(1), topic, "s", query))
    await publish_each(cluster.ws(0), topic, ["x", "y"])
    await consumer.wait_messages(2)
    first = consumer.messages[0]
    await consumer.ack(consumer.messages[1]["messageId"])
    nacked_at = time.monotonic()
    await consumer.send({"type": "negativeAcknowledge", "messageId": first["messageId"]})
    await consumer.wait_messages(3, 5)
    elapsed = time.monotonic() - nacked_at
    again = consumer.messages[2]
    assert again["messageId"] == first["messageId"] and text(again) == "x"
    assert again["redeliveryCount"] == 1
    assert elapsed >= 0.6, elapsed  # not before the delay (small allowance for timer granularity)
    assert elapsed < 3.0, elapsed
    await consumer.ack(again["messageId"])
    assert await consumer.nothing_for(1.2)
    await consumer.close()


async def test_ack_timeout_redelivers_unacked_only(cluster: MessagingCluster) -> None:
    topic = "shared-ack-timeout"
    query = f"{SHARED}&ackTimeoutMillis=1000"
    consumer = await Collector.connect(consumer_url(cluster.ws(0), topic, "s", query))
    published_at = time.monotonic()  # the timer starts at delivery, after this
    await publish_each(cluster.ws(0), topic, ["keep", "drop"])
    await consumer.wait_messages(2)
    received_at = time.monotonic()  # after delivery: a slow test sees it late
    by_text = {text(m): m for m in consumer.messages}
    await consumer.ack(by_text["drop"]["messageId"])
    await consumer.wait_messages(3, 5)
    redelivered_at = time.monotonic()
    again = consumer.messages[2]
    assert text(again) == "keep" and again["redeliveryCount"] == 1
    assert again["messageId"] == by_text["keep"]["messageId"]
    not_before, within = redelivered_at - published_at, redelivered_at - received_at
    assert not_before >= 1.0 and within < 3.5, (not_before, within)
    await consumer.ack(again["messageId"])
    assert await consumer.nothing_for(1.6)  # acked: no further timeout redelivery
    assert [text(m) for m in consumer.messages] == ["keep", "drop", "keep"] or [
        text(m) for m in consumer.messages
    ] == ["drop", "keep", "keep"]
    await consumer.close()


@pytest.mark.parametrize("custom", [False, True], ids=["default-dlq", "deadLetterTopic"])
async def test_dead_letter_after_max_redeliveries(cluster: MessagingCluster, custom: bool) -> None:
    topic = f"shared-dlq-{int(custom)}"
    sub = "work"
    dlq = f"{topic}-custom-dead" if custom else f"{topic}-{sub}-DLQ"
    dlq_consumer = await Collector.connect(
        consumer_url(
            cluster.ws(1), dlq, "inspect", "subscriptionType=Shared&subscriptionInitialPosition=Earliest"
        )
    )
    query = f"{SHARED}&maxRedeliverCount=2&negativeAckRedeliveryDelay=200"
    if custom:
        query += f"&deadLetterTopic=persistent://public/default/{dlq}"
    consumer = await Collector.connect(consumer_url(cluster.ws(0), topic, sub, query))
    ids = await publish_each(cluster.ws(0), topic, ["poison", "fine"])
    counts: Counter[str] = Counter()
    seen: list[int] = []

    async def nack_poison() -> None:
        handled = 0
        while True:
            await consumer.wait_messages(handled + 1, 10)
            frame = consumer.messages[handled]
            handled += 1
            if text(frame) == "fine":
                await consumer.ack(str(frame["messageId"]))
                continue
            counts["poison"] += 1
            seen.append(int(frame["redeliveryCount"]))
            await consumer.send({"type": "negativeAcknowledge", "messageId": frame["messageId"]})

    task = asyncio.get_running_loop().create_task(nack_poison())
    try:
        await dlq_consumer.wait_messages(1, 15)
        assert await consumer.nothing_for(1.0)  # not redelivered once dead-lettered
    finally:
        task.cancel()
    assert counts["poison"] == 3, counts  # delivered maxRedeliverCount + 1 times
    assert seen == [0, 1, 2]
    dead = dlq_consumer.messages[0]
    assert text(dead) == "poison"
    assert dead["properties"].get("REAL_TOPIC") == f"persistent://public/default/{topic}"
    assert dead["properties"].get("ORIGIN_MESSAGE_ID") == str(decode_id(ids[0]))  # "L:E:P" as Pulsar
    assert await dlq_consumer.nothing_for(0.5)  # exactly one copy
    await consumer.close()
    # the dead-lettered message was acked on the original subscription
    again = await Collector.connect(consumer_url(cluster.ws(1), topic, sub, SHARED))
    assert await again.nothing_for(1.0)
    await again.close()
    await dlq_consumer.close()
