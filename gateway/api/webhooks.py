"""Push subscriptions: a gateway POSTs a subscription's messages to a URL (asyncio shell).

Owns: the pushers of this gateway (one per stored webhook of a topic it owns)
and the HTTP client they share. Rules (ADR 0006; decisions in
``gateway.broker.webhook_core``):
- the settings live in etcd (``/folio/webhooks/<topic path>/<sub>``); every
  ``RECONCILE_S`` the gateway lists them, claims unowned topics as a lookup
  would, and runs a pusher for each webhook of a topic it owns - so pushing
  moves with the topic (unload, gateway death) and starts again after a crash;
- a pusher is one pull-mode consumer (name ``folio-webhook``) of an existing
  subscription; it never creates one (the admin call that stores the webhook
  does), so a deleted subscription stays deleted;
- credit is ``maxMessages`` x ``maxInFlight``: that many messages at most wait
  in a pusher; each POST gives its credit back when it is acked or dead-lettered;
- a POST that is not answered 2xx within ``timeoutMs`` is retried as it was
  (``webhook_core.Backoff``); redirects are not followed, proxies from the
  environment are not used, at most ``connections`` (``CONNECTIONS_MAX``)
  connections are open and at most ``ANSWER_BYTES_MAX`` of an answer is read;
- a POST that waits for one of those connections is not failing: ``timeoutMs``
  starts once it has one (the pool wait has no timeout, only the bound), so a
  gateway's slow endpoints hold back its other pushers but never dead-letter
  their messages;
- a stopping pusher leaves what it has not acked to the subscription
  (redelivered, as for a WebSocket consumer that leaves).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson

from coordination import keys
from coordination.store import MetadataStore
from gateway.api.wire_mapping import delivery_frames
from gateway.broker import dead_letters
from gateway.broker.broker_errors import SubscriptionNotFound
from gateway.broker.consumers import PullSink
from gateway.broker.dispatch.base import Deliver
from gateway.broker.subscription import Subscription
from gateway.broker.topic import Topic
from gateway.broker.webhook_core import (
    POST_BYTES_MAX,
    Backoff,
    attempt_outcome,
    plan,
    should_dead_letter,
    take_batch,
)
from gateway.names import TopicName
from gateway.protocol.errors import BadRequest
from gateway.protocol.params import parse_consumer_params
from gateway.protocol.webhook_config import WebhookConfig, parse_webhook
from gateway.security.egress import Egress, GuardedBackend, guard_client, outcome

log = logging.getLogger(__name__)

CONSUMER_NAME = "folio-webhook"
RECONCILE_S = 1.0
WEBHOOKS_MAX = 1000  # stored webhooks in the cluster (refused beyond, at creation)
CONNECTIONS_MAX = 64  # open connections of one gateway's pushers
ANSWER_BYTES_MAX = 64 * 1024  # read of an endpoint's answer body (the rest is dropped)
WebhookKey = tuple[str, str]  # (topic path, subscription)


@dataclass(slots=True)
class PushTotals:
    """A gateway's push counters since it started (never reset: Prometheus counters)."""

    posts: int = 0
    failures: int = 0
    acked: int = 0  # messages
    dead_lettered: int = 0  # messages


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


def _payload_size(delivery: Deliver) -> int:
    return len(delivery.content.payload)


def topic_of(path: str) -> TopicName:
    domain, _, rest = path.partition("/")
    return TopicName.parse(f"{domain}://{rest}")


class WebhookPusher(PullSink):
    """One webhook's consumer on this gateway (a ``ConsumerSink``)."""

    def __init__(
        self,
        topic: Topic,
        subscription: str,
        config: WebhookConfig,
        http: httpx.AsyncClient,
        revision: int,
        totals: PushTotals | None = None,
    ) -> None:
        self.topic = topic
        self.totals = totals or PushTotals()
        self.subscription = subscription
        self.config = config
        self.revision = revision
        self._http = http
        self._buffer: deque[Deliver] = deque()
        self._arrived = asyncio.Event()
        self._workers: list[asyncio.Task[None]] = []
        self._backoff = Backoff(config.minBackoffMs, config.maxBackoffMs)
        self.sub: Subscription | None = None
        self.consumer_id = 0
        self.closed = False
        self.posts = self.failures = self.acked = self.dead_lettered = 0
        self.last_error: str | None = None
        self.last_success_ms: int | None = None  # wall clock

    # ConsumerSink
    def deliver(self, deliveries: list[Deliver]) -> None:
        self._buffer.extend(deliveries)
        self._arrived.set()

    def close(self, code: str, reason: str) -> None:
        self.closed = True
        self._arrived.set()

    # lifecycle
    async def start(self) -> None:
        if self.subscription not in self.topic.subscriptions:
            raise SubscriptionNotFound(f"subscription {self.subscription} of {self.topic.name} is gone")
        cfg = self.config
        params = parse_consumer_params(
            {"subscriptionType": cfg.subscriptionType, "pullMode": "true", "consumerName": CONSUMER_NAME}
        )
        sub, consumer_id = await self.topic.subscribe(
            self.subscription, params.subscription_type, params.to_consumer_info(CONSUMER_NAME), self
        )
        self.sub, self.consumer_id = sub, consumer_id
        loop = asyncio.get_running_loop()
        self._workers = [loop.create_task(self._work()) for _ in range(cfg.maxInFlight)]
        sub.permits(consumer_id, cfg.maxMessages * cfg.maxInFlight)

    async def stop(self) -> None:
        self.close("stopped", "")
        for task in self._workers:
            task.cancel()
        for task in self._workers:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.sub is not None:
            self.sub.remove_consumer(self.consumer_id)  # its unacked messages go back

    @property
    def state(self) -> str:
        if self.closed:
            return "stopped"
        return "backing-off" if self._backoff.failures else "pushing"

    def status(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "posts": self.posts,
            "failures": self.failures,
            "acked": self.acked,
            "deadLettered": self.dead_lettered,
            "waiting": len(self._buffer),
            "lastError": self.last_error,
            "lastSuccessMs": self.last_success_ms,
        }

    # pushing
    async def _work(self) -> None:
        cfg = self.config
        while not self.closed:
            if not self._buffer:
                self._arrived.clear()
                await self._arrived.wait()
                continue
            batch = take_batch(self._buffer, _payload_size, cfg.maxMessages, POST_BYTES_MAX)
            try:
                await self._push(batch)
            except Exception as exc:  # a defect: stop; the next reconcile round starts afresh
                log.exception("webhook of %s/%s: pusher failed", self.topic.name, self.subscription)
                self.last_error = f"internal error: {exc!r}"
                self.close("error", str(exc))

    async def _push(self, batch: list[Deliver]) -> None:
        """POST ``batch`` until it is acked or dead-lettered (or this pusher stops)."""
        body = orjson.dumps(
            {
                "topic": str(self.topic.name),
                "subscription": self.subscription,
                "messages": delivery_frames(batch, self.topic.partition),
            }
        )
        attempts = 0
        while not self.closed:
            wait_ms = self._backoff.wait_ms(_now_ms())
            if wait_ms:
                await asyncio.sleep(wait_ms / 1000)
                continue
            error = await self._post(body, attempts + 1)
            if self.closed:
                return
            if error is None:
                self._backoff.on_success()
                self.last_success_ms = self.topic.clock.now_ms()
                self._done(batch)
                return
            attempts += 1
            self.failures += 1
            self.totals.failures += 1
            self.last_error = error
            self._backoff.on_failure(_now_ms())
            if should_dead_letter(attempts, self.config.maxAttempts) and await self._dead_letter(batch):
                return

    async def _post(self, body: bytes, attempt: int) -> str | None:
        """One attempt; None when the endpoint acknowledged it, else what went wrong."""
        cfg = self.config
        headers = {
            **cfg.headers,
            "content-type": "application/json",
            "x-folio-topic": str(self.topic.name),
            "x-folio-subscription": self.subscription,
            "x-folio-attempt": str(attempt),
        }
        self.posts += 1
        self.totals.posts += 1
        try:
            async with self._http.stream(
                "POST",
                cfg.url,
                content=body,
                headers=headers,
                timeout=httpx.Timeout(cfg.timeoutMs / 1000, pool=None),
            ) as response:
                read = 0
                async for chunk in response.aiter_raw():
                    read += len(chunk)
                    if read >= ANSWER_BYTES_MAX:
                        break
                status = response.status_code
        except Exception as exc:  # httpx's errors, and a URL or header httpx cannot send
            return outcome(exc)  # "refused" or "failed": nothing that maps ports or hosts
        return None if attempt_outcome(status) else f"HTTP {status}"

    def _done(self, batch: list[Deliver]) -> None:
        sub = self.sub
        if sub is None or self.closed:
            return
        acked = sub.ack(self.consumer_id, [d.position for d in batch])
        self.acked += acked
        self.totals.acked += acked
        sub.permits(self.consumer_id, len(batch))

    async def _dead_letter(self, batch: list[Deliver]) -> bool:
        name = self.topic.name
        local = self.config.deadLetterTopic
        target = str(name.sibling(local) if local else dead_letters.letter_topics(name, self.subscription)[1])
        try:
            for delivery in batch:
                await dead_letters.dead_letter(
                    self.topic, target, delivery.content, delivery.position, self.subscription
                )
        except Exception as exc:  # stays unacked: pushed again after the back-off
            self.last_error = f"dead-letter to {target} failed: {exc}"
            return False
        self.dead_lettered += len(batch)
        self.totals.dead_lettered += len(batch)
        self._done(batch)
        return True


class Webhooks:
    """The pushers of one gateway, kept in line with the webhooks stored in etcd."""

    def __init__(
        self,
        store: MetadataStore,
        claim: Callable[[TopicName], Awaitable[bool]],
        owned_topic: Callable[[TopicName], Awaitable[Topic]],
        members: Callable[[], Awaitable[list[str]]],
        *,
        allowed_hosts: tuple[str, ...] = (),
        loopback_ok: bool = False,
        webhooks_max: int = WEBHOOKS_MAX,
        connections: int = CONNECTIONS_MAX,
        reconcile_s: float = RECONCILE_S,
    ) -> None:
        self._store = store
        self._claim = claim  # whether this gateway serves a topic (taking its bundle if free)
        self._owned_topic = owned_topic  # a topic served here, loaded (never created)
        self.allowed_hosts = allowed_hosts
        self.webhooks_max = webhooks_max
        self._reconcile_s = reconcile_s
        self.running: dict[WebhookKey, WebhookPusher] = {}
        self.errors: dict[WebhookKey, str] = {}  # why a pusher could not start (last round)
        self.totals = PushTotals()
        self.http = httpx.AsyncClient(
            limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
            trust_env=False,
            follow_redirects=False,
        )
        self.egress = Egress(allowed_hosts, members, loopback_ok=loopback_ok)
        guard_client(self.http, GuardedBackend(self.egress))  # checked again at each connection
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        async with self._lock:
            await asyncio.gather(*(p.stop() for p in self.running.values()), return_exceptions=True)
            self.running.clear()
        await self.http.aclose()

    async def _loop(self) -> None:
        while True:
            try:
                await self.reconcile()
            except Exception as exc:  # etcd away, gateway stopping: try again next round
                log.info("webhooks: reconcile failed (%s); retrying", exc)
            await asyncio.sleep(self._reconcile_s)

    async def check_url(self, url: str) -> None:
        """Refuse (400 naming the rule) a webhook URL whose host resolves now to an address
        it may never reach; a name that does not resolve yet is left to the send-time check."""
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        host = parts.hostname or ""
        try:
            host.encode("idna")
        except UnicodeError as exc:
            raise BadRequest(f"url: {host[:80]!r} is not a valid host name ({exc})") from exc
        try:
            _, rule = await self.egress.check(host, port)
        except (OSError, TimeoutError):
            return
        if rule is not None:
            raise BadRequest(f"url: {rule}")

    async def reconcile(self) -> None:
        """Start and stop pushers so that this gateway runs those of the topics it owns."""
        stored: dict[WebhookKey, int] = {}
        configs: dict[WebhookKey, bytes] = {}
        for kv in (await self._store.list_prefix(keys.WEBHOOKS))[: self.webhooks_max]:
            path, _, sub = kv.key[len(keys.WEBHOOKS) :].rpartition("/")
            try:
                if not await self._claim(topic_of(path)):
                    continue
            except Exception:  # ownership moving, or a bad key: next round
                continue
            stored[(path, sub)] = kv.mod_revision
            configs[(path, sub)] = kv.value
        async with self._lock:
            for key, pusher in list(self.running.items()):
                if pusher.closed or pusher.topic.closed:
                    await self._stop(key)
                elif key in stored and stored[key] != pusher.revision:
                    self._adopt(pusher, configs[key], stored[key])
            start, stop = plan(stored, {k: p.revision for k, p in self.running.items()})
            for key in stop:
                await self._stop(key)
            for key in start:
                await self._start(key, configs[key], stored[key])

    @staticmethod
    def _adopt(pusher: WebhookPusher, value: bytes, revision: int) -> None:
        """Settings stored again: the same settings keep the pusher (and its counts)."""
        with contextlib.suppress(Exception):
            if parse_webhook(orjson.loads(value)) == pusher.config:
                pusher.revision = revision

    async def _stop(self, key: WebhookKey) -> None:
        pusher = self.running.pop(key, None)
        if pusher is not None:
            await pusher.stop()

    async def _start(self, key: WebhookKey, value: bytes, revision: int) -> None:
        path, sub = key
        try:
            config = parse_webhook(orjson.loads(value), self.allowed_hosts)  # as the allow-list is now
            topic = await self._owned_topic(topic_of(path))
            pusher = WebhookPusher(topic, sub, config, self.http, revision, self.totals)
            await pusher.start()
        except Exception as exc:
            self.errors[key] = f"{type(exc).__name__}: {exc}"
            return
        self.errors.pop(key, None)
        self.running[key] = pusher

    async def apply(self, topic: Topic, subscription: str, stored: tuple[bytes, int] | None) -> None:
        """Act at once, not at the next round, on a webhook of ``topic`` (owned here) just
        stored (``stored``: its value and etcd revision, as written) or deleted (None)."""
        key = (topic.name.path, subscription)
        async with self._lock:
            pusher = self.running.get(key)
            if pusher is not None and stored is not None:
                self._adopt(pusher, *stored)
            if pusher is not None and (stored is None or stored[1] != pusher.revision):
                await self._stop(key)
            if stored is not None and key not in self.running:
                await self._start(key, *stored)
