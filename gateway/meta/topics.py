"""Topic metadata in etcd: partitioned-topic counts and topic existence (asyncio shell).

Owns: the values at ``keys.partitioned`` (``{"partitions": N}``) and the *creation*
of the value at ``keys.managed_log`` (``{"ledgers": [], "createdMs": ms}``); after
that the managed log owns that key. ``delete_topic_metadata`` removes a topic's
managed-log, cursor and dedup keys once the broker has dealt with its ledgers.
Rule: a topic exists iff its managed-log key exists (or it is a partition below
the count of its partitioned topic). Creating a partitioned topic writes the
count, then the partitions' managed-log keys (as Pulsar creates partitions
eagerly). A name is either partitioned or not: each create writes its own key,
then re-reads the other (and the namespace) and undoes itself on a clash, so of
two racing creates at most one survives.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable

import orjson

from coordination import keys
from coordination.store import MetadataStore, update_with_retry
from gateway.meta.errors import (
    AlreadyExists,
    Conflict,
    CorruptMetadata,
    InvalidArgument,
    NotFound,
    PreconditionFailed,
)
from gateway.names import PARTITION_SUFFIX, PARTITIONS_MAX, InvalidName, NamespaceName, TopicName
from gateway.quotas import Quota, refused

CREATE_CONCURRENCY = 32  # partition managed-log keys created at once


def _check_partitions(count: object) -> int:
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= PARTITIONS_MAX:
        raise InvalidArgument(
            f"Number of partitions must be an integer from 1 to {PARTITIONS_MAX}, got {count!r}"
        )
    return count


def _decode_count(key: str, value: bytes) -> int:
    try:
        count = orjson.loads(value)["partitions"]
    except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
        raise CorruptMetadata(f"{key}: not a partitioned-topic record") from exc
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise CorruptMetadata(f"{key}: bad partition count {count!r}")
    return count


def _encode_count(count: int) -> bytes:
    return orjson.dumps({"partitions": count})


def _local_order(local: str) -> tuple[str, int]:
    """Sort partitions numerically after their base name: t-partition-2 < t-partition-10."""
    name = TopicName("persistent", "t", "n", local)
    return (name.base.local, name.partition_index)


async def check_topic_room(store: MetadataStore, ns: NamespaceName, limit: int, adding: int) -> None:
    """``PreconditionFailed`` (Pulsar's 412) unless ``adding`` more topics fit in ``ns``
    under ``limit`` (0: no limit); persistent topics are counted, each partition as one.
    Checked before a create, so gateways creating at the same moment may each pass once."""
    if not limit or adding <= 0:
        return
    prefix = keys.managed_log(f"persistent/{ns.tenant}/{ns.namespace}/")
    count = sum(1 for kv in await store.list_prefix(prefix) if "/" not in kv.key[len(prefix) :])
    if count + adding > limit:
        refused(Quota.TOPICS_PER_NAMESPACE)
        raise PreconditionFailed(
            f"Exceed maximum number of topics in namespace {ns}: it has {count} of {limit}"
            " (maxTopicsPerNamespace)"
        )


class TopicMetadata(ABC):
    """Partitioned-topic counts and topic existence. ``NamespaceStore`` extends it."""

    def __init__(self, store: MetadataStore, *, wall_ms: Callable[[], int]) -> None:
        self._store = store
        self._wall_ms = wall_ms

    @abstractmethod
    async def _namespace_live(self, ns: NamespaceName) -> bool:
        """True if the namespace exists and is not being deleted (NamespaceStore)."""

    @abstractmethod
    async def _topics_limit(self, ns: NamespaceName) -> int:
        """The namespace's maxTopicsPerNamespace (0: none) (NamespaceStore)."""

    async def _check_room(self, ns: NamespaceName, adding: int) -> None:
        await check_topic_room(self._store, ns, await self._topics_limit(ns), adding)

    async def _require_namespace(self, ns: NamespaceName) -> None:
        if not await self._namespace_live(ns):
            raise NotFound(f"Namespace {ns} does not exist")

    # ------------------------------------------------------------ partitioned topics

    async def create_partitioned(self, topic: TopicName, partitions: int) -> None:
        """Create a partitioned topic with ``partitions`` (1..1024) partitions."""
        if PARTITION_SUFFIX in topic.local:
            raise InvalidName(f"Partitioned topic name {topic} must not contain {PARTITION_SUFFIX!r}")
        _check_partitions(partitions)
        topic.partition(partitions - 1)  # every partition's name must be valid (InvalidName)
        await self._require_namespace(topic.namespace_name)
        log_key = keys.managed_log(topic.path)
        if await self._store.get(log_key) is not None:
            raise AlreadyExists(f"Topic {topic} already exists (as a non-partitioned topic)")
        if await self._store.get(keys.partitioned(topic.path)) is None and topic.domain == "persistent":
            await self._check_room(topic.namespace_name, partitions)
        key = keys.partitioned(topic.path)
        await self._create_key(
            key,
            _encode_count(partitions),
            f"Partitioned topic {topic} already exists",
            topic,
            (log_key, "non-partitioned"),
        )
        await self._create_partition_logs(topic, partitions)

    async def get_partitions(self, topic: TopicName) -> int:
        """Partition count; 0 for a non-partitioned or unknown topic (Pulsar's answer)."""
        key = keys.partitioned(topic.path)
        kv = await self._store.get(key)
        return 0 if kv is None else _decode_count(key, kv.value)

    async def update_partitions(self, topic: TopicName, partitions: int) -> None:
        """Raise the partition count to ``partitions``; the same count is a no-op, fewer
        is ``PreconditionFailed``, a topic that is not partitioned is ``Conflict``."""
        _check_partitions(partitions)
        topic.partition(partitions - 1)  # every partition's name must be valid (InvalidName)
        key = keys.partitioned(topic.path)
        if topic.domain == "persistent":
            await self._check_room(topic.namespace_name, partitions - await self.get_partitions(topic))

        def modify(old: bytes | None) -> bytes | None:
            if old is None:
                raise Conflict(f"Topic {topic} is not a partitioned topic")
            current = _decode_count(key, old)
            if partitions < current:
                raise PreconditionFailed(
                    f"Partitions of {topic} can only be increased: it has {current}, asked for {partitions}"
                )
            return None if partitions == current else _encode_count(partitions)

        await update_with_retry(self._store, key, modify)
        await self._create_partition_logs(topic, partitions)

    async def delete_partitioned(self, topic: TopicName) -> None:
        """Delete the partitioned-topic record (its partitions' metadata stays: the
        broker deletes each partition like a topic)."""
        key = keys.partitioned(topic.path)
        kv = await self._store.get(key)
        if kv is None or not await self._store.compare_and_delete(key, kv.mod_revision):
            raise NotFound(f"Partitioned topic {topic} does not exist")

    async def list_partitioned(self, ns: NamespaceName, domain: str = "persistent") -> list[str]:
        """Full names of the partitioned topics of ``ns``."""
        await self._require_namespace(ns)
        counts = await self._partition_counts(ns, domain)
        return [str(TopicName(domain, ns.tenant, ns.namespace, local)) for local in sorted(counts)]

    # ------------------------------------------------------------ topics

    async def create_topic(self, topic: TopicName) -> None:
        """Create a non-partitioned topic (or one partition of a partitioned topic)."""
        await self._require_namespace(topic.namespace_name)
        if topic.is_partition:
            count = await self.get_partitions(topic.base)
            if count and topic.partition_index >= count:
                raise PreconditionFailed(f"{topic} is beyond the {count} partitions of {topic.base}")
        elif await self._store.get(keys.partitioned(topic.path)) is not None:
            raise AlreadyExists(f"Topic {topic} already exists (as a partitioned topic)")
        key = keys.managed_log(topic.path)
        if topic.domain == "persistent" and await self._store.get(key) is None:
            await self._check_room(topic.namespace_name, 1)
        other = None if topic.is_partition else (keys.partitioned(topic.path), "partitioned")
        await self._create_key(key, self._new_log(), f"Topic {topic} already exists", topic, other)

    async def _create_key(
        self, key: str, value: bytes, exists: str, topic: TopicName, other: tuple[str, str] | None
    ) -> None:
        """Create ``key`` (``AlreadyExists`` with ``exists`` when it is there), then take it
        back when the checks made before it raced: the other kind of ``topic`` (``other``:
        its key and kind, a partitioned topic's count or a topic's log) appeared meanwhile, or
        the namespace is being deleted."""
        revision = await self._store.compare_and_swap(key, value, 0)
        if revision is None:
            raise AlreadyExists(exists)
        clash: Exception | None = None
        if other is not None and await self._store.get(other[0]) is not None:
            kind = other[1]
            clash = AlreadyExists(f"Topic {topic} already exists (as a {kind} topic)")
        elif not await self._namespace_live(topic.namespace_name):
            clash = NotFound(f"Namespace {topic.namespace_name} does not exist")
        if clash is not None:
            await self._store.compare_and_delete(key, revision)
            raise clash

    async def topic_exists(self, topic: TopicName) -> bool:
        """The topic's managed-log key exists, or it is a partition below its topic's count."""
        if await self._store.get(keys.managed_log(topic.path)) is not None:
            return True
        return topic.is_partition and topic.partition_index < await self.get_partitions(topic.base)

    async def list_topics(self, ns: NamespaceName, domain: str = "persistent") -> list[str]:
        """Full names of every topic of ``ns`` in ``domain``, partitions included."""
        await self._require_namespace(ns)
        prefix = keys.managed_log(f"{domain}/{ns.tenant}/{ns.namespace}/")
        locals_ = {kv.key[len(prefix) :] for kv in await self._store.list_prefix(prefix)}
        locals_ = {local for local in locals_ if "/" not in local}
        for base, count in (await self._partition_counts(ns, domain)).items():
            locals_.update(f"{base}{PARTITION_SUFFIX}{i}" for i in range(count))
        return [
            str(TopicName(domain, ns.tenant, ns.namespace, lo)) for lo in sorted(locals_, key=_local_order)
        ]

    async def delete_topic_metadata(self, topic: TopicName) -> bool:
        """Delete the topic's managed-log key, its cursors, webhooks and dedup snapshot.
        Call only after its ledgers are dealt with. True if the managed log existed."""
        existed = await self._store.delete(keys.managed_log(topic.path))
        await self._store.delete_prefix(keys.cursors_of(topic.path))
        await self._store.delete_prefix(keys.webhooks_of(topic.path))
        await self._store.delete(keys.dedup(topic.path))
        return existed

    async def _any_topic(self, ns: NamespaceName) -> str | None:
        """One topic (or partitioned topic) of ``ns`` in any domain, or None."""
        for family in (keys.MANAGED_LOGS, keys.PARTITIONED):
            for domain in ("persistent", "non-persistent"):
                prefix = f"{family}{domain}/{ns.tenant}/{ns.namespace}/"
                for kv in await self._store.list_prefix(prefix):
                    local = kv.key[len(prefix) :]
                    if "/" not in local:
                        return f"{domain}://{ns}/{local}"
        return None

    async def _partition_counts(self, ns: NamespaceName, domain: str) -> dict[str, int]:
        prefix = keys.partitioned(f"{domain}/{ns.tenant}/{ns.namespace}/")
        counts = {}
        for kv in await self._store.list_prefix(prefix):
            local = kv.key[len(prefix) :]
            if "/" not in local:
                counts[local] = _decode_count(kv.key, kv.value)
        return counts

    async def _create_partition_logs(self, topic: TopicName, partitions: int) -> None:
        """Create the managed-log keys of partitions 0..partitions-1 that are missing."""
        if topic.domain != "persistent":
            return
        existing = {
            kv.key for kv in await self._store.list_prefix(keys.managed_log(topic.path + PARTITION_SUFFIX))
        }
        missing = [
            key
            for key in (keys.managed_log(topic.partition(i).path) for i in range(partitions))
            if key not in existing
        ]
        gate = asyncio.Semaphore(CREATE_CONCURRENCY)

        async def create(key: str) -> None:
            async with gate:
                await self._store.compare_and_swap(key, self._new_log(), 0)  # lost race: it exists

        await asyncio.gather(*(create(key) for key in missing))

    def _new_log(self) -> bytes:
        return orjson.dumps({"ledgers": [], "createdMs": self._wall_ms()})
