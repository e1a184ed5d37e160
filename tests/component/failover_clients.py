"""Reconnecting clients for the failure tests (tests/component/test_failures_gateway.py).

An at-least-once producer that reconnects across gateways and resends what was
not acknowledged, a consumer that reconnects and records every delivery in one
global order, lookup helpers, and a reader of a whole topic. Histories they
record are checked by checkers.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import orjson
import websockets
from websockets.asyncio.client import ClientConnection
from wsclient import TOPIC_PATH, Consumer, b64

RETRY_PAUSE_S = 0.2


def _checkers() -> Any:
    import checkers  # a sibling test module; imported lazily (it imports nothing of ours)

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
            url = (
                f"{base}/ws/v2/producer/{TOPIC_PATH}/{self.topic}"
                f"?producerName={self.name}&markDuplicates=true&{self.query}"
            )
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
    robin) whenever its session closes or cannot be opened; close codes are recorded.
    Its first session is opened on ``first_base`` however long that takes (a test that
    wants one consumer relayed through a non-owner gets it, also on a loaded box)."""

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
            url = (
                f"{base}/ws/v2/consumer/{TOPIC_PATH}/{self.topic}/{self.sub}"
                f"?consumerName={self.name}&{self.query}"
            )
            try:
                ws = await websockets.connect(url, open_timeout=5, close_timeout=1, ping_interval=None)
            except (OSError, InvalidHandshake, TimeoutError) as exc:
                self.connect_errors.append(f"{base}: {exc!r}")
                if self.connects:  # until its first session, a consumer stays on the base it was given
                    self.attempt += 1
                await asyncio.sleep(RETRY_PAUSE_S)
                continue
            self.connects += 1
            self.attempt += 1  # the next session goes to the next base
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
