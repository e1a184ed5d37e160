"""Load clients of ``folio bench gateway``: W1 publishers and W3 backlog consumers.

Owns: driving one topic through the gateway's public protocols, the way a
user's client would: lookup (a Pulsar client asks where the topic lives and
connects to the owner), WebSocket v2 producer frames one message each
(``ws``) or Folio batch frames (``ws-batch``), REST ``messages`` arrays
(``rest-batch``), and WebSocket consumers acking every message one frame each
(``ws``) or with batched delivery and batched acks (``ws-batch``).

Rules (as the peer harness, /work/shared/peers/peerlib.py): at most ``window``
messages un-acked in flight; only an ``ok`` reply counts (an ok means stored
on a quorum of 2 storage nodes with fsync); every loop is bounded by a message
cap AND a deadline, and every wait by ``asyncio.timeout``; WebSocket
compression is off (as the peers' WebSocket clients). Gateway quirk handled
here: a batch reply does not echo the frame's ``context``, so the first
message of each batch frame carries the frame number as its context.
"""

from __future__ import annotations

import asyncio
import base64
import time
from dataclasses import dataclass, field

import httpx
import orjson
import websockets

TOPIC_PATH = "persistent/public/default"
DRAIN_S = 15.0  # after the deadline: how long to wait for replies still in flight
CONNECT_S = 15.0
MAX_FRAME = 64 * 1024 * 1024
PUBLISH_MODES = ("ws", "ws-batch", "rest-batch")
CONSUME_MODES = ("ws", "ws-batch")


@dataclass
class LoadResult:
    """One measured run; ``latencies_ms`` has one sample per acked message."""

    ok: int = 0
    errors: int = 0
    seconds: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)
    duplicates: int = 0
    first_error: str = ""
    capped_by_time: bool = False

    def error(self, message: str, count: int = 1) -> None:
        self.errors += count
        if not self.first_error:
            self.first_error = message[:200]


async def lookup(http_base: str, topic: str) -> tuple[str, str]:
    """(ws base URL, http base URL) of the gateway that owns ``topic``."""
    async with httpx.AsyncClient(timeout=CONNECT_S) as http:
        response = await http.get(f"{http_base}/lookup/v2/topic/{TOPIC_PATH}/{topic}")
        response.raise_for_status()
        body = response.json()
    return str(body["brokerUrl"]), str(body["httpUrl"])


async def ws_connect(url: str) -> websockets.ClientConnection:
    return await websockets.connect(url, open_timeout=CONNECT_S, max_size=MAX_FRAME, compression=None)


def producer_url(ws_base: str, topic: str) -> str:
    return f"{ws_base}/ws/v2/producer/{TOPIC_PATH}/{topic}"


def consumer_url(ws_base: str, topic: str, sub: str, queue: int, batch: bool) -> str:
    query = f"subscriptionType=Shared&subscriptionInitialPosition=Earliest&receiverQueueSize={queue}"
    if batch:
        query += "&batchDelivery=true"
    return f"{ws_base}/ws/v2/consumer/{TOPIC_PATH}/{topic}/{sub}?{query}"


# ---------------------------------------------------------------- W1 publishers


async def publish(
    mode: str,
    ws_base: str,
    http_base: str,
    topic: str,
    payload: bytes,
    n: int,
    seconds: float,
    window: int,
    batch: int,
) -> LoadResult:
    """Publish up to ``n`` copies of ``payload`` for at most ``seconds``."""
    if mode == "ws":
        return await publish_ws(producer_url(ws_base, topic), payload, n, seconds, window)
    if mode == "ws-batch":
        return await publish_ws_batch(producer_url(ws_base, topic), payload, n, seconds, window, batch)
    if mode == "rest-batch":
        return await publish_rest(
            f"{http_base}/topics/{TOPIC_PATH}/{topic}", payload, n, seconds, window, batch
        )
    raise ValueError(f"unknown publish mode {mode!r} (one of {', '.join(PUBLISH_MODES)})")


async def publish_ws(url: str, payload: bytes, n: int, seconds: float, window: int) -> LoadResult:
    """One message per frame, context = message number, ``window`` un-acked."""
    result = LoadResult()
    head = b'{"payload":"' + base64.b64encode(payload) + b'","context":"'
    sent_at: list[float] = []
    ws = await ws_connect(url)
    start = time.perf_counter()
    deadline = start + seconds
    inflight = 0
    try:
        async with asyncio.timeout(seconds + DRAIN_S):
            while True:
                if time.perf_counter() < deadline:
                    while inflight < window and len(sent_at) < n:
                        frame = head + str(len(sent_at)).encode() + b'"}'
                        sent_at.append(time.perf_counter())
                        await ws.send(frame, text=True)
                        inflight += 1
                if inflight == 0:
                    break
                reply = orjson.loads(await ws.recv(decode=False))
                inflight -= 1
                if reply.get("result") == "ok":
                    result.ok += 1
                    result.latencies_ms.append((time.perf_counter() - sent_at[int(reply["context"])]) * 1e3)
                else:
                    result.error(str(reply.get("errorMsg") or reply))
    except TimeoutError:
        result.error(f"timed out with {inflight} replies outstanding", inflight)
    finally:
        result.seconds = time.perf_counter() - start
        await ws.close()
    result.capped_by_time = len(sent_at) < n
    return result


async def publish_ws_batch(
    url: str, payload: bytes, n: int, seconds: float, window: int, batch: int
) -> LoadResult:
    """Batch frames of ``batch`` messages, ``window // batch`` frames un-acked."""
    result = LoadResult()
    b64 = base64.b64encode(payload).decode()
    body = [{"payload": b64} for _ in range(batch)]
    sent_at: list[float] = []
    frames_max = max(1, window // batch)
    ws = await ws_connect(url)
    start = time.perf_counter()
    deadline = start + seconds
    sent = inflight = 0
    try:
        async with asyncio.timeout(seconds + DRAIN_S):
            while True:
                if time.perf_counter() < deadline:
                    while inflight < frames_max and sent < n:
                        count = min(batch, n - sent)
                        messages = [{"payload": b64, "context": str(len(sent_at))}, *body[1:count]]
                        frame = orjson.dumps({"type": "batch", "messages": messages})
                        sent_at.append(time.perf_counter())
                        await ws.send(frame, text=True)
                        sent += count
                        inflight += 1
                if inflight == 0:
                    break
                reply = orjson.loads(await ws.recv(decode=False))
                inflight -= 1
                results = reply.get("results")
                if reply.get("type") != "batch" or not results:  # the whole frame was refused
                    result.error(str(reply.get("errorMsg") or reply), batch)
                    continue
                latency = (time.perf_counter() - sent_at[int(results[0]["context"])]) * 1e3
                for item in results:
                    if item.get("result") == "ok":
                        result.ok += 1
                        result.latencies_ms.append(latency)
                    else:
                        result.error(str(item.get("errorMsg") or item))
    except TimeoutError:
        result.error(f"timed out with {inflight} batch replies outstanding", inflight * batch)
    finally:
        result.seconds = time.perf_counter() - start
        await ws.close()
    result.capped_by_time = sent < n
    return result


async def publish_rest(
    url: str, payload: bytes, n: int, seconds: float, window: int, batch: int
) -> LoadResult:
    """POST ``messages`` arrays of ``batch``; ``window // batch`` requests in flight."""
    result = LoadResult()
    b64 = base64.b64encode(payload).decode()

    def body(count: int) -> bytes:
        return orjson.dumps({"messages": [{"payload": b64, "payloadEncoding": "base64"}] * count})

    full = body(batch)
    workers = max(1, window // batch)
    claimed = 0
    start = time.perf_counter()
    deadline = start + seconds
    headers = {"content-type": "application/json"}

    async def worker(http: httpx.AsyncClient) -> None:
        nonlocal claimed
        while claimed < n and time.perf_counter() < deadline:
            count = min(batch, n - claimed)
            claimed += count
            sent = time.perf_counter()
            try:
                response = await http.post(
                    url, content=full if count == batch else body(count), headers=headers
                )
            except httpx.HTTPError as exc:
                result.error(f"{type(exc).__name__}: {exc}", count)
                continue
            latency = (time.perf_counter() - sent) * 1e3
            if response.status_code != 200:
                result.error(f"HTTP {response.status_code}: {response.text[:150]}", count)
                continue
            for item in orjson.loads(response.content)["messagePublishResults"]:
                if item.get("errorCode") == 0:
                    result.ok += 1
                    result.latencies_ms.append(latency)
                else:
                    result.error(str(item.get("errorMsg") or item))

    limits = httpx.Limits(max_connections=workers, max_keepalive_connections=workers)
    async with httpx.AsyncClient(limits=limits, timeout=DRAIN_S) as http:
        try:
            async with asyncio.timeout(seconds + 2 * DRAIN_S):
                await asyncio.gather(*(worker(http) for _ in range(workers)))
        except TimeoutError:
            result.error("timed out waiting for REST replies")
    result.seconds = time.perf_counter() - start
    result.capped_by_time = claimed < n
    return result


# ---------------------------------------------------------------- W3 consumers


async def consume(
    mode: str, ws_base: str, topic: str, sub: str, backlog: int, seconds: float, window: int
) -> LoadResult:
    """Drain ``backlog`` messages with a Shared subscription from Earliest, acking each one
    (``ws``: one ack frame per message; ``ws-batch``: batched delivery, one ack frame per delivery)."""
    if mode not in CONSUME_MODES:
        raise ValueError(f"unknown consume mode {mode!r} (one of {', '.join(CONSUME_MODES)})")
    batched = mode == "ws-batch"
    result = LoadResult()
    seen: set[str] = set()
    ws = await ws_connect(consumer_url(ws_base, topic, sub, window, batched))
    start = time.perf_counter()
    try:
        async with asyncio.timeout(seconds):
            while len(seen) < backlog:
                frame = orjson.loads(await ws.recv(decode=False))
                if batched and frame.get("type") == "messages":
                    ids = [m["messageId"] for m in frame["messages"]]
                    await ws.send(orjson.dumps({"type": "ack", "messageIds": ids}), text=True)
                elif "messageId" in frame and "payload" in frame:
                    ids = [frame["messageId"]]
                    await ws.send(orjson.dumps({"messageId": ids[0]}), text=True)
                else:
                    continue  # notices
                for message_id in ids:
                    if message_id in seen:
                        result.duplicates += 1
                    else:
                        seen.add(message_id)
    except TimeoutError:
        result.capped_by_time = True
    finally:
        result.seconds = time.perf_counter() - start
        await ws.close()
    result.ok = len(seen)
    return result
