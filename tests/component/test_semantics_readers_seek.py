"""Readers, seek and HTTP consume with real clients on real gateways.

Shows (docs/compatibility.md §1.7, §4.7; docs/architecture.md §4, §7):
- readers start at ``earliest``, ``latest`` or after a given message id
  (exclusive; ``startMessageIdInclusive=true`` includes it), also inside a
  batch entry, and never create a durable subscription (no cursor in etcd);
- seek over WebSocket by message id (inclusive by default, ``inclusive:false``)
  and by publish timestamp rewinds or skips the subscription's cursor;
- HTTP consume: long-poll fetch, ack and nack (redelivered after the delay)
  round trip; acked messages never come back.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio
from clusters import MessagingCluster
from wsclient import (
    Collector,
    consumer_url,
    decode_id,
    module_cluster,
    publish_each,
    publish_pipelined,
    reader_url,
    unb64,
)

from coordination import keys
from gateway.names import TopicName

pytestmark = [pytest.mark.component, pytest.mark.asyncio(loop_scope="module")]

EXCLUSIVE = "subscriptionType=Exclusive&subscriptionInitialPosition=Earliest"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster(
    etcd_endpoint: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[MessagingCluster]:
    async with module_cluster(etcd_endpoint, tmp_path_factory.mktemp("readers")) as made:
        yield made


def texts(frames: list[dict[str, Any]]) -> list[str]:
    return [unb64(f["payload"]).decode() for f in frames]


async def cursors(cluster: MessagingCluster, topic: str) -> list[str]:
    store = cluster.ledgers.stores[0] if cluster.ledgers.stores else await cluster.ledgers.store()
    prefix = keys.cursors_of(TopicName.parse(topic).path)
    return [kv.key[len(prefix) :] for kv in await store.list_prefix(prefix)]


async def test_reader_start_positions(cluster: MessagingCluster) -> None:
    topic = "reader-starts"
    sent = [f"m{i}" for i in range(10)]
    ids = await publish_each(cluster.ws(0), topic, sent)
    earliest = await Collector.connect(reader_url(cluster.ws(1), topic, "messageId=earliest"))
    latest = await Collector.connect(reader_url(cluster.ws(0), topic, "messageId=latest"))
    default = await Collector.connect(reader_url(cluster.ws(1), topic))  # latest is the default
    after_3 = await Collector.connect(reader_url(cluster.ws(0), topic, f"messageId={ids[3]}"))
    from_3 = await Collector.connect(
        reader_url(cluster.ws(1), topic, f"messageId={ids[3]}&startMessageIdInclusive=true")
    )
    await earliest.wait_messages(10)
    await after_3.wait_messages(6)
    await from_3.wait_messages(7)
    assert await latest.nothing_for(0.5)
    assert default.messages == []
    assert texts(earliest.messages) == sent
    assert texts(after_3.messages) == sent[4:]  # the start id itself is excluded
    assert texts(from_3.messages) == sent[3:]
    more = await publish_each(cluster.ws(1), topic, ["n0", "n1"])
    for reader, count in ((earliest, 12), (latest, 2), (default, 2), (after_3, 8), (from_3, 9)):
        await reader.wait_messages(count)
        assert texts(reader.messages)[-2:] == ["n0", "n1"]
        assert [m["messageId"] for m in reader.messages][-2:] == more
    assert texts(latest.messages) == ["n0", "n1"]
    for reader in (earliest, latest, default, after_3, from_3):
        await reader.close()


async def test_reader_from_an_id_inside_a_batch(cluster: MessagingCluster) -> None:
    topic = "reader-batch"
    replies = await publish_pipelined(cluster.ws(0), topic, [{"payload": f"b{i}"} for i in range(40)])
    replies += await publish_pipelined(cluster.ws(1), topic, [{"payload": "tail"}])
    ids = [r["messageId"] for r in replies]
    decoded = [decode_id(i) for i in ids]
    inside = [i for i in range(40) if decoded[i].batch_index > 0 and decoded[i + 1].entry == decoded[i].entry]
    assert inside, f"no batch entry was formed: {[str(d) for d in decoded]}"
    start = inside[0]
    last_of_entry = max(i for i in range(40) if decoded[i].entry == decoded[start].entry)
    payloads = [f"b{i}" for i in range(40)] + ["tail"]
    cases = {
        f"messageId={ids[start]}": payloads[start + 1 :],  # exclusive: the rest of the batch, then on
        f"messageId={ids[start]}&startMessageIdInclusive=true": payloads[start:],
        f"messageId={ids[last_of_entry]}": payloads[last_of_entry + 1 :],  # the batch's last: next entry
    }
    for query, expected in cases.items():
        reader = await Collector.connect(reader_url(cluster.ws(1), topic, query))
        await reader.wait_messages(len(expected))
        assert await reader.nothing_for(0.3)
        assert texts(reader.messages) == expected, query
        await reader.close()


async def test_readers_do_not_create_durable_subscriptions(cluster: MessagingCluster) -> None:
    topic = "reader-nondurable"
    await publish_each(cluster.ws(0), topic, ["a", "b"])
    readers = [
        await Collector.connect(reader_url(cluster.ws(i % 2), topic, "messageId=earliest&readerName=r"))
        for i in range(2)
    ]
    for reader in readers:
        await reader.wait_messages(2)
        await reader.ack(reader.messages[0]["messageId"])  # flow control only, never an ack
    await asyncio.sleep(0.5)  # cursors are persisted within 200 ms
    assert await cursors(cluster, topic) == []
    for reader in readers:
        await reader.close()
    again = await Collector.connect(reader_url(cluster.ws(0), topic, "messageId=earliest"))
    await again.wait_messages(2)  # nothing was consumed for anyone
    await again.close()
    # a consumer does create one (the check above can see cursors)
    consumer = await Collector.connect(consumer_url(cluster.ws(1), topic, "durable", EXCLUSIVE))
    await consumer.wait_messages(2)
    await asyncio.sleep(0.5)
    assert await cursors(cluster, topic) == ["durable"]
    await consumer.close()


async def test_seek_by_message_id(cluster: MessagingCluster) -> None:
    topic = "seek-id"
    sent = [f"m{i}" for i in range(10)]
    ids = await publish_each(cluster.ws(0), topic, sent)
    consumer = await Collector.connect(consumer_url(cluster.ws(1), topic, "s", EXCLUSIVE))
    await consumer.wait_messages(10)
    for mid in ids:
        await consumer.ack(mid)
    await asyncio.sleep(0.2)
    await consumer.send({"type": "seek", "messageId": ids[4]})  # inclusive by default
    await consumer.wait_messages(16)
    assert texts(consumer.messages[10:]) == sent[4:]
    await consumer.send({"type": "seek", "messageId": ids[7], "inclusive": False})
    await consumer.wait_messages(18)
    assert texts(consumer.messages[16:]) == sent[8:]
    assert await consumer.nothing_for(0.4)
    await consumer.send({"type": "seek", "messageId": "latest"})
    await asyncio.sleep(0.2)
    await consumer.close()
    # the cursor stays where the last seek put it: a new consumer gets only new messages
    again = await Collector.connect(consumer_url(cluster.ws(0), topic, "s", EXCLUSIVE))
    assert await again.nothing_for(0.5)
    await publish_each(cluster.ws(0), topic, ["new"])
    await again.wait_messages(1)
    assert texts(again.messages) == ["new"]
    await again.send({"type": "seek", "messageId": "earliest"})
    await again.wait_messages(12)
    assert texts(again.messages[1:]) == [*sent, "new"]
    await again.close()


async def test_seek_into_a_batch_starts_at_that_message(cluster: MessagingCluster) -> None:
    topic = "seek-batch"
    sent = [f"b{i}" for i in range(5)]
    async with httpx.AsyncClient(timeout=20) as http:  # one REST call: one entry of 5 messages
        body = {"messages": [{"payload": p} for p in sent]}
        response = await http.post(f"{cluster.urls[0]}/topics/persistent/public/default/{topic}", json=body)
        assert response.status_code == 200, response.text
    consumer = await Collector.connect(consumer_url(cluster.ws(1), topic, "s", EXCLUSIVE))
    await consumer.wait_messages(5)
    ids = [m["messageId"] for m in consumer.messages]
    assert len({decode_id(i).entry_id for i in ids}) == 1  # one batch entry
    for mid in ids:
        await consumer.ack(mid)
    await asyncio.sleep(0.2)
    await consumer.send({"type": "seek", "messageId": ids[2]})  # inclusive: from b2, not from b0
    await consumer.wait_messages(8)
    assert texts(consumer.messages[5:]) == sent[2:]
    assert await consumer.nothing_for(0.4)
    await consumer.send({"type": "seek", "messageId": ids[2], "inclusive": False})  # after b2
    await consumer.wait_messages(10)
    assert texts(consumer.messages[8:]) == sent[3:]
    assert await consumer.nothing_for(0.4)
    await consumer.close()


async def test_seek_by_timestamp(cluster: MessagingCluster) -> None:
    topic = "seek-time"
    early = await publish_each(cluster.ws(0), topic, [f"early{i}" for i in range(5)])
    await asyncio.sleep(0.3)
    mark_ms = int(time.time() * 1000)
    await asyncio.sleep(0.3)
    await publish_each(cluster.ws(1), topic, [f"late{i}" for i in range(5)])
    consumer = await Collector.connect(consumer_url(cluster.ws(0), topic, "s", EXCLUSIVE))
    await consumer.wait_messages(10)
    for frame in consumer.messages:
        await consumer.ack(frame["messageId"])
    await consumer.send({"type": "seek", "timestamp": mark_ms})
    await consumer.wait_messages(15)
    assert texts(consumer.messages[10:]) == [f"late{i}" for i in range(5)]
    assert await consumer.nothing_for(0.4)
    await consumer.send({"type": "seek", "timestamp": 0})  # before everything: all again
    await consumer.wait_messages(25)
    assert texts(consumer.messages[15:]) == [f"early{i}" for i in range(5)] + [f"late{i}" for i in range(5)]
    assert consumer.messages[15]["messageId"] == early[0]
    await consumer.close()


async def test_http_consume_fetch_ack_nack_roundtrip(cluster: MessagingCluster) -> None:
    topic = "http-consume"
    sent = [f"h{i}" for i in range(10)]
    async with httpx.AsyncClient(timeout=20) as http:
        publish_url = f"{cluster.urls[0]}/topics/persistent/public/default/{topic}"
        body = {"messages": [{"payload": p} for p in sent]}
        response = await http.post(publish_url, json=body)
        assert response.status_code == 200, response.text
        assert all(r["errorCode"] == 0 for r in response.json()["messagePublishResults"])

        base = f"{cluster.urls[1]}/consume/persistent/public/default/{topic}/hsub"
        params = {
            "subscriptionType": "Shared",
            "subscriptionInitialPosition": "Earliest",
            "consumerName": "h1",
            "negativeAckRedeliveryDelay": "300",
        }
        first = await http.get(base, params={**params, "max": "4", "waitMs": "3000"})
        assert first.status_code == 200, first.text
        got = first.json()["messages"]
        assert texts(got) == sent[:4]
        acked = [m["messageId"] for m in got[:2]]
        nacked = [m["messageId"] for m in got[2:]]
        ack = await http.post(f"{base}/ack", params={"consumerName": "h1"}, json={"messageIds": acked})
        assert ack.status_code == 200 and ack.json() == {"acked": 2, "unmatched": []}, ack.text
        nack = await http.post(f"{base}/nack", params={"consumerName": "h1"}, json={"messageIds": nacked})
        assert nack.status_code == 200 and nack.json() == {"nacked": 2, "unmatched": []}, nack.text

        seen: dict[str, dict[str, Any]] = {}
        deadline = time.monotonic() + 10
        while len(seen) < 8 and time.monotonic() < deadline:
            batch = await http.get(base, params={**params, "max": "10", "waitMs": "1000"})
            assert batch.status_code == 200, batch.text
            for m in batch.json()["messages"]:
                seen[unb64(m["payload"]).decode()] = m
        assert sorted(seen) == sorted(sent[2:])  # the 6 not fetched + the 2 nacked, never the acked
        assert all(seen[t]["redeliveryCount"] >= 1 for t in texts(got[2:]))
        ids = [m["messageId"] for m in seen.values()]
        ack = await http.post(f"{base}/ack", params={"consumerName": "h1"}, json={"messageIds": ids})
        assert ack.json() == {"acked": 8, "unmatched": []}
        # L:E:P string ids are accepted as well; acking twice moves nothing, and says which
        twice = str(decode_id(ids[0]))
        again = await http.post(f"{base}/ack", params={"consumerName": "h1"}, json={"messageIds": [twice]})
        assert again.json() == {"acked": 0, "unmatched": [twice]}
        empty = await http.get(base, params={**params, "max": "10", "waitMs": "800"})
        assert empty.json()["messages"] == []

        # the id a REST publish answers (ledger:entry:partition) acks what a fetch delivered
        published = await http.post(publish_url, json={"messages": [{"payload": "by-rest-id"}]})
        rest_id = published.json()["messagePublishResults"][0]["messageId"]
        fetched = await http.get(base, params={**params, "max": "1", "waitMs": "3000"})
        assert texts(fetched.json()["messages"]) == ["by-rest-id"]
        unknown = ["999999:0:-1", "CAAQADAA"]
        mixed = await http.post(
            f"{base}/ack", params={"consumerName": "h1"}, json={"messageIds": [rest_id, *unknown]}
        )
        assert mixed.json() == {"acked": 1, "unmatched": unknown}, mixed.text
        nothing = await http.post(
            f"{base}/nack", params={"consumerName": "h1"}, json={"messageIds": [rest_id]}
        )
        assert nothing.json() == {"nacked": 0, "unmatched": [rest_id]}
