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
compression is off (as the peers' WebSocket clients). When the gateway closes
a session because the topic moved (4503, e.g. the load manager shed its
bundle) the client looks the owner up and connects again, as a Pulsar client
does; what was in flight counts as errors (fate unknown, never retried) and
the row says how many reconnects happened. Every error is counted under its
kind (the close code and reason, the error reply's text, a timeout, or the
bench client's own failure) so a row with errors says what went wrong. Gateway quirk handled here: a batch
reply does not echo the frame's ``context``, so the first message of each
batch frame carries the frame number as its context.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx
import orjson
import websockets

from folio.bench_ws_client import FrameSession, OnFrame, open_session

TOPIC_PATH = "persistent/public/default"
DRAIN_S = 15.0  # after the deadline: how long to wait for replies still in flight
CONNECT_S = 15.0
CLOSE_S = 2.0  # a closing session whose peer does not finish the close handshake is dropped after this
MAX_FRAME = 64 * 1024 * 1024
PUBLISH_MODES = ("ws", "ws-batch", "rest-batch")
TOPIC_MOVED_CODE = 4503  # the gateway closes sessions of a topic that moved / was unloaded
RECONNECTS_MAX = 5
DRAIN_IDLE_S = 0.5
CONSUME_MODES = ("ws", "ws-batch")


class SessionClosed(Exception):
    """A picows session ended other than by the topic moving (or after too many moves), or the
    bench client's own frame callback failed."""


class Tally(Protocol):
    """What ``Link.reconnect`` counts into (a run's result)."""

    reconnects: int

    def error(self, message: str, count: int = 1) -> None: ...


@dataclass
class LoadResult:
    """One measured run; ``latencies_ms`` has one sample per acked message; ``error_kinds``:
    each error's kind (what the gateway or the client said) -> messages it cost."""

    ok: int = 0
    errors: int = 0
    seconds: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)
    duplicates: int = 0
    first_error: str = ""
    capped_by_time: bool = False
    reconnects: int = 0
    error_kinds: dict[str, int] = field(default_factory=dict)

    def error(self, message: str, count: int = 1) -> None:
        self.errors += count
        count_kind(self.error_kinds, message, count)
        if not self.first_error:
            self.first_error = message[:200]


def count_kind(kinds: dict[str, int], message: str, count: int) -> None:
    """Add ``count`` errors of kind ``message`` (its first 200 characters) to ``kinds``."""
    kind = message[:200]
    kinds[kind] = kinds.get(kind, 0) + count


async def lookup(http_base: str, topic: str) -> tuple[str, str]:
    """(ws base URL, http base URL) of the gateway that owns ``topic``."""
    async with httpx.AsyncClient(timeout=CONNECT_S) as http:
        response = await http.get(f"{http_base}/lookup/v2/topic/{TOPIC_PATH}/{topic}")
        response.raise_for_status()
        body = response.json()
    return str(body["brokerUrl"]), str(body["httpUrl"])


async def ws_connect(url: str) -> websockets.ClientConnection:
    return await websockets.connect(
        url, open_timeout=CONNECT_S, close_timeout=CLOSE_S, max_size=MAX_FRAME, compression=None
    )


def producer_url(ws_base: str, topic: str) -> str:
    return f"{ws_base}/ws/v2/producer/{TOPIC_PATH}/{topic}"


def consumer_url(ws_base: str, topic: str, sub: str, queue: int, batch: bool) -> str:
    query = f"subscriptionType=Shared&subscriptionInitialPosition=Earliest&receiverQueueSize={queue}"
    if batch:
        query += "&batchDelivery=true"
    return f"{ws_base}/ws/v2/consumer/{TOPIC_PATH}/{topic}/{sub}?{query}"


# ---------------------------------------------------------------- W1 publishers


class Link:
    """Connects (again) to whichever gateway owns the topic now, as a Pulsar client does."""

    def __init__(self, http_base: str, topic: str, url: Callable[[str], str]) -> None:
        self.http_base = http_base
        self.topic = topic
        self.url = url
        self.reconnects = 0

    async def connect(self) -> websockets.ClientConnection:
        ws_base, _ = await lookup(self.http_base, self.topic)
        return await ws_connect(self.url(ws_base))

    async def open(self, on_frame: OnFrame) -> FrameSession:
        """A picows session to whichever gateway owns the topic now."""
        ws_base, _ = await lookup(self.http_base, self.topic)
        return await open_session(self.url(ws_base), on_frame)

    async def reopen(
        self, session: FrameSession, on_frame: OnFrame, result: Tally, lost: int
    ) -> FrameSession:
        """After ``session`` ended: if the topic moved (4503), count what was in flight as errors
        (fate unknown; not retried) and open a new session; else raise ``SessionClosed``."""
        code = session.closed.result()
        if session.failure:
            raise SessionClosed(f"the bench client failed on a frame (it closed 1011): {session.failure}")
        if code != TOPIC_MOVED_CODE or self.reconnects >= RECONNECTS_MAX:
            raise SessionClosed(f"the gateway closed the session: {code} {session.close_reason}")
        self.reconnects += 1
        result.reconnects += 1
        result.error(f"session closed ({code} {session.close_reason}); {lost} in flight, fate unknown", lost)
        return await self.open(on_frame)

    async def reconnect(
        self, exc: websockets.ConnectionClosed, result: Tally, lost: int
    ) -> websockets.ClientConnection:
        """After the gateway closed the session because the topic moved (4503): count what was in
        flight as errors (its fate is unknown; not retried) and connect again; else re-raise."""
        code = exc.rcvd.code if exc.rcvd is not None else None
        if code != TOPIC_MOVED_CODE or self.reconnects >= RECONNECTS_MAX:
            raise exc
        self.reconnects += 1
        result.reconnects += 1
        reason = exc.rcvd.reason if exc.rcvd is not None else ""
        result.error(f"session closed ({code} {reason}); {lost} in flight, fate unknown", lost)
        return await self.connect()


async def publish(
    mode: str, http_base: str, topic: str, payload: bytes, n: int, seconds: float, window: int, batch: int
) -> LoadResult:
    """Publish up to ``n`` copies of ``payload`` for at most ``seconds`` (``http_base``: any gateway)."""
    link = Link(http_base, topic, lambda ws_base: producer_url(ws_base, topic))
    if mode == "ws":
        return await publish_ws(link, payload, n, seconds, window)
    if mode == "ws-batch":
        return await publish_ws_batch(link, payload, n, seconds, window, batch)
    if mode == "rest-batch":
        return await publish_rest(http_base, topic, payload, n, seconds, window, batch)
    raise ValueError(f"unknown publish mode {mode!r} (one of {', '.join(PUBLISH_MODES)})")


async def drain(ws: websockets.ClientConnection) -> list[bytes]:
    """Frames that arrived before the close and are still buffered (stops when none comes for
    ``DRAIN_IDLE_S``: a closing connection may block ``recv`` until its TCP connection ends)."""
    frames: list[bytes] = []
    try:
        while True:
            frames.append(await asyncio.wait_for(ws.recv(decode=False), DRAIN_IDLE_S))
    except (websockets.ConnectionClosed, TimeoutError):
        return frames


async def publish_ws(link: Link, payload: bytes, n: int, seconds: float, window: int) -> LoadResult:
    """One message per frame, context = message number, ``window`` un-acked. On the picows
    client (``folio.bench_ws_client``): each reply is handled in its frame callback, which
    sends the next message there (no coroutine per frame), so the client's CPU per message
    stays well below the gateway's."""
    result = LoadResult()
    head = b'{"payload":"' + base64.b64encode(payload) + b'","context":"'
    sent_at: list[float] = []
    inflight = 0
    deadline = 0.0
    session: FrameSession | None = None
    finished: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def refill() -> None:
        nonlocal inflight
        if session is None or not session.is_open:
            return
        if time.perf_counter() < deadline:
            while inflight < window and len(sent_at) < n:
                frame = head + str(len(sent_at)).encode() + b'"}'
                sent_at.append(time.perf_counter())
                inflight += 1
                session.send(frame)
        if inflight == 0 and not finished.done():
            finished.set_result(None)

    def handle(_session: FrameSession, raw: bytes) -> None:
        nonlocal inflight
        reply = orjson.loads(raw)
        inflight -= 1
        if reply.get("result") == "ok":
            result.ok += 1
            result.latencies_ms.append((time.perf_counter() - sent_at[int(reply["context"])]) * 1e3)
        else:
            result.error(str(reply.get("errorMsg") or reply))
        refill()

    session = await link.open(handle)
    start = time.perf_counter()
    deadline = start + seconds
    try:
        async with asyncio.timeout(seconds + DRAIN_S):
            refill()
            while not finished.done():
                waits: list[asyncio.Future[Any]] = [finished, session.closed]
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                if finished.done():
                    break
                session = await link.reopen(session, handle, result, inflight)
                inflight = 0
                refill()
    except TimeoutError:
        result.error(f"timed out with {inflight} replies outstanding", inflight)
    finally:
        result.seconds = time.perf_counter() - start
        await session.close()
    result.capped_by_time = len(sent_at) < n
    return result


async def publish_ws_batch(
    link: Link, payload: bytes, n: int, seconds: float, window: int, batch: int
) -> LoadResult:
    """Batch frames of ``batch`` messages, ``window // batch`` frames un-acked."""
    result = LoadResult()
    b64 = base64.b64encode(payload).decode()
    body = [{"payload": b64} for _ in range(batch)]
    sent_at: list[float] = []
    frames_max = max(1, window // batch)
    sent = inflight = 0
    pending: dict[int, int] = {}  # frame number -> messages in it

    def handle(raw: bytes) -> None:
        nonlocal inflight
        reply = orjson.loads(raw)
        inflight -= 1
        results = reply.get("results")
        if reply.get("type") != "batch" or not results:  # the whole frame was refused
            frame = int(reply.get("context") or -1)
            result.error(str(reply.get("errorMsg") or reply), pending.pop(frame, batch))
            return
        frame = int(results[0]["context"])
        pending.pop(frame, None)
        latency = (time.perf_counter() - sent_at[frame]) * 1e3
        for item in results:
            if item.get("result") == "ok":
                result.ok += 1
                result.latencies_ms.append(latency)
            else:
                result.error(str(item.get("errorMsg") or item))

    ws = await link.connect()
    start = time.perf_counter()
    deadline = start + seconds
    try:
        async with asyncio.timeout(seconds + DRAIN_S):
            while True:
                try:
                    if time.perf_counter() < deadline:
                        while inflight < frames_max and sent < n:
                            count = min(batch, n - sent)
                            number = len(sent_at)
                            messages = [{"payload": b64, "context": str(number)}, *body[1:count]]
                            data = orjson.dumps(
                                {"type": "batch", "context": str(number), "messages": messages}
                            )
                            sent_at.append(time.perf_counter())
                            pending[number] = count
                            sent += count
                            inflight += 1
                            await ws.send(data, text=True)
                    if inflight == 0:
                        break
                    handle(await ws.recv(decode=False))
                except websockets.ConnectionClosed as exc:
                    for raw in await drain(ws):
                        handle(raw)
                    ws = await link.reconnect(exc, result, sum(pending.values()))
                    pending.clear()
                    inflight = 0
    except TimeoutError:
        result.error(f"timed out with {inflight} batch replies outstanding", sum(pending.values()))
    finally:
        result.seconds = time.perf_counter() - start
        await ws.close()
    result.capped_by_time = sent < n
    return result


async def publish_rest(
    http_base: str, topic: str, payload: bytes, n: int, seconds: float, window: int, batch: int
) -> LoadResult:
    """POST ``messages`` arrays of ``batch`` to the owner; ``window // batch`` requests in flight.
    After a failed request the owner is looked up again (the topic may have moved)."""
    result = LoadResult()
    b64 = base64.b64encode(payload).decode()

    def body(count: int) -> bytes:
        return orjson.dumps({"messages": [{"payload": b64, "payloadEncoding": "base64"}] * count})

    full = body(batch)
    workers = max(1, window // batch)
    claimed = 0
    owner = [(await lookup(http_base, topic))[1]]
    start = time.perf_counter()
    deadline = start + seconds
    headers = {"content-type": "application/json"}

    async def failed(message: str, count: int) -> None:
        result.error(message, count)
        owner[0] = (await lookup(http_base, topic))[1]

    async def worker(http: httpx.AsyncClient) -> None:
        nonlocal claimed
        while claimed < n and time.perf_counter() < deadline:
            count = min(batch, n - claimed)
            claimed += count
            sent = time.perf_counter()
            url = f"{owner[0]}/topics/{TOPIC_PATH}/{topic}"
            try:
                response = await http.post(
                    url, content=full if count == batch else body(count), headers=headers
                )
            except httpx.HTTPError as exc:
                await failed(f"{type(exc).__name__}: {exc}", count)
                continue
            latency = (time.perf_counter() - sent) * 1e3
            if response.status_code != 200:
                await failed(f"HTTP {response.status_code}: {response.text[:150]}", count)
                continue
            bad = 0
            for item in orjson.loads(response.content)["messagePublishResults"]:
                if item.get("errorCode") == 0:
                    result.ok += 1
                    result.latencies_ms.append(latency)
                else:
                    bad += 1
                    result.error(str(item.get("errorMsg") or item))
            if bad:
                owner[0] = (await lookup(http_base, topic))[1]

    limits = httpx.Limits(max_connections=workers + 1, max_keepalive_connections=workers + 1)
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
    mode: str, http_base: str, topic: str, sub: str, backlog: int, seconds: float, window: int
) -> LoadResult:
    """Drain ``backlog`` messages with a Shared subscription from Earliest, acking each one
    (``ws``: one ack frame per message; ``ws-batch``: batched delivery, one ack frame per delivery),
    on the picows client: each delivery is acked in its frame callback, on the session it came
    by (the first may come with the handshake's answer, before ``open`` has returned).
    If the topic moves, connect again: unacked messages come again and count as duplicates."""
    if mode not in CONSUME_MODES:
        raise ValueError(f"unknown consume mode {mode!r} (one of {', '.join(CONSUME_MODES)})")
    batched = mode == "ws-batch"
    link = Link(http_base, topic, lambda ws_base: consumer_url(ws_base, topic, sub, window, batched))
    result = LoadResult()
    seen: set[str] = set()
    finished: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    if backlog <= 0:
        finished.set_result(None)

    def handle(session: FrameSession, raw: bytes) -> None:
        frame = orjson.loads(raw)
        if batched and frame.get("type") == "messages":
            ids = [m["messageId"] for m in frame["messages"]]
            session.send(orjson.dumps({"type": "ack", "messageIds": ids}))
        elif "messageId" in frame and "payload" in frame:
            ids = [frame["messageId"]]
            session.send(orjson.dumps({"messageId": ids[0]}))
        else:
            return  # notices
        for message_id in ids:
            if message_id in seen:
                result.duplicates += 1
            else:
                seen.add(message_id)
        if len(seen) >= backlog and not finished.done():
            finished.set_result(None)

    session = await link.open(handle)
    start = time.perf_counter()
    try:
        async with asyncio.timeout(seconds):
            while not finished.done():
                waits: list[asyncio.Future[Any]] = [finished, session.closed]
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                if not finished.done():
                    session = await link.reopen(session, handle, result, 0)
    except TimeoutError:
        result.capped_by_time = True
    finally:
        result.seconds = time.perf_counter() - start
        await session.close()
    result.ok = len(seen)
    return result
