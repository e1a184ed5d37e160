"""The gateway process: its long-lived parts, built and wired together (asyncio shell).

Owns: ``Gateway``, which builds the etcd connection and lease session, the
ledger client, the namespace store, bundle ownership (registry, ownership
manager, load manager), the broker service, the router and the forwarder to
other gateways, and holds the bounds of this gateway (sessions, payload size);
and the load report. Each part takes the leaf objects it needs, never the
process. Rules (docs/architecture.md §6):
- any gateway accepts any request; ``router`` (``gateway.routing``) says whether
  this gateway owns the topic's bundle (serve it) or which gateway does, and
  ``forwarder`` (``gateway.forwarder``) is how it talks to that one;
- when a bundle is lost (lease lost, unload, release, deleted key) its topics,
  loaded or still loading, are dropped at once; a lost lease is stepped down
  from and rejoined in this process (``tenure``); an unload request closes them
  gracefully first; a topic serves only under the ownership epoch (bundle key
  revision) it was loaded in (broker.service);
- shutdown releases bundles after closing topics (ledgers closed, cursors
  persisted) so the next owner recovers nothing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from dataclasses import dataclass, field, replace
from importlib import metadata
from urllib.parse import urlsplit

import httpx

from coordination.clock import SystemClock, WallClock
from coordination.session import LeaseSession
from coordination.session_thread import lease_session
from coordination.store import MetadataStore
from gateway.api.delivery_budget import DeliveryBudget
from gateway.api.http_consume import HttpHeld
from gateway.api.tenure import Tenure
from gateway.api.throughput import ThroughputRing
from gateway.api.webhooks import CONNECTIONS_MAX, WEBHOOKS_MAX, Webhooks
from gateway.broker.log_policy import Retention
from gateway.broker.log_state import LogConfig, Quorums
from gateway.broker.pending_rules import PendingLimits
from gateway.broker.service import BrokerService, NamespaceView
from gateway.broker.topic import Topic
from gateway.broker.topic_policies import TopicPolicies
from gateway.forwarder import Forwarder
from gateway.meta.namespaces import NamespaceStore
from gateway.meta.policies import Policies
from gateway.meta.schema_registry import SchemaRegistry
from gateway.names import NamespaceName, TopicName
from gateway.ownership.bundles import BundleRange, NamespaceBundle
from gateway.ownership.key_records import LoadReport, smoothed
from gateway.ownership.load_manager import LoadManager
from gateway.ownership.owner import LossReason, OwnershipManager
from gateway.ownership.registry import GatewayRegistry
from gateway.ownership.storage_watch import StorageWatch
from gateway.routing import Router
from gateway.security.egress import etcd_peer_addresses
from gateway.security.guard import SecurityConfig
from storage.client.api import LedgerClient
from storage.client.connection import ConnectionConfig

log = logging.getLogger(__name__)

FORWARD_KEEPALIVE_S = 2.0
PEER_CONNECT_TIMEOUT_S = 3.0


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    gateway_id: str
    http_url: str  # how other gateways and clients reach this one
    lease_ttl_s: int = 10
    max_message_bytes: int = 5 * 1024 * 1024 - 64 * 1024  # payload limit (an entry is 5 MiB)
    max_request_bytes: int = 16 * 1024 * 1024  # a REST body (JSON messages array or raw payload)
    sessions_max: int = 10_000  # WebSocket + HTTP-consume sessions
    pending_bytes_per_session: int = 16 * 1024 * 1024
    pending: PendingLimits = field(default_factory=PendingLimits)  # bytes consumers may hold unsent
    log: LogConfig = field(default_factory=LogConfig)
    load_manager_interval_s: float = 5.0
    webhook_hosts: tuple[str, ...] = ()  # hosts (or host:port) webhooks may POST to; empty: any
    webhooks_max: int = WEBHOOKS_MAX
    webhook_connections: int = CONNECTIONS_MAX  # open connections of this gateway's pushers
    etcd_endpoints: tuple[str, ...] = ()  # host:port of etcd (never a webhook target)
    metrics_address: str = ""  # host:port of this gateway's --metrics-address (never a webhook target)
    security: SecurityConfig = field(default_factory=SecurityConfig)  # open unless token rules
    max_tenants: int = 1_000  # quotas (0: none)
    max_namespaces_per_tenant: int = 1_000
    max_subscriptions_per_topic: int = 10_000  # a namespace's policy overrides it
    max_topics_per_namespace: int = 0  # as Pulsar's default: none; a namespace's policy overrides it


def topic_policies(policies: Policies) -> TopicPolicies:
    quota = policies.backlog_quotas.get("destination_storage")
    persistence = policies.persistence
    return TopicPolicies(
        dedup=policies.deduplication,
        retention=Retention(policies.retention.time_minutes, policies.retention.size_mb),
        ttl_seconds=policies.message_ttl_seconds or 0,
        max_consumers_per_subscription=policies.max_consumers_per_subscription or 0,
        max_producers=policies.max_producers_per_topic or 0,
        max_consumers=policies.max_consumers_per_topic or 0,
        backlog_limit_bytes=quota.limit_size if quota is not None else -1,
        backlog_policy=quota.policy if quota is not None else "producer_request_hold",
        quorums=(
            None
            if persistence is None
            else Quorums(persistence.ensemble, persistence.write_quorum, persistence.ack_quorum)
        ),
    )


@dataclass(frozen=True, slots=True)
class _TopicCounts:
    """A loaded topic's message counters at one load report (``topic``: its ``id``)."""

    topic: int
    msg_in: int
    msg_out: int

    def since(self, before: _TopicCounts | None) -> tuple[int, int]:
        """Messages (in, out) since ``before``; all of them if the topic was (re)loaded
        since (its counters start at the load). Out can drop (a subscription removed
        with its count), and so can in if a reloaded topic reuses the old one's ``id``:
        then that part is 0 for this report."""
        if before is None or before.topic != self.topic:
            return self.msg_in, self.msg_out
        return max(0, self.msg_in - before.msg_in), max(0, self.msg_out - before.msg_out)


def _delivered(topic: Topic) -> int:
    """Messages delivered by ``topic``'s subscriptions and readers: the totals each keeps
    (the ``msgOutCounter`` of topic stats), a sum over its subscriptions - cheap."""
    return sum(sub.msg_out for sub in topic.subscriptions.values()) + sum(
        reader.msg_out for reader in topic.readers.values()
    )


class Gateway:
    def __init__(self, store: MetadataStore, config: GatewayConfig) -> None:
        self.store = store
        self.config = config
        self.clock = WallClock()  # publish times, delays, TTL: wall time
        # kept by its own thread; replaced by a new one after a lost lease (tenure)
        session = lease_session(store, config.lease_ttl_s)
        self.client = LedgerClient(
            store,
            SystemClock(),
            connection_config=ConnectionConfig(auth_secret=config.security.cluster_secret),
        )
        self.namespaces = NamespaceStore(
            store,
            max_tenants=config.max_tenants,
            max_namespaces_per_tenant=config.max_namespaces_per_tenant,
            max_topics_per_namespace=config.max_topics_per_namespace,
        )
        self.schemas = SchemaRegistry(store)
        self.deliveries = DeliveryBudget(config.pending)
        self.http_held = HttpHeld()  # payloads HTTP consumers hold (http_consume.py)
        self.registry = GatewayRegistry(
            store,
            session,
            config.gateway_id,
            config.http_url,
            load_provider=self.load_report,
            version=folio_version(),
        )
        self.ownership = OwnershipManager(store, session, self.registry)
        self.load_manager = LoadManager(
            store,
            session,
            config.gateway_id,
            interval_s=config.load_manager_interval_s,
            registry=self.registry,
        )
        # cut from a write quorum of storage while a peer is not: hand the bundles over
        self.storage_watch = StorageWatch(
            self.client, self.registry, self.ownership, lambda: config.log.ack_quorum
        )
        self.service = BrokerService(store, self.client, self.clock, self._namespace_view, config.log)
        self.router = Router(self.namespaces, self.ownership, self.service)
        # idle connections expire before the peer's keep-alive (uvicorn: 5 s) can close
        # them under a request being sent on them
        # a peer that does not take a connection within PEER_CONNECT_TIMEOUT_S is unreachable
        # now (cut, paused): the client gets 503 + Retry-After at once, not after 30 s
        self.http = httpx.AsyncClient(
            timeout=httpx.Timeout(30.0, connect=PEER_CONNECT_TIMEOUT_S),
            limits=httpx.Limits(keepalive_expiry=FORWARD_KEEPALIVE_S),
        )
        self.forwarder = Forwarder(self.http, self.router)
        self.service.is_local = self.ownership.is_owner
        self.service.ownership_epoch = self.ownership.epoch_of
        self.service.held_generation = self.ownership.held_generation
        self.service.lease_valid = self.ownership.lease_valid
        self.service.remote_publish = self.forwarder.publish_entry
        self.webhooks = Webhooks(
            store,
            self.router.claim,
            self._owned_topic,
            self._members,
            allowed_hosts=config.webhook_hosts,
            loopback_ok=config.security.open,  # a developer's own endpoint, in open mode only
            webhooks_max=config.webhooks_max,
            connections=config.webhook_connections,
        )
        self.tenure = Tenure(
            store,
            session,
            config.gateway_id,
            config.lease_ttl_s,
            prepare=(self.namespaces.start, self.namespaces.ensure_defaults),
            steps=(self.registry.rejoin, self.ownership.rejoin, self.load_manager.rejoin),
        )
        self.sessions = 0
        self.closing = False
        self._load_at = time.monotonic()  # when the previous load report was made
        self._cpu_at = time.process_time()  # this process's CPU seconds at that report
        self._load_counts: dict[TopicName, _TopicCounts] = {}  # each topic's counters then
        self._bundle_rates: dict[str, float] = {}  # smoothed rate of each owned bundle then
        self.throughput = ThroughputRing()  # msg/s in and out at each load report (dashboard history)

    @property
    def session(self) -> LeaseSession:
        """The lease session this gateway is in the cluster under (``tenure`` renews it)."""
        return self.tenure.session

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Join the cluster (every etcd step waits for etcd) and serve; a lost lease
        later is stepped down from and rejoined by ``tenure``, in this process."""
        self.ownership.on_bundle_lost(self._bundle_lost)
        self.ownership.on_unload_requested(self._unload_bundle)
        await self.tenure.join()
        self.service.start()
        self.storage_watch.start()
        self.webhooks.start()

    async def close(self) -> None:
        self.closing = True
        await self.storage_watch.close()
        await self.tenure.close()
        with contextlib.suppress(Exception):
            await self.load_manager.close()
        await self.webhooks.close()  # before the topics: their pushers leave first
        await self.service.close()  # ledgers closed, cursors persisted
        with contextlib.suppress(Exception):
            await self.ownership.close(release=True)
        with contextlib.suppress(Exception):
            await self.registry.close()
        with contextlib.suppress(Exception):
            await self.namespaces.close()
        await self.client.close()
        await self.http.aclose()
        with contextlib.suppress(Exception):
            await self.session.close()

    def load_report(self) -> LoadReport:
        """Load for the load manager: *rates* since the previous report (the topics'
        counters are totals) - published messages/s in total, and messages/s in + out
        (published + delivered to subscriptions and readers) of each owned bundle,
        every owned bundle listed, smoothed over reports (``key_records.smoothed``: a
        burst does not make a bundle look hot) - plus topics and sessions. One pass
        over the loaded topics and their subscriptions, once per report interval. The
        totals in and out also go into ``throughput``, the history the dashboard draws."""
        now = time.monotonic()
        elapsed = now - self._load_at
        per_bundle = {bundle.path: 0 for bundle in self.ownership.owned_bundles()}
        published = delivered = 0
        counts: dict[TopicName, _TopicCounts] = {}
        for name, topic in self.service.topics.items():
            now_counts = _TopicCounts(id(topic), topic.msg_in, _delivered(topic))
            counts[name] = now_counts
            msgs_in, msgs_out = now_counts.since(self._load_counts.get(name))
            published += msgs_in
            delivered += msgs_out
            bundle = self.ownership.owned_bundle_of(name)
            if bundle is not None and bundle.path in per_bundle:
                per_bundle[bundle.path] += msgs_in + msgs_out
        self._load_counts = counts
        self._load_at = now

        def per_s(messages: int) -> float:
            return round(messages / elapsed, 3) if elapsed > 0 else 0.0

        self.throughput.offer(self.clock.now_ms(), per_s(published), per_s(delivered))
        before = self._bundle_rates
        self._bundle_rates = {
            path: smoothed(before.get(path, 0.0), per_s(n)) for path, n in per_bundle.items()
        }
        cpu_now = time.process_time()
        cpu_s, self._cpu_at = cpu_now - self._cpu_at, cpu_now
        machine_s = elapsed * (os.cpu_count() or 1)
        return LoadReport(
            topics=len(self.service.topics),
            sessions=self.sessions,
            msg_rate_in=per_s(published),
            bundle_rates=tuple(self._bundle_rates.items()),
            cpu_used=round(min(1.0, cpu_s / machine_s), 4) if machine_s > 0 else 0.0,
            rss_bytes=resident_bytes(),
        )

    # ------------------------------------------------------------ ownership

    async def _namespace_view(self, ns: NamespaceName) -> NamespaceView:
        try:
            policies = await self.namespaces.policies(ns)
        except Exception:
            return NamespaceView(False)
        if policies.deleted:
            return NamespaceView(False)
        auto = policies.auto_topic_creation
        partitions = (auto.default_num_partitions or 1) if auto.topic_type == "partitioned" else 0
        subscriptions = policies.max_subscriptions_per_topic
        if subscriptions is None:
            subscriptions = self.config.max_subscriptions_per_topic
        resolved = replace(topic_policies(policies), max_subscriptions=subscriptions)
        topics = policies.max_topics_per_namespace
        if topics is None:
            topics = self.config.max_topics_per_namespace
        return NamespaceView(True, auto.allow, partitions, resolved, topics)

    async def unload_namespace(self, ns: NamespaceName, bundle: str | None) -> int:
        """Ask the owners of ``ns``'s bundles (all, or the one named) to unload them; the
        topics close gracefully and move on next use. Returns how many were asked."""
        policies = await self.namespaces.policies(ns)
        names = policies.bundles.ranges() if bundle is None else [bundle]
        asked = 0
        for name in names:
            if await self.ownership.request_unload(NamespaceBundle(ns, BundleRange.parse(name))):
                asked += 1
        return asked

    async def _bundle_lost(self, bundle: NamespaceBundle, reason: LossReason) -> None:
        # whatever the reason (a release too): no topic, loaded or loading, outlives its bundle
        dropped = await self.service.drop_where(bundle.contains)
        if dropped:
            log.warning("bundle %s lost (%s): dropped %d topics", bundle.path, reason.value, dropped)

    async def _unload_bundle(self, bundle: NamespaceBundle) -> None:
        await self.service.unload_where(bundle.contains)

    async def _owned_topic(self, name: TopicName) -> Topic:
        """A webhook's topic, owned here: loaded, never created."""
        return await self.service.topic(name, create=False)

    async def _members(self) -> list[str]:
        """Every etcd member's client and peer, gateway's, storage node's host:port and this
        gateway's metrics address (never a webhook target)."""
        gateways = [urlsplit(info.http_url).netloc for info in self.registry.live().values()]
        nodes = [
            address
            for node in await self.client.metadata.live_nodes()
            for address in (node.address, node.metrics_address)
        ]
        own = [self.config.metrics_address] if self.config.metrics_address else []
        peers = await etcd_peer_addresses(self.store)
        return [*self.config.etcd_endpoints, *peers, *gateways, *nodes, *own]


def resident_bytes() -> int:
    """This process's resident memory (Linux ``/proc/self/statm``; 0 where it is absent)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def folio_version() -> str:
    """The installed Folio release, as its package metadata says ("" if not installed)."""
    try:
        return metadata.version("folio")
    except metadata.PackageNotFoundError:
        return ""
