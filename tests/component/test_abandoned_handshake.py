"""A WebSocket handshake its client gave up on leaves nothing behind on the gateways.

A client that times out while a gateway is paused or slow leaves its upgrade
request queued; the gateway answers it later, registers the producer (or the
consumer, or opens the relay to the owner) and only then finds the client gone
at ``accept``. The 1 h fault run (seed 404) showed what a leak there costs: the
producer's name stayed "already connected" (409) on the owner until the topic
was unloaded, 17-59 s, the run's longest publish outages. A producer is covered
both ways: served by the owner (gateway/api/ws_producer.py) and relayed to it
(gateway/api/ws_session.py); so are an Exclusive consumer and a named reader
(gateway/api/ws_subscribe.py) and a partitioned producer and Exclusive consumer,
whose per-partition links are opened before the client's handshake is answered
(gateway/api/ws_partitioned.py).
"""

from __future__ import annotations

import asyncio
import base64
import os
import socket
import time
from collections.abc import AsyncIterator

import httpx
import pytest
import pytest_asyncio
import websockets
from clusters import MessagingCluster, started_cluster
from failover_clients import owner_of as lookup_owner
from websockets.exceptions import InvalidStatus
from wsclient import eventually

pytestmark = [pytest.mark.component, pytest.mark.asyncio(loop_scope="module")]

P = "/persistent/public/default"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster(
    etcd_endpoint: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[MessagingCluster]:
    root = tmp_path_factory.mktemp("abandoned")
    namespace = f"/abandoned-{os.getpid()}"
    async with started_cluster(etcd_endpoint, namespace, root, "--log-level", "info") as made:
        yield made  # INFO: a handshake whose client left is logged at INFO, without a traceback


async def owner_of(cluster: MessagingCluster, topic: str) -> str:
    owner_url = await lookup_owner(cluster.urls[0], topic)
    return next(u for u in cluster.urls if u.rstrip("/") == owner_url.rstrip("/"))


async def met(cluster: MessagingCluster, base: str, path: str) -> None:
    """Wait until the gateway at ``base`` has met the abandoned handshake: its answer
    failed (the client was gone) and it logged so - with the fix, after undoing."""
    gateway = next(g for g in cluster.gateways if g.http_url.rstrip("/") == base.rstrip("/"))
    line = f"WebSocket session on {path.split('?', maxsplit=1)[0]} failed"
    await eventually(lambda: line in gateway.log_text(), timeout=30)
    # a client that left is no defect: one INFO line, no traceback (before: log.exception)
    assert "Traceback" not in gateway.log_text(), gateway.log_text()[-3000:]


async def connect_when_free(url: str, within_s: float = 10.0) -> None:
    """Open a session, retrying a 409 (a previous session still closing) for ``within_s``:
    a ghost left by an abandoned handshake stays until the topic moves, so it still fails."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            async with websockets.connect(url, open_timeout=15):
                return
        except InvalidStatus as exc:
            if exc.response.status_code != 409 or time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.2)


def abandon(http_base: str, path: str) -> None:
    """Send a WebSocket upgrade request and hang up before any answer."""
    host, port = http_base.split("//", 1)[1].rstrip("/").rsplit(":", 1)
    key = base64.b64encode(os.urandom(16)).decode()
    request = (
        f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(request.encode())


async def test_an_abandoned_producer_handshake_frees_the_name(cluster: MessagingCluster) -> None:
    for how in ("owner", "relay"):
        topic = f"abandoned-{how}"
        owner = await owner_of(cluster, topic)
        target = owner if how == "owner" else next(u for u in cluster.urls if u != owner)
        path = f"/ws/v2/producer{P}/{topic}?producerName=p1"
        abandon(target, path)
        await met(cluster, target, path)
        for base in cluster.urls:  # before the fix: 409 "Producer with name 'p1' is already connected"
            await connect_when_free(base.replace("http", "ws", 1) + path)
        print(f"{how}: the name is free again after an abandoned handshake")


async def test_abandoned_consumer_reader_and_partitioned_handshakes_leave_nothing(
    cluster: MessagingCluster,
) -> None:
    exclusive = "subscriptionType=Exclusive"
    async with httpx.AsyncClient(timeout=30) as http:
        for topic in ("abandoned-pp", "abandoned-pc"):
            created = await http.put(f"{cluster.urls[0]}/admin/v2{P}/{topic}/partitions", json=2)
            assert created.status_code in (200, 204), created.text
        consumer_owner = await owner_of(cluster, "abandoned-c")
        reader_owner = await owner_of(cluster, "abandoned-r")
        abandoned = [  # each served where the leak was: the topic's owner, or the partition fan-out
            (consumer_owner, f"/ws/v2/consumer{P}/abandoned-c/s?{exclusive}"),
            (reader_owner, f"/ws/v2/reader{P}/abandoned-r?readerName=r-gone"),
            (cluster.urls[0], f"/ws/v2/producer{P}/abandoned-pp?producerName=pp"),
            (cluster.urls[0], f"/ws/v2/consumer{P}/abandoned-pc/s?{exclusive}"),
        ]
        for base, path in abandoned:
            abandon(base, path)
        for base, path in abandoned:
            await met(cluster, base, path)
        stats = await http.get(f"{reader_owner}/admin/v2{P}/abandoned-r/stats")
        assert stats.status_code == 200, stats.text
        leftover = stats.json()["subscriptions"]
        assert "r-gone" not in leftover, f"a ghost reader is left on the owner: {leftover}"
        # before the fix: 409 (ConsumerBusy "Exclusive consumer is already connected",
        # ProducerBusy for the partitioned producer's name) from the ghosts' owners
        for base, path in abandoned:
            if "/reader/" in path:
                continue
            await connect_when_free(base.replace("http", "ws", 1) + path)
    print("consumer, reader, partitioned producer and consumer: nothing left after abandoned handshakes")
