"""Where a topic is served: here (the loaded topic), on which gateway, or across partitions (asyncio shell).

Owns: ``Router``, the one answer to "is this topic here, or where is it?" that
every edge (REST, WebSocket, HTTP consume, admin) asks once: the partition
count (cached), the owner of the topic's bundle, and the loaded topic when the
owner is this gateway. Rules (docs/architecture.md §6-7):
- any gateway accepts any request; the owner of the topic's bundle serves it,
  any other gateway forwards or relays to that owner (``gateway.forwarder``)
  once, with ``authoritative`` set so the owner never bounces it again;
- a partitioned topic is served by the owners of its partitions: ``locate``
  answers ``Partitioned`` and the edge fans out over ``name.partition(i)``;
- a count only ever grows, so it is cached for ``PARTITION_CACHE_S``; while
  etcd is away the last count read still answers (none can be added then);
- when a topic's bundle moves while it loads (the load is discarded), the owner
  is looked up again, at most ``LOOKUP_ATTEMPTS`` times in all.
It takes the leaf objects it asks (namespace store, ownership manager, broker
service), never the gateway process that wires them.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from coordination.errors import Unavailable
from gateway.broker.broker_errors import OwnershipMovedWhileLoading
from gateway.broker.service import BrokerService
from gateway.broker.topic import Topic
from gateway.meta.namespaces import NamespaceStore
from gateway.names import TopicName
from gateway.ownership.owner import OwnerInfo, OwnershipManager

log = logging.getLogger(__name__)

PARTITION_CACHE_S = 2.0
PARTITION_CACHE_MAX = 10_000
LOOKUP_ATTEMPTS = 3  # lookups of one request whose topic moved while it loaded


@dataclass(frozen=True, slots=True)
class Peer:
    """The gateway that owns the topic's bundle, by its base URL (``http://h:p``)."""

    url: str


@dataclass(frozen=True, slots=True)
class Partitioned:
    """A partitioned topic: its ``count`` partitions are served where each one lives."""

    count: int


class Router:
    """Answers where a topic is served, for one gateway."""

    def __init__(
        self, namespaces: NamespaceStore, ownership: OwnershipManager, service: BrokerService
    ) -> None:
        self._namespaces = namespaces
        self._ownership = ownership
        self._service = service
        self._partitions: dict[str, tuple[int, float]] = {}  # topic path -> (count, valid until)

    async def owner(self, name: TopicName, *, authoritative: bool = False) -> OwnerInfo:
        """The owner of ``name``'s bundle (acquiring it when nobody holds it)."""
        policies = await self._namespaces.policies(name.namespace_name)
        boundaries = list(policies.bundles.boundaries)
        return await self._ownership.lookup(name, boundaries, authoritative=authoritative)

    async def partitions(self, name: TopicName) -> int:
        """Partition count of ``name`` (0: not partitioned, or a partition itself), from a
        short-lived cache: every publish asks, and a count only ever grows (clients of
        Pulsar pick up new partitions late too). While etcd is away the last count read
        still answers (none can be added then): REST publishing goes on through an etcd
        outage as WebSocket publishing does."""
        if name.is_partition:
            return 0
        now = time.monotonic()
        cached = self._partitions.get(name.path)
        if cached is not None and cached[1] > now:
            return cached[0]
        try:
            count = await self._namespaces.get_partitions(name)
        except Unavailable:
            if cached is None:
                raise
            return cached[0]
        if len(self._partitions) >= PARTITION_CACHE_MAX:
            self._partitions.clear()
        self._partitions[name.path] = (count, now + PARTITION_CACHE_S)
        return count

    async def serve(
        self, name: TopicName, *, authoritative: bool = False, create: bool = True
    ) -> Topic | Peer:
        """The loaded topic if this gateway owns it (loading it, auto-creating it only
        if ``create``), else the owner. When the topic's bundle moves while it loads,
        the owner is looked up again, at most ``LOOKUP_ATTEMPTS`` times in all, so a
        caller sees the move's 503 only after that."""
        for attempt in range(1, LOOKUP_ATTEMPTS + 1):
            owner = await self.owner(name, authoritative=authoritative)
            if not owner.is_self:
                return Peer(owner.http_url)
            try:
                return await self._service.topic(name, create=create)
            except OwnershipMovedWhileLoading:
                if attempt == LOOKUP_ATTEMPTS:
                    raise
                log.info("topic %s moved while it loaded; looking it up again (%d)", name, attempt)
        raise AssertionError("unreachable")

    async def locate(self, name: TopicName, *, authoritative: bool = False) -> Topic | Peer | Partitioned:
        """``serve``, after the partition count: a partitioned topic is ``Partitioned``."""
        count = await self.partitions(name)
        if count:
            return Partitioned(count)
        return await self.serve(name, authoritative=authoritative)

    async def peer(self, name: TopicName, *, authoritative: bool = False) -> Peer | None:
        """The owner of ``name``, or None when it is this gateway (nothing is loaded)."""
        owner = await self.owner(name, authoritative=authoritative)
        return None if owner.is_self else Peer(owner.http_url)

    async def claim(self, name: TopicName) -> bool:
        """Whether this gateway serves ``name``, acquiring its bundle as a lookup would
        when nobody holds it (webhooks: their topics are served without a client)."""
        if self._ownership.is_owner(name):
            return True
        return (await self.owner(name)).is_self
