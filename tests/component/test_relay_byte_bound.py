"""A relayed consumer that never reads holds a bounded number of bytes on the relaying gateway.

Real etcd, storage nodes and two gateways. A consumer with a huge
``receiverQueueSize`` opens its session through the gateway that does not own
the topic (the WebSocket is relayed to the owner) and then never reads its
socket (a small receive buffer). 1 MiB messages are published to the owner.
The relaying gateway's resident memory must stay under its delivery budget
(shrunk for the test) plus a margin, and another client keeps being served.
``RELAY_BOUND_MESSAGES`` sets how many are published (120 by default).
"""

from __future__ import annotations

import asyncio
import base64
import os
import socket
import time
from collections.abc import Awaitable, Callable

import httpx
import pytest
import websockets
from clusters import MessagingCluster
from failover_clients import owner_of

from gateway.api.ws_session import RELAY_PING_S, RELAY_PING_TIMEOUT_S

pytestmark = pytest.mark.component

TOPIC = "relay-bound"
MESSAGES = int(os.environ.get("RELAY_BOUND_MESSAGES", "120"))
PAYLOAD = os.urandom(1 << 20)


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def stuck_consumer(host: str, port: int, path: str) -> socket.socket:
    """Open a WebSocket consumer by hand and never read past the handshake."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, port))
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        (
            f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    assert head.startswith(b"HTTP/1.1 101"), head
    return sock


async def test_a_relayed_consumer_that_never_reads_is_bounded_on_the_relay(
    messaging_cluster: Callable[..., Awaitable[MessagingCluster]],
) -> None:
    cluster = await messaging_cluster(gateways=0)
    for _ in range(2):
        await cluster.add_gateway("--delivery-budget-mb", "16", "--consumer-pending-bytes", str(4 << 20))
    async with httpx.AsyncClient(timeout=60) as http:
        r = await http.post(f"{cluster.urls[0]}/topics/persistent/public/default/{TOPIC}", content=b"x")
        assert r.status_code == 200, r.text
        owner = await owner_of(cluster.urls[0], TOPIC)
        relay_index = 1 if cluster.urls[0] == owner else 0
        relay_gw = cluster.gateways[relay_index]
        host, port = relay_gw.http_url.removeprefix("http://").split(":")
        path = (
            f"/ws/v2/consumer/persistent/public/default/{TOPIC}/stuck"
            "?receiverQueueSize=100000&subscriptionInitialPosition=Latest"
        )
        sock = await asyncio.to_thread(stuck_consumer, host, int(port), path)
        await asyncio.sleep(1)
        before = rss_bytes(relay_gw.proc.pid)
        peak = before
        body = {"messages": [{"payload": base64.b64encode(PAYLOAD).decode()}]}
        started = time.monotonic()
        for _ in range(MESSAGES):
            r = await http.post(f"{owner}/topics/persistent/public/default/{TOPIC}", json=body)
            assert r.status_code == 200, r.text
            peak = max(peak, rss_bytes(relay_gw.proc.pid))
        for _ in range(20):
            await asyncio.sleep(0.1)
            peak = max(peak, rss_bytes(relay_gw.proc.pid))
        print(
            f"relay RSS before {before >> 20} MiB, peak {peak >> 20} MiB, "
            f"{MESSAGES} x 1 MiB in {time.monotonic() - started:.1f}s"
        )
        # the owner is healthy: the relay, paused one frame ahead behind a client that does
        # not read, must not take the owner's unread pong for a vanished owner
        await asyncio.sleep(RELAY_PING_S + RELAY_PING_TIMEOUT_S + 2)
        stats = (await http.get(f"{owner}/admin/v2/persistent/public/default/{TOPIC}/stats")).json()
        consumers = stats["subscriptions"]["stuck"]["consumers"]
        assert len(consumers) == 1, "the relay dropped a healthy owner behind a slow client"
        # another client is served through the same relaying gateway
        ws = relay_gw.http_url.replace("http://", "ws://", 1)
        async with websockets.connect(f"{ws}/ws/v2/pingpong", open_timeout=10) as other:
            await other.send("x")
        sock.close()
        # the budget (16 MiB) and a margin for the allocator: before the relay bounded what it
        # read from the owner, it grew 39 MiB for 120 MiB published (335 MB for 300 at 256 MB)
        assert peak - before < 24 << 20, f"relay grew {(peak - before) >> 20} MiB"
