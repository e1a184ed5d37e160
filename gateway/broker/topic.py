"""Topic: one owned topic partition - producers, subscriptions, closing (asyncio shell).

Owns: the topic's managed log, its producers (names unique per topic), the
decoded-entry cache, and its subscriptions and readers; the publish path
(batcher, dedup, settling) is its base class ``topic_publish.PublishPath``.
Rules (docs/architecture.md §4-6):
- with dedup on, (producer, sequence id) at or below the persisted maximum is
  answered as a duplicate and not stored; the state is snapshotted to etcd and
  rebuilt from the snapshot plus the log tail when the topic is loaded;
- a fenced add means another gateway owns the topic: everything is dropped at
  once and sessions are closed so clients reconnect to the new owner; a
  publish is refused unless the host still serves the topic under the
  ownership epoch it was loaded in (``TopicHost.serves``);
- an unload (graceful close) refuses new publishes, waits up to
  ``DRAIN_ON_CLOSE_S`` for the accepted ones to be stored and answered, then
  closes the sessions (4503) and the ledger;
- a terminated topic (``terminate``) refuses publishes and producers for good;
  its consumers that read everything are at the end of the topic;
- stats are plain counters bumped on the hot paths; rates and the history
  are sampled by the gateway's upkeep schedule (``upkeep_schedule.py``);
- every state change happens between awaits on the event loop (one owner).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Callable

import orjson

from coordination import keys
from gateway.broker import topic_upkeep as upkeep
from gateway.broker.broker_errors import (
    ConsumerBusy,
    ProducerBusy,
    SubscriptionNotFound,
    TooManyRequests,
    TopicTerminated,
    TopicUnavailable,
)
from gateway.broker.consumers import ConsumerSink
from gateway.broker.cursor_core import Cursor
from gateway.broker.decoded import DecodedEntries
from gateway.broker.dispatch import ConsumerInfo
from gateway.broker.managed_log import ManagedLog
from gateway.broker.stats import RateMeter
from gateway.broker.stats_history import StatsHistory
from gateway.broker.subscription import Subscription
from gateway.broker.topic_publish import PublishPath
from gateway.broker.topic_types import (
    ProducerRecord,
    TopicHost,
)
from gateway.errors import GatewayError
from gateway.names import TopicName
from gateway.quotas import Quota, refused
from storage.formats.positions import EARLIEST, Position

log = logging.getLogger(__name__)

DRAIN_ON_CLOSE_S = 5.0  # an unloading topic waits this long for its accepted publishes


class Topic(PublishPath):
    """One owned topic partition (the publish path is ``PublishPath``, its base)."""

    def __init__(self, name: TopicName, managed_log: ManagedLog, host: TopicHost, epoch: int = 0) -> None:
        self.name = name
        self.epoch = epoch  # the ownership epoch it was loaded under (service.BrokerService)
        self._namespace = name.namespace_name
        self.log = managed_log
        self.host = host
        self.store = host.store
        self.clock = host.clock
        self.producers: dict[str, ProducerRecord] = {}
        self.subscriptions: dict[str, Subscription] = {}
        self.readers: dict[str, Subscription] = {}
        super().__init__()  # the publish path: batcher, dedup
        self.decoded = DecodedEntries(managed_log, managed_log.cache.budget)
        self.dedup_revision = 0
        self.dedup_position = managed_log.last_confirmed  # the last entry dedup took in
        self.entries_since_snapshot = 0
        self.upkeep_task: asyncio.Task[None] | None = None  # set by upkeep_schedule.py
        self.quota_exceeded = False
        self.closed = False
        self.on_closed: Callable[[Topic], None] | None = None
        self.msg_in = 0
        self.bytes_in = 0
        self.msg_expired = 0
        self.meter = RateMeter(self.clock.now_ms(), 2)  # (msg_in, bytes_in), counted from the load
        self.history = StatsHistory()
        self.producer_ids = 0
        self.terminating = False  # terminate() in progress: publishes refused already
        managed_log.on_fenced = self.on_lost_ownership

    # ------------------------------------------------------------ loading

    @classmethod
    async def load(cls, name: TopicName, managed_log: ManagedLog, host: TopicHost, epoch: int = 0) -> Topic:
        topic = cls(name, managed_log, host, epoch)
        for item in await host.store.list_prefix(keys.cursors_of(name.path)):
            sub_name = item.key.rsplit("/", 1)[1]
            try:
                data = orjson.loads(item.value)
                cursor = Cursor.restore(data["cursor"])
            except (GatewayError, ValueError, KeyError) as exc:
                log.error(
                    "topic %s: cursor %s unreadable (%s); starting it at the log's end", name, sub_name, exc
                )
                cursor = Cursor(managed_log.last_confirmed)
            sub = Subscription(topic, sub_name, cursor, revision=item.mod_revision, sub_type=data.get("type"))
            topic.subscriptions[sub_name] = sub
        if topic.policies.dedup:
            await topic._restore_dedup()
        return topic

    async def _restore_dedup(self) -> None:
        await upkeep.restore_dedup(self)

    async def _snapshot_dedup(self) -> None:
        await upkeep.snapshot_dedup(self)

    # ------------------------------------------------------------ producers

    def add_producer(self, name: str | None) -> ProducerRecord:
        if self.closed:
            raise TopicUnavailable(f"topic {self.name} is closing")
        if self.log.terminated or self.terminating:
            raise TopicTerminated(f"topic {self.name} was terminated: it takes no new producers")
        limit = self.policies.max_producers
        if limit and len(self.producers) >= limit:
            refused(Quota.PRODUCERS_PER_TOPIC)
            raise ProducerBusy(
                f"Topic reached max producers limit: {self.name} has {limit} (maxProducersPerTopic)"
            )
        if name is None:
            name = f"folio-{secrets.token_hex(6)}"
        if name in self.producers:
            raise ProducerBusy(f"Producer with name '{name}' is already connected to topic {self.name}")
        self.producer_ids += 1
        record = ProducerRecord(name, self.clock.now_ms(), producer_id=self.producer_ids)
        record.meter.sample(record.connected_since_ms, (0, 0))  # rates count from here
        self.producers[name] = record
        return record

    def remove_producer(self, name: str) -> None:
        self.producers.pop(name, None)

    def last_sequence_id(self, producer: str) -> int:
        return self.dedup.last_pushed(producer)

    # ------------------------------------------------------------ decoded entries

    async def first_position_at_or_after(self, timestamp_ms: int) -> Position | None:
        """The first entry whose publish time is >= ``timestamp_ms``; None if there is none."""
        return await upkeep.first_position_at_or_after(self, timestamp_ms)

    # ------------------------------------------------------------ subscriptions

    def max_consumers_per_subscription(self) -> int:
        return self.policies.max_consumers_per_subscription

    async def subscription(self, name: str, *, initial: str = "Latest", create: bool = True) -> Subscription:
        sub = self.subscriptions.get(name)
        if sub is not None:
            return sub
        if not create:
            raise SubscriptionNotFound(f"subscription {name} does not exist on {self.name}")
        limit = self.policies.max_subscriptions
        if limit and len(self.subscriptions) >= limit:
            refused(Quota.SUBSCRIPTIONS_PER_TOPIC)
            raise TooManyRequests(f"topic {self.name} has {limit} subscriptions (maxSubscriptionsPerTopic)")
        mark_delete = EARLIEST if initial == "Earliest" else self.log.last_confirmed
        sub = Subscription(self, name, Cursor(mark_delete))
        created = await sub.stored.write(sub.state_json(), sub.cursor.revision)
        existing = self.subscriptions.get(name)  # another session created it while we awaited
        if existing is not None:
            return existing
        if not created:
            raise TopicUnavailable(f"subscription {name} was created by another gateway; reconnect")
        self.subscriptions[name] = sub
        return sub

    async def subscribe(
        self,
        name: str,
        sub_type: str,
        info: ConsumerInfo,
        sink: ConsumerSink,
        *,
        initial: str = "Latest",
        durable: bool = True,
        dead_letter_topic: str | None = None,
    ) -> tuple[Subscription, int]:
        if self.closed:
            raise TopicUnavailable(f"topic {self.name} is closing")
        self._check_consumers()
        if durable:
            sub = await self.subscription(name, initial=initial)
        else:
            sub = self._non_durable(name, EARLIEST if initial == "Earliest" else self.log.last_confirmed)
        consumer_id = sub.add_consumer(sub_type, info, sink, dead_letter_topic)
        return sub, consumer_id

    def _check_consumers(self) -> None:
        limit = self.policies.max_consumers
        if (
            limit
            and sum(len(s.consumers) for s in (*self.subscriptions.values(), *self.readers.values())) >= limit
        ):
            refused(Quota.CONSUMERS_PER_TOPIC)
            raise ConsumerBusy(
                f"Topic reached max consumers limit: {self.name} has {limit} (maxConsumersPerTopic)"
            )

    def _non_durable(self, name: str, mark_delete: Position) -> Subscription:
        sub = self.readers.get(name)
        if sub is None:
            sub = Subscription(self, name, Cursor(mark_delete), durable=False)
            self.readers[name] = sub
        return sub

    def create_reader(
        self,
        start: Position,
        inclusive: bool,
        info: ConsumerInfo,
        sink: ConsumerSink,
        name: str | None = None,
    ) -> tuple[Subscription, int]:
        if self.closed:
            raise TopicUnavailable(f"topic {self.name} is closing")
        self._check_consumers()
        reader_name = name or f"reader-{secrets.token_hex(5)}"
        if reader_name in self.readers:
            reader_name = f"{reader_name}-{secrets.token_hex(3)}"
        sub = Subscription(self, reader_name, Cursor(EARLIEST), durable=False)
        sub.cursor.seek(start, self.log.layout, inclusive=inclusive)
        self.readers[reader_name] = sub
        return sub, sub.add_consumer("Exclusive", info, sink)

    async def remove_reader(self, sub: Subscription) -> None:
        if self.readers.get(sub.name) is sub:
            del self.readers[sub.name]
        await sub.close(persist=False)

    async def unsubscribe(self, name: str, *, force: bool = False) -> None:
        sub = self.subscriptions.get(name)
        if sub is None:
            raise SubscriptionNotFound(f"subscription {name} does not exist on {self.name}")
        if sub.consumers and not force:
            raise ConsumerBusy(f"subscription {name} has {len(sub.consumers)} connected consumers")
        if sub.durable:  # its webhook first: no gateway starts pushing it again
            await self.host.store.delete(keys.webhook(self.name.path, name))
        del self.subscriptions[name]
        for record in list(sub.consumers.values()):
            record.sink.close("subscription_deleted", f"subscription {name} was deleted")
        await sub.delete()

    # ------------------------------------------------------------ terminate

    async def terminate(self) -> Position:
        """Seal the topic: publishes are refused from now on; the ones already
        accepted are stored first. Returns the last entry's position."""
        if not self.log.terminated:
            self.terminating = True  # refuse new publishes at once (made durable below)
            try:
                await self._drain(DRAIN_ON_CLOSE_S)
                await self.log.terminate()
            finally:
                self.terminating = False  # terminated for good, or not at all (etcd failed)
        for sub in [*self.subscriptions.values(), *self.readers.values()]:
            sub.wake()
        return self.log.last_confirmed

    def end_of_topic(self, sub: Subscription) -> bool:
        """Whether ``sub`` consumed a terminated topic to its end."""
        return self.log.terminated and sub.read_position > self.log.last_confirmed

    # ------------------------------------------------------------ maintenance

    def slowest_mark_delete(self) -> Position | None:
        marks = [sub.cursor.mark_delete for sub in self.subscriptions.values()]
        return min(marks) if marks else None

    async def maintain_once(self) -> None:
        await upkeep.maintain_once(self)

    def backlog_bytes(self) -> int:
        return upkeep.backlog_bytes(self)

    # ------------------------------------------------------------ closing

    def on_lost_ownership(self) -> None:
        """Fenced or cursor CAS lost: another gateway owns this topic now."""
        if self.closed:
            return
        log.warning("topic %s: ownership lost; closing its sessions", self.name)
        self.host.topic_lost(self)
        asyncio.get_running_loop().create_task(self.close(graceful=False))

    async def close(self, *, graceful: bool = True) -> None:
        if self.closed:
            return
        self.closed = True  # new publishes are refused from here on
        if graceful:  # an unload: let what was accepted be stored and answered first
            await self._drain(DRAIN_ON_CLOSE_S)
        closing = TopicUnavailable(f"topic {self.name} is closing; reconnect")
        for token in self._batcher.drain():
            self._settle(token.group, token.index, closing)
        for producer in list(self.producers.values()):
            if producer.closer is not None:
                producer.closer("topic_unloaded", f"topic {self.name} unloaded; reconnect")
        for sub in [*self.subscriptions.values(), *self.readers.values()]:
            for record in list(sub.consumers.values()):
                record.sink.close("topic_unloaded", f"topic {self.name} unloaded; reconnect")
            await sub.close(persist=graceful)
        if self.upkeep_task is not None and self.upkeep_task is not asyncio.current_task():
            self.upkeep_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.upkeep_task
        if graceful and self.policies.dedup and not self.log.fenced:
            with contextlib.suppress(Exception):
                await self._snapshot_dedup()
        if graceful and not self.log.fenced:
            await self.log.close()
        else:
            await self.log.abandon()
        self.decoded.clear()  # its entries leave the gateway's cache budget
        if self.on_closed is not None:
            self.on_closed(self)
