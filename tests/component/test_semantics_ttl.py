"""Message TTL and retention with real clients on real gateways.

Shows (docs/compatibility.md §4.11; docs/architecture.md §4): with ``messageTTL`` set on the
namespace (admin API), unacknowledged messages older than the TTL are
expired from every subscription on the topic's maintenance tick: the
subscription's persisted mark-delete moves past them (backlog 0) and a
consumer that reconnects gets none of them - but it does get messages
younger than the TTL. Retention: once all subscriptions acked everything,
ledgers outside the namespace's retention are deleted and ledgers inside it
stay readable (a control with retention 0 fails the kept-ledgers check).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import orjson
import pytest
import pytest_asyncio
from clusters import MessagingCluster
from wsclient import Collector, Producer, consumer_url, decode_id, module_cluster, reader_url, unb64

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


# ---------------------------------------------------------------- retention


async def ledger_ids(http: httpx.AsyncClient, base: str, topic: str) -> list[int]:
    response = await http.get(f"{base}/admin/v2/persistent/{topic}/internalStats")
    assert response.status_code == 200, response.text
    return [int(ledger["ledgerId"]) for ledger in response.json()["ledgers"]]


async def three_ledgers_consumed(
    cluster: MessagingCluster, http: httpx.AsyncClient, namespace: str
) -> list[int]:
    """Subscribe to ``namespace``/t, publish 3 x 5 messages with an unload between (each
    takeover closes the ledger and opens a new one), then consume and ack all 15."""
    topic = f"{namespace}/t"
    first = await Collector.connect(consumer_url(cluster.ws(0), "t", "s", SHARED, namespace))
    await first.close()
    for phase in range(3):
        producer = await Producer.connect(cluster.ws(phase % 2), "t", namespace=namespace)
        for i in range(5):
            reply = await producer.send(f"p{phase}-{i}")
            assert reply["result"] == "ok", reply
        await producer.close()
        if phase < 2:
            response = await http.put(f"{cluster.urls[0]}/admin/v2/persistent/{topic}/unload")
            assert response.status_code == 204, response.text
    ledgers = await ledger_ids(http, cluster.urls[0], topic)
    assert len(ledgers) >= 3, ledgers
    consumer = await Collector.connect(consumer_url(cluster.ws(1), "t", "s", SHARED, namespace))
    for message in await consumer.wait_messages(15):
        await consumer.ack(message["messageId"])
    assert await consumer.nothing_for(0.5)
    await consumer.close()
    return ledgers


async def read_all(cluster: MessagingCluster, namespace: str) -> list[str]:
    reader = await Collector.connect(reader_url(cluster.ws(0), "t", "messageId=earliest", namespace))
    while not await reader.nothing_for(1.5):  # until the reader has gone quiet
        pass
    await reader.close()
    return [unb64(m["payload"]).decode() for m in reader.messages]


async def test_retention_keeps_consumed_ledgers_and_none_trims_them(cluster: MessagingCluster) -> None:
    """Namespace retention (docs/compatibility.md §4.11) with real processes: once every
    subscription has acked everything, ledgers outside retention are deleted
    (a reader from the earliest message finds only the open ledger's messages),
    and ledgers inside it stay readable. The kept namespace is checked after the
    trimmed one was seen trimmed, so trimming had its chance there too."""
    async with httpx.AsyncClient(timeout=10) as http:
        admin = f"{cluster.urls[0]}/admin/v2/namespaces/public"
        for ns in ("ret-none", "ret-keep"):
            assert (await http.put(f"{admin}/{ns}")).status_code == 204
        keep = {"retentionTimeInMinutes": 60, "retentionSizeInMB": -1}
        assert (await http.post(f"{admin}/ret-keep/retention", json=keep)).status_code == 204
        await asyncio.sleep(2.5)  # gateways re-read namespace policies every second

        trimmed_topic, kept_topic = "public/ret-none/t", "public/ret-keep/t"
        trimmed = await three_ledgers_consumed(cluster, http, "public/ret-none")
        kept = await three_ledgers_consumed(cluster, http, "public/ret-keep")

        deadline = asyncio.get_running_loop().time() + 15
        while (now := await ledger_ids(http, cluster.urls[1], trimmed_topic)) != trimmed[-1:]:
            assert asyncio.get_running_loop().time() < deadline, (now, trimmed)
            await asyncio.sleep(0.25)
        await asyncio.sleep(2.0)  # a few more maintenance ticks for the kept topic
        assert await ledger_ids(http, cluster.urls[1], kept_topic) == kept

    assert await read_all(cluster, "public/ret-none") == [f"p2-{i}" for i in range(5)]
    assert await read_all(cluster, "public/ret-keep") == [f"p{p}-{i}" for p in range(3) for i in range(5)]
