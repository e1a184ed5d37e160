"""Plain-HTTP consumers: long-poll fetch, ack and nack over REST (Folio extension).

Owns: the HTTP consumers this gateway holds, keyed by (topic, subscription,
consumer name), each a pull-mode consumer of its subscription with a bounded
buffer of delivered messages. Rules (docs/architecture.md §7, docs/compatibility.md §7 row 12):
- ``fetch(max, wait)`` grants credit for what the buffer lacks, waits up to
  ``wait`` for at least one message and returns up to ``max``; what it returns
  stays unacked at this consumer until acked, nacked or the consumer expires;
- a consumer not polled for ``idle_ms`` is removed: its unacked messages are
  redelivered to other consumers (Shared) as with a WebSocket disconnect;
- at most ``consumers_max`` HTTP consumers per gateway, ``FETCH_MAX`` messages
  and ``FETCH_BYTES_MAX`` payload bytes per call (at least one message);
- bytes, not only permits: credit is given only for what fits in
  ``CONSUMER_HELD_BYTES`` of payloads delivered and not yet fetched, at the
  average message size seen (this consumer's, else the topic's); all HTTP
  consumers of the gateway together hold at most ``HELD_BUDGET_BYTES`` (a
  fetch finding nothing held while they are over it is refused: 429
  ``too_many_requests``, counted in ``HttpHeld.refused``);
- an ack or nack (``settle``) moves only what is pending at the subscription:
  ids already acked, or not of this topic, are answered as unmatched;
- when the server starts to stop (``end_all``), every consumer is dropped: its
  waiting fetch or event stream (sse_consume.py) ends, so none holds the shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from dataclasses import dataclass, field

from gateway.broker.broker_errors import ConsumerBusy, TooManyRequests
from gateway.broker.consumers import PullSink
from gateway.broker.dispatch.base import Deliver
from gateway.broker.subscription import Subscription
from gateway.broker.topic import Topic
from gateway.protocol.params import ConsumerParams, parse_consumer_params
from storage.formats.positions import MessagePosition

FETCH_MAX = 1000
FETCH_BYTES_MAX = 8 * 1024 * 1024  # payload bytes in one fetch (a larger message goes out alone)
CONSUMER_HELD_BYTES = 8 * 1024 * 1024  # one HTTP consumer's delivered, unfetched payloads
HELD_BUDGET_BYTES = 256 * 1024 * 1024  # all HTTP consumers of a gateway together
IDLE_MS = 60_000
CONSUMERS_MAX = 1000


@dataclass
class HttpHeld:
    """Payload bytes all HTTP consumers of a gateway hold (for ``/metrics``)."""

    budget: int = HELD_BUDGET_BYTES
    bytes: int = 0
    refused: int = 0  # fetches refused (429) because the budget was full


def settle(
    sub: Subscription, consumer_id: int, texts: list[str], found: list[MessagePosition | None], nack: bool
) -> list[str]:
    """Ack (or nack) at ``sub`` the positions ``found`` for the ids ``texts`` (None: an id
    of another topic) on behalf of ``consumer_id``; the ids that matched nothing pending
    (acked already, or not this topic's), as sent."""
    is_acked = sub.cursor.is_acked
    pending = [p is not None and p.entry_id >= 0 and not is_acked(p) for p in found]
    chosen = [p for p, ok in zip(found, pending, strict=True) if ok and p]
    if nack:
        sub.nack(consumer_id, chosen)
        return [t for t, ok in zip(texts, pending, strict=True) if not ok]
    sub.ack(consumer_id, chosen)
    matched = [ok and p is not None and is_acked(p) for p, ok in zip(found, pending, strict=True)]
    return [t for t, ok in zip(texts, matched, strict=True) if not ok]


def pull_params(query: dict[str, str]) -> ConsumerParams:
    """An HTTP consumer's settings from its query (fetch and stream alike): pull mode,
    Shared unless ``subscriptionType`` says otherwise."""
    return parse_consumer_params(
        {**query, "pullMode": "true", "subscriptionType": query.get("subscriptionType", "Shared")}
    )


@dataclass(eq=False)
class HttpConsumer(PullSink):
    topic: Topic
    sub: Subscription | None = None
    consumer_id: int = 0
    buffer: deque[Deliver] = field(default_factory=deque)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    last_used_ms: int = 0
    closed: bool = False
    granted: int = 0  # credit given and not yet used
    streaming: bool = False  # an event stream's own (sse_consume.py)
    owner: str | None = None  # the role that made it (tokens on): only it fetches and acks through it
    held: HttpHeld = field(default_factory=HttpHeld)  # the gateway's, shared by its HTTP consumers
    held_bytes: int = 0  # payload bytes in ``buffer``
    seen: int = 0  # messages delivered here so far ...
    seen_bytes: int = 0  # ... and their payload bytes: the average sizes its credit

    # ConsumerSink
    def deliver(self, deliveries: list[Deliver]) -> None:
        self.buffer.extend(deliveries)
        size = sum([len(d.content.payload) for d in deliveries])
        self.seen += len(deliveries)
        self.seen_bytes += size
        self.held_bytes += size
        self.held.bytes += size
        self.granted = max(0, self.granted - len(deliveries))
        self.arrived.set()

    def close(self, code: str, reason: str) -> None:
        self.closed = True
        self.release()
        self.arrived.set()

    def _credit(self, want: int) -> int:
        """``want`` messages of credit, fewer when that many messages of the average size
        (this consumer's, else the topic's) would take it past ``CONSUMER_HELD_BYTES``."""
        if not want:
            return 0
        if self.seen:
            average = self.seen_bytes // self.seen
        else:
            count = getattr(self.topic, "msg_in", 0)
            average = getattr(self.topic, "bytes_in", 0) // count if count else 0
        room = CONSUMER_HELD_BYTES - self.held_bytes - self.granted * average
        if room <= 0:
            return 0
        return min(want, max(1, room // average)) if average else want

    def release(self) -> None:
        """Its buffer no longer counts (dropped: the messages are unacked, redelivered)."""
        self.held.bytes -= self.held_bytes
        self.held_bytes = 0
        self.buffer.clear()

    async def fetch(self, max_messages: int, wait_ms: int, refuse: bool = True) -> list[Deliver]:
        """Up to ``max_messages`` (and ``FETCH_BYTES_MAX``) delivered messages, waiting up to
        ``wait_ms`` for one; ``refuse``: raise 429 when nothing is held here and the
        gateway's budget is full (else just wait: an event stream)."""
        sub = self.sub
        assert sub is not None
        held = self.held
        if refuse and not self.buffer and held.bytes >= held.budget:
            held.refused += 1
            raise TooManyRequests(
                f"the gateway's HTTP consumers hold {held.bytes} bytes, its budget is {held.budget}; retry"
            )
        want = self._credit(max(0, max_messages - len(self.buffer) - self.granted))
        if want and held.bytes < held.budget:
            self.granted += want
            sub.permits(self.consumer_id, want)
        if not self.buffer and wait_ms > 0 and not self.closed:
            self.arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.arrived.wait(), wait_ms / 1000)
        out: list[Deliver] = []
        size = 0
        while self.buffer and len(out) < max_messages:
            payload = len(self.buffer[0].content.payload)
            if out and size + payload > FETCH_BYTES_MAX:
                break
            out.append(self.buffer.popleft())
            size += payload
        self.held_bytes -= size
        self.held.bytes -= size
        return out


class HttpConsumers:
    def __init__(
        self, consumers_max: int = CONSUMERS_MAX, idle_ms: int = IDLE_MS, held: HttpHeld | None = None
    ) -> None:
        self.held = held or HttpHeld()
        self._consumers: dict[tuple[str, str, str], HttpConsumer] = {}
        self._consumers_max = consumers_max
        self._idle_ms = idle_ms
        self._reaper: asyncio.Task[None] | None = None

    def get(self, key: tuple[str, str, str]) -> HttpConsumer | None:
        consumer = self._consumers.get(key)
        if consumer is not None and (consumer.closed or consumer.topic.closed):
            self._drop(key)
            return None
        return consumer

    async def attach(
        self,
        key: tuple[str, str, str],
        topic: Topic,
        params: ConsumerParams,
        *,
        stream: bool = False,
        owner: str | None = None,
    ) -> HttpConsumer:
        """The HTTP consumer ``key`` (topic, subscription, consumer name) names,
        subscribed now (pull mode) if this gateway holds none. An event stream has
        its consumer to itself: 409 if the name is in use by a stream, or by
        anything when ``stream``."""
        consumer = self.get(key)
        if consumer is not None and consumer.owner != owner:
            raise ConsumerBusy(f"HTTP consumer {key[2]!r} of subscription {key[1]} belongs to another role")
        if consumer is not None and (stream or consumer.streaming):
            raise ConsumerBusy(
                f"HTTP consumer {key[2]!r} of subscription {key[1]} is in use by another client"
            )
        if consumer is None:
            consumer = HttpConsumer(topic, owner=owner, held=self.held)
            sub, consumer_id = await topic.subscribe(
                key[1],
                params.subscription_type,
                params.to_consumer_info(key[2]),
                consumer,
                initial=params.initial_position,
                dead_letter_topic=params.dead_letter_topic,
            )
            consumer.sub, consumer.consumer_id = sub, consumer_id
            consumer.streaming = stream
            self.add(key, consumer)
        return consumer

    def add(self, key: tuple[str, str, str], consumer: HttpConsumer) -> None:
        if len(self._consumers) >= self._consumers_max:
            raise TooManyRequests(f"this gateway holds its maximum of {self._consumers_max} HTTP consumers")
        self._consumers[key] = consumer
        if self._reaper is None:
            self._reaper = asyncio.get_running_loop().create_task(self._reap())

    def _drop(self, key: tuple[str, str, str]) -> None:
        consumer = self._consumers.pop(key, None)
        if consumer is None:
            return
        if consumer.sub is not None:
            consumer.sub.remove_consumer(consumer.consumer_id)
        consumer.close("removed", "")  # a fetch or stream waiting on it returns now

    async def _reap(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            now = asyncio.get_running_loop().time() * 1000
            for key, consumer in list(self._consumers.items()):
                if consumer.closed or now - consumer.last_used_ms > self._idle_ms:
                    self._drop(key)

    def now_ms(self) -> int:
        return int(asyncio.get_running_loop().time() * 1000)

    def remove(self, key: tuple[str, str, str], consumer: HttpConsumer | None = None) -> bool:
        """Drop ``key``'s consumer (only if it is ``consumer``, when given: a stream that
        ends after its consumer was dropped must not remove a newer one of that name)."""
        present = self._consumers.get(key)
        if present is None or (consumer is not None and present is not consumer):
            return False
        self._drop(key)
        return True

    def end_all(self) -> None:
        """Drop every HTTP consumer now (the server is stopping): a waiting fetch
        returns at once and an event stream ends, so no response holds the shutdown."""
        for key in list(self._consumers):
            self._drop(key)

    async def close(self) -> None:
        self.end_all()
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
