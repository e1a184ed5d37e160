"""Partitioned topics over WebSocket: key routing, routing modes, fan-in consume, acks per partition."""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable

import httpx
import pytest
from clusters import MessagingCluster
from wsclient import Consumer, Producer, unb64

from storage.formats.key_routing import partition_of_key
from storage.formats.message_id import MessageId

pytestmark = pytest.mark.component


def partition(reply_id: str) -> int:
    return MessageId.from_bytes(base64.b64decode(reply_id)).partition


async def test_partitioned_topic_routing_and_fan_in(
    messaging_cluster: Callable[..., Awaitable[MessagingCluster]],
) -> None:
    cluster = await messaging_cluster(gateways=2)
    async with httpx.AsyncClient() as http:
        created = await http.put(
            f"{cluster.urls[0]}/admin/v2/persistent/public/default/pt/partitions", json=3
        )
        assert created.status_code in (200, 204), created.text
    consumer = await Consumer.connect(
        cluster.ws(1), "pt", "s", "subscriptionType=Shared&receiverQueueSize=500"
    )
    keyed = await Producer.connect(cluster.ws(0), "pt")
    for i in range(30):
        key = f"key-{i % 6}"
        reply = await keyed.send(f"k{i}", key=key)
        assert reply["result"] == "ok", reply
        assert partition(reply["messageId"]) == partition_of_key(key, 3, "JavaStringHash")
    rr = await Producer.connect(cluster.ws(1), "pt", "messageRoutingMode=RoundRobinPartition")
    spread = {partition((await rr.send(f"r{i}"))["messageId"]) for i in range(9)}
    assert spread == {0, 1, 2}
    single = await Producer.connect(cluster.ws(0), "pt")
    assert len({partition((await single.send(f"s{i}"))["messageId"]) for i in range(6)}) == 1
    got = await consumer.receive_n(45)
    payloads = sorted(unb64(f["payload"]).decode() for f in got)
    expected = sorted(
        [f"k{i}" for i in range(30)] + [f"r{i}" for i in range(9)] + [f"s{i}" for i in range(6)]
    )
    assert payloads == expected
    await consumer.close()
    again = await Consumer.connect(cluster.ws(0), "pt", "s", "subscriptionType=Shared")
    assert await again.nothing_for(1.5), "acked messages came back"
    for client in (keyed, rr, single, again):
        await client.close()
