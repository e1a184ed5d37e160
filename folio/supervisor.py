"""The local cluster of ``folio up``: embedded etcd, storage nodes, gateways and the
analytics service on loopback.

Owns: the lifetime of every process it starts (data under ``./.folio/``).
Rule: start in dependency order (etcd, then nodes), print where everything
listens, and on Ctrl-C / SIGTERM stop in reverse order, each child by PID.
A child that exits meanwhile (etcd, a node, the auditor, a gateway) is started
again, with the back-off of ``folio.restarts``, and both are printed; the
restarted child waits for etcd by itself if etcd is the one coming back.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from coordination.clock import SystemClock
from coordination.etcd_server import EmbeddedEtcd, EtcdStartError
from coordination.ports import free_ports
from folio.procs import AnalyticsProcess, AuditorProcess, GatewayProcess, NodeProcess
from folio.restarts import RestartPolicy, Restarts
from folio.secure_up import SecureSetup
from storage.client.connection import SECRET_ENV

DEFAULT_NODE_PORTS = (3181, 3182, 3183)
DEFAULT_METRICS_PORTS = (8001, 8002, 8003)
DEFAULT_GATEWAY_PORTS = (8080, 8081)
SUPERVISE_INTERVAL_S = 0.25


@dataclass
class Child:
    """One supervised child process, as the restart loop sees it."""

    label: str
    running: Callable[[], bool]
    exit_code: Callable[[], int | None]
    restart: Callable[[], None]  # start it again without waiting for it to be ready
    pid: Callable[[], int | None]
    restarts: Restarts


@dataclass
class LocalCluster:
    root: Path
    node_ports: tuple[int, ...] = DEFAULT_NODE_PORTS
    metrics_ports: tuple[int, ...] = DEFAULT_METRICS_PORTS
    etcd_client_port: int = 2379
    etcd_peer_port: int = 2380
    etcd: EmbeddedEtcd | None = None
    nodes: list[NodeProcess] = field(default_factory=list)
    auditor: AuditorProcess | None = None
    auditor_grace_ms: int = 30_000
    gateway_ports: tuple[int, ...] = DEFAULT_GATEWAY_PORTS
    gateways: list[GatewayProcess] = field(default_factory=list)
    restart_policy: RestartPolicy = field(default_factory=RestartPolicy)
    children: list[Child] = field(default_factory=list)
    secure: bool = False  # bearer tokens on the gateways (keys under <root>/security)
    gateway_args: tuple[str, ...] = ()  # more flags for every gateway (benchmarks)
    analytics_master: str | None = "local[*]"  # Spark master of the analytics service; None: none
    analytics: AnalyticsProcess | None = None

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.etcd = EmbeddedEtcd(
            self.root / "etcd", client_port=self.etcd_client_port, peer_port=self.etcd_peer_port
        )
        self.etcd.start()
        security = SecureSetup(self.root / "security")
        if self.secure:
            security.prepare()
        else:
            security.prepare_cluster_secret()
        internal = security.internal_args()  # open mode too: no anonymous peer on a node port
        # clients this process makes itself (benchmarks) prove the secret as well
        os.environ[SECRET_ENV] = str(security.cluster_key)
        for port, metrics_port in zip(self.node_ports, self.metrics_ports, strict=True):
            node = NodeProcess(
                self.root / f"node-{port}",
                self.etcd.endpoint,
                port=port,
                metrics_port=metrics_port,
                log_path=self.root / f"node-{port}.log",
                extra_args=internal,
            )
            node.start()
            self.nodes.append(node)
        self.auditor = AuditorProcess(
            etcd=self.etcd.endpoint,
            log_path=self.root / "auditor.log",
            grace_ms=self.auditor_grace_ms,
            extra_args=internal,
        )
        self.auditor.start()
        for port in self.gateway_ports:
            gateway = GatewayProcess(
                self.root / f"gateway-{port}",
                self.etcd.endpoint,
                port=port,
                log_path=self.root / f"gateway-{port}.log",
                extra_args=(
                    *internal,
                    *(security.gateway_args() if self.secure else ()),
                    *self.gateway_args,
                ),
            )
            gateway.start()
            self.gateways.append(gateway)
        if self.analytics_master is not None:
            self.analytics = AnalyticsProcess(
                self.root / "analytics",
                self.etcd.endpoint,
                master=self.analytics_master,
                log_path=self.root / "analytics.log",
            )
            # its Spark reads go straight to the storage nodes
            self.analytics.env[SECRET_ENV] = str(security.cluster_key)
            self.analytics.start()
        self.children = self._children(SystemClock().now_ms())

    def _children(self, now_ms: int) -> list[Child]:
        assert self.etcd is not None and self.auditor is not None
        etcd = self.etcd
        children = [
            Child(
                f"etcd {etcd.endpoint}",
                etcd.running,
                lambda: etcd.exit_code,
                etcd.start,
                lambda: etcd.pid,
                Restarts(self.restart_policy, now_ms),
            )
        ]
        named: list[tuple[str, NodeProcess]] = [(f"storage node {n.address}", n) for n in self.nodes]
        named.append(("auditor", self.auditor))
        named += [(f"gateway {g.http_url}", g) for g in self.gateways]
        if self.analytics is not None:
            named.append(("analytics service", self.analytics))
        children += [
            _process_child(label, proc, Restarts(self.restart_policy, now_ms)) for label, proc in named
        ]
        return children

    def supervise(self, now_ms: int) -> list[str]:
        """One round of the restart loop: what happened, one line each."""
        lines = []
        for child in self.children:
            if child.restarts.due_ms is None:
                if child.running():
                    continue
                pause = child.restarts.exited(now_ms)
                lines.append(
                    f"{child.label} exited with {child.exit_code()}; restarting it in {pause / 1000:.1f} s"
                )
            if not child.restarts.due(now_ms):
                continue
            child.restarts.restarted(now_ms)
            try:
                child.restart()
            except (RuntimeError, OSError, EtcdStartError) as exc:
                lines.append(f"{child.label} did not restart: {exc}")
                continue
            lines.append(f"{child.label} restarted (pid {child.pid()})")
        return lines

    def describe(self) -> str:
        assert self.etcd is not None
        lines = [f"etcd           {self.etcd.endpoint}   (data {self.root / 'etcd'})"]
        for node in self.nodes:
            lines.append(
                f"storage node   {node.address}   metrics http://{node.metrics_address}/metrics"
                f"   (pid {node.pid}, data {node.data_dir})"
            )
        if self.auditor is not None:
            lines.append(
                f"auditor        pid {self.auditor.pid}, grace {self.auditor_grace_ms} ms"
                + (
                    f"   metrics http://{self.auditor.metrics_address}/metrics"
                    if self.auditor.metrics_address
                    else ""
                )
            )
        for gateway in self.gateways:
            lines.append(f"gateway        {gateway.http_url}   (pid {gateway.pid})")
        if self.analytics is not None:
            lines.append(
                f"analytics      Spark {self.analytics.master}   (pid {self.analytics.pid};"
                " statistics every 5 min and on demand, in the dashboard)"
            )
        if self.gateways:
            url = self.gateways[0].http_url
            lines.append(f"dashboard      {url}/   (served by every gateway)")
            lines.append(
                f"admin API      {url}/admin/v2/…   spec {url}/openapi.json, WebSockets {url}/asyncapi.json"
            )
            security = SecureSetup(self.root / "security")
            if self.secure:
                lines += security.describe(url)
            else:
                lines.append(
                    "security       OFF: open on loopback, anyone on this machine may use the API"
                    " (folio up --secure for tokens)"
                )
                lines.append(f"publish        curl -d 'hello' {url}/topics/persistent/public/default/demo")
                lines.append(
                    f"consume        curl '{url}/consume/persistent/public/default/demo/sub"
                    "?subscriptionInitialPosition=Earliest'"
                )
            lines.append(
                f"storage nodes  answer only peers proving the cluster secret {security.cluster_key}"
                f" (Spark jobs, tools: export {SECRET_ENV}={security.cluster_key})"
            )
        lines.append(f"status         folio status --etcd {self.etcd.endpoint}")
        lines.append(f"logs           {self.root}/*.log")
        return "\n".join(lines)

    def stop(self) -> None:
        if self.analytics is not None:
            self.analytics.stop()
            self.analytics = None
        for gateway in reversed(self.gateways):
            gateway.stop()
        self.gateways.clear()
        if self.auditor is not None:
            self.auditor.stop()
            self.auditor = None
        for node in reversed(self.nodes):
            node.stop()
        self.nodes.clear()
        if self.etcd is not None:
            self.etcd.stop()
            self.etcd = None


def _process_child(label: str, proc: NodeProcess, restarts: Restarts) -> Child:
    def exit_code() -> int | None:
        return proc.proc.returncode if proc.proc is not None else None

    def restart() -> None:
        proc.start(expect_ready=False)  # a node or gateway may wait for etcd: do not block on it

    def pid() -> int | None:
        return proc.proc.pid if proc.proc is not None else None

    return Child(label, proc.running, exit_code, restart, pid, restarts)


def run_until_signalled(cluster: LocalCluster) -> int:
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        cluster.start()
        print(cluster.describe(), flush=True)
        print("Folio is up. Ctrl-C stops everything.", flush=True)
        clock = SystemClock()
        while not stop.wait(SUPERVISE_INTERVAL_S):
            for line in cluster.supervise(clock.now_ms()):
                print(line, flush=True)
    finally:
        print("stopping…", flush=True)
        cluster.stop()
        print("stopped.", flush=True)
    return 0


def on_free_ports(
    root: Path,
    gateways: int = 2,
    gateway_args: tuple[str, ...] = (),
    analytics_master: str | None = None,
) -> LocalCluster:
    """A local cluster for a benchmark, not yet started: ``root`` wiped, every
    process (etcd, 3 storage nodes, ``gateways`` gateways) on free loopback ports,
    no analytics service unless a Spark master is named."""
    shutil.rmtree(root, ignore_errors=True)
    ports = free_ports(8 + gateways)
    return LocalCluster(
        root=root,
        node_ports=tuple(ports[0:3]),
        metrics_ports=tuple(ports[3:6]),
        etcd_client_port=ports[6],
        etcd_peer_port=ports[7],
        gateway_ports=tuple(ports[8:]),
        gateway_args=gateway_args,
        analytics_master=analytics_master,
    )
