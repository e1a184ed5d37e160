"""Conformance: WebSocket handshake statuses for each kind of error (docs/compatibility.md §1.4)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import httpx
import orjson
import pytest
import websockets
from clusters import MessagingCluster
from websockets.exceptions import InvalidStatus

pytestmark = pytest.mark.component


async def refused(url: str) -> tuple[int, dict[str, str]]:
    with pytest.raises(InvalidStatus) as info:
        async with websockets.connect(url, open_timeout=15):
            pass
    response = info.value.response
    return response.status_code, orjson.loads(response.body or b"{}")


async def test_handshake_statuses(messaging_cluster: Callable[..., Awaitable[MessagingCluster]]) -> None:
    cluster = await messaging_cluster(gateways=2)
    ws0, ws1 = cluster.ws(0), cluster.ws(1)
    base = "persistent/public/default"

    status, body = await refused(f"{ws0}/ws/v2/consumer/{base}/t/s?subscriptionType=Foo")
    assert status == 400 and body["reason"].startswith("Invalid query params: "), body
    assert (await refused(f"{ws0}/ws/v2/consumer/{base}/t/s?receiverQueueSize=abc"))[0] == 400
    assert (await refused(f"{ws0}/ws/v2/reader/{base}/t?messageId=not-an-id"))[0] == 400
    assert (await refused(f"{ws0}/ws/v2/producer/{base}/t?messageRoutingMode=Nope"))[0] == 400
    assert (await refused(f"{ws0}/ws/v2/producer/persistent/public/default/bad%20name"))[0] == 400
    assert (await refused(f"{ws0}/ws/v2/producer/other-domain/public/default/t"))[0] == 400

    # unknown namespace: 404 (through either gateway)
    for ws in (ws0, ws1):
        status, body = await refused(f"{ws}/ws/v2/producer/persistent/public/nosuchns/t")
        assert status == 404, body

    # auto-creation off: a missing topic is 404, an existing one is served
    async with httpx.AsyncClient() as http:
        off = {"allowAutoTopicCreation": False, "topicType": "non-partitioned"}
        response = await http.put(f"{cluster.urls[0]}/admin/v2/namespaces/public/strict", json={})
        assert response.status_code in (200, 204), response.text
        response = await http.post(
            f"{cluster.urls[0]}/admin/v2/namespaces/public/strict/autoTopicCreation", json=off
        )
        assert response.status_code in (200, 204), response.text
        response = await http.put(f"{cluster.urls[0]}/admin/v2/persistent/public/strict/exists")
        assert response.status_code in (200, 204), response.text
    assert (await refused(f"{ws1}/ws/v2/producer/persistent/public/strict/missing"))[0] == 404
    async with websockets.connect(f"{ws1}/ws/v2/producer/persistent/public/strict/exists", open_timeout=15):
        pass

    # conflicts: 409 (Exclusive taken, producer name taken), through the other gateway too
    async with websockets.connect(f"{ws0}/ws/v2/consumer/{base}/busy/s?subscriptionType=Exclusive"):
        assert (await refused(f"{ws1}/ws/v2/consumer/{base}/busy/s?subscriptionType=Exclusive"))[0] == 409
        assert (await refused(f"{ws0}/ws/v2/consumer/{base}/busy/s?subscriptionType=Shared"))[0] == 409
    async with websockets.connect(f"{ws0}/ws/v2/producer/{base}/busy?producerName=p1"):
        status, body = await refused(f"{ws1}/ws/v2/producer/{base}/busy?producerName=p1")
        assert status == 409 and "p1" in body["reason"], body
    async with websockets.connect(
        f"{ws0}/ws/v2/consumer/{base}/ks/s?subscriptionType=Key_Shared&keySharedMode=STICKY&stickyRanges=0-100"
    ):
        sticky = "subscriptionType=Key_Shared&keySharedMode=STICKY&stickyRanges=50-200"
        url = f"{ws1}/ws/v2/consumer/{base}/ks/s?{sticky}"
        assert (await refused(url))[0] == 409
