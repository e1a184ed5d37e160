"""A partitioned topic whose partition owner is dead: every path answers 503, retryable.

Real etcd, 3 storage nodes, 2 gateway processes. The owner of the partitions is
started with a long lease, so after its kill -9 it stays registered as their
owner for a while and the other gateway's fan-out meets a refused connection.
The WebSocket fan-out (a producer session on the partitioned topic), the REST
publish and the partitioned stats must all answer 503 (the plain relay does):
the WebSocket fan-out answered 500 "Connection refused".
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import httpx
import pytest
import websockets
from clusters import MessagingCluster
from websockets.exceptions import InvalidStatus

pytestmark = pytest.mark.component

TOPIC = "persistent/public/default/fanout-dead-owner"


async def test_fan_out_to_a_dead_owner_answers_503(
    messaging_cluster: Callable[..., Awaitable[MessagingCluster]],
) -> None:
    cluster = await messaging_cluster(gateways=0)
    owner = await cluster.add_gateway("--lease-ttl", "60")  # stays "the owner" after its death
    async with httpx.AsyncClient(timeout=20.0) as http:
        created = await http.put(f"{owner.http_url}/admin/v2/{TOPIC}/partitions", json=2)
        assert created.status_code in (200, 204), created.text
        for index in range(2):  # both partitions loaded on the owner
            url = f"{owner.http_url}/topics/{TOPIC}-partition-{index}"
            sent = await http.post(url, json={"messages": [{"payload": "eA=="}]})
            assert sent.status_code == 200, sent.text
        front = await cluster.add_gateway()
        assert owner.proc is not None
        owner.kill9()

        with pytest.raises(InvalidStatus) as refused:
            await websockets.connect(f"{cluster.ws(1)}/ws/v2/producer/{TOPIC}", open_timeout=20)
        response = refused.value.response
        print(f"WebSocket fan-out: {response.status_code} {response.body!r}")
        assert response.status_code == 503, response.body
        assert b"owner_unreachable" in (response.body or b"")

        rest = await http.post(f"{front.http_url}/topics/{TOPIC}", json={"messages": [{"payload": "eA=="}]})
        print(f"REST publish: {rest.status_code} {rest.text}")
        assert rest.status_code == 503, rest.text
        stats = await http.get(f"{front.http_url}/admin/v2/{TOPIC}/partitioned-stats")
        print(f"partitioned stats: {stats.status_code} {stats.text}")
        assert stats.status_code == 503, stats.text
