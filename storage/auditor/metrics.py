"""Prometheus metrics of the auditor process: recovery progress, read at scrape time.

Owns: the auditor's CollectorRegistry and its /metrics HTTP server
(prometheus-client's, on a daemon thread). Rule: nothing on the audit path
updates a metric; the collector reads the leading ``Auditor``'s ``Progress``
(the same numbers as ``/folio/recovery-status``) when Prometheus scrapes. A
standby auditor reports ``folio_auditor_leader 0`` and zeros. Every metric is
listed in docs/metrics.md.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from storage.auditor.auditor import Progress


class AuditorCollector(Collector):
    """Recovery progress of the auditor leading in this process (if any)."""

    def __init__(self) -> None:
        self.progress: Progress | None = None

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        p = self.progress
        yield GaugeMetricFamily("folio_auditor_leader", "1 while this auditor leads", 1 if p else 0)
        yield GaugeMetricFamily(
            "folio_auditor_ledgers_checked",
            "Ledgers scanned by the last audit pass",
            p.ledgers_checked if p else 0,
        )
        yield GaugeMetricFamily(
            "folio_auditor_ledgers_pending",
            "Ledgers still under-replicated after the last pass",
            p.under_replicated if p else 0,
        )
        yield GaugeMetricFamily(
            "folio_auditor_ledgers_repaired",
            "Ledgers brought back to a full write quorum since this auditor leads",
            p.ledgers_repaired if p else 0,
        )
        yield GaugeMetricFamily(
            "folio_auditor_gone_nodes", "Storage nodes counted as gone", len(p.gone) if p else 0
        )
        yield CounterMetricFamily(
            "folio_auditor_fragments_replicated",
            "Ledger fragments copied to a new node",
            p.fragments_done if p else 0,
        )
        yield CounterMetricFamily(
            "folio_auditor_entries_copied", "Entries copied by re-replication", p.entries_copied if p else 0
        )
        yield CounterMetricFamily(
            "folio_auditor_ledgers_fenced",
            "Open ledgers fenced and closed by the auditor",
            p.ledgers_fenced if p else 0,
        )
        yield CounterMetricFamily(
            "folio_auditor_failures", "Repairs that failed (retried)", p.failures if p else 0
        )
        yield CounterMetricFamily("folio_auditor_passes", "Audit passes completed", p.passes if p else 0)


def serve(collector: AuditorCollector, host: str, port: int) -> str:
    """Start /metrics for ``collector``; returns its host:port (port 0 = any free port)."""
    registry = CollectorRegistry()
    registry.register(collector)
    server, _thread = start_http_server(port, addr=host, registry=registry)
    return f"{host}:{server.server_address[1]}"
