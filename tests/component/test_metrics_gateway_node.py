"""Prometheus ``/metrics`` of real gateways and storage nodes (docs/metrics.md).

A real cluster (etcd, 3 storage nodes, 2 gateways). Publishing over WebSocket
(single and batch frames) and REST, with a WebSocket consumer and an HTTP
consumer open, must show on the owner gateway: a populated publish-latency
histogram per API (count = requests, not messages), session gauges per type,
per-topic counters, backlog and bundles owned. A ledger written, recovered,
read back and deleted through the storage client must show on the nodes:
journal sync histogram, adds, ledger ops (create/fence/delete), recovery adds
and the read-latency histogram, all non-zero.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import httpx
import orjson
import pytest
from clusters import MessagingCluster
from failover_clients import owner_of
from prometheus_client.parser import text_string_to_metric_families
from wsclient import (
    TOPIC_PATH,
    Collector,
    Consumer,
    Producer,
    b64,
    consumer_url,
    publish_pipelined,
    reader_url,
    unb64,
)

from storage.client.api import LedgerClient

pytestmark = pytest.mark.component

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), -1.0)


async def scrape(http: httpx.AsyncClient, url: str) -> Samples:
    response = await http.get(url)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    return parse(response.text)


async def test_gateway_and_storage_node_metrics(
    messaging_cluster: Callable[..., Awaitable[MessagingCluster]],
) -> None:
    cluster = await messaging_cluster(gateways=2, nodes=3)
    topic = "metered"
    name = f"persistent://public/default/{topic}"
    owner = await owner_of(cluster.urls[0], topic)
    ws_owner = owner.replace("http://", "ws://", 1)
    consumer = await Consumer.connect(ws_owner, topic, "watch", "subscriptionType=Shared")
    producer = await Producer.connect(ws_owner, topic)
    for i in range(4):
        assert (await producer.send(f"single-{i}"))["result"] == "ok"
    batch = {"type": "batch", "context": "b", "messages": [{"payload": b64(f"b{i}")} for i in range(5)]}
    await producer.ws.send(orjson.dumps(batch).decode())
    reply = orjson.loads(await asyncio.wait_for(producer.ws.recv(), 15))
    assert reply["type"] == "batch" and [r["result"] for r in reply["results"]] == ["ok"] * 5, reply
    async with httpx.AsyncClient(timeout=20.0) as http:
        rest = await http.post(
            f"{owner}/topics/{TOPIC_PATH}/{topic}",
            json={"messages": [{"payload": b64("r1")}, {"payload": b64("r2")}]},
        )
        assert rest.status_code == 200, rest.text
        delivered = await consumer.receive_n(11, ack=False)
        assert len(delivered) == 11
        fetch = await http.get(f"{owner}/consume/{TOPIC_PATH}/{topic}/http-sub", params={"wait": 0})
        assert fetch.status_code == 200, fetch.text

        gw = await scrape(http, f"{owner}/metrics")
        # one observation per request: 4 single frames + 1 batch frame; 1 REST call
        assert value(gw, "folio_gateway_publish_latency_seconds_count", api="websocket") == 5
        assert value(gw, "folio_gateway_publish_latency_seconds_count", api="rest") == 1
        assert value(gw, "folio_gateway_publish_latency_seconds_sum", api="websocket") > 0
        assert value(gw, "folio_gateway_publish_latency_seconds_bucket", api="websocket", le="+Inf") == 5
        assert value(gw, "folio_gateway_sessions", type="websocket") >= 2  # producer + consumer
        assert value(gw, "folio_gateway_sessions", type="http") >= 1
        assert value(gw, "folio_gateway_bundles_owned") >= 1 and value(gw, "folio_gateway_topics") >= 1
        assert value(gw, "folio_gateway_topics_recounting") == 0  # no takeover here
        # the 11 messages' entries sit in the caches, well within the budget
        assert 0 < value(gw, "folio_gateway_cache_bytes") <= value(gw, "folio_gateway_cache_budget_bytes")
        assert value(gw, "folio_gateway_cache_reclaimed_bytes_total") == 0
        assert value(gw, "folio_topic_messages_in_total", topic=name) == 11
        assert value(gw, "folio_topic_bytes_in_total", topic=name) > 0
        assert value(gw, "folio_topic_messages_out_total", topic=name) >= 11
        assert value(gw, "folio_subscription_backlog", topic=name, subscription="watch") == 11  # none acked
        assert value(gw, "folio_topic_backlog_bytes", topic=name) > 0
        assert value(gw, "folio_topic_storage_bytes", topic=name) > 0
        other = next(u for u in cluster.urls if u != owner)
        elsewhere = await scrape(http, f"{other}/metrics")
        # only owners report a topic
        assert value(elsewhere, "folio_topic_messages_in_total", topic=name) == -1
        assert value(elsewhere, "folio_gateway_publish_latency_seconds_count", api="websocket") == 0

        await producer.close()
        await consumer.close()

        # storage side: a ledger the nodes see created, written, fenced (recovered), read and deleted
        client = LedgerClient(await cluster.ledgers.store(), seed=7)
        try:
            writer = await client.create(ensemble_size=3, write_quorum=3, ack_quorum=2)
            for i in range(10):
                await writer.append(f"entry-{i}".encode())
            reader = await asyncio.wait_for(client.open(writer.ledger_id, recover=True), 30)
            assert await reader.read_range(0, 9) == [f"entry-{i}".encode() for i in range(10)]
            assert await client.delete(writer.ledger_id)
        finally:
            await client.close()

        async def node_samples() -> list[Samples]:
            return [await scrape(http, f"http://{n.metrics_address}/metrics") for n in cluster.ledgers.nodes]

        deadline = asyncio.get_running_loop().time() + 30
        while True:  # deletes reach the nodes through their etcd watch
            nodes = await node_samples()
            if all(value(s, "folio_node_ledger_ops_total", op="delete") >= 1 for s in nodes):
                break
            assert asyncio.get_running_loop().time() < deadline, "nodes never saw the ledger deleted"
            await asyncio.sleep(0.2)
        for s in nodes:
            assert value(s, "folio_journal_sync_seconds_count") > 0
            assert value(s, "folio_journal_sync_seconds_sum") > 0
            assert value(s, "folio_node_adds_total") >= 10
            assert value(s, "folio_node_ledger_ops_total", op="create") >= 1
            assert value(s, "folio_node_ledger_ops_total", op="fence") >= 1
        assert sum(value(s, "folio_node_read_latency_seconds_count") for s in nodes) >= 1
        assert sum(value(s, "folio_node_reads_total") for s in nodes) >= 1
        # the writer's LAC lags its last entry, so recovery writes the tail back with recovery adds
        assert sum(value(s, "folio_node_recovery_adds_total") for s in nodes) >= 1


async def test_a_gateways_cached_entries_stay_within_its_cache_budget(
    messaging_cluster: Callable[..., Awaitable[MessagingCluster]],
) -> None:
    """A gateway started with ``--cache-mb 1`` takes 2.4 MB of entries on 4 topics and
    reads them back: its caches hold at most 1 MiB (the rest was reclaimed, oldest
    first), and every message still reads back intact (from the storage nodes)."""
    cluster = await messaging_cluster(gateways=0)
    await cluster.add_gateway("--cache-mb", "1")
    base = cluster.urls[0]
    topics = [f"budget{i}" for i in range(4)]
    payload = {t: [bytes([65 + i]) * 100_000 for i in range(6)] for t in topics}  # one entry each
    async with httpx.AsyncClient(timeout=30.0) as http:
        for topic in topics:
            for data in payload[topic]:
                response = await http.post(f"{base}/topics/{TOPIC_PATH}/{topic}", content=data)
                assert response.status_code == 200, response.text
        for topic in topics:
            reader = await Collector.connect(reader_url(cluster.ws(0), topic, "messageId=earliest"))
            await reader.wait_messages(6)
            assert [unb64(m["payload"]) for m in reader.messages] == payload[topic]
            await reader.close()
        samples = await scrape(http, f"{base}/metrics")
    budget = value(samples, "folio_gateway_cache_budget_bytes")
    assert budget == 1024 * 1024
    assert 0 < value(samples, "folio_gateway_cache_bytes") <= budget
    assert value(samples, "folio_gateway_cache_reclaimed_bytes_total") >= 2_400_000 - budget


async def test_order_holds_while_the_cache_budget_drops_entries(
    messaging_cluster: Callable[..., Awaitable[MessagingCluster]],
) -> None:
    """Under a 1 MiB budget, 300 messages of 20 KB published while an Exclusive
    consumer (receiver queue 50) acks as it goes, and a Shared consumer that leaves
    half way with messages unacked: every message arrives, the Exclusive one in
    publish order and the Shared survivor with nothing of the leaver's overtaken.
    (A stress check: it passes on the code before the ordering fix too; the
    reader test above and test_topic_inprocess reproduce that bug.)"""
    cluster = await messaging_cluster(gateways=0)
    await cluster.add_gateway("--cache-mb", "1")
    ws = cluster.ws(0)
    topic = "budget-order"
    sent = [f"{i:05d}".encode() * 4000 for i in range(300)]
    exclusive = await Consumer.connect(ws, topic, "ex", "subscriptionType=Exclusive&receiverQueueSize=50")
    leaver = await Collector.connect(
        consumer_url(ws, topic, "sh", "subscriptionType=Shared&receiverQueueSize=40")
    )
    survivor = await Collector.connect(
        consumer_url(ws, topic, "sh", "subscriptionType=Shared&receiverQueueSize=400")
    )
    publishing = asyncio.create_task(publish_pipelined(ws, topic, [{"payload": p} for p in sent], window=20))
    got = [unb64(m["payload"]) for m in await exclusive.receive_n(150, timeout=60)]
    await leaver.close()  # leaves with up to 40 unacked, their entries likely dropped by now
    got += [unb64(m["payload"]) for m in await exclusive.receive_n(150, timeout=60)]
    assert all(r["result"] == "ok" for r in await publishing)
    assert got == sent  # Exclusive: every message, in publish order
    assert leaver.messages  # it had some, never acked: they come back to the survivor
    await survivor.wait_messages(300, timeout=60)
    texts = [unb64(m["payload"]) for m in survivor.messages]
    assert sorted(texts) == sent  # each message once
    redelivered = [t for m, t in zip(survivor.messages, texts, strict=True) if m.get("redeliveryCount")]
    assert redelivered == sorted(redelivered)  # the leaver's messages come back in their order
    await exclusive.close()
    await survivor.close()
