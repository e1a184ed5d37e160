"""Topic: one owned topic partition - producers, publishing, subscriptions, closing (asyncio shell).

Owns: the topic's managed log, its producers (names unique per topic), the
publish path (the batcher and dedup state of ``publish_core``, the lone-message
pump, the settling of each publish call's outcomes), the decoded-entry cache,
its subscriptions and readers, and its upkeep (the rules are pure, in
``topic_upkeep``). Rules (docs/architecture.md §4-6, docs/compatibility.md §4.9, §4.11):
- a publish is refused whole while the topic is closing, fenced, terminated or
  over its backlog quota, and unless the host still serves the topic under the
  ownership epoch it was loaded in (``TopicHost.serves``); otherwise its
  messages are queued in order, all at once when they fit and dedup is off,
  else one by one (each refused with a retriable 429 when the queue is full,
  or answered as a duplicate); on a dedup topic a new id refused (whole-publish
  refusal or a full queue) opens a gap in its producer's sequence
  (``Dedup.on_refused``);
- a message published without a sequence id (``publish_requests``) gets one
  from the topic: under dedup, a one-off publish (REST) gets the ids after its
  producer's last, so retries without ids stay apart, else 0; a connected
  producer (``ProducerRecord``) continues its own count, from
  ``initialSequenceId`` or, under dedup, from its last id the topic knows, and
  an id it gives moves that count on;
- entries are cut by ``PublishBatcher`` (adaptive: when the previous add
  completed or the batch is full); a batch is cut at once, a lone message one
  loop round later with whatever else arrived by then;
- an entry's messages get ids (ledger, entry, partition, batch index), the
  batch index only when the entry holds more than one message; a failed add
  answers each of its messages with a 503 (reconnect), and so it does the
  messages queued behind it (accepted before the failure was known: stored
  later, in a next ledger, they would come before the producer's resend of the
  failed ones - the order Pulsar keeps; ``ManagedLog`` does the same for the
  appends that wait for a roll), and so does an entry stored after the topic
  stopped serving (its ownership epoch ended - the gateway's lease past its
  local deadline): nothing is acknowledged late;
- every message of a publish call is settled exactly once, and the call's
  future (and ``on_done``) resolves when the last one is;
- with dedup on, (producer, sequence id) at or below the persisted maximum is
  answered as a duplicate and not stored; the state is a snapshot in etcd
  (producer -> highest persisted sequence id, the holes skipped below it, and
  the log position it covers), written by compare-and-swap every
  ``DEDUP_SNAPSHOT_ENTRIES`` entries and on clean close; a new owner restores
  it and replays the log after that position, so duplicates are recognised
  across ownership changes;
- a fenced add means another gateway owns the topic: everything is dropped at
  once and sessions are closed so clients reconnect to the new owner;
- an unload (graceful close) refuses new publishes, waits up to
  ``DRAIN_ON_CLOSE_S`` for the accepted ones to be stored and answered, then
  closes the sessions (4503) and the ledger;
- a terminated topic (``terminate``) refuses publishes and producers for good;
  its consumers that read everything are at the end of the topic;
- upkeep (visited by the gateway's ``upkeep_schedule.py``): TTL expiry, the
  backlog quota (refuse publishes, or ``consumer_backlog_eviction``), trimming
  under the retention policy (``ManagedLog.trim``), dedup snapshots, and the
  stats: plain counters bumped on the hot paths, rate meters and the history
  sampled at every visit; a seek by time binary-searches the log (publish
  times grow with it);
- every state change happens between awaits on the event loop (one owner).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import secrets
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import orjson

from coordination import keys
from coordination.clock import Clock
from coordination.store import MetadataStore
from gateway.broker import topic_upkeep as upkeep
from gateway.broker.broker_errors import (
    BacklogQuotaExceeded,
    ConsumerBusy,
    DuplicateUndetermined,
    ProducerBusy,
    SequenceAbandoned,
    SequenceGap,
    SubscriptionNotFound,
    TooManyRequests,
    TopicTerminated,
    TopicUnavailable,
)
from gateway.broker.consumers import ConsumerSink
from gateway.broker.cursor_core import Cursor
from gateway.broker.decoded_entries import DecodedEntries
from gateway.broker.dispatch import ConsumerInfo
from gateway.broker.log_state import LogFenced
from gateway.broker.managed_log import ManagedLog
from gateway.broker.publish_core import BatcherConfig, Dedup, DedupVerdict, PublishBatcher
from gateway.broker.publish_results import Outcome, PublishResult
from gateway.broker.stats import RateMeter
from gateway.broker.stats_history import StatsHistory, StatsSample
from gateway.broker.subscription import Subscription
from gateway.broker.topic_policies import TopicPolicies
from gateway.errors import GatewayError
from gateway.names import NamespaceName, TopicName
from gateway.protocol.ws_frames import PublishRequest
from gateway.quotas import Quota, refused
from gateway.subscription_type import SubscriptionType
from storage.formats.entry_format import EntryMessage, encode_message, join_entry
from storage.formats.message_id import entry_ids_base64
from storage.formats.positions import EARLIEST, NO_BATCH, Position

log = logging.getLogger(__name__)

DRAIN_ON_CLOSE_S = 5.0  # an unloading topic waits this long for its accepted publishes


class TopicHost(Protocol):
    """What a topic needs from the gateway that owns it."""

    store: MetadataStore
    clock: Clock
    policies_generation: int  # moves on whenever any namespace's policies may have changed

    def namespace_policies(self, ns: NamespaceName) -> TopicPolicies: ...

    async def publish_to(self, topic: str, message: EntryMessage) -> None: ...

    def topic_lost(self, topic: Topic) -> None: ...

    def serves(self, topic: Topic) -> bool: ...


@dataclass(slots=True)
class ProducerRecord:
    name: str
    connected_since_ms: int
    msg_in: int = 0
    bytes_in: int = 0
    closer: Callable[[str, str], None] | None = None  # the session's close(code, reason)
    producer_id: int = 0
    address: str = ""
    access_mode: str = "Shared"
    client_version: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    meter: RateMeter = field(default_factory=RateMeter)  # (msg_in, bytes_in)
    next_sequence: int = 0  # the id its next message without one gets (``publish_requests``)


@dataclass(slots=True)
class PublishGroup:
    """The messages of one publish call; its future (if it has one) resolves when all are
    settled (and ``on_done`` is called with the outcomes right then, without a loop round)."""

    future: asyncio.Future[list[Outcome]] | None
    outcomes: list[Outcome | None]
    remaining: int
    on_done: Callable[[list[Outcome]], None] | None = None


@dataclass(slots=True)
class PendingMessage:
    """One message of a publish call, waiting for its entry to be stored."""

    group: PublishGroup
    index: int
    producer: str
    sequence_id: int


def entry_message(request: PublishRequest, producer: str, sequence_id: int, now_ms: int) -> EntryMessage:
    """The message to store for ``request``, published at ``now_ms``."""
    key = request.key
    return EntryMessage(  # positional: keywords cost ~30 % more per published message
        request.payload,
        now_ms,
        producer,
        sequence_id,
        key.encode() if key is not None else None,
        None,  # ordering key
        request.properties,
        request.event_time_ms or None,
        request.deliver_at_ms or None,
        request.schema_version,
    )


class Topic:
    """One owned topic partition."""

    def __init__(self, name: TopicName, managed_log: ManagedLog, host: TopicHost, epoch: int = 0) -> None:
        self.name = name
        self.epoch = epoch  # the ownership epoch it was loaded under (service.BrokerService)
        # the held-bundles generation under which ``epoch`` was last found current (the
        # host's ``serves`` keeps it; -1: never)
        self.served_generation = -1
        self._partition = name.partition_index  # fixed by the name: not parsed per entry
        self._namespace = name.namespace_name
        self._policies = host.namespace_policies(self._namespace)
        self._policies_generation = host.policies_generation
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
            sub = Subscription(
                topic,
                sub_name,
                cursor,
                revision=item.mod_revision,
                sub_type=SubscriptionType.stored(data.get("type")),
            )
            topic.subscriptions[sub_name] = sub
        if topic.policies.dedup:
            await topic._restore_dedup()
        return topic

    async def _restore_dedup(self) -> None:
        """Take the dedup snapshot back, then replay the log tail after the position it covers."""
        current = await self.store.get(keys.dedup(self.name.path))
        position = EARLIEST
        if current is not None:
            data = orjson.loads(current.value)
            self.dedup.restore(data)
            ledger, entry = data.get("position", [-1, -1])
            position = Position(int(ledger), int(entry))
            self.dedup_revision = current.mod_revision
        self.dedup_position = position
        layout = self.log.layout
        nxt = layout.next_position(position)
        while nxt is not None:  # replay the log tail after the snapshot
            entries = await self.log.read(nxt, 1000)
            if not entries:
                break
            for pos, payload in entries:
                for message in self.decoded.messages(pos, payload):
                    self.dedup.on_persisted(message.producer_name, message.sequence_id)
            self.dedup_position = entries[-1][0]
            nxt = self.log.layout.next_position(entries[-1][0])

    async def _snapshot_dedup(self) -> None:
        """Write the dedup state with the position it covers: the last entry whose
        messages it has taken in (never ahead of it, or a replay would skip ids)."""
        position = self.dedup_position
        value = orjson.dumps({**self.dedup.snapshot(), "position": [position.ledger_id, position.entry_id]})
        revision = await self.store.compare_and_swap(keys.dedup(self.name.path), value, self.dedup_revision)
        if revision is None:
            self.on_lost_ownership()
            return
        self.dedup_revision = revision
        self.entries_since_snapshot = 0

    # ------------------------------------------------------------ producers

    def add_producer(self, name: str | None, initial_sequence_id: int = -1) -> ProducerRecord:
        """Connect a producer (a generated name if None); its messages without a
        sequence id are numbered after ``initial_sequence_id`` or, under dedup, after
        the last id of the producer the topic knows, if higher."""
        if self.closed:
            raise TopicUnavailable(f"topic {self.name} is closing")
        if self.log.terminated or self.terminating:
            raise TopicTerminated(f"topic {self.name} was terminated: it takes no new producers")
        policies = self.policies
        limit = policies.max_producers
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
        start = initial_sequence_id
        if policies.dedup:
            start = max(start, self.last_sequence_id(name))
        record.next_sequence = start + 1
        self.producers[name] = record
        return record

    def remove_producer(self, name: str) -> None:
        self.producers.pop(name, None)

    def last_sequence_id(self, producer: str) -> int:
        return self.dedup.last_pushed(producer)

    # ------------------------------------------------------------ publishing

    @property
    def policies(self) -> TopicPolicies:
        """The namespace's policies as they are now (cached by the gateway; looked up
        again once the host's ``policies_generation`` moved, not on every call)."""
        generation = self.host.policies_generation
        if generation != self._policies_generation:
            self._policies = self.host.namespace_policies(self._namespace)
            self._policies_generation = generation
        return self._policies

    @property
    def partition(self) -> int:
        return self._partition

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

    def publish_requests(
        self,
        producer: str | ProducerRecord,
        requests: Sequence[PublishRequest],
        now_ms: int,
    ) -> asyncio.Future[list[Outcome]]:
        """Publish parsed requests as ``publish_many`` does, numbering the ones that
        carry no sequence id: a connected producer's (``ProducerRecord``) continue its
        own count, which an id it gives moves on; a one-off publish's (a producer
        name: REST) get, under dedup, the ids after the producer's last, so retries
        without ids stay apart; else 0."""
        return self.publish_many(self._entry_messages(producer, requests, now_ms))

    def publish_requests_then(
        self,
        producer: ProducerRecord,
        requests: Sequence[PublishRequest],
        now_ms: int,
        on_done: Callable[[list[Outcome]], None],
    ) -> None:
        """``publish_requests`` for a connected producer that only needs ``on_done``: no
        future per call (the WebSocket producer's path, one call per frame)."""
        messages = self._entry_messages(producer, requests, now_ms)
        self._queue_group(messages, PublishGroup(None, [None] * len(messages), len(messages), on_done))

    def _entry_messages(
        self, producer: str | ProducerRecord, requests: Sequence[PublishRequest], now_ms: int
    ) -> list[EntryMessage]:
        """The messages to store for ``requests``, numbered (see ``publish_requests``)."""
        messages: list[EntryMessage] = []
        if isinstance(producer, ProducerRecord):
            name = producer.name
            sequence = producer.next_sequence  # once per message: kept inline
            for request in requests:
                given = request.sequence_id
                if given is None:
                    messages.append(entry_message(request, name, sequence, now_ms))
                    sequence += 1
                else:
                    messages.append(entry_message(request, name, given, now_ms))
                    sequence = max(sequence, given + 1)
            producer.next_sequence = sequence
        else:
            first = self.last_sequence_id(producer) + 1 if self.policies.dedup else None
            for index, request in enumerate(requests):
                given = request.sequence_id
                if given is None:
                    given = first + index if first is not None else 0
                messages.append(entry_message(request, producer, given, now_ms))
        return messages

    def publish_many(self, messages: list[EntryMessage]) -> asyncio.Future[list[Outcome]]:
        """Queue messages in order; the future gives one outcome per message (a
        result, or the error that refused it) once every one is settled (a caller that
        needs the outcomes without a future uses ``publish_requests_then``)."""
        future: asyncio.Future[list[Outcome]] = asyncio.get_running_loop().create_future()
        self._queue_group(messages, PublishGroup(future, [None] * len(messages), len(messages)))
        return future

    def _queue_group(self, messages: list[EntryMessage], group: PublishGroup) -> None:
        """Queue the messages of ``group`` in order (or settle the ones refused)."""
        policies = self.policies
        refusal: GatewayError | None = None
        if self.closed or self.log.fenced or not self.host.serves(self):
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

    def _offer_all(self, messages: list[EntryMessage], group: PublishGroup) -> bool:
        """Queue every message in one step (no dedup, no refusal); False if they do
        not all fit the queue (nothing queued then)."""
        if len(messages) == 1:  # one message per frame or request: no lists, no generators
            message = messages[0]
            producer = message.producer_name
            token = PendingMessage(group, 0, producer, message.sequence_id)
            if not self._batcher.offer(encode_message(message), token):
                return False
            self._count_in(producer, len(message.payload))
            return True
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
                if dedup:
                    self.dedup.on_refused(producer, sequence)
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
                if verdict is DedupVerdict.GAP:
                    first = (
                        f"sequence id {self.dedup.gap(producer)} of {producer} failed: send it again first"
                    )
                    self._settle(group, index, SequenceGap(first))
                    continue
                if verdict is DedupVerdict.ABANDONED:
                    late = f"sequence id {sequence} of {producer} was never stored and later ids were"
                    self._settle(group, index, SequenceAbandoned(late))
                    continue
            encoded = encode_message(message)
            if not batcher.offer(encoded, PendingMessage(group, index, producer, sequence)):
                full = TooManyRequests(f"topic {self.name}: publish queue full, retry later")
                if dedup:
                    self.dedup.on_refused(producer, sequence)
                self._settle(group, index, full)
                continue
            if dedup:
                self.dedup.on_pushed(producer, sequence)
            self._count_in(producer, len(message.payload))

    def _count_in(self, producer: str, size: int) -> None:
        """Count one queued message of ``size`` bytes for the topic and its producer."""
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
        """Every message of ``group`` is settled: resolve it, answer ``on_done`` (not when
        its future was cancelled: nobody waits for the answer)."""
        future = group.future
        if future is None or not future.done():
            outcomes = [o for o in group.outcomes if o is not None]  # all set by now
            if future is not None:
                future.set_result(outcomes)
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
            for token in [*tokens, *self._batcher.drain()]:  # nothing behind it may overtake it
                if dedup:
                    self.dedup.on_failed(token.producer, token.sequence_id)
                settle(token.group, token.index, error)
            return
        if not self.host.serves(self):
            # stored, but this gateway's ownership (its lease) ended before it answered:
            # never acknowledge past the lease's local deadline; the producer retries
            # on the next owner, which recovers the entry (dedup then answers it)
            late = TopicUnavailable(f"topic {self.name}: this gateway's ownership ended; reconnect")
            for token in tokens:
                if dedup:
                    self.dedup.on_persisted(token.producer, token.sequence_id)
                settle(token.group, token.index, late)
            if dedup:
                self.dedup_position = entry_future.result()
            self._pump()
            return
        position = entry_future.result()
        ledger_id, entry_id = position.ledger_id, position.entry_id
        count = len(tokens)
        partition = self._partition
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
        if dedup:
            self.dedup_position = position
        self.entries_since_snapshot += 1
        for sub in self.subscriptions.values():
            sub.on_new_entry()
        for reader in self.readers.values():
            reader.on_new_entry()
        self._pump()

    async def _drain(self, seconds: float) -> None:
        """Wait (up to ``seconds``) until accepted publishes are stored and answered."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        batcher = self._batcher
        while (batcher.inflight or batcher.queued) and loop.time() < deadline and not self.log.fenced:
            await asyncio.sleep(0.005)

    # ------------------------------------------------------------ decoded entries

    async def first_position_at_or_after(self, timestamp_ms: int) -> Position | None:
        """The first entry whose publish time is >= ``timestamp_ms`` (binary search
        over the log; publish times grow with the log); None if there is none."""
        layout = self.log.layout
        lo, hi = 1, layout.total_entries
        found: Position | None = None
        while lo <= hi:
            mid = (lo + hi) // 2
            position = layout.at(mid)
            messages = await self.decoded.load_messages(position)
            if not messages or messages[0].publish_time_ms >= timestamp_ms:
                found = position
                hi = mid - 1
            else:
                lo = mid + 1
        return found

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
        sub_type: SubscriptionType,
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
        return sub, sub.add_consumer(SubscriptionType.EXCLUSIVE, info, sink)

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

    # ------------------------------------------------------------ upkeep

    def slowest_mark_delete(self) -> Position | None:
        marks = [sub.cursor.mark_delete for sub in self.subscriptions.values()]
        return min(marks) if marks else None

    def backlog_bytes(self) -> int:
        """Estimated bytes after the slowest durable cursor (docs/compatibility.md §4.11)."""
        return upkeep.backlog_bytes(self.log.layout, self.log.total_bytes, self.slowest_mark_delete())

    def upkeep_needs_io(self, policies: TopicPolicies) -> bool:
        """Whether this visit's upkeep may do I/O (else ``maintain_in_place`` covers it)."""
        subscriptions, ledgers = len(self.subscriptions), self.log.ledger_count
        return upkeep.needs_io(policies, subscriptions, ledgers, self.entries_since_snapshot)

    def maintain_in_place(self, policies: TopicPolicies, now_ms: int) -> None:
        """``maintain_once`` for a topic that ``upkeep_needs_io`` says has no I/O due."""
        self.sample_stats(now_ms)
        self._check_backlog_quota(policies)

    async def maintain_once(self) -> None:
        if self.closed or self.log.fenced:
            return
        self.sample_stats(self.clock.now_ms())
        policies = self.policies
        if policies.ttl_seconds > 0:
            await self.expire(policies.ttl_seconds)
        self._check_backlog_quota(policies)
        await self.log.trim(self.slowest_mark_delete(), policies.retention)
        if upkeep.snapshot_due(policies, self.entries_since_snapshot):
            await self._snapshot_dedup()

    def _check_backlog_quota(self, policies: TopicPolicies) -> None:
        limit = policies.backlog_limit_bytes
        if limit < 0:
            self.quota_exceeded = False
            return
        self.quota_exceeded = self.backlog_bytes() > limit
        if self.quota_exceeded and policies.backlog_policy == "consumer_backlog_eviction":
            slowest = min(self.subscriptions.values(), key=lambda sub: sub.cursor.mark_delete)
            slowest.skip(upkeep.eviction_count(self.log.layout, slowest.cursor.mark_delete))

    async def expire(self, ttl_seconds: int, subs: Iterable[Subscription] | None = None) -> int:
        """Expire (acknowledge) messages older than ``ttl_seconds`` on ``subs`` (default:
        every durable subscription); returns how many messages expired."""
        first_live = await self.first_position_at_or_after(self.clock.now_ms() - ttl_seconds * 1000)
        upto = upkeep.expiry_position(self.log.layout, first_live)
        expired = 0
        for sub in list(self.subscriptions.values()) if subs is None else subs:
            if upto > sub.cursor.mark_delete:
                expired += sub.expire_upto(upto)
        return expired

    def sample_stats(self, now_ms: int) -> None:
        """Feed the rate meters (topic, producers, subscriptions, consumers) and, once
        per history interval, the topic's stats history."""
        self.meter.sample(now_ms, (self.msg_in, self.bytes_in))
        for producer in self.producers.values():
            producer.meter.sample(now_ms, (producer.msg_in, producer.bytes_in))
        for subs in (self.subscriptions, self.readers):
            for sub in subs.values() if subs else ():
                sub.meter.sample(now_ms, _sub_counts(sub))
                for record in sub.consumers.values():
                    record.meter.sample(
                        now_ms, (record.msg_out, record.bytes_out, record.redelivered, record.acks)
                    )
        if self.history.due(now_ms):
            rate_in, throughput_in = self.meter.rates(now_ms, (self.msg_in, self.bytes_in))
            rate_out = throughput_out = 0.0
            for sub in self.subscriptions.values():
                rates = sub.meter.rates(now_ms, _sub_counts(sub))
                rate_out += rates[0]
                throughput_out += rates[1]
            self.history.offer(
                StatsSample(
                    now_ms,
                    rate_in,
                    rate_out,
                    throughput_in,
                    throughput_out,
                    sum(sub.backlog() for sub in self.subscriptions.values()),
                    self.log.total_bytes,
                )
            )

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


def _sub_counts(sub: Subscription) -> tuple[int, int, int, int, int]:
    return (sub.msg_out, sub.bytes_out, sub.msg_redelivered, sub.acks, sub.expired)
