"""Admin REST v2: the cluster - gateways, storage nodes, ledgers' health, etcd, overview.

Owns: the HTTP shape of ``/admin/v2/clusters``, ``/admin/v2/brokers…``,
``/admin/v2/storage/…``, ``/admin/v2/etcd/members``,
``/admin/v2/broker-stats/topics`` and ``/admin/v2/cluster/overview`` (thin
asyncio shell: reads etcd and the other gateways, decisions in
``gateway.api.cluster_health``). Rules:
- Pulsar-compatible paths answer Pulsar's shapes (a single cluster ``folio``);
- lists that can grow (gateways, storage nodes) take ``search`` / ``offset`` /
  ``limit`` (``gateway.api.paging``; search matches id, address and state) and
  keep the plain array body, the count before paging in ``X-Total-Count``;
- the overview fans out to every live gateway's ``broker-stats/topics`` with
  bounded concurrency and a short timeout; an unreachable gateway is a problem
  in the answer, never a failed request; a topic no gateway has loaded counts
  with its stored figures (``gateway.api.stored_views``, docs/decisions/0016);
- a storage node can be forgotten only when it is neither registered nor named
  by a ledger ensemble (409 otherwise: its data still matters).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

import httpx
import orjson
from fastapi import APIRouter, Response

from coordination import keys
from coordination.election import current_leader
from coordination.errors import CoordinationError
from coordination.etcd_store import EtcdMember
from gateway.api import cluster_health as health
from gateway.api import errors
from gateway.api.admin_common import paged
from gateway.api.admin_models import NodeIdPath
from gateway.api.cluster_models import (
    BrokerTopicStats,
    ClusterOverview,
    EtcdMemberView,
    GatewayView,
    RecoveryStatus,
    StorageNodeView,
    UnderReplicatedLedger,
)
from gateway.api.paging import PageParams
from gateway.api.rollups import FIGURES_STORED
from gateway.api.route_docs import Cluster, Paging
from gateway.api.stored_figures import live
from gateway.api.stored_views import StoredFigures
from gateway.api.topic_summary import broker_topic_stats, flatten, topic_fact
from gateway.meta.errors import Conflict, NotFound
from storage.types import LedgerMetadata, NodeInfo

if TYPE_CHECKING:
    from gateway.process import Gateway

CLUSTER = "folio"
TAGS: list[str | Any] = ["admin-cluster"]
FANOUT_MAX = 8  # gateways asked at once
FANOUT_TIMEOUT_S = 2.0
T = TypeVar("T")


@runtime_checkable
class _MemberSource(Protocol):
    async def cluster_members(self) -> list[EtcdMember]: ...


def _paged(response: Response, paging: PageParams, items: list[T], text: Callable[[T], str]) -> list[T]:
    """``admin_common.paged`` through each item's search text (unique per item)."""
    by_text = {text(item): item for item in items}
    return [by_text[t] for t in paged(response, paging, list(by_text))]


class ClusterViews:
    """The reads behind the routes, plus the small in-memory history they keep."""

    def __init__(self, gateway: Gateway, stored: StoredFigures) -> None:
        self.gateway = gateway
        self.stored = stored
        self.backlogs = health.BacklogHistory()
        self.sightings = health.GatewaySightings()
        gateway.registry.add_listener(self._registry_changed)

    def now_ms(self) -> int:
        return self.gateway.clock.now_ms()

    def _registry_changed(self) -> None:
        self.sightings.observe(self.gateway.registry.live(), self.now_ms())

    # ------------------------------------------------------------ gateways

    async def gateways(self) -> list[dict[str, Any]]:
        gw = self.gateway
        live = await gw.registry.list_gateways()
        self.sightings.observe(live, self.now_ms())
        leader = await current_leader(gw.store, keys.LOAD_MANAGER)
        bundles: dict[str, int] = {}
        for owner in gw.ownership.bundle_owners().values():
            bundles[owner] = bundles.get(owner, 0) + 1
        me = gw.config.gateway_id
        out = []
        for gateway_id in sorted(live):
            info = live[gateway_id]
            mine = gateway_id == me
            out.append(
                {
                    "id": gateway_id,
                    "httpUrl": info.http_url,
                    "topics": len(gw.service.topics) if mine else info.load.topics,
                    "sessions": gw.sessions if mine else info.load.sessions,
                    "msgRateIn": round(info.load.msg_rate_in, 3),
                    "bundles": bundles.get(gateway_id, 0),
                    "loadManager": gateway_id == leader,
                    "self": mine,
                    "cpu": round(info.load.cpu_used, 3),
                    "rssBytes": info.load.rss_bytes,
                    "version": info.version,
                    "startedMs": info.started_ms,
                }
            )
        return out

    # ------------------------------------------------------------ storage

    async def _ledgers(self) -> list[LedgerMetadata]:
        out = []
        for kv in await self.gateway.store.list_prefix(keys.LEDGERS):
            with contextlib.suppress(ValueError, KeyError, AssertionError, orjson.JSONDecodeError):
                out.append(LedgerMetadata.from_json(kv.value))
        return out

    async def _live_nodes(self) -> list[NodeInfo]:
        out = []
        for kv in await self.gateway.store.list_prefix(keys.NODES):
            with contextlib.suppress(ValueError, KeyError, orjson.JSONDecodeError):
                out.append(NodeInfo.from_json(kv.value))
        return out

    async def _known_nodes(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for kv in await self.gateway.store.list_prefix(keys.NODES_KNOWN):
            node_id = kv.key[len(keys.NODES_KNOWN) :]
            with contextlib.suppress(ValueError, orjson.JSONDecodeError):
                record = orjson.loads(kv.value)
                out[node_id] = record if isinstance(record, dict) else {}
        return out

    @staticmethod
    def _referenced(ledgers: list[LedgerMetadata]) -> dict[str, int]:
        counts: dict[str, int] = {}
        for metadata in ledgers:
            for node_id in {n for segment in metadata.segments for n in segment.ensemble}:
                counts[node_id] = counts.get(node_id, 0) + 1
        return counts

    async def storage_nodes(self) -> list[health.NodeView]:
        live = await self._live_nodes()
        known = await self._known_nodes()
        return health.storage_nodes(live, known, self._referenced(await self._ledgers()))

    async def forget_node(self, node_id: str) -> None:
        store = self.gateway.store
        if await store.get(keys.node(node_id)) is not None:
            raise Conflict(f"storage node {node_id} is registered (live): stop it before forgetting it")
        referenced = self._referenced(await self._ledgers()).get(node_id, 0)
        if referenced:
            raise Conflict(
                f"storage node {node_id} is still named by {referenced} ledger ensembles: "
                "wait until the auditor has re-replicated them"
            )
        if not await store.delete(keys.node_known(node_id)):
            raise NotFound(f"storage node {node_id} is not known")

    async def under_replicated(self) -> list[dict[str, Any]]:
        out = []
        for kv in await self.gateway.store.list_prefix(keys.UNDER_REPLICATED):
            with contextlib.suppress(ValueError, orjson.JSONDecodeError):
                ledger_id = int(kv.key[len(keys.UNDER_REPLICATED) :])
                marker = orjson.loads(kv.value)
                nodes = marker.get("nodes", []) if isinstance(marker, dict) else []
                out.append({"ledgerId": ledger_id, "missingNodes": [str(n) for n in nodes]})
        return out

    async def recovery_status(self) -> dict[str, Any]:
        kv = await self.gateway.store.get(keys.RECOVERY_STATUS)
        if kv is None:
            raise NotFound("no recovery status: no auditor has reported yet")
        status = orjson.loads(kv.value)
        return status if isinstance(status, dict) else {}

    # ------------------------------------------------------------ etcd

    async def etcd_members(self) -> list[EtcdMember]:
        store = self.gateway.store
        if isinstance(store, _MemberSource):
            return await store.cluster_members()
        return []  # not etcd (in-memory store): no members to show

    async def etcd_health(self) -> tuple[int, bool]:
        try:
            members = await self.etcd_members()
        except CoordinationError:
            return 0, False
        if not isinstance(self.gateway.store, _MemberSource):
            return 0, True
        return len(members), any(m.is_leader for m in members)

    # ------------------------------------------------------------ topics

    def local_topic_stats(self) -> dict[str, Any]:
        gw = self.gateway
        return broker_topic_stats(gw.service.topics.values(), gw.ownership.owned_bundles())

    async def all_topic_summaries(
        self, gateways: list[dict[str, Any]]
    ) -> tuple[list[dict[str, Any]], dict[str, str]]:
        """Every live gateway's owned-topic summaries and the stored figures of every
        other topic (``stored_views``); gateways that failed -> error text."""
        limit = asyncio.Semaphore(FANOUT_MAX)
        failed: dict[str, str] = {}

        async def one(view: dict[str, Any]) -> list[dict[str, Any]]:
            if view["self"]:
                return flatten(self.local_topic_stats())
            async with limit:
                try:
                    url = f"{view['httpUrl']}/admin/v2/broker-stats/topics"
                    response = await self.gateway.http.get(url, timeout=FANOUT_TIMEOUT_S)
                    response.raise_for_status()
                    body = response.json()
                    return flatten(body) if isinstance(body, dict) else []
                except (httpx.HTTPError, ValueError) as exc:
                    failed[view["id"]] = f"{type(exc).__name__}: {exc}"[:300]
                    return []

        parts = await asyncio.gather(*(one(view) for view in gateways))
        now = self.now_ms()
        loaded = [live(summary, now) for part in parts for summary in part]
        stored, _ = await self.stored.topics("", {str(s.get("topic")) for s in loaded})
        return loaded + [figures.summary for figures in stored.values()], failed

    # ------------------------------------------------------------ overview

    async def _counts(self) -> tuple[int, int, int]:
        namespaces = self.gateway.namespaces
        tenants = await namespaces.list_tenants()
        ns_count = 0
        for tenant in tenants:
            with contextlib.suppress(NotFound):
                ns_count += len(await namespaces.list_namespaces(tenant))
        topics = len(await self.gateway.store.list_prefix(keys.MANAGED_LOGS))
        return len(tenants), ns_count, topics

    async def overview(self) -> dict[str, Any]:
        gateways = await self.gateways()
        nodes = await self.storage_nodes()
        members, healthy = await self.etcd_health()
        summaries, unreachable = await self.all_topic_summaries(gateways)
        tenants, namespaces, topics = await self._counts()
        now = self.now_ms()
        self.backlogs.record({s["topic"]: int(s.get("msgBacklog", 0)) for s in summaries}, now)
        under = {u["ledgerId"]: u["missingNodes"] for u in await self.under_replicated()}
        problems = health.build_problems(
            nodes=nodes,
            write_quorum=self.gateway.config.log.write_quorum,
            under_replicated=under,
            missing_gateways=self.sightings.missing(),
            unreachable_gateways=unreachable,
            topics=[topic_fact(s) for s in summaries],
            growing=self.backlogs.growing(),
            etcd_healthy=healthy,
        )
        return {
            "gateways": gateways,
            "storageNodes": [n.to_json() for n in nodes],
            "etcd": {"members": members, "healthy": healthy},
            "totals": {
                "tenants": tenants,
                "namespaces": namespaces,
                "topics": topics,
                "msgRateIn": round(sum(float(s.get("msgRateIn", 0.0)) for s in summaries), 3),
                "msgRateOut": round(sum(float(s.get("msgRateOut", 0.0)) for s in summaries), 3),
                "msgBacklog": sum(int(s.get("msgBacklog", 0)) for s in summaries),
                "storageSize": sum(int(s.get("storageSize", 0)) for s in summaries),
                **_activity(summaries, gateways),
            },
            "problems": [p.to_json() for p in problems],
        }


def _activity(summaries: list[dict[str, Any]], gateways: list[dict[str, Any]]) -> dict[str, Any]:
    """Byte rates, producers, consumers and connections, and how many topics' figures are
    live or stored (and the oldest stored time)."""
    stored = [s for s in summaries if s.get("figures") == FIGURES_STORED]
    times = [int(s["asOfMs"]) for s in stored if isinstance(s.get("asOfMs"), int)]
    return {
        "msgThroughputIn": round(sum(float(s.get("msgThroughputIn", 0.0)) for s in summaries), 3),
        "msgThroughputOut": round(sum(float(s.get("msgThroughputOut", 0.0)) for s in summaries), 3),
        "producers": sum(int(s.get("producerCount", 0)) for s in summaries),
        "consumers": sum(int(s.get("consumerCount", 0)) for s in summaries),
        "connections": sum(int(g.get("sessions", 0)) for g in gateways),
        "loadedTopics": len(summaries) - len(stored),
        "storedTopics": len(stored),
        "storedAsOfMs": min(times) if times else None,
    }


def _gateway_text(view: dict[str, Any]) -> str:
    return f"{view['id']} {view['httpUrl']}"


def _node_text(node: health.NodeView) -> str:
    return f"{node.node_id} {node.address} {node.state}"


def make_router(get_gateway: Callable[[], Gateway], stored: StoredFigures) -> APIRouter:
    router = APIRouter(prefix="/admin/v2", tags=TAGS)
    cluster_views = ClusterViews(get_gateway(), stored)  # now: it watches the registry from the start

    def views() -> ClusterViews:
        return cluster_views

    @router.get(
        "/clusters", summary="List clusters (Pulsar): the one cluster, folio", responses=errors.responses()
    )
    async def list_clusters() -> list[str]:
        return [CLUSTER]

    @router.get(
        "/brokers/{cluster}",
        summary="List the live gateways of a cluster as host:port (Pulsar)",
        responses=errors.responses(404),
    )
    async def list_brokers_of_cluster(cluster: Cluster) -> list[str]:
        if cluster != CLUSTER:
            raise NotFound(f"Cluster {cluster[:100]} does not exist")
        live = await views().gateway.registry.list_gateways()
        return sorted(info.http_url.split("://", 1)[-1] for info in live.values())

    @router.get(
        "/brokers",
        summary="List live gateways with their load, bundles and roles",
        responses=errors.responses(400),
        response_model=list[GatewayView],
    )
    async def list_gateways(response: Response, paging: Paging) -> list[dict[str, Any]]:
        return _paged(response, paging, await views().gateways(), _gateway_text)

    @router.get(
        "/storage/nodes",
        summary="List storage nodes: writable, read-only, or gone (known but not registered)",
        responses=errors.responses(400),
        response_model=list[StorageNodeView],
    )
    async def list_storage_nodes(response: Response, paging: Paging) -> list[dict[str, Any]]:
        return [n.to_json() for n in _paged(response, paging, await views().storage_nodes(), _node_text)]

    @router.delete(
        "/storage/nodes/{node_id}",
        status_code=204,
        summary="Forget a decommissioned storage node (409 while live or named by a ledger)",
        responses=errors.responses(404, 409),
    )
    async def forget_storage_node(node_id: NodeIdPath) -> Response:
        await views().forget_node(node_id)
        return Response(status_code=204)

    @router.get(
        "/storage/under-replicated",
        summary="Ledgers the auditor found under-replicated",
        responses=errors.responses(),
        response_model=list[UnderReplicatedLedger],
    )
    async def list_under_replicated_ledgers() -> list[dict[str, Any]]:
        return await views().under_replicated()

    @router.get(
        "/storage/recovery",
        summary="The auditor's re-replication progress",
        responses=errors.responses(404),
        response_model=RecoveryStatus,
    )
    async def get_recovery_status() -> dict[str, Any]:
        return await views().recovery_status()

    @router.get(
        "/etcd/members",
        summary="Members of the etcd cluster (cluster-wide)",
        responses=errors.responses(),
        response_model=list[EtcdMemberView],
        response_model_exclude_none=True,
    )
    async def list_etcd_members() -> list[dict[str, Any]]:
        return [m.to_json() for m in await views().etcd_members()]

    @router.get(
        "/broker-stats/topics",
        summary="Summaries of the topics this gateway owns (Pulsar: namespace -> bundle -> domain -> topic)",
        responses=errors.responses(),
        response_model=BrokerTopicStats,
    )
    async def get_broker_topic_stats() -> dict[str, Any]:
        return views().local_topic_stats()

    @router.get(
        "/cluster/overview",
        summary="Gateways, storage nodes, etcd, totals and problems (critical first)",
        responses=errors.responses(),
        response_model=ClusterOverview,
    )
    async def get_cluster_overview() -> dict[str, Any]:
        return await views().overview()

    return router
