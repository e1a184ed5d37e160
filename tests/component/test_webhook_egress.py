"""Webhooks cannot forge requests: real gateways, a real listening endpoint on loopback.

Without an allow-list, a webhook whose URL resolves to loopback (by address or by
the DNS name ``localhost``), a private or a link-local address is never connected
to: its ``lastError`` is "refused" and the endpoint sees nothing. With the
endpoint's host allow-listed (control), the same endpoint gets the messages. A
webhook aimed at a gateway of the cluster (its own publish path) is refused even
when allow-listed, so no publish loop starts. An unreachable port reads "failed",
as every other non-HTTP failure does: nothing tells ports or hosts apart.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable

import httpx
import pytest
from clusters import MessagingCluster

pytestmark = pytest.mark.component

ADMIN = "/admin/v2/persistent/public/default"


class Listener:
    """A TCP endpoint answering every request 200 and counting the requests."""

    def __init__(self) -> None:
        self.requests = 0
        self.server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> None:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while True:
                    head = await reader.readuntil(b"\r\n\r\n")
                    length = next(
                        (
                            int(line.split(b":")[1])
                            for line in head.split(b"\r\n")
                            if line.lower().startswith(b"content-length")
                        ),
                        0,
                    )
                    await reader.readexactly(length)
                    self.requests += 1
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                    await writer.drain()
            except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
                writer.close()

        self.server = await asyncio.start_server(handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def last_error(http: httpx.AsyncClient, base: str, topic: str, url: str) -> tuple[str | None, int]:
    path = f"{base}{ADMIN}/{topic}/subscription/s/webhook"
    r = await http.post(
        f"{base}/topics/persistent/public/default/{topic}", json={"messages": [{"payload": "eA=="}]}
    )
    assert r.status_code == 200, r.text
    settings = {"url": url, "initialPosition": "Earliest", "minBackoffMs": 50, "maxBackoffMs": 100}
    assert (await http.put(path, json=settings)).status_code == 204
    view: dict[str, object] = {}
    for _ in range(400):
        view = (await http.get(path)).json()
        if view.get("lastError") or view.get("acked"):
            break
        await asyncio.sleep(0.05)
    assert (await http.delete(path)).status_code == 204, view
    return view.get("lastError"), int(view.get("acked") or 0)  # type: ignore[arg-type]


async def test_forbidden_targets_are_refused_after_dns(
    messaging_cluster: Callable[..., Awaitable[MessagingCluster]],
) -> None:
    cluster = await messaging_cluster(gateways=0)
    open_gateway = await cluster.add_gateway()  # no allow-list: the default
    listener = Listener()
    await listener.start()
    open_base = open_gateway.http_url
    async with httpx.AsyncClient(timeout=30) as http:
        for i, url in enumerate(
            (
                f"http://127.0.0.1:{listener.port}/hook",
                f"http://localhost:{listener.port}/hook",  # a DNS name resolving to loopback
                "http://169.254.169.254/latest/meta-data",
                "http://10.0.0.1/hook",
                "http://0.0.0.0:1/hook",
            )
        ):
            error, acked = await last_error(http, open_base, f"ssrf-{i}", url)
            assert (error, acked) == ("refused", 0), url
        assert listener.requests == 0
        open_gateway.stop()
        listed_base = (await cluster.add_gateway("--webhook-hosts", "127.0.0.1")).http_url
        # control: the operator allow-lists the endpoint's host, and it is served
        error, acked = await last_error(
            http, listed_base, "ssrf-listed", f"http://127.0.0.1:{listener.port}/h"
        )
        assert acked >= 1 and listener.requests >= 1, error
        # a gateway of the cluster, even allow-listed: refused (no publish loop)
        own = f"{listed_base}/topics/persistent/public/default/ssrf-loop"
        assert await last_error(http, listed_base, "ssrf-loop", own) == ("refused", 0)
        # an allowed host with nothing listening: "failed", as every other failure reads
        error, _ = await last_error(http, listed_base, "ssrf-closed", f"http://127.0.0.1:{free_port()}/h")
        assert error == "failed"
    assert listener.server is not None
    listener.server.close()
