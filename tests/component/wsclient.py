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

from gateway.broker.message_id import MessageId

TOPIC_PATH = "persistent/public/default"


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
    async def connect(cls, base: str, topic: str, query: str = "") -> Producer:
        ws = await websockets.connect(f"{base}/ws/v2/producer/{TOPIC_PATH}/{topic}?{query}", open_timeout=15)
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


def consumer_url(base: str, topic: str, sub: str, query: str = "") -> str:
    return f"{base}/ws/v2/consumer/{TOPIC_PATH}/{topic}/{sub}?{query}"


def reader_url(base: str, topic: str, query: str = "") -> str:
    return f"{base}/ws/v2/reader/{TOPIC_PATH}/{topic}?{query}"


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
    from clusters import LedgerCluster, MessagingCluster

    global _module_clusters
    _module_clusters += 1
    namespace = f"/semantics-{os.getpid()}-{_module_clusters:04d}"
    cluster = MessagingCluster(LedgerCluster(etcd_endpoint, namespace, root))
    try:
        await cluster.ledgers.add_nodes(nodes)
        for _ in range(gateways):
            await cluster.add_gateway()
        yield cluster
    finally:
        for gateway in cluster.gateways:
            gateway.stop()
        for node in cluster.ledgers.nodes:
            node.stop()
        with contextlib.suppress(Exception):
            store = await cluster.ledgers.store()
            await store.delete_prefix("")
        for store in cluster.ledgers.stores:
            with contextlib.suppress(Exception):
                await store.close()


_module_clusters = 0


# ---------------------------------------------------------------- failure tests: reconnecting clients
# (tests/component/test_failures_gateway.py; histories are checked by checkers.py)

RETRY_PAUSE_S = 0.2


def _checkers() -> Any:
    import checkers  # a sibling test module; imported lazily so wsclient stays standalone

    return checkers


async def owner_of(http_base: str, topic: str) -> str:
    """The ``httpUrl`` of the gateway owning ``topic`` (lookup through ``http_base``)."""
    import httpx

    async with httpx.AsyncClient(timeout=10.0) as http:
        response = await http.get(f"{http_base}/lookup/v2/topic/{TOPIC_PATH}/{topic}")
        response.raise_for_status()
        return str(response.json()["httpUrl"])


async def wait_for_owner(http_base: str, topic: str, want: str, timeout: float = 20.0) -> float:
    """Poll lookups through ``http_base`` until ``want`` owns ``topic``; returns seconds waited."""
    import time

    start = time.monotonic()
    last = ""
    while time.monotonic() - start < timeout:
        try:
            last = await owner_of(http_base, topic)
            if last == want:
                return time.monotonic() - start
        except Exception as exc:  # the lookup itself may fail while ownership moves
            last = repr(exc)
        await asyncio.sleep(0.2)
    raise AssertionError(f"{want} did not take over {topic} within {timeout}s (last answer: {last})")


class _Broken(Exception):
    """A producer session must be abandoned (error reply, reply timeout)."""


class AtLeastOnceProducer:
    """Publishes seq 0, 1, 2, ... (payload ``checkers.encode_value``) with up to ``window``
    messages in flight. On a close, an error reply or a reply timeout it reconnects to the
    next base URL (round robin) and resends, in order, every message whose ``ok`` reply it
    has not received. ``history()`` gives one ``checkers.Sent`` per sequence number."""

    def __init__(
        self,
        bases: list[str],
        topic: str,
        name: str,
        *,
        window: int = 8,
        keys: int = 0,
        query: str = "",
        send_sequence_id: bool = False,
        reply_timeout: float = 5.0,
        interval_s: float = 0.0,
        first_base: int = 0,
    ) -> None:
        self.bases = bases
        self.topic = topic
        self.name = name
        self.window = window
        self.keys = keys
        self.query = query
        self.send_sequence_id = send_sequence_id
        self.reply_timeout = reply_timeout
        self.interval_s = interval_s
        self.attempt = first_base
        self.next_seq = 0
        self.unacked: set[int] = set()
        self.ok_ids: dict[int, list[str]] = {}
        self.acked_at: dict[int, float] = {}
        self.duplicates = 0  # ok replies flagged "duplicate" (dedup on)
        self.errors: list[tuple[float, str]] = []  # (monotonic time, what failed)
        self.connects = 0

    def key_of(self, seq: int) -> str | None:
        return f"k{seq % self.keys}" if self.keys else None

    def history(self) -> list[Any]:
        sent = _checkers().Sent
        return [
            sent(self.name, seq, self.key_of(seq), tuple(self.ok_ids.get(seq, ())))
            for seq in range(self.next_seq)
        ]

    def acked_count(self) -> int:
        return len(self.acked_at)

    async def run(self, stop: asyncio.Event, limit: int | None = None, drain_timeout: float = 25.0) -> None:
        """Publish until ``stop`` (or ``limit`` messages), then retry the unacked ones
        for at most ``drain_timeout`` seconds."""
        import time

        from websockets.exceptions import ConnectionClosed, InvalidHandshake

        drain_deadline: float | None = None
        while True:
            finished = stop.is_set() or (limit is not None and self.next_seq >= limit)
            if finished:
                if not self.unacked:
                    return
                drain_deadline = drain_deadline or time.monotonic() + drain_timeout
                if time.monotonic() > drain_deadline:
                    return
            base = self.bases[self.attempt % len(self.bases)]
            self.attempt += 1
            url = f"{base}/ws/v2/producer/{TOPIC_PATH}/{self.topic}?producerName={self.name}&{self.query}"
            try:
                ws = await websockets.connect(url, open_timeout=5, close_timeout=1, ping_interval=None)
            except (OSError, InvalidHandshake, TimeoutError) as exc:
                self.errors.append((time.monotonic(), f"connect {base}: {exc!r}"))
                await asyncio.sleep(RETRY_PAUSE_S)
                continue
            self.connects += 1
            try:
                await self._session(ws, base, stop, limit)
            except (ConnectionClosed, _Broken, OSError, TimeoutError) as exc:
                self.errors.append((time.monotonic(), f"session {base}: {exc!r}"))
                await asyncio.sleep(RETRY_PAUSE_S)
            finally:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(ws.close(), 2)

    async def _send(self, ws: ClientConnection, seq: int, inflight: dict[str, int]) -> None:
        frame: dict[str, Any] = {
            "payload": b64(_checkers().encode_value(self.name, seq, self.key_of(seq))),
            "context": str(seq),
        }
        key = self.key_of(seq)
        if key is not None:
            frame["key"] = key
        if self.send_sequence_id:
            frame["sequenceId"] = seq
        inflight[str(seq)] = seq
        await ws.send(orjson.dumps(frame).decode())

    async def _session(self, ws: ClientConnection, base: str, stop: asyncio.Event, limit: int | None) -> None:
        import time

        inflight: dict[str, int] = {}
        for seq in sorted(self.unacked):
            await self._send(ws, seq, inflight)
        next_at = 0.0
        while True:
            now = time.monotonic()
            can_send = (
                not stop.is_set() and len(inflight) < self.window and (limit is None or self.next_seq < limit)
            )
            if can_send and now >= next_at:
                seq = self.next_seq
                self.next_seq += 1
                self.unacked.add(seq)
                await self._send(ws, seq, inflight)
                next_at = now + self.interval_s
                continue
            if not inflight and not can_send:
                return
            timeout = max(0.0, next_at - now) if can_send else self.reply_timeout
            try:
                raw = await asyncio.wait_for(ws.recv(), timeout)
            except TimeoutError:
                if can_send:
                    continue
                raise _Broken(f"no reply within {self.reply_timeout}s ({len(inflight)} in flight)") from None
            reply = orjson.loads(raw)
            seq_or_none = inflight.pop(str(reply.get("context")), None)
            if seq_or_none is None:
                continue
            if reply.get("result") != "ok":
                raise _Broken(f"{reply.get('result')}: {reply.get('errorMsg')}")
            self.unacked.discard(seq_or_none)
            self.ok_ids.setdefault(seq_or_none, []).append(str(reply["messageId"]))
            self.acked_at.setdefault(seq_or_none, time.monotonic())
            if reply.get("duplicate"):
                self.duplicates += 1


class Deliveries:
    """Every message frame received by a group of consumers, in one global receipt order."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        self.frames = 0

    def record(self, consumer: str, frame: dict[str, Any]) -> None:
        self.items.append(_checkers().decode_frame(len(self.items), consumer, frame))


class ReconnectingConsumer:
    """A consumer that acks everything it receives and reconnects (next base URL, round
    robin) whenever its session closes or cannot be opened; close codes are recorded."""

    def __init__(
        self,
        bases: list[str],
        topic: str,
        sub: str,
        name: str,
        deliveries: Deliveries,
        *,
        query: str = "",
        first_base: int = 0,
    ) -> None:
        self.bases = bases
        self.topic = topic
        self.sub = sub
        self.name = name
        self.deliveries = deliveries
        self.query = query
        self.attempt = first_base
        self.closes: list[tuple[str, int | None]] = []  # (base URL, close code received or None)
        self.connect_errors: list[str] = []
        self.connects = 0

    async def run(self, stop: asyncio.Event) -> None:
        from websockets.exceptions import ConnectionClosed, InvalidHandshake

        while not stop.is_set():
            base = self.bases[self.attempt % len(self.bases)]
            self.attempt += 1
            url = (
                f"{base}/ws/v2/consumer/{TOPIC_PATH}/{self.topic}/{self.sub}"
                f"?consumerName={self.name}&{self.query}"
            )
            try:
                ws = await websockets.connect(url, open_timeout=5, close_timeout=1, ping_interval=None)
            except (OSError, InvalidHandshake, TimeoutError) as exc:
                self.connect_errors.append(f"{base}: {exc!r}")
                await asyncio.sleep(RETRY_PAUSE_S)
                continue
            self.connects += 1
            try:
                while not stop.is_set():
                    try:
                        raw = await asyncio.wait_for(ws.recv(), 0.5)
                    except TimeoutError:
                        continue
                    frame = orjson.loads(raw)
                    if "payload" in frame and "messageId" in frame:
                        self.deliveries.record(self.name, frame)
                        await ws.send(orjson.dumps({"messageId": frame["messageId"]}).decode())
            except ConnectionClosed as exc:
                self.closes.append((base, exc.rcvd.code if exc.rcvd is not None else None))
                await asyncio.sleep(RETRY_PAUSE_S)
            except OSError:
                await asyncio.sleep(RETRY_PAUSE_S)
            finally:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(ws.close(), 2)


async def read_log(
    base: str, topic: str, want_ids: set[Any] | None = None, timeout: float = 20.0, quiet_s: float = 1.5
) -> list[dict[str, Any]]:
    """Every message of ``topic`` from the earliest, through a new Exclusive subscription:
    reads until every id key in ``want_ids`` (``checkers.id_key``) was seen and then nothing
    came for ``quiet_s``, or until ``timeout``."""
    import secrets
    import time

    id_key = _checkers().id_key
    want = set(want_ids or ())
    consumer = await Consumer.connect(
        base,
        topic,
        f"final-{secrets.token_hex(4)}",
        "subscriptionType=Exclusive&subscriptionInitialPosition=Earliest&subscriptionMode=NonDurable",
    )
    frames: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            wait = quiet_s if not want else min(2.0, max(0.1, deadline - time.monotonic()))
            try:
                frame = await consumer.receive(wait)
            except TimeoutError:
                if not want:
                    break
                continue
            frames.append(frame)
            want.discard(id_key(frame["messageId"]))
            await consumer.ack(frame["messageId"])
    finally:
        await consumer.close()
    return frames


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
