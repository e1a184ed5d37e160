"""Gateway process lifecycle: health, registration, clean shutdown with open sessions."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import httpx
import orjson
import pytest
from clusters import MessagingCluster
from websockets.exceptions import ConnectionClosed
from wsclient import Consumer, Producer

from coordination import keys

pytestmark = pytest.mark.component


async def test_clean_shutdown_releases_bundles_closes_ledgers_and_sessions(
    messaging_cluster: Callable[..., Awaitable[MessagingCluster]],
) -> None:
    cluster = await messaging_cluster(gateways=2)
    store = await cluster.ledgers.store()
    assert len(await store.list_prefix(keys.GATEWAYS)) == 2
    async with httpx.AsyncClient() as http:
        for url in cluster.urls:
            assert (await http.get(f"{url}/admin/v2/brokers/health")).text == "ok"
        owner_url = (
            await http.get(f"{cluster.urls[0]}/lookup/v2/topic/persistent/public/default/life")
        ).json()["httpUrl"]
    owner = next(i for i, g in enumerate(cluster.gateways) if g.http_url == owner_url)
    other = 1 - owner
    consumer = await Consumer.connect(cluster.ws(owner), "life", "s", "subscriptionType=Exclusive")
    producer = await Producer.connect(cluster.ws(owner), "life")
    for i in range(10):
        assert (await producer.send(f"m{i}"))["result"] == "ok"
    await consumer.receive_n(10)

    started = time.monotonic()
    code = await asyncio.to_thread(cluster.gateways[owner].terminate, 20.0)
    assert code == 0, cluster.gateways[owner].log_tail()
    assert time.monotonic() - started < 15
    with pytest.raises(ConnectionClosed):
        await asyncio.wait_for(consumer.ws.recv(), 5)
    assert consumer.ws.close_code in (4503, 1001, 1012, 1006)

    # the topic's last ledger was closed by its owner (nothing left to recover) and the bundle released
    state = orjson.loads((await store.get(keys.managed_log("persistent/public/default/life"))).value)
    last = state["ledgers"][-1]["ledgerId"]
    meta = orjson.loads((await store.get(keys.ledger(last))).value)
    assert meta["state"] == "CLOSED", meta
    owners = [kv.value.decode() for kv in await store.list_prefix(keys.BUNDLES)]
    assert cluster.gateways[owner].address not in " ".join(owners)

    # the other gateway serves the topic at once, with the acked state intact
    fresh = await Consumer.connect(cluster.ws(other), "life", "s", "subscriptionType=Exclusive")
    producer2 = await Producer.connect(cluster.ws(other), "life")
    assert (await producer2.send("after"))["result"] == "ok"
    frame = await fresh.receive()
    assert frame["payload"] == "YWZ0ZXI="  # only the new message: the 10 were acked and persisted
    await fresh.close()
    await producer2.close()


async def test_shutdown_ends_event_streams_and_long_polls_at_once(
    messaging_cluster: Callable[..., Awaitable[MessagingCluster]],
) -> None:
    """uvicorn waits for open responses (up to its 5 s graceful timeout) before the
    app's shutdown runs: a stop first ends the HTTP consumers' streams and long-polls."""
    cluster = await messaging_cluster(gateways=1)
    base = f"{cluster.urls[0]}/consume/persistent/public/default/held"
    async with httpx.AsyncClient(timeout=30) as http:
        poll = asyncio.create_task(http.get(f"{base}/poller", params={"waitMs": "60000"}))
        async with http.stream("GET", f"{base}/streamer/stream") as stream:
            lines = stream.aiter_lines()
            assert (await asyncio.wait_for(anext(lines), 10)) == "event: consumer"
            await asyncio.sleep(0.3)  # the long-poll is waiting too
            started = time.monotonic()
            stopping = asyncio.create_task(asyncio.to_thread(cluster.gateways[0].terminate, 20.0))
            rest = [line async for line in lines]  # the stream ends (no error): the response completed
            ended = time.monotonic() - started
            assert all(not line or line.startswith(("data:", ":")) for line in rest), rest
        polled = await asyncio.wait_for(poll, 10)
        assert polled.status_code == 200 and polled.json()["messages"] == []
        assert await stopping == 0, cluster.gateways[0].log_tail()
        stopped = time.monotonic() - started
    print(f"stream ended after {ended:.2f} s, gateway exited after {stopped:.2f} s")
    assert ended < 2.0 and stopped < 4.5  # not held until uvicorn's 5 s graceful timeout
