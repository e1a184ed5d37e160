"""Bytes, not frames, bound what consumers pin in a gateway (real gateway processes).

1,000 consumers that never read (raw sockets with 4 KiB receive buffers, so
what they are sent stays in the gateway) on one hot topic under 5 bursts of
300 x 1 KiB, with the default limits: the owner's RSS stays under
``STUCK_RSS_BOUND`` (README, "Limits"), its lease holds, the stuck consumers
are closed as slow (4429) and leave their subscriptions, and a consumer that
reads gets every message (``folio bench stuck`` is the same run). Over a small
delivery budget, consumers that never read are closed as slow while one that
reads gets every message. One consumer with receiverQueueSize=100000 taking
1 MiB messages slowly: the owner's RSS grows by what the caches hold, not by
what the consumer's permits would allow.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Awaitable, Callable

import httpx
import orjson
import pytest
import websockets
from clusters import MessagingCluster

from folio.load_fanout import Watch, alive_of, consumer_url, mib, rss_bytes, run_stuck

pytestmark = pytest.mark.component

MANY_SESSIONS = ("--sessions-per-role", "2000", "--load-manager-interval", "3600")  # 1,000 anonymous
# consumers and more; no bundle moved by load while a test measures

STUCK_RSS_BOUND = 512 << 20  # 1,000 consumers x 1,000 unacked each; was 2.6-3.6 GiB, then lease loss
BIG_RSS_GROWTH_BOUND = 160 << 20  # entry cache (64 MiB) + read-ahead (16 MiB) + one consumer's 4 MiB


def _metric(text: str, name: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


def _lease(text: str) -> tuple[float, float]:
    return _metric(text, "folio_gateway_lease_valid"), _metric(text, "folio_gateway_lease_rejoins_total")


async def test_1000_consumers_that_never_read_cost_the_gateway_neither_its_memory_nor_its_lease(
    messaging_cluster: Callable[..., Awaitable[MessagingCluster]],
) -> None:
    cluster = await messaging_cluster(gateways=0, nodes=3)
    gateway = await cluster.add_gateway(*MANY_SESSIONS)
    pid = gateway.pid
    watch = Watch([pid], alive_of([pid])).start()
    result = await run_stuck(
        cluster.urls, stuck=1000, bursts=5, burst=300, payload=1024, sample=50, drain_s=10
    )
    await watch.stop()
    async with httpx.AsyncClient(timeout=30) as http:
        metrics = (await http.get(f"{cluster.urls[0]}/metrics")).text
    closed = _metric(metrics, "folio_gateway_slow_consumer_closes_total")
    valid, rejoins = _lease(metrics)
    top = watch.rss_max[pid]
    print(
        f"1,000 stuck x 5 x 300 x 1 KiB: owner RSS start {mib(watch.rss_start[pid])} max {mib(top)} "
        f"(bound {mib(STUCK_RSS_BOUND)}), slow closes {closed:.0f}, 50 drained saw {dict(result.closes)}, "
        f"reader got {result.reader_got}/{result.published} in {result.seconds:.1f}s, "
        f"lease valid={valid:.0f} rejoins={rejoins:.0f}"
    )
    assert not watch.died and gateway.pid == pid and gateway.proc is not None and gateway.proc.poll() is None
    assert valid == 1 and rejoins == 0, "the owner lost its lease"
    assert result.reader_got == result.published == 1500
    assert result.reader_close is None
    assert closed >= 500, f"only {closed:.0f} of 1,000 stuck consumers were closed"
    assert top < STUCK_RSS_BOUND, f"owner RSS peaked at {mib(top)}"


async def test_over_its_delivery_budget_a_gateway_closes_the_stuck_consumers_4429(
    messaging_cluster: Callable[..., Awaitable[MessagingCluster]],
) -> None:
    cluster = await messaging_cluster(gateways=0, nodes=3)
    await cluster.add_gateway(
        "--delivery-budget-mb", "8", "--consumer-pending-bytes", str(256 << 10), *MANY_SESSIONS
    )
    result = await run_stuck(cluster.urls, stuck=50, bursts=3, burst=100, payload=16 << 10, queue=5000)
    async with httpx.AsyncClient(timeout=30) as http:
        metrics = (await http.get(f"{cluster.urls[0]}/metrics")).text
    closed = _metric(metrics, "folio_gateway_slow_consumer_closes_total")
    held = _metric(metrics, "folio_gateway_delivery_pending_bytes")
    print(
        f"budget 8 MiB, 50 stuck x 300 x 16 KiB: gateway slow closes={closed:.0f}, client closes="
        f"{dict(result.closes)}, reader got {result.reader_got}/{result.published}, held now {held:.0f}"
    )
    assert closed >= 1
    assert sum(n for code, n in result.closes.items() if code in (4429, 1006)) >= 1
    assert result.reader_got >= result.published == 300
    assert result.reader_close is None or result.reader_close == 1000


async def test_a_huge_receiver_queue_is_bounded_by_bytes(
    messaging_cluster: Callable[..., Awaitable[MessagingCluster]],
) -> None:
    cluster = await messaging_cluster(gateways=1, nodes=3)
    url = cluster.urls[0]
    pid = cluster.gateways[0].pid
    topic = "bigqueue"
    payload = base64.b64encode(b"m" * (1 << 20)).decode()
    async with httpx.AsyncClient(timeout=60) as http:
        for _ in range(30):  # 150 messages of 1 MiB, a backlog
            body = {"messages": [{"payload": payload, "payloadEncoding": "base64"}] * 5}
            response = await http.post(f"{url}/topics/persistent/public/default/{topic}", json=body)
            response.raise_for_status()
    await asyncio.sleep(1)
    before = rss_bytes(pid)
    watch = Watch([pid], alive_of([pid])).start()
    ws_url = consumer_url(url.replace("http://", "ws://"), topic, "slow", 100_000)
    got = 0
    async with websockets.connect(ws_url, max_size=None, max_queue=1) as ws:
        while got < 150:  # a slow reader: ~20 messages/s
            msg = orjson.loads(await asyncio.wait_for(ws.recv(), 30))
            await ws.send(orjson.dumps({"messageId": msg["messageId"]}).decode())
            got += 1
            await asyncio.sleep(0.05)
    await watch.stop()
    growth = watch.rss_max[pid] - before
    top = mib(watch.rss_max[pid])
    print(f"receiverQueueSize=100000, 150 x 1 MiB read slowly: owner RSS {mib(before)} -> max {top}")
    assert not watch.died
    assert growth < BIG_RSS_GROWTH_BOUND, f"RSS grew {mib(growth)}"


async def test_an_http_consumer_is_bounded_by_bytes_not_only_by_permits(
    messaging_cluster: Callable[..., Awaitable[MessagingCluster]],
) -> None:
    cluster = await messaging_cluster(gateways=1, nodes=3)
    url = cluster.urls[0]
    topic = f"{url}/topics/persistent/public/default/httpbytes"
    base = f"{url}/consume/persistent/public/default/httpbytes/sub"
    query = {"subscriptionInitialPosition": "Earliest", "max": "10"}
    payload = base64.b64encode(b"h" * (3 << 20)).decode()  # 3 MiB each
    async with httpx.AsyncClient(timeout=60) as http:
        (await http.get(base, params={**query, "max": "1", "waitMs": "0"})).raise_for_status()  # subscribe
        for _ in range(3):
            body = {"messages": [{"payload": payload, "payloadEncoding": "base64"}] * 2}
            (await http.post(topic, json=body)).raise_for_status()
        sizes: list[int] = []
        held: list[float] = []
        for _ in range(10):
            await asyncio.sleep(0.5)  # deliveries arrive
            held.append(
                _metric((await http.get(f"{url}/metrics")).text, "folio_gateway_http_consumer_held_bytes")
            )
            got = (await http.get(base, params={**query, "waitMs": "3000"})).json()
            sizes.append(len(got["messages"]))
            if sum(sizes) >= 6:
                break
    shown = [mib(int(h)) for h in held]
    print(f"6 x 3 MiB, max=10 per fetch: fetched {sizes}, held before each fetch {shown}")
    assert sum(sizes) == 6
    assert max(sizes) <= 2, "a fetch returned more than 8 MiB of payloads"
    assert max(held) <= 8 << 20, "an HTTP consumer held more than 8 MiB"
