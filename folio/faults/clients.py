"""The fault run's clients: at-least-once producers (WebSocket and REST),
reconnecting consumers, and the final reader. Every operation goes to the history.

Owns: the wire side of the workload. Rules: a producer gives each message a
fixed sequence number and a unique payload ``{"p","s","k"}`` and resends it,
same number, until an ``ok`` comes (``invoke`` per attempt; ``ok`` / ``info``
per answer: an error or a broken session is ambiguous, the message may be
stored); a session that breaks moves to the next gateway. Consumers (WebSocket,
or HTTP long-poll fetch + ack) ack all they get and record each delivery. Every socket has a timeout: a paused
gateway costs a client its session, never the run.
"""

from __future__ import annotations

import abc
import asyncio
import base64
import contextlib
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
import websockets
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from folio.faults.history import History
from storage.formats.message_id import MessageId

RETRY_PAUSE_S = 0.3
REPLY_TIMEOUT_S = 6.0
OPEN_TIMEOUT_S = 5.0
_SESSION_ERRORS = (OSError, InvalidHandshake, TimeoutError, ConnectionClosed, InvalidStatus)


def topic_path(namespace: str, topic: str) -> str:
    return f"persistent/{namespace}/{topic}"


def normal_id(text: str) -> str:
    """Any message id form as ``L:E:P:B``."""
    m = MessageId.parse(text) if ":" in text else MessageId.from_base64(text)
    return f"{m.ledger_id}:{m.entry_id}:{m.partition}:{m.batch_index}"


def payload(producer: str, seq: int, key: str | None) -> bytes:
    return orjson.dumps({"p": producer, "s": seq, "k": key})


def decode(frame: dict[str, Any]) -> dict[str, Any]:
    value = orjson.loads(base64.b64decode(str(frame["payload"])))
    return {
        "producer": value["p"],
        "seq": int(value["s"]),
        "key": value.get("k"),
        "id": normal_id(frame["messageId"]),
    }


@dataclass
class Gateways:
    """The gateway base URLs the clients spread over (updated when one restarts)."""

    urls: list[str]

    def pick(self, attempt: int) -> str:
        return self.urls[attempt % len(self.urls)]


class Producer(abc.ABC):
    """Publishes seq 0, 1, 2... to one topic at ``rate`` msg/s, ``window`` in flight."""

    def __init__(
        self,
        history: History,
        gateways: Gateways,
        namespace: str,
        topic: str,
        name: str,
        *,
        keys: int = 0,
        sequence_ids: bool = False,
        rate: float = 10.0,
        window: int = 4,
        seed: int = 0,
    ) -> None:
        self.history, self.gateways = history, gateways
        self.namespace, self.topic, self.name = namespace, topic, name
        self.keys, self.sequence_ids, self.rate, self.window = keys, sequence_ids, rate, window
        self.attempt = seed
        self.next_seq = 0
        self.unacked: list[int] = []
        self.keys_by_seq: dict[int, str | None] = {}
        self.rng = random.Random(f"{name}-{seed}")

    def key_of(self, seq: int) -> str | None:
        return f"k{self.rng.randrange(self.keys)}" if self.keys else None

    def _invoke(self, seq: int, key: str | None) -> None:
        self.history.record("invoke", "publish", process=self.name, topic=self.topic, seq=seq, key=key)

    def _answer(
        self, seq: int, reply_ok: bool, message_id: str = "", duplicate: bool = False, error: str = ""
    ) -> None:
        if reply_ok:
            self.history.record(
                "ok",
                "publish",
                process=self.name,
                topic=self.topic,
                seq=seq,
                id=message_id,
                duplicate=duplicate,
            )
            if seq in self.unacked:
                self.unacked.remove(seq)
        else:
            self.history.record(
                "info", "publish", process=self.name, topic=self.topic, seq=seq, error=error[:200]
            )

    def fresh(self, stop: asyncio.Event) -> int | None:
        if stop.is_set():
            return None
        seq = self.next_seq
        self.next_seq += 1
        self.unacked.append(seq)
        self.keys_by_seq[seq] = self.key_of(seq)
        return seq

    async def run(self, stop: asyncio.Event, drained: asyncio.Event) -> None:
        """Publish until ``stop``, then resend the unacked until ``drained``."""
        while not (stop.is_set() and (not self.unacked or drained.is_set())):
            base = self.gateways.pick(self.attempt)
            self.attempt += 1
            try:
                await self.session(base, stop, drained)
            except _SESSION_ERRORS as exc:
                self.history.record("info", "session", process=self.name, base=base, error=repr(exc)[:200])
            await asyncio.sleep(RETRY_PAUSE_S)

    @abc.abstractmethod
    async def session(self, base: str, stop: asyncio.Event, drained: asyncio.Event) -> None:
        """One connection to ``base``: publish fresh and unacked sequences until it ends."""


class WsProducer(Producer):
    async def session(self, base: str, stop: asyncio.Event, drained: asyncio.Event) -> None:
        url = f"{base.replace('http', 'ws', 1)}/ws/v2/producer/{topic_path(self.namespace, self.topic)}"
        url += f"?producerName={self.name}&sendTimeoutMillis=30000&markDuplicates=true"
        ws = await websockets.connect(url, open_timeout=OPEN_TIMEOUT_S, close_timeout=1, ping_interval=None)
        try:
            await self._pump(ws, stop, drained)
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(ws.close(), 1)

    async def _send(self, ws: ClientConnection, seq: int, inflight: set[int]) -> None:
        key = self.keys_by_seq[seq]
        frame: dict[str, Any] = {
            "payload": base64.b64encode(payload(self.name, seq, key)).decode(),
            "context": str(seq),
        }
        if key is not None:
            frame["key"] = key
        if self.sequence_ids:
            frame["sequenceId"] = seq
        inflight.add(seq)
        self._invoke(seq, key)
        await ws.send(orjson.dumps(frame).decode())

    async def _pump(self, ws: ClientConnection, stop: asyncio.Event, drained: asyncio.Event) -> None:
        inflight: set[int] = set()
        for seq in list(self.unacked):
            await self._send(ws, seq, inflight)
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        last_reply = loop.time()
        while True:
            if drained.is_set() or (stop.is_set() and not self.unacked):
                return
            can_send = not stop.is_set() and len(inflight) < self.window
            now = loop.time()
            if can_send and now >= next_at:
                fresh = self.fresh(stop)
                if fresh is not None:
                    await self._send(ws, fresh, inflight)
                next_at = max(now, next_at) + 1.0 / self.rate
                continue
            wait = min(0.5, max(0.01, next_at - now)) if can_send else 0.5
            try:
                raw = await asyncio.wait_for(ws.recv(), wait)
            except TimeoutError:
                if inflight and loop.time() - last_reply > REPLY_TIMEOUT_S:
                    raise TimeoutError(f"no reply in {REPLY_TIMEOUT_S}s, {len(inflight)} in flight") from None
                if not inflight:
                    last_reply = loop.time()
                continue
            last_reply = loop.time()
            reply = orjson.loads(raw)
            context = str(reply.get("context", ""))
            if not context.isdigit() or int(context) not in inflight:
                continue
            seq = int(context)
            inflight.discard(seq)
            if reply.get("result") == "ok":
                self._answer(seq, True, normal_id(str(reply["messageId"])), bool(reply.get("duplicate")))
            else:
                self._answer(seq, False, error=f"{reply.get('result')}: {reply.get('errorMsg')}")
                raise ConnectionError(f"send error {reply.get('result')}")


class RestProducer(Producer):
    """One message per POST (``/topics/...``), resent until ok."""

    async def session(self, base: str, stop: asyncio.Event, drained: asyncio.Event) -> None:
        url = f"{base}/topics/{topic_path(self.namespace, self.topic)}?markDuplicates=true"
        async with httpx.AsyncClient(timeout=REPLY_TIMEOUT_S) as http:
            while not drained.is_set() and not (stop.is_set() and not self.unacked):
                seq = self.unacked[0] if self.unacked else self.fresh(stop)
                if seq is None:
                    return
                key = self.keys_by_seq[seq]
                message: dict[str, Any] = {"payload": payload(self.name, seq, key).decode()}
                if key is not None:
                    message["key"] = key
                if self.sequence_ids:
                    message["sequenceId"] = seq
                self._invoke(seq, key)
                try:
                    response = await http.post(url, json={"producerName": self.name, "messages": [message]})
                except httpx.HTTPError as exc:
                    self._answer(seq, False, error=repr(exc))
                    raise ConnectionError(repr(exc)) from None
                results = (
                    response.json().get("messagePublishResults", []) if response.status_code == 200 else []
                )
                if len(results) == 1 and results[0].get("errorCode") == 0:
                    self._answer(
                        seq, True, normal_id(str(results[0]["messageId"])), bool(results[0].get("duplicate"))
                    )
                    await asyncio.sleep(1.0 / self.rate)
                else:
                    self._answer(seq, False, error=f"{response.status_code} {response.text[:150]}")
                    raise ConnectionError(f"publish answered {response.status_code}")


class Consumer:
    """A WebSocket consumer of one subscription: acks everything, reconnects."""

    def __init__(
        self,
        history: History,
        gateways: Gateways,
        namespace: str,
        topic: str,
        sub: str,
        subtype: str,
        name: str,
        seed: int,
    ) -> None:
        self.history, self.gateways = history, gateways
        self.namespace, self.topic, self.sub, self.subtype, self.name = namespace, topic, sub, subtype, name
        self.attempt = seed
        self.sessions = 0

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            base = self.gateways.pick(self.attempt)
            self.attempt += 1
            path = f"{topic_path(self.namespace, self.topic)}/{self.sub}"
            url = (
                f"{base.replace('http', 'ws', 1)}/ws/v2/consumer/{path}"
                f"?subscriptionType={self.subtype}&consumerName={self.name}&subscriptionInitialPosition=Earliest"
            )
            try:
                ws = await websockets.connect(
                    url, open_timeout=OPEN_TIMEOUT_S, close_timeout=1, ping_interval=None
                )
            except _SESSION_ERRORS as exc:
                self.history.record("info", "session", process=self.name, base=base, error=repr(exc)[:200])
                await asyncio.sleep(RETRY_PAUSE_S)
                continue
            self.sessions += 1
            try:
                await self._receive(ws, stop)
            except _SESSION_ERRORS as exc:
                self.history.record("info", "session", process=self.name, base=base, error=repr(exc)[:200])
            finally:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(ws.close(), 1)
            await asyncio.sleep(RETRY_PAUSE_S)

    async def _receive(self, ws: ClientConnection, stop: asyncio.Event) -> None:
        idle = 0.0
        while not stop.is_set():
            try:
                raw = await asyncio.wait_for(ws.recv(), 0.5)
            except TimeoutError:
                idle += 0.5
                if idle > 3 * REPLY_TIMEOUT_S:  # a paused gateway: try elsewhere
                    await asyncio.wait_for(ws.ping(), REPLY_TIMEOUT_S)
                    idle = 0.0
                continue
            idle = 0.0
            frame = orjson.loads(raw)
            if "payload" not in frame or "messageId" not in frame:
                continue
            self.history.record(
                "ok",
                "deliver",
                process=self.name,
                topic=self.topic,
                sub=self.sub,
                subtype=self.subtype,
                session=self.sessions,
                **decode(frame),
            )
            await ws.send(orjson.dumps({"messageId": frame["messageId"]}).decode())


class HttpConsumer(Consumer):
    """A consumer over plain HTTP: long-poll fetch, then ack the ids it got."""

    async def run(self, stop: asyncio.Event) -> None:
        path = f"{topic_path(self.namespace, self.topic)}/{self.sub}"
        query = {
            "subscriptionType": self.subtype,
            "subscriptionInitialPosition": "Earliest",
            "consumerName": self.name,
            "max": "50",
            "waitMs": "1000",
        }
        async with httpx.AsyncClient(timeout=REPLY_TIMEOUT_S) as http:
            while not stop.is_set():
                base = self.gateways.pick(self.attempt)
                try:
                    response = await http.get(f"{base}/consume/{path}", params=query)
                    if response.status_code != 200:
                        raise ConnectionError(f"fetch answered {response.status_code} {response.text[:150]}")
                    frames = response.json().get("messages", [])
                    for frame in frames:
                        self.history.record(
                            "ok", "deliver", process=self.name, topic=self.topic, sub=self.sub,
                            subtype=self.subtype, session=self.attempt, **decode(frame),
                        )  # fmt: skip
                    if frames:
                        ids = [frame["messageId"] for frame in frames]
                        await http.post(f"{base}/consume/{path}/ack", params=query, json={"messageIds": ids})
                except (httpx.HTTPError, ConnectionError, ValueError) as exc:
                    self.history.record(
                        "info", "session", process=self.name, base=base, error=repr(exc)[:200]
                    )
                    self.attempt += 1  # the next gateway
                    await asyncio.sleep(RETRY_PAUSE_S)


async def read_topics(
    history: History,
    base: str,
    namespace: str,
    partitions: Sequence[str],
    want: set[tuple[str, int]],
    quiet_s: float = 2.0,
    limit_s: float = 90.0,
) -> int:
    """The final read of one topic (its ``partitions``, or itself): a reader per
    partition from the earliest, until every value in ``want`` (the acked ones) was
    read and then nothing came for ``quiet_s``, or ``limit_s`` passed. A reader
    that cannot connect yet (ownership still moving) retries. Returns the count."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit_s
    counts = await asyncio.gather(
        *(_read_one(history, base, namespace, p, want, quiet_s, deadline) for p in partitions)
    )
    return sum(counts)


async def _read_one(
    history: History,
    base: str,
    namespace: str,
    topic: str,
    want: set[tuple[str, int]],
    quiet_s: float,
    deadline: float,
) -> int:
    url = f"{base.replace('http', 'ws', 1)}/ws/v2/reader/{topic_path(namespace, topic)}?messageId=earliest"
    loop = asyncio.get_running_loop()
    count = 0
    while loop.time() < deadline:
        try:
            ws = await websockets.connect(url, open_timeout=10, close_timeout=1, ping_interval=None)
        except _SESSION_ERRORS as exc:
            history.record("info", "session", process="final-reader", base=base, error=repr(exc)[:200])
            await asyncio.sleep(0.5)
            continue
        try:
            while loop.time() < deadline:
                try:
                    raw = await asyncio.wait_for(ws.recv(), quiet_s)
                except TimeoutError:
                    if not want:
                        return count
                    continue
                frame = orjson.loads(raw)
                if "payload" not in frame or "messageId" not in frame:
                    continue
                op = history.record("ok", "read", process="final-reader", topic=topic, **decode(frame))
                want.discard((op["producer"], op["seq"]))
                count += 1
                await ws.send(orjson.dumps({"messageId": frame["messageId"]}).decode())
            return count
        except _SESSION_ERRORS as exc:  # a reader that broke half-way starts again (repeats are fine)
            history.record("info", "session", process="final-reader", base=base, error=repr(exc)[:200])
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(ws.close(), 1)
    return count


def all_urls(gateways: Sequence[Any]) -> list[str]:
    return [g.http_url for g in gateways]
