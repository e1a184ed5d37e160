"""Pydantic models of the admin cluster views' JSON (gateway/api/admin_cluster.py).

Owns: the documented response shapes of ``/admin/v2/brokers``,
``/admin/v2/storage/…``, ``/admin/v2/etcd/members``,
``/admin/v2/broker-stats/topics`` and ``/admin/v2/cluster/overview``. Rule:
field names are the JSON names (camelCase, as Pulsar's admin API spells
them); the values are built by ``gateway.api.cluster_health`` and
``gateway.api.topic_summary`` - these models only document and check them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class GatewayView(BaseModel):
    """A live gateway (a Pulsar "broker")."""

    model_config = ConfigDict(populate_by_name=True)

    id: str = Field(description="gateway id (default host:port)")
    httpUrl: str = Field(description="where clients and other gateways reach it")
    topics: int = Field(description="topics it has loaded (owns)")
    sessions: int = Field(description="open WebSocket and HTTP-consume sessions")
    msgRateIn: float = Field(description="messages published per second (last load report)")
    bundles: int = Field(description="namespace bundles it owns")
    loadManager: bool = Field(description="true for the elected load manager")
    is_self: bool = Field(alias="self", description="true for the gateway that answered")
    cpu: float = Field(0.0, description="CPU used, fraction of one machine (last load report)")
    rssBytes: int = Field(0, description="resident memory, bytes (last load report; 0 = not reported)")
    version: str = Field("", description="the Folio release it runs ('' = not reported)")
    startedMs: int = Field(0, description="when it started (epoch ms; 0 = not reported)")


class StorageNodeView(BaseModel):
    nodeId: str
    address: str = Field(description="host:port of the storage wire protocol")
    metricsAddress: str = Field(description="host:port of its Prometheus /metrics ('' if unknown)")
    state: Literal["writable", "read-only", "gone"] = Field(
        description="gone: known to Folio (it registered once, or a ledger ensemble names it) "
        "but not registered now"
    )
    freeBytes: int
    totalBytes: int
    ledgerCount: int = Field(
        description="ledgers it holds (for a gone node: ledgers whose ensembles name it)"
    )
    load: float = Field(description="adds + reads per second, smoothed")


class UnderReplicatedLedger(BaseModel):
    ledgerId: int
    missingNodes: list[str] = Field(description="gone nodes that held fragments of this ledger")


class RecoveryStatus(BaseModel):
    """The auditor's progress record (``/folio/recovery-status``); more fields may follow."""

    model_config = ConfigDict(extra="allow")

    auditor: str = Field(description="id of the auditor that wrote it")
    goneNodes: list[str] = []
    underReplicatedLedgers: int = 0
    fragmentsReplicated: int = 0
    entriesCopied: int = 0
    ledgersFenced: int = 0
    failures: int = 0
    ledgersChecked: int = 0
    ledgersRepaired: int = 0
    ledgersPending: int = 0
    updatedAtMs: int = 0


class EtcdMemberView(BaseModel):
    id: str = Field(description="member id, hex")
    name: str
    peerUrls: list[str]
    clientUrls: list[str]
    isLeader: bool
    dbSize: int | None = Field(None, description="bytes; only for the member that answered")


class TopicSummary(BaseModel):
    """One owned topic, as summed up by the cluster overview."""

    topic: str
    msgRateIn: float
    msgThroughputIn: float
    msgRateOut: float
    msgThroughputOut: float
    msgInCounter: int
    bytesInCounter: int
    msgOutCounter: int
    bytesOutCounter: int
    msgBacklog: int = Field(description="entries not acknowledged, summed over durable subscriptions")
    backlogSize: int = Field(description="bytes after the slowest durable subscription")
    storageSize: int
    producerCount: int
    subscriptionCount: int
    consumerCount: int
    backlogQuotaExceeded: bool


# {namespace: {bundle range: {domain: {topic: summary}}}} (Pulsar's broker-stats/topics shape)
BrokerTopicStats = dict[str, dict[str, dict[str, dict[str, TopicSummary]]]]


class EtcdHealth(BaseModel):
    members: int
    healthy: bool = Field(description="the member list answered and names a leader")


class Totals(BaseModel):
    tenants: int
    namespaces: int
    topics: int = Field(description="topics (each partition counts) with a managed log")
    msgRateIn: float
    msgRateOut: float
    msgBacklog: int = Field(description="messages not acknowledged, every topic (live or stored figures)")
    storageSize: int = Field(description="bytes stored by every topic (live or stored figures)")
    msgThroughputIn: float = Field(0.0, description="bytes/s published, over the loaded topics")
    msgThroughputOut: float = Field(0.0, description="bytes/s delivered, over the loaded topics")
    producers: int = Field(0, description="producers connected to the loaded topics")
    consumers: int = Field(0, description="consumers connected to the loaded topics")
    connections: int = Field(0, description="client sessions (WebSocket and HTTP) the live gateways hold")
    loadedTopics: int = Field(0, description="topics a live gateway has loaded (live figures)")
    storedTopics: int = Field(
        0, description="topics no live gateway has loaded, counted from stored records (docs/decisions/0016)"
    )
    storedAsOfMs: int | None = Field(None, description="the oldest stored figures' time (epoch ms)")


class ProblemView(BaseModel):
    severity: Literal["critical", "warning"]
    kind: str = Field(
        description="etcd-unhealthy, storage-node-gone, not-enough-writable-nodes, "
        "backlog-quota-exceeded, storage-node-read-only, under-replicated-ledgers, gateway-missing, "
        "gateway-unreachable, backlog-growing"
    )
    message: str
    target: str = Field(description="what it is about: a node id, gateway id, topic, or 'storage'/'etcd'")


class ClusterOverview(BaseModel):
    gateways: list[GatewayView]
    storageNodes: list[StorageNodeView]
    etcd: EtcdHealth
    totals: Totals
    problems: list[ProblemView] = Field(description="critical first, then by kind")
