"""A gateway's connections never take its last open files (gateway/security/file_budget.py).

One gateway whose open-file limit is 600 and which is asked for 600 connections
(the shape where idle connections took every file and a legitimate request was
reset at accept): it holds at most 344 (600 less the 256 kept), says so at start
and on /metrics. 700 slow-header connections (a request line, then nothing) are
opened; the oldest are pushed out with a 503 that says why, never a reset, and a
REST request and a WebSocket consumer opened after them are served. Then, with
every connection busy (none waiting for its head), a new connection gets 503
naming the limit - and once they close, requests are served again.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Awaitable, Callable

import httpx
import orjson
import pytest
import websockets
from clusters import GATEWAY_LEASE_TTL_S, MessagingCluster

from folio.procs import GatewayProcess

pytestmark = pytest.mark.component

FILES = 600
CAP = FILES - 256  # file_budget.connection_cap(600, 600)
SLOW = 700  # slow-header connections: more than the cap, more than the files


class FileLimitedGateway(GatewayProcess):
    """A gateway started under ``prlimit --nofile=FILES:FILES`` (the same process: prlimit execs)."""

    def command(self) -> list[str]:
        return ["prlimit", f"--nofile={FILES}:{FILES}", "--", *super().command()]


async def read_answer(reader: asyncio.StreamReader) -> bytes:
    with contextlib.suppress(ConnectionError):
        return await asyncio.wait_for(reader.read(), 10)
    return b"RESET"


async def test_slow_header_connections_leave_room_for_a_legitimate_request(
    messaging_cluster: Callable[..., Awaitable[MessagingCluster]],
) -> None:
    cluster = await messaging_cluster(gateways=0)
    ledgers = cluster.ledgers
    gateway = FileLimitedGateway(
        ledgers.root / "limited",
        ledgers.endpoint,
        namespace=ledgers.namespace,
        extra_args=[
            *("--lease-ttl", str(GATEWAY_LEASE_TTL_S), "--max-connections", str(FILES)),
            *("--header-timeout", "60"),
        ],
        log_path=ledgers.root / "limited.log",
    )
    cluster.gateways.append(gateway)  # stopped by the fixture
    await asyncio.to_thread(gateway.start)
    log = gateway.log_path.read_text()
    assert f"connections: at most {CAP}, not {FILES}: the open-file limit is {FILES}" in log, log[-2000:]
    host, port = gateway.host_port
    ws = gateway.http_url.replace("http://", "ws://")
    consumer_url = f"{ws}/ws/v2/consumer/persistent/public/default/limited/s"
    async with httpx.AsyncClient(timeout=30) as http:
        metrics = (await http.get(f"{gateway.http_url}/metrics")).text
        assert f"folio_gateway_connections_limit {CAP}.0" in metrics
        assert f"folio_gateway_open_files_limit {FILES}.0" in metrics

        slow = []
        for _ in range(SLOW):
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(b"GET /admin/v2/brokers/health HTTP/1.1\r\n")  # and never the rest
            slow.append((reader, writer))
        health = await http.get(f"{gateway.http_url}/admin/v2/brokers/health")
        assert health.status_code == 200, health.text
        async with websockets.connect(consumer_url, open_timeout=30) as consumer:
            published = await http.post(
                f"{gateway.http_url}/topics/persistent/public/default/limited",
                json={"messages": [{"payload": "hi"}]},
            )
            assert published.status_code == 200, published.text
            frame = orjson.loads(await asyncio.wait_for(consumer.recv(), 30))
            assert frame["payload"] == "aGk="
        open_now = re.search(
            r"^folio_gateway_connections (\d+)", (await http.get(f"{gateway.http_url}/metrics")).text, re.M
        )
        assert open_now is not None and int(open_now.group(1)) <= CAP

        # the oldest slow connections were pushed out with a sentence, not reset
        pushed = await asyncio.gather(*(read_answer(r) for r, _ in slow[:100]))
        assert all(a.startswith(b"HTTP/1.1 503") for a in pushed), [
            a[:80] for a in pushed if a[:12] != b"HTTP/1.1 503"
        ]
        body = orjson.loads(pushed[0].partition(b"\r\n\r\n")[2])
        assert body["code"] == "pushed_out" and f"limit of {CAP} connections" in body["reason"], body
        for _, writer in slow:
            writer.close()

        # every connection busy (a request answered, kept alive): a new one is refused 503
        request = f"GET /admin/v2/brokers/health HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode()
        busy = []
        for _ in range(CAP - 10):
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(request)
            busy.append((reader, writer))
        for reader, _ in busy:
            assert (await asyncio.wait_for(reader.readline(), 10)).startswith(b"HTTP/1.1 200")
        answers = []
        for _ in range(20):  # the cap is reached within 10 more (httpx holds one too)
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(request)
            busy.append((reader, writer))
            answers.append(await asyncio.wait_for(reader.readline(), 10))
            if answers[-1].startswith(b"HTTP/1.1 503"):
                break
        assert answers[-1].startswith(b"HTTP/1.1 503"), answers
        full = orjson.loads((await read_answer(busy[-1][0])).partition(b"\r\n\r\n")[2])
        assert full["code"] == "connection_limit" and "retry later" in full["reason"], full
        for _, writer in busy:
            writer.close()
        await asyncio.sleep(0.5)
        assert (await http.get(f"{gateway.http_url}/admin/v2/brokers/health")).status_code == 200
        metrics = (await http.get(f"{gateway.http_url}/metrics")).text
        assert 'folio_gateway_head_refused_total{reason="pushed_out"}' in metrics
        assert 'folio_gateway_head_refused_total{reason="connection_limit"}' in metrics
