"""The analytics tests' stack: a cluster and its analytics service processes (see conftest.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from clusters import MessagingCluster

from folio.procs import AnalyticsProcess

LEADER_TIMEOUT_S = 240.0  # Spark start on a loaded 2-core box


@dataclass
class Stack:
    cluster: MessagingCluster
    root: Path
    services: list[AnalyticsProcess] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.cluster.urls[0]

    def start_service(self, name: str, wait_leader: bool = True) -> AnalyticsProcess:
        ledgers = self.cluster.ledgers
        service = AnalyticsProcess(
            self.root / name,
            ledgers.endpoint,
            namespace=ledgers.namespace,
            master="local[2]",
            log_path=self.root / f"{name}.log",
            # 6 s: the suite runs on both cores, and a box loaded further by other work has
            # starved a keepalive for 3 s (the service then steps down mid-run, as it must)
            extra_args=["--id", name, "--lease-ttl", "6"],
        )
        service.start(timeout_s=60)
        self.services.append(service)
        if wait_leader:
            assert service.leader.wait(LEADER_TIMEOUT_S), service.log_tail()
        return service
