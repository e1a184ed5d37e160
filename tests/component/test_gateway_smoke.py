"""Smoke: 2 real gateways, 3 real nodes: publish on one, consume through the other."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import httpx
import pytest
from clusters import MessagingCluster
from wsclient import Consumer, Producer, unb64

pytestmark = pytest.mark.component


async def test_publish_on_one_gateway_consume_through_the_other(
    messaging_cluster: Callable[..., Awaitable[MessagingCluster]],
) -> None:
    cluster = await messaging_cluster(gateways=2)
    consumer = await Consumer.connect(cluster.ws(1), "smoke", "s", "subscriptionType=Shared")
    producer = await Producer.connect(cluster.ws(0), "smoke")
    replies = [await producer.send(f"m{i}") for i in range(20)]
    assert all(r["result"] == "ok" for r in replies)
    got = await consumer.receive_n(20)
    assert sorted(unb64(f["payload"]) for f in got) == sorted(f"m{i}".encode() for i in range(20))
    async with httpx.AsyncClient() as http:
        response = await http.post(
            f"{cluster.urls[1]}/topics/persistent/public/default/smoke", content=b"raw"
        )
        assert response.status_code == 200, response.text
        assert response.json()["errorCode"] == 0
    frame = await consumer.receive()
    assert unb64(frame["payload"]) == b"raw"
    async with httpx.AsyncClient() as http:
        texts = [(await http.get(f"{url}/metrics")).text for url in cluster.urls]
    totals = [
        float(line.split()[-1])
        for text in texts
        for line in text.splitlines()
        if line.startswith("folio_gateway_messages_in_total")
    ]
    assert sum(totals) == 21, texts  # counted once, on the owner
    await producer.close()
    await consumer.close()
