"""What a hostile WebSocket client can make a gateway log, and how it is closed.

A real cluster (etcd, 3 storage nodes, 1 gateway at ``--log-level info``):
- a text frame that is not UTF-8 closes the session 1007 (with a reason) and
  leaves no traceback in the gateway's log;
- a burst of refused handshakes from one client is logged once, at INFO, with
  the path and the client; no ERROR line however the client behaves (it waits
  for the refusal, or hangs up before it).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable

import pytest
import websockets
from clusters import MessagingCluster
from websockets.exceptions import ConnectionClosed, InvalidStatus

pytestmark = pytest.mark.component

BASE = "persistent/public/default"


async def _refused(url: str) -> int:
    with pytest.raises(InvalidStatus) as info:
        async with websockets.connect(url, open_timeout=15):
            pass
    return info.value.response.status_code


def _hang_up_before_the_answer(host: str, port: int, path: str) -> None:
    """Send an upgrade request and close at once, before the gateway answers it."""
    head = (
        f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    with socket.create_connection((host, port), timeout=5) as sock:
        sock.sendall(head.encode())
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")


async def test_bad_utf8_and_refusals_do_not_flood_the_log(
    messaging_cluster: Callable[..., Awaitable[MessagingCluster]],
) -> None:
    cluster = await messaging_cluster(gateways=0)
    gateway = await cluster.add_gateway("--log-level", "info")
    ws = cluster.ws(0)

    async with websockets.connect(f"{ws}/ws/v2/producer/{BASE}/utf8") as producer:
        await producer.send(b'{"payload": "\xff\xfe"}', text=True)  # a text frame, not UTF-8
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(producer.recv(), 15)
    assert producer.close_code == 1007, (producer.close_code, producer.close_reason)
    assert producer.close_reason, "a 1007 close says what was wrong"

    refused_path = f"/ws/v2/producer/{BASE[: BASE.rindex('/')]}/nosuchns/t"
    for _ in range(20):
        assert await _refused(f"{ws}{refused_path}") == 404
    host, port = gateway.http_url.removeprefix("http://").rsplit(":", 1)
    for _ in range(20):
        await asyncio.to_thread(_hang_up_before_the_answer, host, int(port), refused_path)
    await asyncio.sleep(1.0)  # the hung-up handshakes are answered (to nobody) by now

    log = gateway.log_text()
    assert "Traceback" not in log, log[-4000:]
    assert " ERROR " not in log, log[-4000:]
    refusals = [line for line in log.splitlines() if "refused" in line and "nosuchns" in line]
    assert len(refusals) == 1, refusals[:5]
    assert " INFO " in refusals[0] and "127.0.0.1" in refusals[0], refusals[0]
