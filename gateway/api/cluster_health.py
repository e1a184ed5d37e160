"""Cluster health from facts: storage-node states, problems, backlog trends (pure).

Owns: the rules the admin cluster views (gateway/api/admin_cluster.py) apply to
what they read from etcd and from the gateways. No I/O; time comes in as
``now_ms``. Rules:
- a storage node is ``writable`` / ``read-only`` while it has a live registration
  (its lease key), and ``gone`` when Folio knew it (a persistent known-node
  record, docs/decisions/0007, or a ledger ensemble naming it) but it has none;
- problems are ordered critical first, then by kind in ``KIND_ORDER``, then by
  target. Critical: etcd unhealthy, storage node gone, fewer writable nodes
  than the write quorum, backlog quota exceeded (producers are held or
  refused). Warnings: node read-only, under-replicated ledgers, gateway
  missing or unreachable, topic backlog growing;
- a gateway is *missing* when it was seen live within ``MISSING_WINDOW_MS`` and
  is not registered now; *unreachable* when registered but its stats call failed;
- a topic's backlog is *growing* when it rose at every sample (samples at
  least ``SAMPLE_INTERVAL_MS`` apart) for at least ``GROWTH_SAMPLES`` samples
  spanning at least ``GROWTH_SPAN_MS``, up to the latest sample; the history
  is a bounded ring per topic, for at most ``TOPICS_MAX`` topics, and forgets
  topics no longer reported.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from storage.types import NodeInfo

WRITABLE, READ_ONLY, GONE = "writable", "read-only", "gone"
CRITICAL, WARNING = "critical", "warning"
KIND_ORDER = (
    "etcd-unhealthy",
    "storage-node-gone",
    "not-enough-writable-nodes",
    "backlog-quota-exceeded",
    "storage-node-read-only",
    "under-replicated-ledgers",
    "gateway-missing",
    "gateway-unreachable",
    "backlog-growing",
)
MISSING_WINDOW_MS = 15 * 60_000
GROWTH_SAMPLES = 3
GROWTH_SPAN_MS = 2_000
SAMPLE_INTERVAL_MS = 500
RING_SIZE = 16
TOPICS_MAX = 10_000


@dataclass(frozen=True, slots=True)
class NodeView:
    node_id: str
    address: str
    metrics_address: str
    state: str
    free_bytes: int
    total_bytes: int
    ledger_count: int
    load: float

    def to_json(self) -> dict[str, Any]:
        return {
            "nodeId": self.node_id,
            "address": self.address,
            "metricsAddress": self.metrics_address,
            "state": self.state,
            "freeBytes": self.free_bytes,
            "totalBytes": self.total_bytes,
            "ledgerCount": self.ledger_count,
            "load": self.load,
        }


def storage_nodes(
    live: Iterable[NodeInfo], known: Mapping[str, Mapping[str, Any]], referenced: Mapping[str, int]
) -> list[NodeView]:
    """Every node Folio knows, by id. ``known``: known-node records by id;
    ``referenced``: node id -> number of ledgers whose ensembles name it."""
    views: dict[str, NodeView] = {}
    for info in live:
        state = READ_ONLY if info.read_only else WRITABLE
        views[info.node_id] = NodeView(
            info.node_id,
            info.address,
            info.metrics_address,
            state,
            info.free_bytes,
            info.total_bytes,
            info.ledger_count,
            info.load,
        )
    for node_id in sorted(set(known) | set(referenced)):
        if node_id in views:
            continue
        record = known.get(node_id, {})
        address = str(record.get("address") or node_id)
        metrics = str(record.get("metricsAddress") or "")
        views[node_id] = NodeView(node_id, address, metrics, GONE, 0, 0, referenced.get(node_id, 0), 0.0)
    return [views[k] for k in sorted(views)]


@dataclass(frozen=True, slots=True)
class Problem:
    severity: str
    kind: str
    message: str
    target: str

    def to_json(self) -> dict[str, str]:
        return {"severity": self.severity, "kind": self.kind, "message": self.message, "target": self.target}


@dataclass(frozen=True, slots=True)
class TopicFact:
    topic: str
    backlog: int  # messages (entries) not acknowledged, summed over durable subscriptions
    quota_exceeded: bool


def build_problems(
    *,
    nodes: Sequence[NodeView],
    write_quorum: int,
    under_replicated: Mapping[int, Sequence[str]],
    missing_gateways: Collection[str],
    unreachable_gateways: Mapping[str, str],
    topics: Sequence[TopicFact],
    growing: Collection[str],
    etcd_healthy: bool = True,
) -> list[Problem]:
    """The problems list of the cluster overview, in display order."""
    out: list[Problem] = []
    if not etcd_healthy:
        out.append(
            Problem(CRITICAL, "etcd-unhealthy", "etcd did not report its members and a leader", "etcd")
        )
    for node in nodes:
        if node.state == GONE:
            held = f"; {node.ledger_count} ledgers still name it" if node.ledger_count else ""
            out.append(
                Problem(
                    CRITICAL, "storage-node-gone", f"storage node {node.node_id} is gone{held}", node.node_id
                )
            )
        elif node.state == READ_ONLY:
            free = f"{node.free_bytes} of {node.total_bytes} bytes free"
            out.append(
                Problem(
                    WARNING,
                    "storage-node-read-only",
                    f"storage node {node.node_id} is read-only ({free})",
                    node.node_id,
                )
            )
    writable = sum(1 for n in nodes if n.state == WRITABLE)
    if writable < write_quorum:
        out.append(
            Problem(
                CRITICAL,
                "not-enough-writable-nodes",
                f"{writable} writable storage nodes, fewer than the write quorum {write_quorum}: "
                "new ledgers cannot be created",
                "storage",
            )
        )
    by_node: dict[str, list[int]] = {}
    for ledger_id, missing in under_replicated.items():
        for node_id in missing or ("?",):
            by_node.setdefault(node_id, []).append(ledger_id)
    for node_id, ledgers in by_node.items():
        out.append(
            Problem(
                WARNING,
                "under-replicated-ledgers",
                f"{len(ledgers)} ledgers lack their copies on {node_id} (re-replication pending)",
                node_id,
            )
        )
    for gateway_id in missing_gateways:
        out.append(
            Problem(WARNING, "gateway-missing", f"gateway {gateway_id} is no longer registered", gateway_id)
        )
    for gateway_id, error in unreachable_gateways.items():
        out.append(
            Problem(
                WARNING, "gateway-unreachable", f"gateway {gateway_id} did not answer: {error}", gateway_id
            )
        )
    growing_set = set(growing)
    for fact in topics:
        if fact.quota_exceeded:
            out.append(
                Problem(
                    CRITICAL,
                    "backlog-quota-exceeded",
                    f"topic {fact.topic} exceeds its backlog quota",
                    fact.topic,
                )
            )
        if fact.topic in growing_set:
            out.append(
                Problem(
                    WARNING,
                    "backlog-growing",
                    f"backlog of {fact.topic} keeps growing ({fact.backlog})",
                    fact.topic,
                )
            )
    return sort_problems(out)


def sort_problems(problems: Iterable[Problem]) -> list[Problem]:
    rank = {kind: i for i, kind in enumerate(KIND_ORDER)}
    return sorted(
        problems,
        key=lambda p: (p.severity != CRITICAL, rank.get(p.kind, len(KIND_ORDER)), p.target, p.message),
    )


class BacklogHistory:
    """A bounded ring of backlog samples per topic (pure: time is passed in)."""

    def __init__(
        self,
        ring_size: int = RING_SIZE,
        topics_max: int = TOPICS_MAX,
        sample_interval_ms: int = SAMPLE_INTERVAL_MS,
    ) -> None:
        self.ring_size = ring_size
        self.topics_max = topics_max
        self.sample_interval_ms = sample_interval_ms
        self._rings: dict[str, deque[tuple[int, int]]] = {}

    def record(self, backlogs: Mapping[str, int], now_ms: int) -> None:
        """One sample per topic in ``backlogs``; topics not in it are forgotten."""
        for gone in [t for t in self._rings if t not in backlogs]:
            del self._rings[gone]
        for topic, backlog in backlogs.items():
            ring = self._rings.get(topic)
            if ring is None:
                if len(self._rings) >= self.topics_max:
                    continue
                ring = self._rings[topic] = deque(maxlen=self.ring_size)
            if ring and now_ms - ring[-1][0] < self.sample_interval_ms:
                continue
            ring.append((now_ms, backlog))

    def samples(self, topic: str) -> list[tuple[int, int]]:
        return list(self._rings.get(topic, ()))

    def growing(self, samples_needed: int = GROWTH_SAMPLES, span_ms: int = GROWTH_SPAN_MS) -> list[str]:
        """Topics whose backlog rose at every sample of a run that ends with the latest
        sample, holds ``samples_needed`` samples or more and spans ``span_ms`` or more."""
        out = []
        for topic, ring in self._rings.items():
            samples = list(ring)
            start = len(samples) - 1
            while start > 0 and samples[start - 1][1] < samples[start][1]:
                start -= 1
            run = samples[start:]
            if len(run) >= samples_needed and run[-1][0] - run[0][0] >= span_ms:
                out.append(topic)
        return sorted(out)


class GatewaySightings:
    """Which gateways were seen live, and when (pure: time is passed in)."""

    def __init__(self, window_ms: int = MISSING_WINDOW_MS) -> None:
        self.window_ms = window_ms
        self._last_seen: dict[str, int] = {}
        self._live: frozenset[str] = frozenset()

    def observe(self, live: Iterable[str], now_ms: int) -> None:
        self._live = frozenset(live)
        for gateway_id in self._live:
            self._last_seen[gateway_id] = now_ms
        for gateway_id in [g for g, at in self._last_seen.items() if now_ms - at > self.window_ms]:
            del self._last_seen[gateway_id]

    def missing(self) -> list[str]:
        return sorted(g for g in self._last_seen if g not in self._live)
