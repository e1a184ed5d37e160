"""Admin REST v2 subscriptions and message reads on real processes (2 gateways, 3 storage
nodes): every cursor operation moves msgBacklog as Pulsar's would, counted in messages even
when Folio stored several messages in one entry; peek/get-by-id headers and bodies; examine,
last id, id by time and Folio's paged JSON browse; 404/409/412/400 answers."""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import AsyncIterator

import httpx
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
    async with module_cluster(etcd_endpoint, tmp_path_factory.mktemp("admin-subs")) as made:
        yield made


@pytest_asyncio.fixture(loop_scope="module")
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=30) as client:
        yield client


def expect(response: httpx.Response, status: int) -> httpx.Response:
    assert response.status_code == status, response.text
    if status >= 400:
        assert set(response.json()) == {"reason", "code"}
    return response


async def backlog(http: httpx.AsyncClient, url: str, topic: str, sub: str = "s") -> int:
    stats = expect(await http.get(f"{url}{P}/{topic}/stats"), 200).json()
    return int(stats["subscriptions"][sub]["msgBacklog"])


async def publish(cluster: MessagingCluster, topic: str, count: int) -> list[tuple[int, int]]:
    """``count`` messages, one entry each (each waits for its reply); their (ledger, entry)."""
    producer = await Producer.connect(cluster.ws(0), topic, "producerName=adm")
    ids = []
    for i in range(count):
        reply = await producer.send(f"m{i}", key=f"k{i}", properties={"n": str(i)})
        assert reply["result"] == "ok", reply
        mid = decode_id(reply["messageId"])
        ids.append((mid.ledger_id, mid.entry_id))
    await producer.close()
    return ids


async def test_each_cursor_operation_moves_the_backlog(
    cluster: MessagingCluster, http: httpx.AsyncClient
) -> None:
    a, b = cluster.urls
    sub = f"{P}/ops/subscription/s"
    expect(await http.put(f"{a}{sub}"), 204)  # at the end of the (new) topic
    expect(await http.put(f"{b}{sub}"), 409)
    before = int(time.time() * 1000)
    ids = await publish(cluster, "ops", 10)
    assert await backlog(http, b, "ops") == 10
    expect(await http.post(f"{b}{sub}/skip/3"), 204)
    assert await backlog(http, a, "ops") == 7
    expect(await http.post(f"{a}{sub}/expireMessages/3600"), 204)  # nothing is an hour old
    assert await backlog(http, a, "ops") == 7
    expect(await http.post(f"{b}{sub}/resetcursor", json="earliest"), 204)
    assert await backlog(http, a, "ops") == 10
    ledger, entry = ids[5]
    expect(await http.post(f"{a}{sub}/resetcursor", json={"ledgerId": ledger, "entryId": entry}), 204)
    assert await backlog(http, b, "ops") == 5  # m5..m9
    ledger, entry = ids[6]
    target = {"ledgerId": ledger, "entryId": entry, "partitionIndex": -1, "isExcluded": True}
    expect(await http.post(f"{b}{sub}/resetcursor", json=target), 204)
    assert await backlog(http, b, "ops") == 3  # m7..m9
    expect(await http.post(f"{b}{sub}/resetcursor", json="earliest"), 204)
    ledger, entry = ids[3]
    expect(await http.post(f"{a}{sub}/expireMessages", json={"ledgerId": ledger, "entryId": entry}), 204)
    assert await backlog(http, a, "ops") == 6  # m0..m3 expired
    stats = (await http.get(f"{a}{P}/ops/stats")).json()["subscriptions"]["s"]
    assert stats["totalMsgExpired"] == 4 and stats["lastExpireTimestamp"] >= before
    expect(await http.post(f"{b}{sub}/skip_all"), 204)
    assert await backlog(http, b, "ops") == 0
    expect(await http.post(f"{a}{sub}/resetcursor/{before}"), 204)
    assert await backlog(http, a, "ops") == 10
    expect(await http.post(f"{b}{sub}/resetcursor/{int(time.time() * 1000) + 60_000}"), 204)
    assert await backlog(http, a, "ops") == 0
    expect(await http.post(f"{b}{sub}/resetcursor", json="earliest"), 204)
    expect(await http.post(f"{b}{P}/ops/all_subscription/expireMessages/0"), 204)
    assert await backlog(http, a, "ops") == 0
    ledger, entry = ids[8]
    expect(await http.put(f"{b}{P}/ops/subscription/sub2", json={"ledgerId": ledger, "entryId": entry}), 204)
    assert await backlog(http, a, "ops", "sub2") == 2  # starts at m8
    listed = await http.get(f"{a}{P}/ops/subscriptions")
    assert listed.json() == ["s", "sub2"] and listed.headers["X-Total-Count"] == "2"
    searched = await http.get(f"{b}{P}/ops/subscriptions", params={"search": "UB2"})
    assert searched.json() == ["sub2"] and searched.headers["X-Total-Count"] == "1"
    consumer = await Consumer.connect(cluster.ws(1), "ops", "sub2", "subscriptionType=Shared")
    assert "force" in expect(await http.delete(f"{a}{P}/ops/subscription/sub2"), 412).json()["reason"]
    expect(await http.delete(f"{b}{P}/ops/subscription/sub2", params={"force": "true"}), 204)
    assert (await http.get(f"{a}{P}/ops/subscriptions")).json() == ["s"]
    await consumer.close()


async def test_bad_requests(cluster: MessagingCluster, http: httpx.AsyncClient) -> None:
    a, b = cluster.urls
    expect(await http.put(f"{a}{P}/bad/subscription/s"), 204)
    sub = f"{P}/bad/subscription/s"
    for body in ("soon", {"ledgerId": 1}, {"ledgerId": "x", "entryId": 0}, [1, 2]):
        expect(await http.post(f"{b}{sub}/resetcursor", json=body), 400)
    expect(
        await http.post(
            f"{b}{sub}/resetcursor", content=b"{not json", headers={"content-type": "application/json"}
        ),
        400,
    )
    expect(await http.post(f"{a}{sub}/expireMessages", json={"entryId": 1}), 400)
    expect(await http.post(f"{a}{sub}/skip/-1"), 400)
    expect(await http.get(f"{a}{sub}/messages", params={"limit": 101}), 400)
    expect(await http.get(f"{a}{P}/bad/messages", params={"from": "middle"}), 400)
    expect(await http.get(f"{a}{sub}/position/0"), 400)
    for method, path in (("POST", "skip/1"), ("POST", "skip_all"), ("DELETE", ""), ("GET", "position/1")):
        url = f"{b}{P}/bad/subscription/nope/{path}".rstrip("/")
        assert expect(await http.request(method, url), 404).json()["code"] == "not_found"
    expect(await http.put(f"{a}{P}/bad/subscription/bad%20sub"), 412)
    expect(await http.get(f"{a}{P}/bad/subscription/s/position/1"), 404)  # nothing to peek
    expect(await http.get(f"{a}{P}/bad/ledger/1/entry/0"), 404)
    expect(await http.get(f"{a}{P}/bad/messageid/0"), 404)


async def test_peek_get_by_id_examine_and_ids(cluster: MessagingCluster, http: httpx.AsyncClient) -> None:
    a, b = cluster.urls
    expect(await http.put(f"{a}{P}/peek/subscription/s", json="earliest"), 204)
    start = int(time.time() * 1000)
    ids = await publish(cluster, "peek", 4)
    expect(await http.post(f"{a}{P}/peek/subscription/s/skip/1"), 204)
    peeked = expect(await http.get(f"{b}{P}/peek/subscription/s/position/2"), 200)
    assert peeked.content == b"m2"
    assert peeked.headers["content-type"] == "application/octet-stream"
    assert peeked.headers["X-Pulsar-Message-ID"] == f"{ids[2][0]}:{ids[2][1]}"
    assert peeked.headers["X-Pulsar-PROPERTY-n"] == "2"
    assert peeked.headers["X-Pulsar-partition-key"] == "k2"
    assert peeked.headers["X-Pulsar-producer-name"] == "adm"
    assert peeked.headers["X-Pulsar-sequence-id"].isdigit()
    assert peeked.headers["X-Pulsar-publish-time"].endswith("Z")
    expect(await http.get(f"{b}{P}/peek/subscription/s/position/4"), 404)  # only 3 left
    ledger, entry = ids[3]
    got = expect(await http.get(f"{a}{P}/peek/ledger/{ledger}/entry/{entry}"), 200)
    assert got.content == b"m3" and got.headers["X-Pulsar-PROPERTY-n"] == "3"
    expect(await http.get(f"{a}{P}/peek/ledger/{ledger}/entry/{entry + 5}"), 404)
    latest = await http.get(
        f"{b}{P}/peek/examinemessage", params={"initialPosition": "latest", "messagePosition": 1}
    )
    assert latest.content == b"m3"
    second = await http.get(
        f"{a}{P}/peek/examinemessage", params={"initialPosition": "earliest", "messagePosition": 2}
    )
    assert second.content == b"m1"
    last = expect(await http.get(f"{b}{P}/peek/lastMessageId"), 200).json()
    assert last == {"ledgerId": ledger, "entryId": entry, "partitionIndex": -1}
    by_time = expect(await http.get(f"{a}{P}/peek/messageid/{start}"), 200).json()
    assert (by_time["ledgerId"], by_time["entryId"]) == ids[0]
    expect(await http.get(f"{a}{P}/peek/messageid/{int(time.time() * 1000) + 60_000}"), 404)


async def test_batched_entries_count_messages(cluster: MessagingCluster, http: httpx.AsyncClient) -> None:
    """One REST call of 40 messages: Folio stores them in few entries; every count is in messages."""
    a, b = cluster.urls
    expect(await http.put(f"{a}{P}/batch/subscription/s", json="earliest"), 204)
    body = {"producerName": "rest", "messages": [{"payload": f"b{i}", "key": f"k{i % 3}"} for i in range(40)]}
    published = await http.post(f"{b}/topics/persistent/public/default/batch", json=body)
    results = published.json()["messagePublishResults"]
    assert all(not r.get("errorCode") for r in results), results
    internal = (await http.get(f"{a}{P}/batch/internalStats")).json()
    entries = internal["numberOfEntries"]
    assert entries < 40  # several messages share entries
    assert await backlog(http, a, "batch") == 40
    expect(await http.post(f"{b}{P}/batch/subscription/s/skip/5"), 204)
    assert await backlog(http, a, "batch") == 35
    peeked = expect(await http.get(f"{a}{P}/batch/subscription/s/position/1"), 200)
    assert peeked.content == b"b5"
    parts = peeked.headers["X-Pulsar-Message-ID"].split(":")
    page = expect(
        await http.get(f"{b}{P}/batch/subscription/s/messages", params={"offset": 2, "limit": 4}), 200
    )
    data = page.json()
    assert data["total"] == 35 and data["offset"] == 2 and data["limit"] == 4
    assert [base64.b64decode(m["payload"]) for m in data["messages"]] == [b"b7", b"b8", b"b9", b"b10"]
    first = data["messages"][0]
    assert first["producerName"] == "rest" and first["key"] == "k1" and first["publishTime"] > 0
    mid = decode_id(first["messageId"])
    assert (mid.ledger_id, mid.entry_id) == (first["ledgerId"], first["entryId"])
    assert mid.batch_index == (first["batchIndex"] if first["batchIndex"] is not None else -1)
    if len(parts) == 3:  # a message sharing its entry: L:E:batchIndex
        got = await http.get(
            f"{a}{P}/batch/ledger/{parts[0]}/entry/{parts[1]}", params={"batchIndex": parts[2]}
        )
        assert got.content == b"b5"
    newest = (
        await http.get(f"{a}{P}/batch/messages", params={"from": "latest", "offset": 1, "limit": 3})
    ).json()
    assert [base64.b64decode(m["payload"]) for m in newest["messages"]] == [b"b38", b"b37", b"b36"]
    assert newest["total"] == 40
    oldest = (await http.get(f"{b}{P}/batch/messages", params={"offset": 38, "limit": 5})).json()
    assert [base64.b64decode(m["payload"]) for m in oldest["messages"]] == [b"b38", b"b39"]
    # consuming acknowledges messages one by one: the backlog follows
    consumer = await Consumer.connect(cluster.ws(0), "batch", "s", "subscriptionType=Shared")
    await consumer.receive_n(10)
    deadline = asyncio.get_running_loop().time() + 15
    while await backlog(http, b, "batch") != 25:
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.1)
    await consumer.close()
