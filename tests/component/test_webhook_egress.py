"""Webhooks cannot forge requests: real gateways (open mode, on loopback), a real
listening endpoint on loopback.

Without an allow-list, a webhook to a private, unspecified or link-local address or
to a gateway of the cluster is 400 naming the rule when it is set; a developer's
own endpoint on loopback (by address or by the name ``localhost``) gets the
messages, as open mode allows. Settings stored before that check (written to etcd
directly) are checked again at every connection: a pusher aimed at a gateway or at a
private address is never connected (``lastError`` "refused", the endpoint sees
nothing). With the endpoint's host allow-listed, a webhook aimed at a gateway of the
cluster (its own publish path) is refused still, so no publish loop starts. An
unreachable port reads "failed", as every other non-HTTP failure does: nothing
tells ports or hosts apart.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import httpx
import orjson
import pytest
from clusters import MessagingCluster

from coordination import keys
from coordination.ports import free_ports

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


async def test_forbidden_targets_are_refused_at_the_request_and_at_send_time(
    messaging_cluster: Callable[..., Awaitable[MessagingCluster]],
) -> None:
    cluster = await messaging_cluster(gateways=0)
    open_gateway = await cluster.add_gateway()  # no allow-list: the default
    listener = Listener()
    await listener.start()
    open_base = open_gateway.http_url
    async with httpx.AsyncClient(timeout=30) as http:
        for i, (url, rule) in enumerate(
            (
                ("http://169.254.169.254/latest/meta-data", "link-local"),
                ("http://10.0.0.1/hook", "not a public address"),
                ("http://0.0.0.0:1/hook", "not a public address"),
                (f"{open_base}/topics/persistent/public/default/ssrf-loop", "a port of this cluster"),
            )
        ):
            r = await http.put(f"{open_base}{ADMIN}/ssrf-{i}/subscription/s/webhook", json={"url": url})
            assert r.status_code == 400 and rule in r.json()["reason"], (url, r.text)
        for i, url in enumerate(
            (f"http://127.0.0.1:{listener.port}/hook", f"http://localhost:{listener.port}/h")
        ):
            error, acked = await last_error(http, open_base, f"own-{i}", url)
            assert acked >= 1, (url, error)  # open mode: the developer's own endpoint
        served = listener.requests
        # stored before the request-time check existed: refused when connecting
        store = await cluster.ledgers.store()
        for i, url in enumerate((f"{open_base}/topics/persistent/public/default/old-0", "http://10.0.0.1/h")):
            topic = f"old-{i}"
            path = f"{open_base}{ADMIN}/{topic}/subscription/s/webhook"
            r = await http.put(f"{open_base}{ADMIN}/{topic}/subscription/s")
            assert r.status_code in (204, 409), r.text
            r = await http.post(f"{open_base}/topics/persistent/public/default/{topic}", content=b"x")
            assert r.status_code == 200, r.text
            settings = {"url": url, "initialPosition": "Earliest", "minBackoffMs": 50, "maxBackoffMs": 100}
            await store.put(keys.webhook(f"persistent/public/default/{topic}", "s"), orjson.dumps(settings))
            view: dict[str, object] = {}
            for _ in range(400):
                view = (await http.get(path)).json()
                if view.get("lastError") or view.get("acked"):
                    break
                await asyncio.sleep(0.05)
            assert (view.get("lastError"), view.get("acked")) == ("refused", 0), (url, view)
            assert (await http.delete(path)).status_code == 204
        assert listener.requests == served
        open_gateway.stop()
        listed_base = (await cluster.add_gateway("--webhook-hosts", "127.0.0.1")).http_url
        # control: the operator allow-lists the endpoint's host, and it is served
        error, acked = await last_error(
            http, listed_base, "ssrf-listed", f"http://127.0.0.1:{listener.port}/h"
        )
        assert acked >= 1 and listener.requests > served, error
        # a gateway of the cluster, even allow-listed: refused (no publish loop)
        own = f"{listed_base}/topics/persistent/public/default/ssrf-loop"
        r = await http.put(f"{listed_base}{ADMIN}/ssrf-loop/subscription/s/webhook", json={"url": own})
        assert r.status_code == 400 and "a port of this cluster" in r.json()["reason"], r.text
        # an allowed host with nothing listening: "failed", as every other failure reads
        error, _ = await last_error(
            http, listed_base, "ssrf-closed", f"http://127.0.0.1:{free_ports(1)[0]}/h"
        )
        assert error == "failed"
    assert listener.server is not None
    listener.server.close()


async def test_etcd_peer_port_and_the_gateways_metrics_port_are_refused(
    messaging_cluster: Callable[..., Awaitable[MessagingCluster]],
) -> None:
    """etcd's peer port (only in etcd's member list) and the gateway's own
    ``--metrics-address`` are ports of the cluster too: 400 at the request. The
    control, a free loopback port, is accepted (open mode)."""
    cluster = await messaging_cluster(gateways=0)
    metrics_port = free_ports(1)[0]
    gateway = await cluster.add_gateway("--metrics-address", f"127.0.0.1:{metrics_port}")
    store = await cluster.ledgers.store()
    peers = [url for member in await store.cluster_members() for url in member.peer_urls]  # type: ignore[attr-defined]
    assert peers, "etcd lists no peer URL"
    peer_port = int(peers[0].rsplit(":", 1)[1])
    base = gateway.http_url
    async with httpx.AsyncClient(timeout=30) as http:
        targets = (f"http://127.0.0.1:{peer_port}/members", f"http://localhost:{metrics_port}/metrics")
        for i, url in enumerate(targets):
            r = await http.put(f"{base}{ADMIN}/own-port-{i}/subscription/s/webhook", json={"url": url})
            assert r.status_code == 400 and "a port of this cluster" in r.json()["reason"], (url, r.text)
        control = f"http://127.0.0.1:{free_ports(1)[0]}/hook"
        r = await http.put(f"{base}{ADMIN}/own-port-c/subscription/s/webhook", json={"url": control})
        assert r.status_code == 204, r.text
        assert (await http.delete(f"{base}{ADMIN}/own-port-c/subscription/s/webhook")).status_code == 204
    gateway.stop()
