"""A client relayed to a paused owner gateway is closed 4503 (reconnect), not left hanging.

The non-owner gateway pings the owner on every relayed session
(gateway/api/ws_session.py); a SIGSTOPped owner answers no ping, so the relay
gives the session up and closes its client with 4503 within ping interval +
timeout (5 + 5 s). Without the ping the client waited until the owner died.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Awaitable, Callable

import httpx
import pytest
import websockets
from clusters import MessagingCluster

from folio.bench_gateway_load import lookup

pytestmark = pytest.mark.component

CLOSE_BOUND_S = 25.0  # 10 s by design; generous for a loaded box


async def test_a_client_relayed_to_a_paused_owner_is_closed_4503(
    messaging_cluster: Callable[..., Awaitable[MessagingCluster]],
) -> None:
    cluster = await messaging_cluster(gateways=2, nodes=3)
    topic = "relay-ping"
    async with httpx.AsyncClient(timeout=30) as http:
        body = {"messages": [{"payload": "aGk=", "payloadEncoding": "base64"}]}
        (
            await http.post(f"{cluster.urls[0]}/topics/persistent/public/default/{topic}", json=body)
        ).raise_for_status()
    _, owner_url = await lookup(cluster.urls[0], topic)
    owner = next(g for g in cluster.gateways if g.http_url.rstrip("/") == owner_url.rstrip("/"))
    other = next(g for g in cluster.gateways if g is not owner)
    url = other.http_url.replace("http://", "ws://") + f"/ws/v2/consumer/persistent/public/default/{topic}/s"
    async with websockets.connect(
        url + "?subscriptionType=Shared&subscriptionInitialPosition=Earliest"
    ) as ws:
        await asyncio.wait_for(ws.recv(), 15)  # relayed and delivering
        os.kill(owner.pid, signal.SIGSTOP)
        paused = time.monotonic()
        try:
            with pytest.raises(websockets.ConnectionClosed):
                await asyncio.wait_for(ws.recv(), CLOSE_BOUND_S)
            waited = time.monotonic() - paused
        finally:
            os.kill(owner.pid, signal.SIGCONT)
    print(f"relayed client closed {ws.close_code} '{ws.close_reason}' {waited:.1f} s after the owner paused")
    assert ws.close_code == 4503
