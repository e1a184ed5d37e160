"""Small WebSocket/HTTP client helpers for messaging component tests (real sockets).

Producers send Pulsar JSON frames and match replies by ``context``; consumers
collect delivered frames and ack them. Every wait has a timeout so a broken
gateway fails a test instead of hanging it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import websockets
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import InvalidStatus

from storage.formats.message_id import MessageId

NAMESPACE = "public/default"
TOPIC_PATH = f"persistent/{NAMESPACE}"


def b64(data: bytes | str) -> str:
    raw = data.encode() if isinstance(data, str) else data
    return base64.b64encode(raw).decode()


def unb64(text: str) -> bytes:
    return base64.b64decode(text)


class Producer:
    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self._contexts = itertools.count()

    @classmethod
    async def connect(cls, base: str, topic: str, query: str = "", namespace: str = NAMESPACE) -> Producer:
        url = f"{base}/ws/v2/producer/persistent/{namespace}/{topic}?{query}"
        ws = await websockets.connect(url, open_timeout=15)
        return cls(ws)

    async def send(self, payload: bytes | str, timeout: float = 15.0, **fields: Any) -> dict[str, Any]:
        context = str(next(self._contexts))
        await self.ws.send(orjson.dumps({"payload": b64(payload), "context": context, **fields}).decode())
        reply: dict[str, Any] = orjson.loads(await asyncio.wait_for(self.ws.recv(), timeout))
        assert reply.get("context") == context, reply
        return reply

    async def close(self) -> None:
        await self.ws.close()


class Consumer:
    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws

    @classmethod
    async def connect(cls, base: str, topic: str, sub: str, query: str = "") -> Consumer:
        url = f"{base}/ws/v2/consumer/{TOPIC_PATH}/{topic}/{sub}?{query}"
        return cls(await websockets.connect(url, open_timeout=15))

    async def receive(self, timeout: float = 10.0) -> dict[str, Any]:
        while True:
            frame: dict[str, Any] = orjson.loads(await asyncio.wait_for(self.ws.recv(), timeout))
            if "messageId" in frame and "payload" in frame:
                return frame

    async def receive_n(self, n: int, timeout: float = 15.0, ack: bool = True) -> list[dict[str, Any]]:
        out = []
        for _ in range(n):
            frame = await self.receive(timeout)
            out.append(frame)
            if ack:
                await self.ack(frame["messageId"])
        return out

    async def nothing_for(self, seconds: float) -> bool:
        try:
            await self.receive(seconds)
        except TimeoutError:
            return True
        return False

    async def ack(self, message_id: str) -> None:
        await self.ws.send(orjson.dumps({"messageId": message_id}).decode())

    async def send(self, obj: dict[str, Any]) -> None:
        await self.ws.send(orjson.dumps(obj).decode())

    async def close(self) -> None:
        await self.ws.close()


# ---------------------------------------------------------------- semantics-test helpers
# (background-reading consumers, pipelined publishing, refused handshakes, a
# cluster for a whole test module, message-id decoding)


def decode_id(message_id: str) -> MessageId:
    """A base64 WebSocket message id as a ``MessageId`` (``L:E:P[:B]`` via ``str``)."""
    return MessageId.from_base64(message_id)


def id_order(message_id: str) -> tuple[int, int, int, int]:
    """Sort key of a base64 message id in log order (partition, ledger, entry, batch index)."""
    mid = decode_id(message_id)
    return (mid.partition, mid.ledger_id, mid.entry_id, mid.batch_index)


def consumer_url(base: str, topic: str, sub: str, query: str = "", namespace: str = NAMESPACE) -> str:
    return f"{base}/ws/v2/consumer/persistent/{namespace}/{topic}/{sub}?{query}"


def reader_url(base: str, topic: str, query: str = "", namespace: str = NAMESPACE) -> str:
    return f"{base}/ws/v2/reader/persistent/{namespace}/{topic}?{query}"


async def handshake_status(url: str) -> int:
    """Open a WebSocket expecting the upgrade to be refused; returns the HTTP status
    (101 if it was accepted - the socket is closed again at once)."""
    try:
        ws = await websockets.connect(url, open_timeout=15)
    except InvalidStatus as exc:
        return int(exc.response.status_code)
    await ws.close()
    return 101


class PipelinedProducer:
    """A producer session that keeps up to ``window`` publishes in flight (so the
    gateway stores them several to an entry); replies are matched by context."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self._contexts = itertools.count()

    @classmethod
    async def connect(cls, base: str, topic: str, query: str = "") -> PipelinedProducer:
        url = f"{base}/ws/v2/producer/{TOPIC_PATH}/{topic}?{query}"
        return cls(await websockets.connect(url, open_timeout=15))

    async def publish(self, messages: list[dict[str, Any]], window: int = 200) -> list[dict[str, Any]]:
        """``messages``: dicts with ``payload`` (bytes/str) plus other publish
        fields; returns the replies in message order."""
        contexts = [str(next(self._contexts)) for _ in messages]
        replies: dict[str, dict[str, Any]] = {}
        sent = 0
        while len(replies) < len(messages):
            while sent < len(messages) and sent - len(replies) < window:
                fields = dict(messages[sent])
                fields["payload"] = b64(fields["payload"])
                fields["context"] = contexts[sent]
                await self.ws.send(orjson.dumps(fields).decode())
                sent += 1
            reply: dict[str, Any] = orjson.loads(await asyncio.wait_for(self.ws.recv(), 20))
            replies[reply["context"]] = reply
        return [replies[c] for c in contexts]

    async def close(self) -> None:
        await self.ws.close()


async def publish_pipelined(
    base: str, topic: str, messages: list[dict[str, Any]], query: str = "", window: int = 200
) -> list[dict[str, Any]]:
    """Publish ``messages`` over one new producer session (see ``PipelinedProducer``)."""
    producer = await PipelinedProducer.connect(base, topic, query)
    try:
        return await producer.publish(messages, window)
    finally:
        await producer.close()


class Collector:
    """A consumer (or reader) socket read by a background task: message frames go
    to ``messages`` (and a queue), every other frame to ``notices``. Acks are
    sent through ``ack``/``send``; ``on_message`` (optional) is called for each
    message frame as it is read."""

    def __init__(self, ws: ClientConnection, name: str = "") -> None:
        self.ws = ws
        self.name = name
        self.messages: list[dict[str, Any]] = []
        self.notices: list[dict[str, Any]] = []
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.changed = asyncio.Event()
        self.on_message: Any = None
        self.closed = False
        self.close_code: int | None = None
        self._task = asyncio.get_running_loop().create_task(self._read())

    @classmethod
    async def connect(cls, url: str, name: str = "", busy_retry_s: float = 10.0) -> Collector:
        """Connect; a 409 (the previous consumer's disconnect not yet seen by the
        owner - e.g. still travelling through a relay) is retried for ``busy_retry_s``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + busy_retry_s
        while True:
            try:
                return cls(await websockets.connect(url, open_timeout=15), name)
            except InvalidStatus as exc:
                if exc.response.status_code != 409 or loop.time() > deadline:
                    raise
            await asyncio.sleep(0.05)

    async def _read(self) -> None:
        try:
            async for raw in self.ws:
                frame: dict[str, Any] = orjson.loads(raw)
                if "messageId" in frame and "payload" in frame:
                    self.messages.append(frame)
                    self.queue.put_nowait(frame)
                    if self.on_message is not None:
                        self.on_message(self, frame)
                else:
                    self.notices.append(frame)
                self.changed.set()
        except websockets.ConnectionClosed:
            pass
        finally:
            self.closed = True
            self.close_code = self.ws.close_code
            self.changed.set()

    async def wait_until(self, predicate: Any, timeout: float = 15.0) -> None:
        """Wait until ``predicate()`` is true (checked whenever a frame arrives)."""
        async with asyncio.timeout(timeout):
            while not predicate():
                self.changed.clear()
                if predicate():
                    return
                await self.changed.wait()

    async def wait_messages(self, n: int, timeout: float = 15.0) -> list[dict[str, Any]]:
        await self.wait_until(lambda: len(self.messages) >= n, timeout)
        return self.messages[:n]

    async def next(self, timeout: float = 10.0) -> dict[str, Any]:
        return await asyncio.wait_for(self.queue.get(), timeout)

    async def nothing_for(self, seconds: float) -> bool:
        """True if no further message frame arrives within ``seconds``."""
        seen = len(self.messages)
        try:
            await self.wait_until(lambda: len(self.messages) > seen, seconds)
        except TimeoutError:
            return True
        return False

    def active(self) -> bool | None:
        """The last ``active`` notice's flag (Failover), None if none came."""
        flags = [n["active"] for n in self.notices if n.get("type") == "active"]
        return flags[-1] if flags else None

    async def ack(self, message_id: str) -> None:
        await self.ws.send(orjson.dumps({"messageId": message_id}).decode())

    async def send(self, obj: dict[str, Any]) -> None:
        await self.ws.send(orjson.dumps(obj).decode())

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._task
        with contextlib.suppress(Exception):
            await self.ws.close()
        self.closed = True


@contextlib.asynccontextmanager
async def module_cluster(
    etcd_endpoint: str, root: Path, gateways: int = 2, nodes: int = 3
) -> AsyncIterator[Any]:
    """A ``MessagingCluster`` (see conftest) for a whole test module: started on
    entry, every process stopped by PID and its etcd namespace deleted on exit."""
    from clusters import started_cluster

    global _module_clusters
    _module_clusters += 1
    namespace = f"/semantics-{os.getpid()}-{_module_clusters:04d}"
    async with started_cluster(etcd_endpoint, namespace, root, gateways=gateways, nodes=nodes) as cluster:
        yield cluster


_module_clusters = 0


async def eventually(predicate: Any, timeout: float = 10.0, interval: float = 0.05) -> None:
    """Poll ``predicate()`` until it is true; ``TimeoutError`` after ``timeout``."""
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(interval)


async def publish_each(base: str, topic: str, payloads: list[str]) -> list[str]:
    """Publish ``payloads`` one at a time (each waits for its reply, so each is
    an entry of its own) over a new producer session; returns the message ids."""
    producer = await Producer.connect(base, topic)
    try:
        replies = [await producer.send(p) for p in payloads]
    finally:
        await producer.close()
    assert all(r["result"] == "ok" for r in replies), replies
    return [str(r["messageId"]) for r in replies]
