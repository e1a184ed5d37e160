"""Admin skip and reset-cursor-by-time on a subscription, through the gateway that does not own it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import httpx
import pytest
from clusters import MessagingCluster
from wsclient import Consumer, Producer, unb64

pytestmark = pytest.mark.component
BASE = "/admin/v2/persistent/public/default/adm/subscription/s"


async def test_skip_and_reset_cursor_by_publish_time(
    messaging_cluster: Callable[..., Awaitable[MessagingCluster]],
) -> None:
    cluster = await messaging_cluster(gateways=2)
    first = await Consumer.connect(cluster.ws(0), "adm", "s", "subscriptionType=Exclusive")
    await first.close()  # the subscription exists, at the end of the (empty) topic
    producer = await Producer.connect(cluster.ws(0), "adm")
    for i in range(5):
        assert (await producer.send(f"early{i}"))["result"] == "ok"
    await asyncio.sleep(0.01)  # publish times are whole ms and an ack can come back within one:
    middle = int(time.time() * 1000)  # keep early4's publish time strictly before "middle"
    await asyncio.sleep(0.05)
    for i in range(5):
        assert (await producer.send(f"late{i}"))["result"] == "ok"
    async with httpx.AsyncClient() as http:
        for url in cluster.urls:  # whichever gateway owns the topic, both answer
            response = await http.post(f"{url}{BASE}/skip/0")
            assert response.status_code == 204, response.text
        response = await http.post(f"{cluster.urls[1]}{BASE}/skip/3")
        assert response.status_code == 204, response.text
        missing = await http.post(
            f"{cluster.urls[1]}/admin/v2/persistent/public/default/adm/subscription/nope/skip/1"
        )
        assert missing.status_code == 404
    consumer = await Consumer.connect(cluster.ws(1), "adm", "s", "subscriptionType=Exclusive")
    got = [unb64(f["payload"]).decode() for f in await consumer.receive_n(7, ack=False)]
    assert got == ["early3", "early4"] + [f"late{i}" for i in range(5)]
    await consumer.close()
    async with httpx.AsyncClient() as http:
        response = await http.post(f"{cluster.urls[0]}{BASE}/resetcursor/{middle}")
        assert response.status_code == 204, response.text
    again = await Consumer.connect(cluster.ws(0), "adm", "s", "subscriptionType=Exclusive")
    got = [unb64(f["payload"]).decode() for f in await again.receive_n(5)]
    assert got == [f"late{i}" for i in range(5)]
    assert await again.nothing_for(0.5)
    await again.close()
    await producer.close()
