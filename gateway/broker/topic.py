"""Topic: one owned topic partition - producers, the publish path, subscriptions (asyncio shell).

Owns: the topic's managed log, its producers (names unique per topic), the
publish batcher and dedup state (publish_core), the decoded-entry cache, and
its subscriptions and readers. Rules (DESIGN.md §4-6):
- messages published to the topic are cut into entries by ``PublishBatcher``
  (adaptive: cut when the previous add completed or the batch is full); a
  message's id is (ledger, entry, partition, batch index), the batch index
  only when the entry holds more than one message;
- with dedup on, (producer, sequence id) at or below the persisted maximum is
  answered as a duplicate and not stored; the state is snapshotted to etcd and
  rebuilt from the snapshot plus the log tail when the topic is loaded;
- a fenced add means another gateway owns the topic: everything is dropped at
  once and sessions are closed so clients reconnect to the new owner;
- an unload (graceful close) refuses new publishes, waits up to
  ``DRAIN_ON_CLOSE_S`` for the accepted ones to be stored and answered, then
  closes the sessions (4503) and the ledger;
- a terminated topic (``terminate``) refuses publishes and producers for good;
  its consumers that read everything are at the end of the topic;
- stats are plain counters bumped on the hot paths; rates and the history
  are sampled by the maintenance loop (``topic_upkeep.sample_stats``);
- every state change happens between awaits on the event loop (one owner).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import secrets
from collections.abc import Callable

import orjson

from coordination import keys
from gateway.broker import topic_upkeep as upkeep
from gateway.broker.broker_errors import (
    BacklogQuotaExceeded,
    ConsumerBusy,
    DuplicateUndetermined,
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
from gateway.broker.entry_format import EntryMessage, encode_message, join_entry
from gateway.broker.log_state import LogFenced
from gateway.broker.managed_log import ManagedLog
from gateway.broker.message_id import entry_ids_base64
from gateway.broker.positions import EARLIEST, NO_BATCH, Position
from gateway.broker.publish_core import BatcherConfig, Dedup, DedupVerdict, PublishBatcher
from gateway.broker.stats import RateMeter
from gateway.broker.stats_history import StatsHistory
from gateway.broker.subscription import Subscription
from gateway.broker.topic_types import (
    Outcome,
    PendingMessage,
    ProducerRecord,
    PublishGroup,
    PublishResult,
    TopicHost,
    TopicPolicies,
)
from gateway.errors import GatewayError
from gateway.names import TopicName

log = logging.getLogger(__name__)

MAINTENANCE_INTERVAL_MS = 1000
DRAIN_ON_CLOSE_S = 5.0  # an unloading topic waits this long for its accepted publishes


class Topic:
    def __init__(self, name: TopicName, managed_log: ManagedLog, host: TopicHost) -> None:
        self.name = name
        self._namespace = name.namespace_name
        self.log = managed_log
        self.host = host
        self.store = host.store
        self.clock = host.clock
        self.producers: dict[str, ProducerRecord] = {}
        self.subscriptions: dict[str, Subscription] = {}
        self.readers: dict[str, Subscription] = {}
        self.dedup = Dedup()
        self._batcher: PublishBatcher[PendingMessage] = PublishBatcher(BatcherConfig())
        self._pump_soon = False  # a _pump is scheduled (for a lone message)
        self.decoded = DecodedEntries(managed_log)
        self.dedup_revision = 0
        self.entries_since_snapshot = 0
        self._maintenance: asyncio.Task[None] | None = None
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

    @property
    def policies(self) -> TopicPolicies:
        return self.host.namespace_policies(self._namespace)

    @property
    def partition(self) -> int:
        return self.name.partition_index

    # ------------------------------------------------------------ loading

    @classmethod
    async def load(cls, name: TopicName, managed_log: ManagedLog, host: TopicHost) -> Topic:
        topic = cls(name, managed_log, host)
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
        topic._maintenance = asyncio.get_running_loop().create_task(topic._maintain())
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
            raise ProducerBusy(f"topic {self.name} reached its limit of {limit} producers")
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

    # ------------------------------------------------------------ publishing

    def publish(self, message: EntryMessage) -> asyncio.Future[PublishResult]:
        """Queue one message; the future resolves once it is stored (or refused)."""
        single: asyncio.Future[PublishResult] = asyncio.get_running_loop().create_future()

        def unwrap(group: asyncio.Future[list[Outcome]]) -> None:
            outcome = group.result()[0]
            if isinstance(outcome, PublishResult):
                single.set_result(outcome)
            else:
                single.set_exception(outcome)

        self.publish_many([message]).add_done_callback(unwrap)
        return single

    def publish_many(
        self, messages: list[EntryMessage], on_done: Callable[[list[Outcome]], None] | None = None
    ) -> asyncio.Future[list[Outcome]]:
        """Queue messages in order; the future gives one outcome per message (a
        result, or the error that refused it) once every one is settled; ``on_done``
        gets the same list synchronously at that moment (possibly before this returns)."""
        future: asyncio.Future[list[Outcome]] = asyncio.get_running_loop().create_future()
        group = PublishGroup(future, [None] * len(messages), len(messages), on_done)
        policies = self.policies
        refusal: GatewayError | None = None
        if self.closed or self.log.fenced:
            refusal = TopicUnavailable(f"topic {self.name} moved or is closing; reconnect")
        elif self.log.terminated or self.terminating:
            refusal = TopicTerminated(f"topic {self.name} was terminated: no more messages can be published")
        elif self.quota_exceeded and policies.backlog_policy != "consumer_backlog_eviction":
            limit = policies.backlog_limit_bytes
            refusal = BacklogQuotaExceeded(f"topic {self.name}: backlog above its quota of {limit} bytes")
        if refusal is not None or policies.dedup or not self._offer_all(messages, group):
            self._offer_each(messages, group, refusal, policies.dedup)
        if len(messages) > 1:
            self._pump()
        elif not self._pump_soon:
            # a lone message (one per frame or request) is cut in the next loop round
            # but one - after one more I/O poll - with any others that arrived by then:
            # a client's frames written back to back land in one entry, one fsync (W2
            # one message per frame: p50 2.16 -> 1.91 ms for this round, then about
            # 0.07 ms less for the extra poll; W1 per frame unchanged); a batch is cut
            # at once
            self._pump_soon = True
            loop = asyncio.get_running_loop()
            loop.call_soon(loop.call_soon, self._pump)
        return future

    def _offer_all(self, messages: list[EntryMessage], group: PublishGroup) -> bool:
        """Queue every message in one step (no dedup, no refusal); False if they do
        not all fit the queue (nothing queued then)."""
        encoded = [encode_message(message) for message in messages]
        tokens = [
            PendingMessage(group, index, message.producer_name, message.sequence_id)
            for index, message in enumerate(messages)
        ]
        if not self._batcher.offer_all(encoded, tokens, sum(map(len, encoded))):
            return False
        size = sum(len(message.payload) for message in messages)
        self.msg_in += len(messages)
        self.bytes_in += size
        producer = messages[0].producer_name
        if all(message.producer_name == producer for message in messages):
            record = self.producers.get(producer)
            if record is not None:
                record.msg_in += len(messages)
                record.bytes_in += size
        else:
            for message in messages:
                record = self.producers.get(message.producer_name)
                if record is not None:
                    record.msg_in += 1
                    record.bytes_in += len(message.payload)
        return True

    def _offer_each(
        self, messages: list[EntryMessage], group: PublishGroup, refusal: GatewayError | None, dedup: bool
    ) -> None:
        """Queue the messages one by one: each refused, answered as a duplicate, or queued."""
        batcher = self._batcher
        for index, message in enumerate(messages):
            producer, sequence = message.producer_name, message.sequence_id
            if refusal is not None:
                self._settle(group, index, refusal)
                continue
            if dedup:
                verdict = self.dedup.check(producer, sequence)
                if verdict is DedupVerdict.DUPLICATE:
                    self._settle(group, index, PublishResult.duplicate_of(self.partition))
                    continue
                if verdict is DedupVerdict.IN_FLIGHT:
                    busy = f"sequence id {sequence} of {producer} is still in flight"
                    self._settle(group, index, DuplicateUndetermined(busy))
                    continue
            encoded = encode_message(message)
            if not batcher.offer(encoded, PendingMessage(group, index, producer, sequence)):
                full = TooManyRequests(f"topic {self.name}: publish queue full, retry later")
                self._settle(group, index, full)
                continue
            if dedup:
                self.dedup.on_pushed(producer, sequence)
            size = len(message.payload)
            self.msg_in += 1
            self.bytes_in += size
            record = self.producers.get(producer)
            if record is not None:
                record.msg_in += 1
                record.bytes_in += size

    @staticmethod
    def _settle(group: PublishGroup, index: int, outcome: Outcome) -> None:
        group.outcomes[index] = outcome
        group.remaining -= 1
        if group.remaining == 0:
            Topic._finish(group)

    @staticmethod
    def _finish(group: PublishGroup) -> None:
        """Every message of ``group`` is settled: resolve it, answer ``on_done``."""
        if not group.future.done():
            outcomes = [o for o in group.outcomes if o is not None]  # all set by now
            group.future.set_result(outcomes)
            if group.on_done is not None:
                try:
                    group.on_done(outcomes)
                except Exception:
                    log.exception("publish callback failed")

    def _pump(self) -> None:
        self._pump_soon = False
        batcher = self._batcher
        while True:
            cut = batcher.cut()
            if cut is None:
                return
            parts, tokens = cut
            payload = join_entry(parts)
            self.log.append(payload, len(parts), functools.partial(self._entry_done, tokens=tokens))

    def _entry_done(self, entry_future: asyncio.Future[Position], *, tokens: list[PendingMessage]) -> None:
        self._batcher.on_entry_done(len(tokens))
        dedup = self.policies.dedup
        settle = self._settle
        if entry_future.cancelled() or entry_future.exception() is not None:
            exc = None if entry_future.cancelled() else entry_future.exception()
            error = (
                TopicUnavailable(f"topic {self.name} moved to another gateway; reconnect")
                if isinstance(exc, LogFenced) or exc is None
                else TopicUnavailable(f"topic {self.name}: write failed: {exc}")
            )
            for token in tokens:
                if dedup:
                    self.dedup.on_failed(token.producer)
                settle(token.group, token.index, error)
            self._pump()
            return
        position = entry_future.result()
        ledger_id, entry_id = position.ledger_id, position.entry_id
        count = len(tokens)
        partition = self.partition
        ids = entry_ids_base64(ledger_id, entry_id, partition, count)
        batched = count > 1
        for index, (token, b64) in enumerate(zip(tokens, ids, strict=True)):
            if dedup:
                self.dedup.on_persisted(token.producer, token.sequence_id)
            group = token.group  # _settle inlined: once per message
            group.outcomes[token.index] = PublishResult(
                ledger_id, entry_id, partition, index if batched else NO_BATCH, count if batched else 0, b64
            )
            group.remaining -= 1
            if not group.remaining:
                self._finish(group)
        self.entries_since_snapshot += 1
        for sub in self.subscriptions.values():
            sub.on_new_entry()
        for reader in self.readers.values():
            reader.on_new_entry()
        self._pump()

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
        if durable:
            sub = await self.subscription(name, initial=initial)
        else:
            sub = self._non_durable(name, EARLIEST if initial == "Earliest" else self.log.last_confirmed)
        consumer_id = sub.add_consumer(sub_type, info, sink, dead_letter_topic)
        return sub, consumer_id

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

    async def _drain(self, seconds: float) -> None:
        """Wait (up to ``seconds``) until accepted publishes are stored and answered."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        batcher = self._batcher
        while (batcher.inflight or batcher.queued) and loop.time() < deadline and not self.log.fenced:
            await asyncio.sleep(0.005)

    # ------------------------------------------------------------ maintenance

    def slowest_mark_delete(self) -> Position | None:
        marks = [sub.cursor.mark_delete for sub in self.subscriptions.values()]
        return min(marks) if marks else None

    async def _maintain(self) -> None:
        while not self.closed:
            await asyncio.sleep(MAINTENANCE_INTERVAL_MS / 1000)
            try:
                await self.maintain_once()
            except Exception as exc:
                log.info("topic %s: maintenance failed: %s", self.name, exc)

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
        if self._maintenance is not None and self._maintenance is not asyncio.current_task():
            self._maintenance.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._maintenance
        if graceful and self.policies.dedup and not self.log.fenced:
            with contextlib.suppress(Exception):
                await self._snapshot_dedup()
        if graceful and not self.log.fenced:
            await self.log.close()
        else:
            await self.log.abandon()
        if self.on_closed is not None:
            self.on_closed(self)
