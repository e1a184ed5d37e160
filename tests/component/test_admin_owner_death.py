"""Admin calls served through a gateway whose topic owner just died: a clear,
retriable 503 while the dead owner's lease is still alive (never a 500), and the
right answer once the surviving gateway has taken the topic over."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Awaitable, Callable

import httpx
import pytest
from clusters import MessagingCluster

pytestmark = pytest.mark.component

TOPIC = "owner-dies"
P = f"/admin/v2/persistent/public/default/{TOPIC}"


async def test_stats_through_the_survivor_are_503_then_served(
    messaging_cluster: Callable[..., Awaitable[MessagingCluster]],
) -> None:
    cluster = await messaging_cluster(gateways=2)
    async with httpx.AsyncClient(timeout=20) as http:
        created = await http.put(f"{cluster.urls[0]}{P}/subscription/work")  # before the publish
        assert created.status_code in (200, 204), created.text
        body = {"messages": [{"payload": f"m{i}"} for i in range(5)]}  # text payloads, as Pulsar REST
        published = await http.post(f"{cluster.urls[0]}/topics/persistent/public/default/{TOPIC}", json=body)
        assert published.status_code == 200, published.text
        lookup = (
            await http.get(f"{cluster.urls[0]}/lookup/v2/topic/persistent/public/default/{TOPIC}")
        ).json()
        owner = next(i for i, url in enumerate(cluster.urls) if url == lookup["httpUrl"])
        bundle = (
            await http.get(f"{cluster.urls[1]}/lookup/v2/topic/persistent/public/default/{TOPIC}/bundle")
        ).json()
        boundaries = (await http.get(f"{cluster.urls[1]}/admin/v2/namespaces/public/default/bundles")).json()
        low, high = bundle.split("_")
        assert boundaries["boundaries"].index(high) == boundaries["boundaries"].index(low) + 1
        survivor = cluster.urls[1 - owner]
        cluster.gateways[owner].kill9()

        statuses: list[int] = []
        deadline = asyncio.get_running_loop().time() + 30
        while True:
            got = await http.get(f"{survivor}{P}/stats")
            statuses.append(got.status_code)
            if got.status_code == 200:
                break
            assert got.status_code == 503, got.text
            assert set(got.json()) == {"reason", "code"}
            assert asyncio.get_running_loop().time() < deadline, statuses
            await asyncio.sleep(0.1)
        assert statuses[0] == 503, statuses  # the lease outlives the process by seconds
        assert got.json()["msgInCounter"] == 0  # loaded anew by the survivor: counters restart
        browse = (await http.get(f"{survivor}{P}/messages", params={"from": "earliest"})).json()
        assert [base64.b64decode(m["payload"]) for m in browse["messages"]] == [b"m%d" % i for i in range(5)]
        # the five share one entry of a ledger closed by recovery: counted in messages again
        while True:
            stats = (await http.get(f"{survivor}{P}/stats")).json()
            browse = (await http.get(f"{survivor}{P}/messages", params={"offset": 3})).json()
            counts = (stats["subscriptions"]["work"]["msgBacklog"], browse["total"], len(browse["messages"]))
            if counts == (5, 5, 2):
                break
            assert asyncio.get_running_loop().time() < deadline, counts
            await asyncio.sleep(0.1)
