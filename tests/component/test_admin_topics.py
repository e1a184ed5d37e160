"""Admin REST v2 topics on real processes (2 gateways, 3 storage nodes): Pulsar's stats,
partitioned-stats, internalStats and topic lifecycle (terminate, delete, unload), served
through either gateway, with list paging/search and the stats history."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest
import pytest_asyncio
from clusters import MessagingCluster
from wsclient import Consumer, Producer, decode_id, module_cluster

pytestmark = [pytest.mark.component, pytest.mark.asyncio(loop_scope="module")]

P = "/admin/v2/persistent/public/default"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster(
    etcd_endpoint: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[MessagingCluster]:
    async with module_cluster(etcd_endpoint, tmp_path_factory.mktemp("admin-topics")) as made:
        yield made


@pytest_asyncio.fixture(loop_scope="module")
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=30) as client:
        yield client


async def owner_and_other(cluster: MessagingCluster, http: httpx.AsyncClient, topic: str) -> tuple[str, str]:
    """(owner URL, non-owner URL) of ``topic``."""
    got = await http.get(f"{cluster.urls[0]}/lookup/v2/topic/persistent/public/default/{topic}")
    owner = got.json()["httpUrl"]
    other = next(url for url in cluster.urls if url != owner)
    return owner, other


async def poll(http: httpx.AsyncClient, url: str, check: Any, timeout: float = 15.0) -> dict[str, Any]:
    """GET ``url`` until ``check(json)`` holds; the last body on success."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        response = await http.get(url)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        if check(body):
            return body
        assert asyncio.get_running_loop().time() < deadline, body
        await asyncio.sleep(0.1)


def status(response: httpx.Response, expected: int) -> dict[str, Any]:
    assert response.status_code == expected, response.text
    if expected >= 400:
        body: dict[str, Any] = response.json()
        assert set(body) == {"reason", "code"} and body["reason"]
        return body
    return {}


async def test_stats_after_publishing_and_consuming_some(
    cluster: MessagingCluster, http: httpx.AsyncClient
) -> None:
    owner, other = await owner_and_other(cluster, http, "st")
    consumer = await Consumer.connect(
        cluster.ws(0),
        "st",
        "s",
        "subscriptionType=Shared&consumerName=c1&subscriptionInitialPosition=Earliest",
    )
    producer = await Producer.connect(cluster.ws(1), "st", "producerName=prod-st")
    for i in range(10):
        assert (await producer.send(f"m{i}"))["result"] == "ok"
    frames = await consumer.receive_n(10, ack=False)
    for frame in frames[:4]:
        await consumer.ack(frame["messageId"])
    stats = await poll(http, f"{other}{P}/st/stats", lambda b: b["subscriptions"]["s"]["msgBacklog"] == 6)
    assert stats["msgInCounter"] == 10 and stats["bytesInCounter"] == 20
    assert stats["averageMsgSize"] == 2.0
    assert stats["msgOutCounter"] == 10 and stats["bytesOutCounter"] == 20
    assert stats["storageSize"] > 20 and stats["deduplicationStatus"] == "Disabled"
    assert [p["producerName"] for p in stats["publishers"]] == ["prod-st"]
    assert stats["publishers"][0]["connectedSince"].endswith("Z")
    sub = stats["subscriptions"]["s"]
    assert sub["type"] == "Shared" and sub["isDurable"] is True
    assert sub["unackedMessages"] == 6 and sub["msgOutCounter"] == 10
    assert [c["consumerName"] for c in sub["consumers"]] == ["c1"]
    assert sub["consumers"][0]["unackedMessages"] == 6 and sub["consumers"][0]["msgOutCounter"] == 10
    assert sub["consumers"][0]["availablePermits"] >= 0
    same = (await http.get(f"{owner}{P}/st/stats")).json()  # the owner serves the same topic
    assert same["msgInCounter"] == 10 and same["subscriptions"]["s"]["msgBacklog"] == 6
    rates = await poll(http, f"{owner}{P}/st/stats", lambda b: b["msgRateIn"] > 0, timeout=20)
    assert rates["msgThroughputIn"] > 0
    history = await poll(http, f"{other}{P}/st/stats/history", lambda b: len(b["samples"]) >= 1)
    assert history["intervalMs"] == 5000
    assert set(history["samples"][-1]) == {
        "t",
        "msgRateIn",
        "msgRateOut",
        "msgThroughputIn",
        "msgThroughputOut",
        "msgBacklog",
        "storageSize",
    }
    await consumer.close()
    await producer.close()


async def test_internal_stats_ledgers_and_out_of_order_acks(
    cluster: MessagingCluster, http: httpx.AsyncClient
) -> None:
    _, other = await owner_and_other(cluster, http, "is")
    consumer = await Consumer.connect(cluster.ws(0), "is", "s", "subscriptionType=Exclusive")
    producer = await Producer.connect(cluster.ws(0), "is")
    ids = [(await producer.send(f"entry-{i}"))["messageId"] for i in range(6)]
    frames = await consumer.receive_n(6, ack=False)
    assert [f["messageId"] for f in frames] == ids
    for index in (1, 2, 4):
        await consumer.ack(ids[index])
    internal = await poll(
        http,
        f"{other}{P}/is/internalStats",
        lambda b: (
            b["cursors"]["s"]["individuallyDeletedMessages"] != "[]"
            and b["cursors"]["s"]["totalNonContiguousDeletedMessagesRange"] == 2
        ),
    )
    ledger = internal["ledgers"][-1]
    lid = ledger["ledgerId"]
    assert (
        internal["cursors"]["s"]["individuallyDeletedMessages"] == f"[({lid}:0..{lid}:2], ({lid}:3..{lid}:4]]"
    )
    assert internal["cursors"]["s"]["markDeletePosition"] == f"{lid}:-1"
    assert internal["cursors"]["s"]["active"] is True
    assert internal["numberOfEntries"] == 6 and internal["entriesAddedCounter"] == 6
    assert internal["lastConfirmedEntry"] == f"{lid}:5" and internal["state"] == "LedgerOpened"
    assert ledger["entries"] == 6 and ledger["size"] == internal["totalSize"] > 6 * len("entry-0")
    assert ledger["state"] == "open" and ledger["offloaded"] is False and ledger["underReplicated"] is False
    nodes = ledger["ensembles"]["0"]
    assert len(nodes) == 3 and all(n.startswith("127.0.0.1:") for n in nodes)
    stats = (await http.get(f"{other}{P}/is/stats")).json()
    assert (
        stats["subscriptions"]["s"]["msgBacklog"] == 3 and stats["subscriptions"]["s"]["type"] == "Exclusive"
    )
    await consumer.close()
    await producer.close()


async def test_partitioned_stats_aggregate_partitions_from_their_owners(
    cluster: MessagingCluster, http: httpx.AsyncClient
) -> None:
    base = cluster.urls[0]
    status(await http.put(f"{base}{P}/pt/partitions", json=2), 204)
    status(await http.put(f"{base}{P}/pt/subscription/s", json="earliest"), 204)
    for index, count in ((0, 3), (1, 2)):
        producer = await Producer.connect(cluster.ws(index), f"pt-partition-{index}")
        for i in range(count):
            assert (await producer.send(f"p{index}-{i}"))["result"] == "ok"
        await producer.close()
    for url in cluster.urls:
        stats = (await http.get(f"{url}{P}/pt/partitioned-stats", params={"perPartition": "true"})).json()
        assert stats["metadata"] == {"partitions": 2}
        assert stats["msgInCounter"] == 5
        assert stats["subscriptions"]["s"]["msgBacklog"] == 5
        parts = stats["partitions"]
        assert {name: p["msgInCounter"] for name, p in parts.items()} == {
            "persistent://public/default/pt-partition-0": 3,
            "persistent://public/default/pt-partition-1": 2,
        }
    internal = (await http.get(f"{cluster.urls[1]}{P}/pt/partitioned-internalStats")).json()
    assert internal["metadata"] == {"partitions": 2}
    assert sorted(p["numberOfEntries"] for p in internal["partitions"].values()) == [2, 3]
    status(await http.get(f"{base}{P}/st/partitioned-stats"), 404)  # not partitioned
    listed = await http.get(f"{base}{P}/partitioned", params={"search": "PT"})
    assert listed.json() == ["persistent://public/default/pt"] and listed.headers["X-Total-Count"] == "1"
    status(await http.delete(f"{cluster.urls[1]}{P}/pt/partitions", params={"force": "true"}), 204)
    assert (await http.get(f"{base}{P}/pt/partitions")).json() == {"partitions": 0}
    status(await http.get(f"{base}{P}/pt-partition-0/stats"), 404)


async def test_terminate_refuses_publishes_and_ends_the_topic(
    cluster: MessagingCluster, http: httpx.AsyncClient
) -> None:
    consumer = await Consumer.connect(cluster.ws(1), "term", "s", "subscriptionType=Exclusive")
    producer = await Producer.connect(cluster.ws(0), "term")
    for i in range(3):
        assert (await producer.send(f"t{i}"))["result"] == "ok"
    frames = await consumer.receive_n(3)
    last = decode_id(frames[-1]["messageId"])
    answer = await http.post(f"{cluster.urls[1]}{P}/term/terminate")
    status(answer, 200)
    body = answer.json()
    assert body["partitionIndex"] == -1 and body["entryId"] == 2
    assert (body["ledgerId"], body["entryId"]) == (last.ledger_id, last.entry_id)
    reply = await producer.send("after")
    assert reply["result"] != "ok" and "terminated" in reply["errorMsg"]
    rest = await http.post(
        f"{cluster.urls[0]}/topics/persistent/public/default/term", json={"messages": [{"payload": "x"}]}
    )
    result = rest.json()["messagePublishResults"][0]
    assert result["errorCode"] != 0 and "terminated" in result["errorMsg"]
    await consumer.send({"type": "isEndOfTopic"})
    while True:
        frame = orjson.loads(await consumer.ws.recv())
        if "endOfTopic" in frame:
            assert frame["endOfTopic"] is True
            break
    again = await http.post(f"{cluster.urls[0]}{P}/term/terminate")  # idempotent
    assert again.status_code == 200 and again.json()["entryId"] == 2
    await consumer.close()
    await producer.close()


async def test_delete_refuses_with_clients_unless_forced(
    cluster: MessagingCluster, http: httpx.AsyncClient
) -> None:
    consumer = await Consumer.connect(cluster.ws(0), "del", "s", "subscriptionType=Shared")
    producer = await Producer.connect(cluster.ws(0), "del")
    assert (await producer.send("x"))["result"] == "ok"
    await producer.close()
    internal = (await http.get(f"{cluster.urls[1]}{P}/del/internalStats")).json()
    assert internal["ledgers"]
    body = status(await http.delete(f"{cluster.urls[1]}{P}/del"), 412)
    assert "force" in body["reason"]
    status(await http.delete(f"{cluster.urls[1]}{P}/del", params={"force": "true"}), 204)
    status(await http.get(f"{cluster.urls[0]}{P}/del/stats"), 404)
    status(await http.get(f"{cluster.urls[1]}{P}/del/subscriptions"), 404)
    assert "persistent://public/default/del" not in (await http.get(f"{cluster.urls[0]}{P}")).json()
    status(await http.delete(f"{cluster.urls[0]}{P}/del"), 404)
    await consumer.close()


async def test_unload_closes_and_the_topic_is_served_again(
    cluster: MessagingCluster, http: httpx.AsyncClient
) -> None:
    status(await http.put(f"{cluster.urls[0]}{P}/unl/subscription/s"), 204)
    producer = await Producer.connect(cluster.ws(0), "unl")
    for i in range(2):
        assert (await producer.send(f"u{i}"))["result"] == "ok"
    status(await http.put(f"{cluster.urls[1]}{P}/unl/unload"), 204)
    stats = (await http.get(f"{cluster.urls[1]}{P}/unl/stats")).json()
    assert stats["msgInCounter"] == 0  # counters restart with the reload ...
    assert stats["subscriptions"]["s"]["msgBacklog"] == 2  # ... the cursor and the log do not
    producer = await Producer.connect(cluster.ws(1), "unl")
    assert (await producer.send("u2"))["result"] == "ok"
    await producer.close()
    assert (await http.get(f"{cluster.urls[0]}{P}/unl/stats")).json()["subscriptions"]["s"]["msgBacklog"] == 3


async def test_unknown_topics_are_404_and_never_created(
    cluster: MessagingCluster, http: httpx.AsyncClient
) -> None:
    base = cluster.urls[1]
    for method, path in (
        ("GET", "stats"),
        ("GET", "internalStats"),
        ("GET", "stats/history"),
        ("GET", "subscriptions"),
        ("GET", "subscription/s/position/1"),
        ("GET", "lastMessageId"),
        ("POST", "terminate"),
        ("PUT", "unload"),
        ("DELETE", ""),
    ):
        body = status(await http.request(method, f"{base}{P}/ghost/{path}".rstrip("/")), 404)
        assert body["code"] == "not_found", (method, path)
        assert "auto-creation is off" not in body["reason"], body  # public/default auto-creates
    stats = status(await http.get(f"{base}{P}/ghost/stats"), 404)
    assert stats["reason"].startswith(  # what is true, and what to do
        "topic persistent://public/default/ghost does not exist yet: namespace public/default "
        "creates it on the first publish or subscribe"
    ), stats
    assert not any("ghost" in t for t in (await http.get(f"{base}{P}")).json())
    status(await http.get(f"{base}/admin/v2/persistent/public/nowhere/t/stats"), 404)
    status(await http.get(f"{base}{P}/bad%20name/stats"), 412)


async def test_topic_lists_page_and_search(cluster: MessagingCluster, http: httpx.AsyncClient) -> None:
    base = cluster.urls[0]
    for name in ("pg-a-1", "pg-a-2", "pg-b-1"):
        status(await http.put(f"{base}{P}/{name}"), 204)
    status(await http.put(f"{base}{P}/pg-a-1"), 409)
    got = await http.get(f"{base}{P}", params={"search": "PG-A", "limit": 1})
    assert got.json() == ["persistent://public/default/pg-a-1"] and got.headers["X-Total-Count"] == "2"
    got = await http.get(f"{cluster.urls[1]}{P}", params={"search": "pg-", "offset": 1, "limit": 5})
    assert got.json() == ["persistent://public/default/pg-a-2", "persistent://public/default/pg-b-1"]
    assert got.headers["X-Total-Count"] == "3"
    everything = await http.get(f"{base}{P}")
    assert int(everything.headers["X-Total-Count"]) == len(everything.json()) >= 3
    body = status(await http.get(f"{base}{P}", params={"limit": 1001}), 400)
    assert "limit" in body["reason"]
    status(await http.get(f"{base}{P}", params={"offset": -1}), 400)
