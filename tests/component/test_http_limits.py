"""Request-head limits of a real gateway process: answered, never hung, others served.

One gateway (etcd, 3 storage nodes) with a 2 s header timeout and room for 80
connections: a 9 KiB request line gets 414 (plain request and WebSocket
handshake alike); a 100 KiB header and 200 headers get 431; a head sent one
byte at a time and a connection that sends nothing get 408 after the timeout;
while 60 such slow connections are open a normal request is served; beyond
80 connections the oldest slow ones are pushed out with a 503 and a normal
request is still served; the rest are timed out. The refusals are counted on /metrics, served on the
separate ``--metrics-address``. Quotas: a 4th tenant, a 3rd namespace of a tenant
and a 3rd subscription of a topic are refused (412, 412, 429 - over REST and a
WebSocket handshake) while existing ones and other tenants / topics are served;
the namespace quotas (topics per namespace, subscriptions, producers and
consumers per topic, consumers per subscription) likewise, counted on /metrics.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import httpx
import orjson
import pytest
import websockets
from clusters import MessagingCluster
from websockets.exceptions import InvalidStatus

from coordination.ports import free_ports

pytestmark = pytest.mark.component


async def exchange(host: str, port: int, data: bytes, timeout: float = 10.0) -> tuple[int, dict[str, str]]:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        try:
            writer.write(data)
            await writer.drain()
        except ConnectionError:  # refused before it was all sent: the answer is there to read
            pass
        answer = await asyncio.wait_for(reader.read(), timeout)
    finally:
        writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), orjson.loads(body) if body.startswith(b"{") else {}


async def test_head_limits(messaging_cluster: Callable[..., Awaitable[MessagingCluster]]) -> None:
    cluster = await messaging_cluster(gateways=0)
    metrics_port = free_ports(1)[0]
    gateway = await cluster.add_gateway(
        "--header-timeout",
        "2",
        "--max-connections",
        "80",
        "--metrics-address",
        f"127.0.0.1:{metrics_port}",
        *("--max-tenants", "3", "--max-namespaces-per-tenant", "2", "--max-subscriptions-per-topic", "2"),
    )
    host, port = gateway.address.rsplit(":", 1)
    address = (host, int(port))
    long_query = "x=" + "a" * 9 * 1024
    for path in (
        f"/admin/v2/brokers/health?{long_query}",
        f"/ws/v2/consumer/persistent/public/default/t/s?{long_query}",
    ):
        upgrade = b"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
        upgrade += b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        request = f"GET {path} HTTP/1.1\r\nHost: {host}\r\n".encode() + upgrade + b"\r\n"
        status, body = await exchange(*address, request)
        assert status == 414 and body["code"] == "line_too_long", (status, body)

    big = f"GET /admin/v2/brokers/health HTTP/1.1\r\nHost: {host}\r\nX-Big: {'b' * 100 * 1024}\r\n\r\n"
    assert (await exchange(*address, big.encode()))[0] == 431
    many = "".join(f"X-H{i}: v\r\n" for i in range(200))
    status, body = await exchange(*address, f"GET / HTTP/1.1\r\nHost: {host}\r\n{many}\r\n".encode())
    assert status == 431 and body["code"] == "too_many_headers"

    # slow heads: one byte every 0.3 s, and silence; both get 408 after the 2 s timeout
    reader, writer = await asyncio.open_connection(*address)
    start = time.monotonic()
    answered = asyncio.ensure_future(reader.read())
    for byte in b"GET /admin/v2/brokers/health HTTP/1.1\r\nHost: x\r\n":
        if answered.done():
            break
        writer.write(bytes([byte]))
        await asyncio.sleep(0.3)
    answer = await asyncio.wait_for(answered, 10)
    waited = time.monotonic() - start
    assert answer.startswith(b"HTTP/1.1 408"), answer
    print(f"slow head answered 408 after {waited:.1f} s (timeout 2 s)")
    assert waited < 6
    writer.close()

    slow = [await asyncio.open_connection(*address) for _ in range(60)]
    async with httpx.AsyncClient(timeout=10) as http:
        assert (await http.get(f"{gateway.http_url}/admin/v2/brokers/health")).status_code == 200
        more = [await asyncio.open_connection(*address) for _ in range(40)]  # 100 > 80
        # past 80 the oldest connections still waiting for a head are pushed out (503), and
        # a request that sends its head is served (test_connection_limit.py: the limit's other side)
        assert (await http.get(f"{gateway.http_url}/admin/v2/brokers/health")).status_code == 200
        answers = await asyncio.gather(*(asyncio.wait_for(r.read(), 10) for r, _ in slow + more))
        pushed = [a for a in answers if a.startswith(b"HTTP/1.1 503")]
        assert len(pushed) >= 20 and all(a.startswith(b"HTTP/1.1 503") for a in answers[:20]), answers[:3]
        assert b'"code":"pushed_out"' in pushed[0]
        assert all(a.startswith((b"HTTP/1.1 408", b"HTTP/1.1 503")) for a in answers), answers
        assert any(a.startswith(b"HTTP/1.1 408") for a in answers[20:])
        for _, w in slow + more:
            w.close()
        assert (await http.get(f"{gateway.http_url}/admin/v2/brokers/health")).status_code == 200
        # every refusal is counted, and /metrics is also served on its own address
        text = (await http.get(f"http://127.0.0.1:{metrics_port}/metrics")).text
        assert 'folio_gateway_head_refused_total{reason="line_too_long"} 2.0' in text, text[-2000:]
        assert 'folio_gateway_head_refused_total{reason="head_timeout"}' in text
        assert "folio_gateway_" in text
    await quotas_hold(gateway.http_url)


async def quotas_hold(base: str) -> None:
    """Tenants (public + 2), namespaces per tenant (2), subscriptions per topic (2)."""
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        for tenant in ("q1", "q2"):
            assert (await http.put(f"/admin/v2/tenants/{tenant}", json={})).status_code == 204
        r = await http.put("/admin/v2/tenants/q3", json={})
        assert r.status_code == 412 and "maxTenants" in r.json()["reason"], r.text
        for ns in ("a", "b"):
            assert (await http.put(f"/admin/v2/namespaces/q1/{ns}", json={})).status_code == 204
        r = await http.put("/admin/v2/namespaces/q1/c", json={})
        assert r.status_code == 412 and "maxNamespacesPerTenant" in r.json()["reason"], r.text
        assert (await http.put("/admin/v2/namespaces/q2/a", json={})).status_code == 204  # per tenant
        topic = "/admin/v2/persistent/public/default/quota"
        for sub in ("s1", "s2"):
            assert (await http.put(f"{topic}/subscription/{sub}")).status_code == 204
        r = await http.put(f"{topic}/subscription/s3")
        assert r.status_code == 429 and "maxSubscriptionsPerTopic" in r.json()["reason"], r.text
        ws = base.replace("http://", "ws://")
        with pytest.raises(InvalidStatus) as refused:
            async with websockets.connect(f"{ws}/ws/v2/consumer/persistent/public/default/quota/s4"):
                pass
        assert refused.value.response.status_code == 429
        async with websockets.connect(f"{ws}/ws/v2/consumer/persistent/public/default/quota/s1"):
            pass  # an existing subscription is served
        assert (await http.put(f"{topic}2/subscription/s3")).status_code == 204  # per topic
    await namespace_quotas_hold(base)


async def namespace_quotas_hold(base: str) -> None:
    """Namespace policies: topics per namespace (412, admin create and auto-creation),
    subscriptions per topic (overriding the gateway's 2), producers and consumers per
    topic and consumers per subscription (a refused WebSocket handshake, ProducerBusy /
    ConsumerBusy: 409); the clients already connected keep being served; each refusal
    is counted on /metrics."""
    ws = base.replace("http://", "ws://") + "/ws/v2"
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        ns = "/admin/v2/namespaces/q1/a"
        for policy, value in (("maxTopicsPerNamespace", 2), ("maxSubscriptionsPerTopic", 1)):
            assert (await http.post(f"{ns}/{policy}", json=value)).status_code == 204
        assert (await http.get(f"{ns}/maxTopicsPerNamespace")).json() == 2
        topics = "/admin/v2/persistent/q1/a"
        assert (await http.put(f"{topics}/t1")).status_code == 204
        r = await http.put(f"{topics}/p/partitions", json=2)  # 2 partitions: 3 topics
        assert r.status_code == 412 and "maxTopicsPerNamespace" in r.json()["reason"], r.text
        assert (await http.put(f"{topics}/t2")).status_code == 204
        r = await http.post("/topics/persistent/q1/a/t3", json={"messages": [{"payload": "eA=="}]})
        assert r.status_code == 412 and "maxTopicsPerNamespace" in r.text, r.text  # auto-creation
        r = await http.post("/topics/persistent/q1/a/t1", json={"messages": [{"payload": "eA=="}]})
        assert r.status_code == 200 and r.json()["messagePublishResults"][0]["errorCode"] == 0, r.text
        assert (await http.put(f"{topics}/t1/subscription/s1")).status_code == 204
        r = await http.put(f"{topics}/t1/subscription/s2")
        assert r.status_code == 429 and "maxSubscriptionsPerTopic" in r.json()["reason"], r.text
        ns = "/admin/v2/namespaces/q1/b"
        limits = (
            ("maxProducersPerTopic", 1),
            ("maxConsumersPerTopic", 2),
            ("maxConsumersPerSubscription", 1),
        )
        for policy, value in limits:
            assert (await http.post(f"{ns}/{policy}", json=value)).status_code == 204
        shared = "subscriptionType=Shared"
        async with (
            websockets.connect(f"{ws}/producer/persistent/q1/b/t") as producer,
            websockets.connect(f"{ws}/consumer/persistent/q1/b/t/s?{shared}") as first,
            websockets.connect(f"{ws}/consumer/persistent/q1/b/u/s?{shared}"),
        ):
            for url, quota in (
                (f"{ws}/producer/persistent/q1/b/t", "producers"),
                (f"{ws}/consumer/persistent/q1/b/u/s?{shared}", "Subscription reached max consumers"),
            ):
                with pytest.raises(InvalidStatus) as busy:
                    async with websockets.connect(url):
                        pass
                assert busy.value.response.status_code == 409, url
                assert quota in busy.value.response.body.decode(), busy.value.response.body
            async with websockets.connect(f"{ws}/consumer/persistent/q1/b/t/s2"):  # 2nd of topic t
                with pytest.raises(InvalidStatus) as busy:
                    async with websockets.connect(f"{ws}/reader/persistent/q1/b/t"):  # a 3rd
                        pass
                assert busy.value.response.status_code == 409
                assert b"Topic reached max consumers" in busy.value.response.body
            await producer.send(orjson.dumps({"payload": "eA=="}))  # those connected are served
            assert orjson.loads(await asyncio.wait_for(producer.recv(), 15))["result"] == "ok"
            assert orjson.loads(await asyncio.wait_for(first.recv(), 15))["payload"] == "eA=="
        text = (await http.get("/metrics")).text
        for quota in (
            "maxTopicsPerNamespace",
            "maxSubscriptionsPerTopic",
            "maxProducersPerTopic",
            "maxConsumersPerTopic",
            "maxConsumersPerSubscription",
        ):
            assert f'folio_gateway_quota_refused_total{{quota="{quota}"}}' in text, quota
