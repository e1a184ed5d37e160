"""Prometheus metrics of a storage node, on their own HTTP port.

Owns: the node's CollectorRegistry and the /metrics HTTP server
(prometheus-client's, on a daemon thread, bound to the node's host).
Rule: the add path updates metrics once per journal batch, not once per add;
reads observe their latency once per request (a range read is one request).
Every metric is listed in docs/metrics.md.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

SYNC_SECONDS_BUCKETS = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1.0)
BATCH_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000)
READ_SECONDS_BUCKETS = (0.00005, 0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.05, 0.1, 0.5)
LEDGER_OPS = ("create", "fence", "delete")  # as this node sees them (first entry stored, fence, reclaim)


class NodeMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.sync_seconds = Histogram(
            "folio_journal_sync_seconds",
            "Journal fdatasync latency",
            registry=r,
            buckets=SYNC_SECONDS_BUCKETS,
        )
        self.sync_batch = Histogram(
            "folio_journal_sync_batch_records", "Records per journal sync", registry=r, buckets=BATCH_BUCKETS
        )
        self.adds = Counter("folio_node_adds", "Entries added (durable)", registry=r)
        self.add_bytes = Counter("folio_node_add_bytes", "Entry bytes added (durable)", registry=r)
        self.reads = Counter("folio_node_reads", "Read requests (single and range)", registry=r)
        self.rejected = Counter("folio_node_adds_rejected", "Adds refused: journal queue full", registry=r)
        self.ledgers = Gauge("folio_node_ledgers", "Ledgers held by this node", registry=r)
        self.read_only = Gauge("folio_node_read_only", "1 when the node refuses adds (disk)", registry=r)
        self.free_bytes = Gauge("folio_node_disk_free_bytes", "Free bytes on the data disk", registry=r)
        self.connections = Gauge("folio_node_connections", "Open client connections", registry=r)
        self.auth_refused = Counter(
            "folio_node_auth_refused", "Connections closed: no or a bad cluster-secret proof", registry=r
        )
        self.idle_closed = Counter(
            "folio_node_idle_closed", "Connections closed after the idle timeout", registry=r
        )
        self.lac_waiters = Gauge("folio_node_lac_waiters", "Read-LAC long-polls parked now", registry=r)
        self.read_seconds = Histogram(
            "folio_node_read_latency_seconds",
            "Read latency, request parsed -> reply queued (from the journal files)",
            registry=r,
            buckets=READ_SECONDS_BUCKETS,
        )
        ops = Counter("folio_node_ledger_ops", "Ledger operations seen by this node", ["op"], registry=r)
        self.ledger_created, self.ledger_fenced, self.ledger_deleted = (ops.labels(op) for op in LEDGER_OPS)
        self.recovery_adds = Counter(
            "folio_node_recovery_adds",
            "Recovery adds stored (ledger recovery and re-replication)",
            registry=r,
        )
        self.compaction_bytes = Counter(
            "folio_node_compaction_bytes",
            "Live entry bytes copied forward by journal compaction",
            registry=r,
        )
        self.compacted_files = Counter(
            "folio_node_compacted_files", "Journal files whose live entries compaction copied", registry=r
        )
        self.address = ""

    def on_compacted(self, nbytes: int) -> None:
        self.compaction_bytes.inc(nbytes)
        self.compacted_files.inc()

    def on_sync(self, seconds: float, records: int) -> None:
        self.sync_seconds.observe(seconds)
        self.sync_batch.observe(records)

    def on_adds(self, count: int, nbytes: int, created: int = 0) -> None:
        """Once per journal batch: ``count`` adds of ``nbytes``, ``created`` new ledgers."""
        self.adds.inc(count)
        self.add_bytes.inc(nbytes)
        if created:
            self.ledger_created.inc(created)

    def serve(self, host: str, port: int) -> str:
        """Start /metrics; returns its host:port (port 0 = any free port)."""
        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        self.address = f"{host}:{server.server_address[1]}"
        return self.address
