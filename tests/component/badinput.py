"""Helpers shared by the bad-input test modules (real gateways, raw sockets).

``raw_status`` sends a request target byte for byte (no client-side
normalisation of ``..``); ``assert_gateways_survived`` is the closing check of
each module: every gateway still runs, answers health, and logged no
traceback (an unhandled exception) while it was fed bad input.
"""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

import httpx
from clusters import MessagingCluster

BAD_JSON_BODIES: list[bytes] = [
    b"{",
    b'{"messages": [',
    b"[]",
    b"null",
    b"",
    b'"text"',
    b"\xef\xbb\xbf" + b'{"messages":[{"payload":"a"}]}',
    b'{"messages":[{"payload":"a"}]} trailing',
    b'{"messages":[{"payload":NaN}]}',
    b'{"messages":[{"payload":Infinity}]}',
    b"[" * 100_000 + b"]" * 100_000,
    b'{"messages":' + b"[" * 5000 + b"]" * 5000 + b"}",
    b'{"messages":"x"}',
    b'{"messages":{}}',
    b'{"messages":[]}',
    b'{"messages":[1]}',
    b'{"messages":[{}]}',
    b'{"messages":[{"payload":5}]}',
    b'{"messages":[{"payload":"a","sequenceId":99999999999999999999999}]}',
    b'{"messages":[{"payload":"a","sequenceId":-1}]}',
    b'{"messages":[{"payload":"a","properties":{"k":1}}]}',
    b'{"messages":[{"payload":"a","eventTime":"yesterday"}]}',
    b'{"messages":[{"payload":"a","deliverAfterMs":"soon"}]}',
    b'{"messages":[{"payload":"\\ud800"}]}',
    b'{"messages":[{"payload":"!!","payloadEncoding":"base64"}]}',
    b'{"messages":[{"payload":"a","payloadEncoding":"rot13"}]}',
    b'{"producerName":"","messages":[{"payload":"a"}]}',
    b'{"producerName":7,"messages":[{"payload":"a"}]}',
    b'{"messages":[{"payload":"a"}],"valueSchema":"{}"}',
    b"\xff\xfe\x00garbage",
]


async def raw_status(base: str, method: str, target: str, body: bytes = b"", timeout: float = 10.0) -> int:
    """Send ``target`` byte for byte (no client-side normalisation of ``..``); the HTTP status."""
    url = urlsplit(base)
    reader, writer = await asyncio.open_connection(url.hostname, url.port)
    try:
        head = (
            f"{method} {target} HTTP/1.1\r\nHost: {url.netloc}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        writer.write(head.encode("latin-1") + body)
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), timeout)
        return int(line.split()[1])
    finally:
        writer.close()


async def assert_gateways_survived(cluster: MessagingCluster, http: httpx.AsyncClient) -> None:
    for gateway in cluster.gateways:
        assert gateway.running(), gateway.log_tail()
        response = await http.get(f"{gateway.http_url}/admin/v2/brokers/health")
        assert response.status_code == 200, response.text
        blocks = gateway.log_text().split("Traceback (most recent call last):")[1:]
        assert blocks == [], blocks[0][-3000:]
