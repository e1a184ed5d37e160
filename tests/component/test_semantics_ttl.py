"""Message TTL with real clients on real gateways.

Shows (pulsar-api.md §4.11; DESIGN.md §4): with ``messageTTL`` set on the
namespace (admin API), unacknowledged messages older than the TTL are
expired from every subscription on the topic's maintenance tick: the
subscription's persisted mark-delete moves past them (backlog 0) and a
consumer that reconnects gets none of them - but it does get messages
younger than the TTL.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import orjson
import pytest
import pytest_asyncio
from clusters import MessagingCluster
from wsclient import Collector, Producer, consumer_url, decode_id, module_cluster, unb64

from coordination import keys
from gateway.names import TopicName

pytestmark = [pytest.mark.component, pytest.mark.asyncio(loop_scope="module")]

TTL_S = 2
SHARED = "subscriptionType=Shared&subscriptionInitialPosition=Earliest"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster(
    etcd_endpoint: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[MessagingCluster]:
    async with module_cluster(etcd_endpoint, tmp_path_factory.mktemp("ttl")) as made:
        async with httpx.AsyncClient(timeout=10) as http:
            ns = f"{made.urls[1]}/admin/v2/namespaces/public/default"
            response = await http.post(f"{ns}/messageTTL", json=TTL_S)
            assert response.status_code == 204, response.text
            assert (await http.get(f"{ns}/messageTTL")).json() == TTL_S
        await asyncio.sleep(2.5)  # gateways re-read namespace policies every second
        yield made


async def mark_delete(cluster: MessagingCluster, topic: str, sub: str) -> tuple[int, int] | None:
    store = cluster.ledgers.stores[0] if cluster.ledgers.stores else await cluster.ledgers.store()
    item = await store.get(keys.cursor(TopicName.parse(topic).path, sub))
    if item is None:
        return None
    ledger, entry = orjson.loads(item.value)["cursor"]["markDelete"]
    return int(ledger), int(entry)


async def test_unacked_messages_expire_after_the_ttl(cluster: MessagingCluster) -> None:
    topic = "ttl-expire"
    # create the subscription, then leave it without a consumer
    first = await Collector.connect(consumer_url(cluster.ws(0), topic, "s", SHARED))
    await first.close()
    producer = await Producer.connect(cluster.ws(1), topic)
    old = [await producer.send(f"old{i}") for i in range(10)]
    last_old = decode_id(old[-1]["messageId"])
    # messages younger than the TTL are delivered: a consumer that comes at once gets them all
    peek = await Collector.connect(consumer_url(cluster.ws(1), topic, "peek", SHARED))
    await peek.wait_messages(10)
    await peek.close()

    # the TTL runs on the maintenance tick: within TTL + a few ticks the cursor is past them
    target = (last_old.ledger_id, last_old.entry_id)
    deadline = asyncio.get_running_loop().time() + TTL_S + 5
    while (position := await mark_delete(cluster, topic, "s")) != target:
        assert asyncio.get_running_loop().time() < deadline, (position, target)
        await asyncio.sleep(0.2)

    again = await Collector.connect(consumer_url(cluster.ws(0), topic, "s", SHARED))
    assert await again.nothing_for(1.0)  # nothing old
    await producer.send("young")
    await again.wait_messages(1)
    assert [unb64(m["payload"]).decode() for m in again.messages] == ["young"]
    await again.ack(again.messages[0]["messageId"])
    await again.close()
    await producer.close()
