"""Partitioned topics with real clients on real gateways.

Shows (docs/compatibility.md §1.5, §2.2, §3.2; docs/architecture.md §4): a topic created with 3
partitions through the admin API; a REST publish routes a keyed message to
partition ``(String.hashCode(key) & 0x7FFFFFFF) mod N`` (the Java client's
default ``JavaStringHash`` router - same key, same partition) and spreads
messages without a key round robin; each partition ``<topic>-partition-N``
is an ordinary topic a WebSocket consumer reads (ids carry ``P``); a
WebSocket producer on the partitioned topic routes keys the same way.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import AsyncIterator

import httpx
import pytest
import pytest_asyncio
from clusters import MessagingCluster
from wsclient import Collector, consumer_url, decode_id, module_cluster, publish_pipelined, unb64

from storage.formats.message_id import MessageId

pytestmark = [pytest.mark.component, pytest.mark.asyncio(loop_scope="module")]

PARTITIONS = 3
KEYS = [f"customer-{i}" for i in range(6)]  # several have a negative String.hashCode
EARLIEST = "subscriptionType=Exclusive&subscriptionInitialPosition=Earliest"


def java_partition(key: str, partitions: int) -> int:
    """Pulsar's Java client: ``signSafeMod(key.hashCode() & Integer.MAX_VALUE, n)``."""
    h = 0
    for unit in (
        int.from_bytes(key.encode("utf-16-be")[i : i + 2], "big") for i in range(0, 2 * len(key), 2)
    ):
        h = (31 * h + unit) & 0xFFFFFFFF
    return (h & 0x7FFFFFFF) % partitions


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster(
    etcd_endpoint: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[MessagingCluster]:
    async with module_cluster(etcd_endpoint, tmp_path_factory.mktemp("partitioned")) as made:
        yield made


async def create_partitioned(cluster: MessagingCluster, topic: str) -> None:
    async with httpx.AsyncClient(timeout=10) as http:
        url = f"{cluster.urls[0]}/admin/v2/persistent/public/default/{topic}/partitions"
        response = await http.put(url, json=PARTITIONS)
        assert response.status_code == 204, response.text
        got = await http.get(f"{cluster.urls[1]}/admin/v2/persistent/public/default/{topic}/partitions")
        assert got.json() == {"partitions": PARTITIONS}


async def test_rest_publish_routes_by_key_and_round_robin(cluster: MessagingCluster) -> None:
    topic = "part-rest"
    await create_partitioned(cluster, topic)
    keyed = [{"payload": f"{k}#{n}", "key": k} for n in range(5) for k in KEYS]
    unkeyed = [{"payload": f"free#{n}"} for n in range(30)]
    async with httpx.AsyncClient(timeout=20) as http:
        url = f"{cluster.urls[1]}/topics/persistent/public/default/{topic}"
        keyed_reply = await http.post(url, json={"messages": keyed})
        unkeyed_reply = await http.post(url, json={"messages": unkeyed})
    assert keyed_reply.status_code == unkeyed_reply.status_code == 200
    keyed_ids = [MessageId.parse(r["messageId"]) for r in keyed_reply.json()["messagePublishResults"]]
    unkeyed_ids = [MessageId.parse(r["messageId"]) for r in unkeyed_reply.json()["messagePublishResults"]]
    assert all(r["errorCode"] == 0 for r in keyed_reply.json()["messagePublishResults"])
    assert all(i.ledger_id >= 0 and 0 <= i.partition < PARTITIONS for i in keyed_ids + unkeyed_ids)

    by_key: dict[str, set[int]] = defaultdict(set)
    for message, mid in zip(keyed, keyed_ids, strict=True):
        by_key[message["key"]].add(mid.partition)
    assert all(len(parts) == 1 for parts in by_key.values()), by_key  # same key, same partition
    assert {k: p.pop() for k, p in by_key.items()} == {k: java_partition(k, PARTITIONS) for k in KEYS}

    parts = [i.partition for i in unkeyed_ids]
    assert all(b == (a + 1) % PARTITIONS for a, b in itertools.pairwise(parts)), parts
    assert sorted(parts.count(p) for p in range(PARTITIONS)) == [10, 10, 10]

    # each partition is a topic of its own: a WebSocket consumer reads exactly its messages
    sent_to: dict[int, list[str]] = defaultdict(list)
    for message, mid in zip(keyed + unkeyed, keyed_ids + unkeyed_ids, strict=True):
        sent_to[mid.partition].append(str(message["payload"]))
    for p in range(PARTITIONS):
        consumer = await Collector.connect(
            consumer_url(cluster.ws(p % 2), f"{topic}-partition-{p}", "s", EARLIEST)
        )
        await consumer.wait_messages(len(sent_to[p]))
        assert await consumer.nothing_for(0.3)
        assert [unb64(m["payload"]).decode() for m in consumer.messages] == sent_to[p]
        assert {decode_id(m["messageId"]).partition for m in consumer.messages} == {p}
        for m in consumer.messages:
            await consumer.ack(m["messageId"])
        await consumer.close()


async def test_websocket_producer_on_a_partitioned_topic_routes_keys_alike(cluster: MessagingCluster) -> None:
    topic = "part-ws"
    await create_partitioned(cluster, topic)
    messages = [{"payload": f"{k}#{n}", "key": k} for n in range(3) for k in KEYS]
    replies = await publish_pipelined(cluster.ws(0), topic, messages)
    assert all(r["result"] == "ok" for r in replies), replies
    for message, reply in zip(messages, replies, strict=True):
        assert decode_id(reply["messageId"]).partition == java_partition(str(message["key"]), PARTITIONS)
    # a consumer of the partitioned topic itself sees every partition's messages, ids per partition
    consumer = await Collector.connect(consumer_url(cluster.ws(1), topic, "all", EARLIEST))
    await consumer.wait_messages(len(messages))
    got = sorted(unb64(m["payload"]).decode() for m in consumer.messages)
    assert got == sorted(str(m["payload"]) for m in messages)
    for m in consumer.messages:
        assert decode_id(m["messageId"]).partition == java_partition(m["key"], PARTITIONS)
    # per key the order is kept (one partition per key)
    order: dict[str, list[int]] = defaultdict(list)
    for m in consumer.messages:
        order[m["key"]].append(int(unb64(m["payload"]).decode().split("#")[1]))
    assert all(v == [0, 1, 2] for v in order.values()), order
    await consumer.close()
