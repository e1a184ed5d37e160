"""How fast a dead gateway's topics are served again (real etcd, 3 nodes, 2 gateway processes).

Both gateways run with the production defaults of ``folio gateway`` (lease TTL,
load-manager interval). The first owns 100 topics; a REST producer publishes to
every topic through the second, each retrying every 200 ms while it fails. The
owner is killed -9. Printed: time to first success per topic after the kill
(min / median / max) and where the time went, from a watch on etcd kept by the
test - the dead gateway's lease expiring (its keys deleted), the survivor
acquiring the bundles, each topic's ledger list rewritten by the survivor
(recovery done, new ledger in) - and the first success. The bound asserted is
generous (a loaded CI box); the target (5 s) is judged on the printed figures.
"""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from collections.abc import Awaitable, Callable

import httpx
import pytest
from clusters import MessagingCluster

from coordination import keys
from coordination.etcd_store import connect
from coordination.store import EventKind
from gateway.main import DEFAULT_LEASE_TTL_S, DEFAULT_LOAD_MANAGER_INTERVAL_S

pytestmark = pytest.mark.component

TOPICS = 100
BOUND_S = 9.0  # generous for a loaded box (the target is 5 s); a 10 s lease alone cannot pass
PACE_S = 0.2
PRODUCTION = (  # the defaults of ``folio gateway`` (the test clusters' gateways run with others)
    "--lease-ttl",
    str(DEFAULT_LEASE_TTL_S),
    "--load-manager-interval",
    str(DEFAULT_LOAD_MANAGER_INTERVAL_S),
)


def topic_path(i: int) -> str:
    return f"persistent/public/default/takeover-{i:03d}"


async def publish(http: httpx.AsyncClient, base: str, i: int) -> bool:
    try:
        response = await http.post(f"{base}/topics/{topic_path(i)}", json={"messages": [{"payload": "eA=="}]})
    except httpx.HTTPError:
        return False
    if response.status_code != 200:
        return False
    results = response.json().get("messagePublishResults", [])
    return bool(results) and results[0].get("errorCode", 1) == 0


def watch_in_thread(
    endpoint: str,
    namespace: str,
    events: list[tuple[float, EventKind, str, bytes]],
    watching: threading.Event,
    stop: threading.Event,
) -> None:
    """Record every etcd event with its arrival time, on a thread and event loop of its
    own: the test's loop, busy with 100 producers, would stamp them late."""

    async def run() -> None:
        store = await connect(endpoint, namespace=namespace)
        try:
            stream = store.watch_prefix(keys.ROOT, await store.revision() + 1)
            watching.set()
            iterator = aiter(stream)
            while not stop.is_set():
                try:
                    event = await asyncio.wait_for(anext(iterator), 0.2)
                except TimeoutError:
                    continue
                events.append((time.monotonic(), event.kind, event.key, event.value or b""))
        finally:
            await store.close()

    asyncio.run(run())


def spread(values: list[float]) -> str:
    return f"min {min(values):5.2f}  median {statistics.median(values):5.2f}  max {max(values):5.2f}"


async def test_a_dead_owners_topics_are_served_again_quickly(
    messaging_cluster: Callable[..., Awaitable[MessagingCluster]],
) -> None:
    cluster = await messaging_cluster(gateways=0)
    owner = await cluster.add_gateway(*PRODUCTION)
    limits = httpx.Limits(max_connections=TOPICS + 10)
    async with httpx.AsyncClient(timeout=30.0, limits=limits) as http:
        gate = asyncio.Semaphore(32)

        async def create(i: int) -> None:
            async with gate:
                assert await publish(http, owner.http_url, i), f"topic {i} not created"

        await asyncio.gather(*(create(i) for i in range(TOPICS)))  # all owned by the first gateway
        survivor = await cluster.add_gateway(*PRODUCTION)
        events: list[tuple[float, EventKind, str, bytes]] = []
        watching = threading.Event()
        stop_watch = threading.Event()
        watcher = threading.Thread(
            target=watch_in_thread,
            args=(cluster.ledgers.endpoint, cluster.ledgers.namespace, events, watching, stop_watch),
            daemon=True,
        )
        watcher.start()
        assert await asyncio.to_thread(watching.wait, 20)
        killed_at: float | None = None
        first_ok: dict[int, float] = {}
        warm: set[int] = set()

        async def produce(i: int) -> None:
            while i not in first_ok:
                sent_at = time.monotonic()
                ok = await publish(http, survivor.http_url, i)
                if ok and killed_at is None:
                    warm.add(i)
                elif ok and sent_at > killed_at:  # sent after the kill: served by the survivor
                    first_ok[i] = time.monotonic() - killed_at
                    return
                await asyncio.sleep(PACE_S)

        producers = [asyncio.ensure_future(produce(i)) for i in range(TOPICS)]
        try:
            deadline = time.monotonic() + 60
            while len(warm) < TOPICS:  # every topic served through the survivor (forwarded)
                assert time.monotonic() < deadline, f"only {len(warm)} topics forwarded"
                await asyncio.sleep(0.1)
            owner.kill9()
            killed_at = time.monotonic()
            await asyncio.wait_for(asyncio.gather(*producers), BOUND_S + 30)
        finally:
            for task in producers:
                task.cancel()
            await asyncio.sleep(1.0)  # the last events in
            stop_watch.set()
            await asyncio.to_thread(watcher.join, 10)

    assert killed_at is not None
    owner_id = owner.address
    after = [(t - killed_at, kind, key, value) for t, kind, key, value in events if t >= killed_at]
    expired = [t for t, kind, key, _ in after if kind is EventKind.DELETE and key == keys.gateway(owner_id)]
    acquired = [
        t
        for t, kind, key, value in after
        if kind is EventKind.PUT and key.startswith(keys.BUNDLES) and value.decode() == survivor.address
    ]
    recovered: dict[str, float] = {}  # the survivor's open: the list with its epoch written
    for t, kind, key, _ in after:
        if kind is EventKind.PUT and key.startswith(keys.MANAGED_LOGS) and key not in recovered:
            recovered[key] = t
    print(
        f"  etcd events after the kill: {len(after)}; under {keys.MANAGED_LOGS}: "
        f"{sum(1 for _, _, key, _ in after if key.startswith(keys.MANAGED_LOGS))}"
    )
    latencies = [first_ok[i] for i in range(TOPICS)]
    print(f"\ntakeover of {TOPICS} topics after kill -9 of their owner (seconds after the kill):")
    print(f"  lease expired (keys deleted)   {expired[0] if expired else float('nan'):5.2f}")
    if acquired:
        print(f"  bundles acquired by survivor   first {min(acquired):5.2f}  last {max(acquired):5.2f}")
    if recovered:
        lists = spread(list(recovered.values()))
        print(f"  ledger lists rewritten         {lists}  ({len(recovered)} topics)")
    print(f"  first publish ok per topic     {spread(latencies)}")
    assert expired, "the dead gateway's registration was never deleted"
    assert max(latencies) < BOUND_S, spread(latencies)
