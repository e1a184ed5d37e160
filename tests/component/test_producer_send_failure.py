"""A send the topic fails ends the WebSocket producer session (docs/compatibility.md §1.5.3).

Real processes: etcd, 3 storage nodes (every ledger on all three, ack quorum 2)
and one gateway. Two nodes are killed -9, so the producer's next message fails
(no write quorum). The client, like any pipelining client, had its next message
on the wire before it read that error; here it is sent on the same session once
the nodes are back and the topic takes publishes again. Before the session was
ended, that message was stored ahead of the client's resend of the failed one:
the producer's order broke (the fault suite's 1 h run found three such cases on
topics without dedup). Now the session is closed with 4503 right after the
error, nothing sent on it afterwards is stored, and the resend on a new session
keeps the order.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

import orjson
import pytest
import websockets
from clusters import MessagingCluster
from websockets.exceptions import ConnectionClosed
from wsclient import Consumer, Producer, b64, reader_url, unb64

pytestmark = pytest.mark.component

Cluster = Callable[..., Awaitable[MessagingCluster]]
TOPIC = "send-failure-order"
FAIL_BOUND_S = 60.0  # a message with two of three nodes gone fails within this (loaded CI box)


def frame(payload: str) -> str:
    return orjson.dumps({"payload": b64(payload), "context": payload}).decode()


async def writable_again(base: str, timeout: float) -> float:
    """Publish probes (a new session each, as a failed send ends one) until one is ok."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        with contextlib.suppress(ConnectionClosed, TimeoutError, OSError):
            probe = await Producer.connect(base, TOPIC, "producerName=probe")
            try:
                if (await probe.send("probe", timeout=10))["result"] == "ok":
                    return time.monotonic() - started
            finally:
                await probe.close()
        await asyncio.sleep(0.2)
    raise AssertionError(f"the topic took no publish within {timeout}s of the nodes coming back")


async def stored_payloads(base: str) -> list[str]:
    """Every payload of the topic in log order, read from the earliest message."""
    out: list[str] = []
    async with websockets.connect(reader_url(base, TOPIC, "messageId=earliest"), open_timeout=15) as ws:
        with contextlib.suppress(TimeoutError):
            while True:
                message = orjson.loads(await asyncio.wait_for(ws.recv(), 3))
                out.append(unb64(message["payload"]).decode())
    return out


async def test_a_failed_send_ends_the_session_so_later_frames_cannot_overtake_the_resend(
    messaging_cluster: Cluster,
) -> None:
    cluster = await messaging_cluster(gateways=1, nodes=3)
    nodes = cluster.ledgers.nodes
    base = cluster.ws(0)
    # a durable subscription keeps the log: without one (and without retention) the
    # ledger holding m0 is all consumed and is trimmed once the topic rolls, as in Pulsar
    keeper = await Consumer.connect(base, TOPIC, "keep")
    await keeper.ws.close()
    url = f"{base}/ws/v2/producer/persistent/public/default/{TOPIC}?producerName=p"
    ws = await websockets.connect(url, open_timeout=15)
    try:
        await ws.send(frame("m0"))
        assert orjson.loads(await asyncio.wait_for(ws.recv(), 15))["result"] == "ok"

        nodes[0].kill9()
        nodes[1].kill9()
        sent_at = time.monotonic()
        await ws.send(frame("m1"))
        failed = orjson.loads(await asyncio.wait_for(ws.recv(), FAIL_BOUND_S))
        failed_after = time.monotonic() - sent_at
        assert failed["result"].startswith("send-error"), failed
        assert failed["context"] == "m1"

        await asyncio.gather(asyncio.to_thread(nodes[0].start), asyncio.to_thread(nodes[1].start))
        resumed_after = await writable_again(base, 60)

        # m2 was pipelined behind m1 before the client read the error
        later: dict[str, object] | None = None
        with contextlib.suppress(ConnectionClosed):
            await ws.send(frame("m2"))
        with contextlib.suppress(ConnectionClosed, TimeoutError):
            later = orjson.loads(await asyncio.wait_for(ws.recv(), 5))
        closed = ws.close_code
    finally:
        await ws.close()

    # the client resends from the first message without an ok, on a new session
    async with websockets.connect(url, open_timeout=15) as again:
        for payload in ("m1", "m2"):
            await again.send(frame(payload))
            assert orjson.loads(await asyncio.wait_for(again.recv(), 15))["result"] == "ok"

    stored = [p for p in await stored_payloads(base) if p != "probe"]
    print(f"m1 failed after {failed_after:.2f}s; publishes resumed {resumed_after:.2f}s after the restart")
    assert later is None, f"the failed session took a later message: {later}"
    assert closed == 4503, f"the session was not ended with 4503 after the failed send: {closed}"
    assert stored == ["m0", "m1", "m2"], stored
