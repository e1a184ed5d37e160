"""A topic load that ends after its bundle left the gateway (real etcd, real storage nodes).

Two whole gateways (``gateway.process.Gateway``: ownership, load manager,
broker service) live in this process so the interleaving can be forced: gateway
A's load of a topic is held just after its managed log was opened (a ledger
created and compare-and-swapped into the list) while the bundle is unloaded to
B, which loads the topic (recovering A's ledger, empty, so it is deleted). Then
A's load is let go and the bundle is moved back to A. A must serve the topic
from a new ledger of the list, never from the instance whose load outlived its
bundle (which would write into the deleted ledger). And the managed log itself
refuses an open under an older ownership epoch than the list's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from clusters import LedgerCluster

from coordination import keys
from coordination.clock import WallClock
from gateway.broker.broker_errors import TopicUnavailable
from gateway.broker.log_state import LogFenced
from gateway.broker.managed_log import ManagedLog
from gateway.broker.topic import Topic
from gateway.names import TopicName
from gateway.process import Gateway, GatewayConfig
from gateway.routing import Peer
from storage.client.api import LedgerClient
from storage.formats.entry_format import EntryMessage
from storage.formats.log_record import decode_state, encode_state
from storage.formats.positions import Position

pytestmark = pytest.mark.component

TOPIC = TopicName.parse("persistent://public/default/late-load")


async def eventually(condition: Callable[[], bool], timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.02)


@pytest.fixture
async def gateways(
    ledger_cluster: Callable[[int], Awaitable[LedgerCluster]],
) -> AsyncIterator[tuple[Gateway, Gateway, LedgerCluster]]:
    cluster = await ledger_cluster(3)
    made = []
    for gateway_id in ("gw-a", "gw-b"):
        url = f"http://{gateway_id}"
        config = GatewayConfig(gateway_id, url, lease_ttl_s=5, load_manager_interval_s=3600)
        gateway = Gateway(await cluster.store(), config)
        await gateway.start()
        made.append(gateway)
    yield made[0], made[1], cluster
    for gateway in made:
        await gateway.close()


async def ledger_list(cluster: LedgerCluster) -> list[int]:
    kv = await cluster.stores[0].get(keys.managed_log(TOPIC.path))
    assert kv is not None
    return [info.ledger_id for info in decode_state(kv.value)[0]]


async def test_a_load_that_outlives_its_bundle_is_discarded(
    gateways: tuple[Gateway, Gateway, LedgerCluster], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b, cluster = gateways
    bundle = (await a.router.owner(TOPIC, authoritative=True)).bundle
    assert a.ownership.owns(bundle)

    # hold A's load between "managed log opened" and "topic registered"
    held, release = asyncio.Event(), asyncio.Event()
    original = Topic.load

    async def gated_load(name: TopicName, managed_log: Any, host: Any, *args: Any) -> Topic:
        if host is a.service:
            held.set()
            await release.wait()
        return await original(name, managed_log, host, *args)

    monkeypatch.setattr(Topic, "load", gated_load)
    late = asyncio.ensure_future(a.service.topic(TOPIC))
    await asyncio.wait_for(held.wait(), 20)
    [stale_ledger] = await ledger_list(cluster)  # A's ledger is in the list already

    # the bundle moves to B while A's load is in flight; B loads the topic
    assert await a.ownership.request_unload(bundle, to_gateway="gw-b")
    await eventually(lambda: b.ownership.owns(bundle))
    on_b = await b.service.topic(TOPIC)
    assert on_b.log.current_ledger_id != stale_ledger
    assert stale_ledger not in await ledger_list(cluster)  # recovered empty, deleted

    # A's load ends now, after its bundle left: it must not be registered
    release.set()
    with pytest.raises(TopicUnavailable):
        await late
    assert TOPIC not in a.service.topics

    # the bundle comes back to A, which serves the topic from a ledger of the list
    assert await b.ownership.request_unload(bundle, to_gateway="gw-a")
    await eventually(lambda: a.ownership.owns(bundle) and not b.ownership.owns(bundle))
    topic = await a.service.topic(TOPIC)
    message = EntryMessage(b"after the move back", WallClock().now_ms(), "p", 0)
    result = await asyncio.wait_for(topic.publish(message), 20)
    listed = await ledger_list(cluster)
    print(f"stale ledger {stale_ledger}; acked at {result.ledger_id}:{result.entry_id}; list {listed}")
    assert result.ledger_id != stale_ledger
    assert result.ledger_id in listed
    got = await topic.log.read_entry(Position(result.ledger_id, result.entry_id))
    assert got is not None and b"after the move back" in got


async def test_an_open_under_an_older_epoch_is_refused_before_it_fences(
    ledger_cluster: Callable[[int], Awaitable[LedgerCluster]],
) -> None:
    cluster = await ledger_cluster(3)
    store = await cluster.store()
    client = LedgerClient(store)
    clock = WallClock()
    try:
        await store.put(keys.managed_log(TOPIC.path), encode_state([], clock.now_ms(), {}))
        newer = await ManagedLog.open(TOPIC.path, store, client, clock, epoch=200)
        with pytest.raises(LogFenced):
            await ManagedLog.open(TOPIC.path, store, client, clock, epoch=100)
        # the newer owner was not fenced: it still appends
        assert (await asyncio.wait_for(newer.append(b"x"), 20)).ledger_id == newer.current_ledger_id
        again = await ManagedLog.open(TOPIC.path, store, client, clock, epoch=300)  # a later owner
        assert again.ledgers[0].ledger_id == newer.current_ledger_id  # recovered, 1 entry
        await newer.abandon()
        await again.close()
    finally:
        await client.close()


async def test_a_release_drops_the_bundles_topics_and_its_loads_in_flight(
    gateways: tuple[Gateway, Gateway, LedgerCluster], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, _, _ = gateways
    bundle = (await a.router.owner(TOPIC, authoritative=True)).bundle
    loaded = await a.service.topic(TOPIC)
    sibling = next(
        name
        for name in (TopicName.parse(f"persistent://public/default/sibling-{i}") for i in range(1000))
        if bundle.contains(name)
    )
    held, release = asyncio.Event(), asyncio.Event()
    original = Topic.load

    async def gated_load(name: TopicName, managed_log: Any, host: Any, *args: Any) -> Topic:
        held.set()
        await release.wait()
        return await original(name, managed_log, host, *args)

    monkeypatch.setattr(Topic, "load", gated_load)
    late = asyncio.ensure_future(a.service.topic(sibling))
    await asyncio.wait_for(held.wait(), 20)
    assert await a.ownership.release(bundle.namespace, bundle.range)
    await eventually(lambda: loaded.closed)  # dropped: a release left them registered before
    assert TOPIC not in a.service.topics
    release.set()
    with pytest.raises(TopicUnavailable):
        await late
    assert sibling not in a.service.topics


async def test_a_rest_lookup_whose_topic_moves_while_it_loads_finds_the_new_owner(
    gateways: tuple[Gateway, Gateway, LedgerCluster], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b, _ = gateways
    bundle = (await a.router.owner(TOPIC, authoritative=True)).bundle
    held, release = asyncio.Event(), asyncio.Event()
    original = Topic.load

    async def gated_load(name: TopicName, managed_log: Any, host: Any, *args: Any) -> Topic:
        if host is a.service:
            held.set()
            await release.wait()
        return await original(name, managed_log, host, *args)

    monkeypatch.setattr(Topic, "load", gated_load)
    # the path of a REST publish on A: A owns the topic and loads it
    served = asyncio.ensure_future(a.router.serve(TOPIC))
    await asyncio.wait_for(held.wait(), 20)
    assert await a.ownership.request_unload(bundle, to_gateway="gw-b")
    await eventually(lambda: b.ownership.owns(bundle))
    release.set()
    # A's load is discarded, and the request is sent to B instead of answering 503
    assert await asyncio.wait_for(served, 20) == Peer("http://gw-b")
    assert TOPIC not in a.service.topics
