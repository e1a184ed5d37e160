"""BrokerService: the topics this gateway owns, loaded on demand (asyncio shell).

Owns: the map of loaded topics (one load at a time per topic), the policies
each topic acts on (refreshed from the namespace store; the quorums of its
managed log's next ledger among them), and publishing to a
topic by name wherever it is owned (dead-letter topics). Rules (docs/architecture.md
§4, §6): a topic is loaded only by its bundle's owner (the API layer checks
ownership before calling in); loading opens the managed log with recovery,
which fences any previous owner; a topic whose ownership is lost is dropped
at once; auto-creation follows the namespace policy; a topic never loads
while its namespace is unknown.

Ownership epochs (``ownership_epoch``: the revision of the bundle's ownership
key, None when not owned): a load runs under the epoch it started with and
writes it into the ledger list (``log_state.claim_epoch``); a load that ends
after the epoch changed (bundle unloaded, lost, or lost and taken again) is
discarded - its ledger closed, never registered - and so is a registered topic
of an older epoch that ``topic()`` finds. Unload and drop also cover the loads
in flight of the names they match: those are discarded when they end.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import orjson

from coordination import keys
from coordination.clock import Clock
from coordination.store import MetadataStore
from gateway.broker.broker_errors import OwnershipMovedWhileLoading, SubscriptionBusy, TopicUnavailable
from gateway.broker.log_state import LogConfig, TopicNotFound, topic_missing
from gateway.broker.managed_log import ManagedLog
from gateway.broker.topic import Topic
from gateway.broker.topic_admin import connected_clients
from gateway.broker.topic_policies import TopicPolicies
from gateway.broker.upkeep_schedule import UpkeepSchedule
from gateway.errors import GatewayError
from gateway.meta.topics import check_topic_room
from gateway.names import NamespaceName, TopicName
from storage.client.api import LedgerClient
from storage.formats.entry_format import EntryMessage
from storage.formats.log_record import decode_state, encode_state

log = logging.getLogger(__name__)

TOPICS_MAX = 10_000  # loaded topics per gateway
POLICY_REFRESH_S = 1.0


@dataclass(frozen=True, slots=True)
class NamespaceView:
    """What the service needs to know about a namespace."""

    exists: bool
    auto_create: bool = True
    auto_create_partitions: int = 0  # 0 = non-partitioned
    policies: TopicPolicies = field(default_factory=TopicPolicies)
    max_topics: int = 0  # maxTopicsPerNamespace, resolved (0: none)


_DEFAULT_POLICIES = TopicPolicies()
PolicySource = Callable[[NamespaceName], Awaitable[NamespaceView]]
RemotePublish = Callable[[str, EntryMessage], Awaitable[None]]


class NamespaceMissing(TopicNotFound):
    code = "not_found"


class PartitionedTopic(GatewayError):
    """The base name of a partitioned topic where one partition's log is needed (409)."""

    code = "conflict"


class BrokerService:
    def __init__(
        self,
        store: MetadataStore,
        client: LedgerClient,
        clock: Clock,
        policy_source: PolicySource,
        log_config: LogConfig | None = None,
        topics_max: int = TOPICS_MAX,
    ) -> None:
        self.store = store
        self.client = client
        self.clock = clock
        self._policy_source = policy_source
        self._log_config = log_config or LogConfig()
        self._topics_max = topics_max
        self.topics: dict[TopicName, Topic] = {}
        self._loading: dict[TopicName, asyncio.Task[Topic]] = {}
        # loads that may not auto-create (weak: a finished load is forgotten with its task)
        self._loading_without_create: weakref.WeakSet[asyncio.Task[Topic]] = weakref.WeakSet()
        self._namespaces: dict[NamespaceName, NamespaceView] = {}
        self.policies_generation = 0  # moves on with every change of ``_namespaces``
        self._refresh_task: asyncio.Task[None] | None = None
        self.upkeep = UpkeepSchedule(self.topics.values, clock)
        self.remote_publish: RemotePublish | None = None  # set by the API layer (forwarding)
        self.is_local: Callable[[TopicName], bool] = lambda _name: True
        self.ownership_epoch: Callable[[TopicName], int | None] = lambda _name: 0
        # with both set, ``serves`` looks a topic's epoch up again only when the held
        # bundles changed (``held_generation`` moved) and checks the lease every time
        self.held_generation: Callable[[], int] | None = None
        self.lease_valid: Callable[[], bool] = lambda: True
        self._doomed: set[asyncio.Task[Topic]] = set()  # loads to discard when they end
        self.closed = False
        self._deleting: set[TopicName] = set()

    # ------------------------------------------------------------ policies

    def namespace_policies(self, ns: NamespaceName) -> TopicPolicies:
        """Hot path (every publish): the policies of ``ns`` as last refreshed."""
        view = self._namespaces.get(ns)
        return view.policies if view is not None else _DEFAULT_POLICIES

    async def namespace(self, ns: NamespaceName, *, fresh: bool = False) -> NamespaceView:
        view = self._namespaces.get(ns)
        if view is None or fresh or not view.exists:
            view = await self._policy_source(ns)
            if view.exists:
                self._namespaces[ns] = view
                self.policies_generation += 1
        return view

    async def _refresh_policies(self) -> None:
        while not self.closed:
            await asyncio.sleep(POLICY_REFRESH_S)
            for ns in list(self._namespaces):
                with contextlib.suppress(Exception):
                    self._namespaces[ns] = await self._policy_source(ns)
                    self.policies_generation += 1

    def start(self) -> None:
        if self._refresh_task is None:
            self._refresh_task = asyncio.get_running_loop().create_task(self._refresh_policies())
        self.upkeep.start()

    # ------------------------------------------------------------ topics

    async def topic_exists(self, name: TopicName) -> bool:
        return name in self.topics or await self.store.get(keys.managed_log(name.path)) is not None

    async def ensure_topic_metadata(self, name: TopicName, *, create: bool) -> None:
        """Make sure the topic exists in etcd (auto-creating it if allowed)."""
        view = await self.namespace(name.namespace_name)
        if not view.exists:
            raise NamespaceMissing(f"namespace {name.namespace_name} does not exist")
        if await self.store.get(keys.managed_log(name.path)) is not None:
            return
        await self._refuse_partitioned(name)
        if not create or not view.auto_create:
            raise topic_missing(str(name), name.path, str(name.namespace_name), auto_create=view.auto_create)
        if name.domain == "persistent":
            await check_topic_room(self.store, name.namespace_name, view.max_topics, 1)
        key = keys.managed_log(name.path)
        revision = await self.store.compare_and_swap(key, encode_state([], self.clock.now_ms(), {}), 0)
        if revision is not None:  # created here (a lost race: someone else did, fine)
            try:
                await self._refuse_partitioned(name)  # ADR 0005: re-read the other key, undo on a clash
            except PartitionedTopic:
                await self.store.compare_and_delete(key, revision)
                raise

    async def _refuse_partitioned(self, name: TopicName) -> None:
        """``PartitionedTopic`` if ``name`` is the base name of a partitioned topic: it
        has no log of its own (its partitions have), so it is never auto-created."""
        if name.is_partition:
            return
        kv = await self.store.get(keys.partitioned(name.path))
        if kv is None:
            return
        try:
            count = int(orjson.loads(kv.value)["partitions"])
        except (ValueError, KeyError, TypeError):
            count = 0
        last = f" ... {name.partition(count - 1)}" if count > 1 else ""
        raise PartitionedTopic(
            f"topic {name} is partitioned ({count} partitions): use a partition, {name.partition(0)}{last}"
        )

    def _forget_load(self, name: TopicName, task: asyncio.Task[Topic]) -> None:
        if self._loading.get(name) is task:  # never a newer load of the same name
            del self._loading[name]

    async def topic(self, name: TopicName, *, create: bool = True) -> Topic:
        """The loaded topic, loading (and auto-creating) it if needed."""
        if self.closed:
            raise TopicUnavailable("gateway is shutting down")
        if name in self._deleting:
            raise TopicUnavailable(f"topic {name} is being deleted")
        topic = self.topics.get(name)
        if topic is not None and not topic.closed:
            if self.serves(topic):
                return topic
            await self._drop(name, "its ownership epoch is over")
        task = self._loading.get(name)
        if task is None:
            if len(self.topics) >= self._topics_max:
                raise TopicUnavailable(f"this gateway serves its maximum of {self._topics_max} topics")
            task = asyncio.get_running_loop().create_task(self._load(name, create))
            self._loading[name] = task
            task.add_done_callback(functools.partial(self._forget_load, name))
            if not create:
                self._loading_without_create.add(task)
        try:
            return await asyncio.shield(task)
        except TopicNotFound:
            # a concurrent load that may not create (a stats or peek request) found no
            # topic; this caller may create it: load again rather than share that refusal
            if create and task in self._loading_without_create:
                self._forget_load(name, task)  # its done-callback may not have run yet: load anew
                return await self.topic(name, create=True)
            raise

    def serves(self, topic: Topic) -> bool:
        """Whether ``topic`` may still serve: this gateway owns its bundle under the
        epoch the topic was loaded in and its lease is before its local deadline (every
        write path entry asks: every publish and every stored entry). The bundle lookup
        is remembered on the topic until the held bundles change; the lease is checked
        against the clock every time."""
        generation = self.held_generation() if self.held_generation is not None else None
        if generation is not None and topic.served_generation == generation:
            return self.lease_valid()
        if self.ownership_epoch(topic.name) != topic.epoch:
            return False
        if generation is not None:
            topic.served_generation = generation
        return True

    async def _load(self, name: TopicName, create: bool) -> Topic:
        epoch = self.ownership_epoch(name)
        if epoch is None:
            raise OwnershipMovedWhileLoading(f"this gateway does not own {name}; look it up again")
        await self.ensure_topic_metadata(name, create=create)
        ns = name.namespace_name
        managed_log = await ManagedLog.open(
            name.path,
            self.store,
            self.client,
            self.clock,
            self._log_config,
            quorums=lambda: self.namespace_policies(ns).quorums,  # as cached, per ledger created
            epoch=epoch,
        )
        try:
            topic = await Topic.load(name, managed_log, self, epoch)
        except BaseException:
            await managed_log.abandon()
            raise
        task = asyncio.current_task()
        if self.closed or task in self._doomed or not self.serves(topic):
            # the bundle left while this load ran: nothing was served, seal the ledger
            log.warning("topic %s: load ended after its ownership moved; discarded", name)
            await topic.close()
            raise OwnershipMovedWhileLoading(f"ownership of {name} moved while it loaded; look it up again")
        topic.on_closed = self._forget
        self.topics[name] = topic
        log.info("topic %s loaded (ledger %d, epoch %d)", name, managed_log.current_ledger_id, epoch)
        return topic

    def _doom_loads(self, predicate: Callable[[TopicName], bool]) -> int:
        """Mark the loads in flight of matching names to be discarded when they end."""
        doomed = [task for name, task in self._loading.items() if predicate(name)]
        for task in doomed:
            self._doomed.add(task)
            task.add_done_callback(self._doomed.discard)
        return len(doomed)

    async def _drop(self, name: TopicName, why: str) -> None:
        topic = self.topics.pop(name, None)
        if topic is not None:
            log.warning("topic %s dropped: %s", name, why)
            await topic.close(graceful=False)

    def _forget(self, topic: Topic) -> None:
        if self.topics.get(topic.name) is topic:
            del self.topics[topic.name]

    def topic_lost(self, topic: Topic) -> None:
        self._forget(topic)

    async def unload(self, name: TopicName) -> bool:
        topic = self.topics.pop(name, None)
        if topic is None:
            return False
        await topic.close()
        return True

    async def delete_topic(
        self, name: TopicName, *, force: bool, delete_metadata: Callable[[TopicName], Awaitable[bool]]
    ) -> list[int]:
        """Delete a topic this gateway owns: refuse (``SubscriptionBusy``) while clients
        are connected unless ``force``; close it, delete its ledgers (storage nodes
        reclaim them), then its metadata (``delete_metadata``: managed log, cursors,
        dedup). Returns the deleted ledger ids; ``TopicNotFound`` if it does not exist."""
        if name in self._deleting:
            raise TopicUnavailable(f"topic {name} is being deleted")
        topic = self.topics.get(name)
        if topic is not None and not force and connected_clients(topic):
            raise SubscriptionBusy(
                f"Topic {name} has {connected_clients(topic)} connected clients; use force=true"
            )
        self._deleting.add(name)
        try:
            if topic is not None:
                self.topics.pop(name, None)
                await topic.close()
            current = await self.store.get(keys.managed_log(name.path))
            if current is None:
                raise TopicNotFound(f"Topic {name} does not exist")
            ledger_ids = [info.ledger_id for info in decode_state(current.value)[0]]
            for ledger_id in ledger_ids:
                with contextlib.suppress(Exception):
                    await self.client.delete(ledger_id)
            await delete_metadata(name)
        finally:
            self._deleting.discard(name)
        log.info("topic %s deleted (ledgers %s)", name, ledger_ids)
        return ledger_ids

    async def unload_where(self, predicate: Callable[[TopicName], bool]) -> int:
        """Close the matching topics gracefully (their bundle is being unloaded); loads
        in flight of matching names are discarded when they end."""
        doomed = self._doom_loads(predicate)
        names = [name for name in self.topics if predicate(name)]
        await asyncio.gather(*(self.unload(name) for name in names), return_exceptions=True)
        return len(names) + doomed

    async def drop_where(self, predicate: Callable[[TopicName], bool]) -> int:
        """Ownership lost: close without persisting or closing ledgers; loads in flight
        of matching names are discarded when they end."""
        doomed = self._doom_loads(predicate)
        names = [name for name in self.topics if predicate(name)]
        for name in names:
            topic = self.topics.pop(name, None)
            if topic is not None:
                await topic.close(graceful=False)
        return len(names) + doomed

    async def publish_to(self, topic: str, message: EntryMessage) -> None:
        name = TopicName.parse(topic)
        if self.is_local(name):
            target = await self.topic(name)
            await target.publish(message)
            return
        if self.remote_publish is None:
            raise TopicUnavailable(f"topic {name} is owned elsewhere and forwarding is not set up")
        await self.remote_publish(str(name), message)

    async def close(self) -> None:
        self.closed = True
        await self.upkeep.close()
        if self._refresh_task is not None:
            self._refresh_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refresh_task
        for task in list(self._loading.values()):
            task.cancel()
        await asyncio.gather(*(topic.close() for topic in list(self.topics.values())), return_exceptions=True)
        self.topics.clear()
