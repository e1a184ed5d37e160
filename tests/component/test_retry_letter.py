"""Retry-letter topic over WebSocket: reconsumeLater acks, re-delivers on the RETRY topic, then DLQ."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import pytest
from clusters import MessagingCluster
from wsclient import Consumer, Producer, unb64

pytestmark = pytest.mark.component


async def test_reconsume_later_goes_to_retry_topic_with_delay_then_dlq(
    messaging_cluster: Callable[..., Awaitable[MessagingCluster]],
) -> None:
    cluster = await messaging_cluster(gateways=1)
    query = "subscriptionType=Shared&maxRedeliverCount=2"
    main = await Consumer.connect(cluster.ws(), "orders", "s", query)
    retry = await Consumer.connect(
        cluster.ws(), "orders-s-RETRY", "s", query + "&subscriptionInitialPosition=Earliest"
    )
    dlq = await Consumer.connect(cluster.ws(), "orders-s-DLQ", "d", "subscriptionInitialPosition=Earliest")
    producer = await Producer.connect(cluster.ws(), "orders")
    assert (await producer.send("job-1"))["result"] == "ok"
    first = await main.receive()
    sent = time.monotonic()
    await main.send({"type": "reconsumeLater", "messageId": first["messageId"], "delayMs": 700})
    again = await retry.receive(10)
    assert time.monotonic() - sent >= 0.6  # delayed delivery on the retry topic
    assert unb64(again["payload"]) == b"job-1"
    assert again["properties"]["RECONSUMETIMES"] == "1"
    assert again["properties"]["REAL_TOPIC"] == "persistent://public/default/orders"
    await retry.send({"type": "reconsumeLater", "messageId": again["messageId"], "delayMs": 0})
    third = await retry.receive(10)
    assert third["properties"]["RECONSUMETIMES"] == "2"
    await retry.send({"type": "reconsumeLater", "messageId": third["messageId"], "delayMs": 0})
    dead = await dlq.receive(10)  # past maxRedeliverCount: dead-lettered, not retried
    assert unb64(dead["payload"]) == b"job-1"
    assert await main.nothing_for(1.0)  # the original was acked
    assert await retry.nothing_for(0.5)
    for client in (main, retry, dlq, producer):
        await client.close()
