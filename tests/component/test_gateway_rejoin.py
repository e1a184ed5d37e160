"""Gateways ride out an etcd outage in the same process (real etcd killed -9, real processes).

etcd + 3 storage nodes + 2 gateways; producers publish over REST through both
gateways to topics of both, one WebSocket consumer per gateway; etcd is killed
-9 for 10 s and restarted on the same data dir. Both gateway processes must be
the same PIDs afterwards, step down when their lease runs out (consumers closed
with 4503), serve publishes and consumes again within a bound (printed), be
assigned bundles again, and no publish sent to a topic after its owner's lease
deadline (the owner's log line) may be acknowledged before etcd is back - no
other gateway can own the topic while etcd is away, so such an ack would be the
stepped-down owner's. Each gateway logs its failing keepalives once per outage.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import httpx
import orjson
import pytest
import websockets
from clusters import LedgerCluster, MessagingCluster
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from coordination import keys
from coordination.etcd_server import EmbeddedEtcd
from folio.procs import GatewayProcess

pytestmark = pytest.mark.component

OUTAGE_S = 10.0
SERVE_AGAIN_BOUND_S = 30.0  # generous for a loaded 2-core box; the figure is printed
TOPICS = [f"rejoin-{i}" for i in range(8)]
PATH = "persistent/public/default"
LEASE_LOST = re.compile(r"^(\S+ \S+) WARNING \S+: lease \w+ lost: ", re.M)
REJOINED = "rejoined the cluster with lease"
KEEPALIVE_FAILED = re.compile(r"lease \w+ keepalive failed")


@dataclass(frozen=True, slots=True)
class Attempt:
    topic: str
    gateway: int  # index of the gateway the request was sent to
    sent: float  # wall clock, s
    answered: float
    ok: bool


def _log_time(stamp: str) -> float:
    """A gateway log line's time (logging's local ``asctime``) as epoch seconds."""
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[EmbeddedEtcd]:
    server = EmbeddedEtcd(tmp_path / "etcd")
    server.start()
    yield server
    server.stop()


@pytest.fixture
async def cluster(etcd: EmbeddedEtcd, tmp_path: Path) -> AsyncIterator[MessagingCluster]:
    made = MessagingCluster(LedgerCluster(etcd.endpoint, "/rejoin", tmp_path))
    try:
        await made.ledgers.add_nodes(3)
        for _ in range(2):
            await made.add_gateway("--log-level", "info")
        yield made
    finally:
        for proc in [*made.gateways, *made.ledgers.nodes]:
            proc.stop()
        for store in made.ledgers.stores:
            await store.close()


async def publish(http: httpx.AsyncClient, base: str, topic: str, payload: bytes) -> bool:
    try:
        reply = await http.post(
            f"{base}/topics/{PATH}/{topic}",
            content=payload,
            headers={"Content-Type": "application/octet-stream"},
        )
    except httpx.HTTPError:
        return False
    return reply.status_code == 200 and "messageId" in reply.json()


async def owner(http: httpx.AsyncClient, base: str, topic: str) -> str:
    reply = await http.get(f"{base}/lookup/v2/topic/{PATH}/{topic}")
    reply.raise_for_status()
    return str(reply.json()["httpUrl"])


async def producers(
    http: httpx.AsyncClient, urls: list[str], attempts: list[Attempt], stop: asyncio.Event
) -> None:
    async def one(topic: str) -> None:
        n = 0
        while not stop.is_set():
            index = n % len(urls)
            n += 1
            sent = time.time()
            ok = await publish(http, urls[index], topic, f"{topic}-{n}".encode())
            attempts.append(Attempt(topic, index, sent, time.time(), ok))
            await asyncio.sleep(0.05 if ok else 0.2)

    await asyncio.gather(*(one(topic) for topic in TOPICS))


async def consume_one(ws_base: str, topic: str, sub: str, closes: list[int], timeout_s: float) -> float:
    """Connect (retrying) and wait for one message; returns when it came (monotonic).
    Close codes received on the way are appended to ``closes``."""
    deadline = time.monotonic() + timeout_s
    url = f"{ws_base}/ws/v2/consumer/{PATH}/{topic}/{sub}?subscriptionType=Shared"
    while time.monotonic() < deadline:
        try:
            async with websockets.connect(url, open_timeout=5, close_timeout=1, ping_interval=None) as ws:
                while time.monotonic() < deadline:
                    frame = orjson.loads(await asyncio.wait_for(ws.recv(), deadline - time.monotonic()))
                    if "messageId" in frame:
                        await ws.send(orjson.dumps({"messageId": frame["messageId"]}).decode())
                        return time.monotonic()
        except ConnectionClosed as exc:
            if exc.rcvd is not None:
                closes.append(exc.rcvd.code)
        except (OSError, InvalidHandshake, TimeoutError):
            pass
        await asyncio.sleep(0.3)
    raise AssertionError(f"no message on {topic} through {ws_base} within {timeout_s} s")


async def close_code(ws_base: str, topic: str, sub: str, connected: asyncio.Event) -> int | None:
    """Connect one consumer and return the close code the gateway ends its session with."""
    url = f"{ws_base}/ws/v2/consumer/{PATH}/{topic}/{sub}?subscriptionType=Shared"
    async with websockets.connect(url, open_timeout=5, close_timeout=1, ping_interval=None) as ws:
        connected.set()
        try:
            while True:
                frame = orjson.loads(await ws.recv())
                if "messageId" in frame:
                    await ws.send(orjson.dumps({"messageId": frame["messageId"]}).decode())
        except ConnectionClosed as exc:
            return exc.rcvd.code if exc.rcvd is not None else None


async def test_gateways_step_down_and_rejoin_across_a_10s_etcd_outage(
    etcd: EmbeddedEtcd, cluster: MessagingCluster
) -> None:
    gateways: list[GatewayProcess] = cluster.gateways
    pids = [g.pid for g in gateways]
    urls = cluster.urls
    async with httpx.AsyncClient(timeout=5.0) as http:
        for topic in TOPICS:  # create every topic, then learn its owner
            assert await publish(http, urls[0], topic, b"first")
        owners = {topic: urls.index(await owner(http, urls[0], topic)) for topic in TOPICS}
        print(f"owners before: {owners}")
        store = await cluster.ledgers.store()
        registered_before = {kv.key: kv.lease for kv in await store.list_prefix(keys.GATEWAYS)}
        assert len(registered_before) == 2

        # a consumer on a topic of each gateway, through it, before the outage: told to reconnect
        closes: list[int] = []
        ws_bases = [cluster.ws(i) for i in range(2)]
        watched = {owners[t]: t for t in TOPICS}  # a topic of each gateway that owns one
        ready = {i: asyncio.Event() for i in watched}
        sessions = {
            i: asyncio.create_task(close_code(ws_bases[i], t, f"before-{i}", ready[i]))
            for i, t in watched.items()
        }
        for event in ready.values():
            await asyncio.wait_for(event.wait(), 10)
        stop = asyncio.Event()
        attempts: list[Attempt] = []
        load = asyncio.create_task(producers(http, urls, attempts, stop))
        await asyncio.sleep(2.0)

        etcd.kill()
        killed = time.monotonic()
        killed_wall = time.time()
        await asyncio.sleep(OUTAGE_S)
        await asyncio.to_thread(etcd.start)
        back = time.monotonic()
        back_wall = time.time()
        print(f"etcd away {back - killed:.1f} s")

        # publishes through every gateway to every topic succeed again
        served_at: dict[tuple[int, str], float] = {}
        while len(served_at) < len(urls) * len(TOPICS) and time.monotonic() - back < SERVE_AGAIN_BOUND_S:
            for a in attempts:
                if a.ok and a.sent >= back_wall:
                    served_at.setdefault((a.gateway, a.topic), a.answered - back_wall)
            await asyncio.sleep(0.2)
        publish_again_s = max(served_at.values(), default=float("inf"))
        assert len(served_at) == len(urls) * len(TOPICS), (
            f"not served again within {SERVE_AGAIN_BOUND_S} s: {sorted(served_at)}\n"
            + "\n".join(g.log_tail(3000) for g in gateways)
        )
        # consumes: a new subscription through each gateway gets a message published now
        consumed = await asyncio.gather(
            *(
                consume_one(ws_bases[i], TOPICS[i], f"after-{i}", closes, SERVE_AGAIN_BOUND_S)
                for i in range(2)
            )
        )
        consume_again_s = max(consumed) - back
        stop.set()
        await load
        print(
            f"after etcd came back: every topic published through both gateways within "
            f"{publish_again_s:.1f} s; a consumer through each received within {consume_again_s:.1f} s"
        )

        owners_after = {topic: urls.index(await owner(http, urls[0], topic)) for topic in TOPICS}
        print(f"owners after: {owners_after}")
        registered_after = {kv.key: kv.lease for kv in await store.list_prefix(keys.GATEWAYS)}
        for url in urls:  # the step-down and rejoin, as /metrics says it
            text = (await http.get(f"{url}/metrics")).text
            assert "\nfolio_gateway_lease_rejoins_total 1.0\n" in text, url
            assert "\nfolio_gateway_lease_valid 1.0\n" in text, url
        codes = {i: await asyncio.wait_for(task, 5) for i, task in sessions.items()}
        print(f"consumers connected before the outage were closed with {codes}")

    # the same processes, never restarted
    assert [g.pid for g in gateways] == pids
    assert all(g.running() for g in gateways)
    texts = [g.log_text() for g in gateways]
    for text in texts:
        assert "Traceback" not in text, text[-3000:]
        assert text.count(REJOINED) == 1, text[-3000:]
        assert len(KEEPALIVE_FAILED.findall(text)) == 1, text[-3000:]  # once per outage
    # both registered again, each under a new lease (the old ones revoked)
    assert set(registered_after) == set(registered_before), (registered_before, registered_after)
    assert all(registered_after[g] != registered_before[g] for g in registered_after)

    # no publish sent after its owner's lease deadline is acknowledged while etcd is away
    lost_at = []
    for text in texts:
        stamps = LEASE_LOST.findall(text)
        assert len(stamps) == 1, text[-3000:]
        lost_at.append(_log_time(stamps[0]))
    print(f"leases lost {[round(t - killed_wall, 1) for t in lost_at]} s after etcd was killed")
    window = [a for a in attempts if lost_at[owners[a.topic]] <= a.sent and a.answered <= back_wall]
    late_acks = [a for a in window if a.ok]
    print(f"publishes sent after the owner's lease deadline while etcd was away: {len(window)}, acked: 0")
    assert window, "the check saw no publish in the window"
    assert not late_acks, late_acks[:5]
    before = [a for a in attempts if a.ok and a.answered < min(lost_at)]
    assert before, "publishes were acknowledged before the leases ran out"
    assert set(codes.values()) == {4503}, codes  # stepped down as an unload does: reconnect
