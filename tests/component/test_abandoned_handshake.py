"""A WebSocket handshake its client gave up on leaves nothing behind on the gateways.

A client that times out while a gateway is paused or slow leaves its upgrade
request queued; the gateway answers it later, registers the producer (or the
consumer, or opens the relay to the owner) and only then finds the client gone
at ``accept``. The 1 h fault run (seed 404) showed what a leak there costs: the
producer's name stayed "already connected" (409) on the owner until the topic
was unloaded, 17-59 s, the run's longest publish outages. Both ways are covered:
served by the owner (gateway/api/ws_producer.py) and relayed to it
(gateway/api/ws_session.py).
"""

from __future__ import annotations

import asyncio
import base64
import os
import socket
from collections.abc import Awaitable, Callable

import pytest
import websockets
from clusters import MessagingCluster

from folio.bench_gateway_load import lookup

pytestmark = pytest.mark.component


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


async def test_an_abandoned_producer_handshake_frees_the_name(
    messaging_cluster: Callable[..., Awaitable[MessagingCluster]],
) -> None:
    cluster = await messaging_cluster(gateways=2, nodes=3)
    for how in ("owner", "relay"):
        topic = f"abandoned-{how}"
        _, owner_url = await lookup(cluster.urls[0], topic)
        owner = next(u for u in cluster.urls if u.rstrip("/") == owner_url.rstrip("/"))
        target = owner if how == "owner" else next(u for u in cluster.urls if u != owner)
        path = f"/ws/v2/producer/persistent/public/default/{topic}?producerName=p1"
        abandon(target, path)
        await asyncio.sleep(2.0)  # the gateway loads the topic, then finds the client gone
        for base in cluster.urls:  # before the fix: 409 "Producer with name 'p1' is already connected"
            async with websockets.connect(base.replace("http", "ws", 1) + path, open_timeout=15):
                pass
            await asyncio.sleep(0.5)  # the gateway notes the close before the next session
        print(f"{how}: the name is free again after an abandoned handshake")
