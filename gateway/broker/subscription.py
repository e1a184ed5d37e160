"""Subscription: one cursor, one dispatcher, and its consumers (asyncio shell).

Owns: a subscription's cursor (ack state), its dispatcher (who gets what), its
read position, its consumers' sinks, the effects that wait for entries read
back (``deferred_effects``) and the persistence of the cursor to etcd; it
knows its topic through a narrow port (``SubscriptionTopic``).
Rules (docs/architecture.md §4-5, dispatch/base.py contract):
- one task (``_run``) reads the log at the read position as far as the
  dispatcher's ``read_budget`` allows (overshooting by at most one entry),
  skipping acked messages, and carries out the dispatcher's effects in order;
  every other input (consumer join/leave, permits, acks, nacks, seek) is a
  synchronous call that applies the cursor change first, then the dispatcher's
  effects, then wakes the task - state is only touched between awaits;
- ``RewindTo`` bumps an epoch so results of reads started before it are dropped;
- the cursor is persisted in batches (at most every ``persist_interval_ms``)
  by compare-and-swap; a failed CAS means another gateway owns the topic now:
  the topic is dropped (at-least-once: unpersisted acks come back as
  redeliveries, nothing is lost);
- acks naming positions this topic never delivered move nothing;
- a dispatcher's ``DeadLetter`` copies the message to the consumer's
  dead-letter topic (default ``<topic>-<sub>-DLQ``, ``dead_letters``), then
  acks the original; a copy that fails leaves it unacked (redelivered later).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

import orjson

from coordination import keys
from coordination.store import MetadataStore
from gateway.broker.broker_errors import ConsumerBusy, NotAllowed, SubscriptionTypeMismatch
from gateway.broker.consumers import (
    DISPATCHERS,
    ConsumerRecord,
    ConsumerSink,
    read_messages,
    resolve_deliveries,
)
from gateway.broker.cursor_core import Cursor
from gateway.broker.cursor_store import StoredCursor
from gateway.broker.dead_letters import LetterSource, dead_letter, letter_topics
from gateway.broker.deferred_effects import DeferredEffects
from gateway.broker.dispatch import (
    ActiveChanged,
    ConsumerId,
    ConsumerInfo,
    DeadLetter,
    Deliver,
    Dispatcher,
    DispatcherConfig,
    Effect,
    ExclusiveDispatcher,
    FailoverDispatcher,
    RangesChanged,
    Reject,
    RejectReason,
    RewindTo,
)
from gateway.broker.managed_log import ManagedLog
from gateway.broker.stats import RateMeter
from gateway.quotas import Quota, refused
from gateway.subscription_type import SubscriptionType
from storage.formats.positions import NO_BATCH, MessagePosition, Position

if TYPE_CHECKING:
    from storage.formats.entry_format import EntryMessage

log = logging.getLogger(__name__)

PERSIST_INTERVAL_MS = 200
READ_ENTRIES_MAX = 100
_consumer_ids = itertools.count(1)


class SubscriptionTopic(LetterSource, Protocol):
    """What a subscription needs of its topic (a ``Topic``): its log and decoded
    entries, the cursor store, the consumer limit, and to be told that another
    gateway owns it now (a cursor CAS lost); dead letters need ``LetterSource``."""

    @property
    def log(self) -> ManagedLog: ...

    @property
    def store(self) -> MetadataStore: ...

    def max_consumers_per_subscription(self) -> int: ...

    def on_lost_ownership(self) -> None: ...


class Subscription:
    def __init__(
        self,
        topic: SubscriptionTopic,
        name: str,
        cursor: Cursor,
        *,
        durable: bool = True,
        revision: int = 0,
        sub_type: SubscriptionType | None = None,
        config: DispatcherConfig | None = None,
        persist_interval_ms: int = PERSIST_INTERVAL_MS,
    ) -> None:
        self.topic = topic
        self.name = name
        self.cursor = cursor
        self.durable = durable
        self.sub_type = sub_type  # fixed by the first consumer, free again when none is left
        self._config = config or DispatcherConfig(
            partition_index=topic.name.partition_index, topic_name=str(topic.name)
        )
        self._dispatcher: Dispatcher | None = None
        self.consumers: dict[ConsumerId, ConsumerRecord] = {}
        self._read_position = self._after(cursor.mark_delete)
        self._epoch = 0
        self._waiter: asyncio.Future[None] | None = None  # the read loop sleeping (``_sleep``)
        self._reading = False  # the read loop awaits a read of the log
        self._entry_messages = 1  # messages per entry in the last read: turns a budget into entries
        self._task: asyncio.Task[None] | None = None
        self._persist_task: asyncio.Task[None] | None = None
        self._deferred = DeferredEffects(self.apply_later)  # deliveries waiting for their entries
        self._just_read: list[tuple[Position, bytes]] = []  # the entries being dispatched now
        self.stored = StoredCursor(topic.store, self.key, revision, cursor.revision if revision else -1)
        self._persist_interval_ms = persist_interval_ms
        self.closed = False
        self.msg_out = 0
        self.bytes_out = 0
        self.msg_redelivered = 0
        self.expired = 0
        self.last_consumed_ms = 0
        self.last_acked_ms = 0
        self.last_expire_ms = 0
        self.acks = 0
        self.meter = RateMeter(self._now(), 5)  # (msg_out, bytes_out, redelivered, acks, expired)

    # ------------------------------------------------------------ helpers

    def _after(self, position: Position) -> Position:
        nxt = self.topic.log.layout.next_position(position)
        if nxt is not None:
            return nxt
        last = self.topic.log.last_confirmed
        return Position(last.ledger_id, last.entry_id + 1) if last.entry_id >= -1 else Position(0, 0)

    @property
    def read_position(self) -> Position:
        return self._read_position

    @property
    def dispatcher(self) -> Dispatcher | None:
        return self._dispatcher

    @property
    def key(self) -> str:
        return keys.cursor(self.topic.name.path, self.name)

    def _now(self) -> int:
        return self.topic.clock.now_ms()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"sub-{self.name}")
        if self.durable and self._persist_task is None:
            self._persist_task = asyncio.get_running_loop().create_task(self._persist_loop())

    def wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def on_new_entry(self) -> None:
        """An entry was confirmed: with no read in flight, dispatch what is cached from the
        read position now (delivered in the confirming loop round); wake the loop."""
        dispatcher = self._dispatcher
        if dispatcher is not None and self._task is not None and not self._reading and not self.closed:
            deadline = dispatcher.next_deadline_ms()
            budget = dispatcher.read_budget()
            if budget > 0 and (deadline is None or deadline > self._now()):
                entries = self.topic.log.read_cached(self._read_position, min(budget, READ_ENTRIES_MAX))
                if entries:
                    self._on_entries(dispatcher, entries, budget)
        self.wake()

    # ------------------------------------------------------------ consumers

    def add_consumer(
        self,
        sub_type: SubscriptionType,
        info: ConsumerInfo,
        sink: ConsumerSink,
        dead_letter_topic: str | None = None,
    ) -> int:
        if self.consumers and self.sub_type != sub_type:
            raise SubscriptionTypeMismatch(
                f"subscription {self.name} is {self.sub_type}; cannot subscribe as {sub_type}"
            )
        max_consumers = self.topic.max_consumers_per_subscription()
        if max_consumers and len(self.consumers) >= max_consumers:
            refused(Quota.CONSUMERS_PER_SUBSCRIPTION)
            raise ConsumerBusy(
                f"Subscription reached max consumers limit: {self.name} has {max_consumers}"
                " (maxConsumersPerSubscription)"
            )
        if self._dispatcher is None or self.sub_type != sub_type:
            self.sub_type = sub_type
            self._dispatcher = DISPATCHERS[sub_type](self._config)
            self._rewind(self.cursor.mark_delete)
        consumer_id = ConsumerId(next(_consumer_ids))
        record = ConsumerRecord(consumer_id, info, sink, self._now(), dead_letter_topic)
        record.meter.sample(record.connected_since_ms, (0, 0, 0, 0))
        self.consumers[consumer_id] = record
        effects = self._dispatcher.add_consumer(consumer_id, info, self._now())
        for effect in effects:
            if isinstance(effect, Reject) and effect.consumer_id == consumer_id:
                del self.consumers[consumer_id]
                if effect.reason in (RejectReason.CONSUMER_BUSY, RejectReason.TOO_MANY_CONSUMERS):
                    raise ConsumerBusy(f"Exclusive consumer is already connected to {self.name}")
                if effect.reason is RejectReason.HASH_RANGE_CONFLICT:
                    raise ConsumerBusy(f"Key_Shared range conflict: {effect.detail}")
                raise NotAllowed(f"{effect.reason.value}: {effect.detail}")
        self._apply_now(effects)
        self.start()
        return consumer_id

    def remove_consumer(self, consumer_id: int) -> None:
        record = self.consumers.pop(ConsumerId(consumer_id), None)
        if record is None or self._dispatcher is None:
            return
        self._apply_now(self._dispatcher.remove_consumer(record.consumer_id, self._now()))

    def permits(self, consumer_id: int, n: int) -> None:
        if self._dispatcher is not None and ConsumerId(consumer_id) in self.consumers:
            self._apply_now(self._dispatcher.on_permits(ConsumerId(consumer_id), n, self._now()))

    def set_writable(self, consumer_id: int, writable: bool) -> None:
        """The consumer's sink is over its pending-bytes limit (False) or back under it."""
        if self._dispatcher is not None and ConsumerId(consumer_id) in self.consumers:
            self._apply_now(self._dispatcher.on_writable(ConsumerId(consumer_id), writable, self._now()))

    @staticmethod
    def _valid(position: MessagePosition) -> bool:
        """A cheap sanity check: the cursor itself ignores entries it never read, and
        ledger ids are unique across topics, so a foreign or invented id moves nothing."""
        return position.entry_id >= 0 and position.ledger_id >= 0

    def ack(self, consumer_id: int, positions: Iterable[MessagePosition]) -> int:
        """Individual acks; returns how many changed the cursor."""
        acked = self.cursor.ack_many(positions, self.topic.log.layout)  # unseen or invalid: no-ops
        record = self.consumers.get(ConsumerId(consumer_id))
        if record is not None:
            record.acks += len(acked)
        if acked:
            self.acks += len(acked)
            self.last_acked_ms = self._now()
        if self._dispatcher is not None and acked:
            self._apply_now(self._dispatcher.on_ack(ConsumerId(consumer_id), acked, self._now()))
        return len(acked)

    def ack_cumulative(self, consumer_id: int, position: MessagePosition) -> bool:
        if self.sub_type is None or not self.sub_type.single_active:
            raise NotAllowed(f"cumulative ack is not allowed on a {self.sub_type} subscription")
        if not self._valid(position):
            return False
        changed = self.cursor.ack_cumulative(position, self.topic.log.layout)
        dispatcher = self._dispatcher
        if changed and isinstance(dispatcher, ExclusiveDispatcher | FailoverDispatcher):
            self.acks += 1
            self.last_acked_ms = self._now()
            self._apply_now(dispatcher.on_cumulative_ack(ConsumerId(consumer_id), position, self._now()))
        return changed

    def nack(self, consumer_id: int, positions: Iterable[MessagePosition]) -> None:
        if self._dispatcher is not None:
            valid = [p for p in positions if self._valid(p)]
            self._apply_now(self._dispatcher.on_nack(ConsumerId(consumer_id), valid, self._now()))

    # ------------------------------------------------------------ cursor admin

    def seek(self, position: Position, *, inclusive: bool = True) -> None:
        self.cursor.seek(position, self.topic.log.layout, inclusive=inclusive)
        self._reset_delivery()

    def skip(self, count: int) -> None:
        """Acknowledge the next ``count`` unacknowledged *messages*."""
        log_ = self.topic.log
        self.cursor.skip_messages(count, log_.layout, log_.counts.view(log_.layout))
        self._reset_delivery()

    def backlog(self) -> int:
        """Unacknowledged messages (``msgBacklog``)."""
        log_ = self.topic.log
        return self.cursor.backlog_messages(log_.layout, log_.counts.view(log_.layout))

    def expire_upto(self, position: Position) -> int:
        """Acknowledge everything up to ``position`` (TTL, admin expiry); returns
        how many messages that expired."""
        before = self.backlog()
        if not self.cursor.expire(position, self.topic.log.layout):
            return 0
        self._reset_delivery()
        expired = max(0, before - self.backlog())
        self.expired += expired
        self.last_expire_ms = self._now()
        return expired

    def _reset_delivery(self) -> None:
        """After a seek/skip: start delivery over from the new mark-delete."""
        if self._dispatcher is not None:
            infos = [(r.consumer_id, r.info) for r in self.consumers.values()]
            self._dispatcher = DISPATCHERS[self.sub_type or SubscriptionType.EXCLUSIVE](self._config)
            now = self._now()
            for consumer_id, info in infos:
                self._apply_now(self._dispatcher.add_consumer(consumer_id, info, now))
        self._rewind(self.cursor.mark_delete)

    def _rewind(self, mark_delete: Position) -> None:
        self._read_position = self._after(mark_delete)
        self._epoch += 1
        self.wake()

    # ------------------------------------------------------------ effects

    def _apply_now(self, effects: list[Effect]) -> None:
        # Every input may have freed credit or changed membership even when it has
        # no effect of its own: the read loop must look at the budget again.
        self.wake()
        if not effects:
            return
        delivers: list[Deliver] = []
        later: list[Effect] = []
        for effect in effects:
            if isinstance(effect, Deliver):
                delivers.append(effect)
            elif isinstance(effect, RewindTo):
                self._read_position = effect.position
                self._epoch += 1
            elif isinstance(effect, ActiveChanged):
                record = self.consumers.get(effect.consumer_id)
                if record is not None:
                    record.sink.active_changed(effect.is_active)
            elif isinstance(effect, RangesChanged):
                record = self.consumers.get(effect.consumer_id)
                if record is not None:
                    record.sink.ranges_changed(effect.ranges)
            else:
                later.append(effect)
        if self._deferred.busy:  # earlier deliveries wait for their entries: none may overtake them
            self._deferred.add([*delivers, *later])
            return
        deliveries, missing = resolve_deliveries(delivers, self._messages_at)
        if missing:  # these wait, in order, with the ones whose entry must be read back
            self._deferred.add([*delivers, *later])
            return
        self.send(deliveries)
        if later:  # dead letters
            asyncio.get_running_loop().create_task(self.apply_later(later))
        self.wake()

    async def apply_later(self, effects: list[Effect]) -> None:
        """Apply ``effects`` in order: deliveries once their entries are at hand (read
        back from the storage nodes if need be), dead letters by publishing them."""
        delivers: list[Deliver] = []
        loaded: dict[Position, list[EntryMessage] | None] = {}
        for effect in effects:
            if isinstance(effect, Deliver):
                entry = effect.message.position.entry
                if entry not in loaded:
                    try:
                        loaded[entry] = await self.topic.decoded.load_messages(entry)
                    except Exception as exc:  # its messages stay pending: redelivered later
                        log.warning(
                            "subscription %s: reading entry %s back failed: %s", self.name, entry, exc
                        )
                        loaded[entry] = None
                delivers.append(effect)  # one whose entry is gone (trimmed, unreadable) is dropped
            elif isinstance(effect, DeadLetter):
                await self._dead_letter(effect)
        deliveries, _ = resolve_deliveries(delivers, lambda position: loaded[position.entry])
        self.send(deliveries)

    async def _dead_letter(self, effect: DeadLetter) -> None:
        """Carry out a dispatcher's ``DeadLetter``: copy the message to the consumer's
        dead-letter topic (default ``<topic>-<sub>-DLQ``), then ack the original."""
        position = effect.message.position
        topic = self.topic
        messages = await topic.decoded.load_messages(position.entry)
        record = self.consumers.get(effect.consumer_id)
        target = record.dead_letter_topic if record and record.dead_letter_topic else None
        if target is None:
            target = str(letter_topics(topic.name, self.name)[1])
        if messages is not None:
            index = 0 if position.batch_index == NO_BATCH else position.batch_index
            try:
                await dead_letter(topic, target, messages[index], position, self.name)
            except Exception as exc:  # the message stays unacked: redelivered later
                log.warning("dead-letter to %s failed: %s", target, exc)
                return
        self.ack(effect.consumer_id, [position])

    def _messages_at(self, position: MessagePosition) -> list[EntryMessage] | None:
        """The messages of ``position``'s entry without I/O: decoded, in the log's
        cache, or one of the entries being dispatched now (the cache budget may have
        dropped it since it was read)."""
        found = self.topic.decoded.messages_at(position)
        if found is None:
            entry = position.entry
            payload = next((p for at, p in self._just_read if at == entry), None)
            if payload is not None:
                found = self.topic.decoded.messages(entry, payload)
        return found

    def send(self, deliveries: dict[ConsumerId, list[Deliver]]) -> None:
        """Hand ``deliveries`` to their consumers' sinks (counted in the stats)."""
        now = self._now()
        for consumer_id, items in deliveries.items():
            record = self.consumers.get(consumer_id)
            if record is None:
                continue
            size = sum([len(d.content.payload) for d in items])  # a list: quicker than a generator
            record.msg_out += len(items)
            record.bytes_out += size
            self.msg_out += len(items)
            self.bytes_out += size
            redelivered = len(items) - [d.redelivery_count for d in items].count(0)
            record.redelivered += redelivered
            self.msg_redelivered += redelivered
            self.last_consumed_ms = now
            record.sink.deliver(items)

    # ------------------------------------------------------------ read loop

    async def _run(self) -> None:
        log_ = self.topic.log
        while not self.closed:
            dispatcher = self._dispatcher
            now = self._now()
            if dispatcher is None:
                await self._sleep(None)
                continue
            deadline = dispatcher.next_deadline_ms()
            if deadline is not None and deadline <= now:
                self._apply_now(dispatcher.on_timer(now))
                continue
            budget = dispatcher.read_budget()
            start = self._read_position
            if budget > 0 and log_.last_confirmed >= start:
                epoch = self._epoch
                self._reading = True
                try:
                    wanted = min(-(-budget // self._entry_messages), READ_ENTRIES_MAX)  # entries, rounded up
                    entries = await log_.read(start, wanted)
                except Exception as exc:
                    log.warning("subscription %s: read at %s failed: %s", self.name, start, exc)
                    await asyncio.sleep(0.2)
                    continue
                finally:
                    self._reading = False
                if epoch != self._epoch or self.closed or dispatcher is not self._dispatcher:
                    continue
                if not entries:
                    nxt = log_.layout.next_position(Position(start.ledger_id, start.entry_id - 1))
                    if nxt is not None and nxt > start:
                        self._read_position = nxt  # skip a gap (empty or trimmed ledger)
                        continue
                    await self._sleep(deadline)
                    continue
                self._on_entries(dispatcher, entries, budget)
                continue
            await self._sleep(deadline)

    def _on_entries(self, dispatcher: Dispatcher, entries: list[tuple[Position, bytes]], budget: int) -> None:
        decoded = self.topic.decoded
        messages, last, self._entry_messages = read_messages(entries, decoded, self.cursor, budget)
        self._read_position = Position(last.ledger_id, last.entry_id + 1)
        if messages:
            self._just_read = entries
            try:
                self._apply_now(dispatcher.on_messages(messages, self._now()))
            finally:
                self._just_read = []

    async def _sleep(self, deadline: int | None) -> None:
        """Wait for ``wake`` (wakes while the loop runs are not kept: it looks again
        before sleeping) or the deadline. A bare future, not ``wait_for``: one loop
        round from an entry's confirmation to its delivery, and no task per sleep."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiter = waiter
        timer = None
        if deadline is not None:
            timer = loop.call_later(max(0.0, (deadline - self._now()) / 1000), self.wake)
        try:
            await waiter
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()

    # ------------------------------------------------------------ persistence

    def state_json(self) -> bytes:
        return orjson.dumps(
            {"cursor": self.cursor.snapshot(), "type": self.sub_type, "createdMs": self.topic.clock.now_ms()}
        )

    async def persist(self) -> None:
        """Write the cursor now if it changed (CAS on the key's revision)."""
        if not self.durable or self.stored.holds(self.cursor.revision):
            return
        if not await self.stored.write(self.state_json(), self.cursor.revision):
            log.warning("subscription %s of %s: cursor moved by another gateway", self.name, self.topic.name)
            self.topic.on_lost_ownership()

    async def _persist_loop(self) -> None:
        while not self.closed:
            await asyncio.sleep(self._persist_interval_ms / 1000)
            try:
                await self.persist()
            except Exception as exc:
                log.info("subscription %s: cursor persist failed (%s); will retry", self.name, exc)

    async def delete(self) -> None:
        await self.close(persist=False)
        if self.durable:
            await self.stored.delete()

    async def close(self, *, persist: bool = True) -> None:
        if self.closed:
            return
        self.closed = True
        self.wake()
        for task in (self._task, self._persist_task):
            if task is not None and task is not asyncio.current_task():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        await self._deferred.close()
        if persist:
            with contextlib.suppress(Exception):
                await self.persist()
