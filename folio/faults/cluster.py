"""The cluster a fault run breaks: its own etcd, storage nodes, the auditor and
gateways, each a real process the nemesis may kill, pause or power off.

Owns: those processes (started here, signalled only by the PIDs it holds) and
their files under the run directory. Every storage node runs with a sync log
(power loss, ``powerloss.py``) whose fdatasyncs lag ``sync_lag_ms`` behind their
writes (without a lag a node syncs ~0.2 ms after writing, on its loop thread,
and a kill practically never finds unsynced bytes) and a free-space file (a filling disk: the node
reads its free bytes from it and turns read-only below ``--min-free-bytes``).
``revive`` plays ``folio up``'s part: a component that exited on its own is
started again, and the exit is reported to the caller. With ``partitions`` on,
each node and gateway runs in its own network namespace (``network.py``) and etcd
listens on the bridge, so the nemesis can cut links one by one; each node also
reads a disk-delay file (``GRAY_DISK_ENV``: its fdatasyncs take that long, a slow or
stalled disk) and each gateway blocks its event loop on SIGUSR2 for the seconds in
its loop-block file (``LOOP_BLOCK_ENV``). Every node and gateway steps its wall clock
by the milliseconds in its clock-step file (``CLOCK_STEP_ENV``).
"""

from __future__ import annotations

import contextlib
import os
import signal
from dataclasses import dataclass, field
from pathlib import Path

from coordination.clock import CLOCK_STEP_ENV
from coordination.etcd_server import EmbeddedEtcd
from folio.faults.network import Network
from folio.procs import AuditorProcess, GatewayProcess, NodeProcess
from storage.ports import GRAY_DISK_ENV

PLENTY_FREE = str(1 << 40)
DISK_FULL_FREE = str(1 << 20)
MIN_FREE_BYTES = 64 << 20
UNSAFE_ENV = "FOLIO_UNSAFE_TEST_SWITCHES"
SYNC_LAG_MS = 20  # each journal fdatasync waits this long: a power cut finds unsynced groups
LOOP_BLOCK_ENV = "FOLIO_TEST_LOOP_BLOCK_FILE"  # gateway.main: SIGUSR2 blocks the loop that long


ETCD_CLIENT_PORT = 2379  # each member has a namespace (and ports) of its own
ETCD_PEER_PORT = 2380


class MemberEtcd(EmbeddedEtcd):
    """One member of the run's etcd cluster, in its own network namespace."""

    def __init__(self, host: str, prefix: list[str], initial_cluster: str, **kwargs: object) -> None:
        super().__init__(client_port=ETCD_CLIENT_PORT, peer_port=ETCD_PEER_PORT, **kwargs)  # type: ignore[arg-type]
        self.host = host
        self.prefix = prefix
        self.initial_cluster = initial_cluster

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.client_port}"

    @property
    def client_url(self) -> str:
        return f"http://{self.host}:{self.client_port}"

    def spawn(self) -> None:
        """Start without waiting: a member is healthy only once a quorum is up."""
        if not self.running():
            self._spawn()

    def _command(self) -> list[str]:
        command = super()._command()
        peer_url = f"http://{self.host}:{self.peer_port}"
        for flag, value in (
            ("--listen-peer-urls", peer_url),
            ("--initial-advertise-peer-urls", peer_url),
            ("--initial-cluster", self.initial_cluster),
            ("--initial-cluster-token", "folio-faults"),
        ):
            command[command.index(flag) + 1] = value
        return [*self.prefix, *command]


@dataclass
class EtcdCluster:
    """The run's etcd: ``members`` in their namespaces. Started, killed and revived
    whole, as one etcd is; ``endpoints(i)`` rotates the list so each process first
    talks to a different member (a split then strands some process's member)."""

    members: list[MemberEtcd]

    @property
    def endpoint(self) -> str:
        return self.endpoints(0)

    def endpoints(self, first: int) -> str:
        turn = first % len(self.members)
        return ",".join(m.endpoint for m in [*self.members[turn:], *self.members[:turn]])

    def start(self) -> None:
        for member in self.members:
            member.spawn()
        for member in self.members:
            member._wait_healthy()

    def running(self) -> bool:
        return all(member.running() for member in self.members)

    def kill(self) -> None:
        for member in self.members:
            member.kill()

    def stop(self) -> None:
        for member in self.members:
            member.stop()


class NsNode(NodeProcess):
    """A storage node run inside its network namespace."""

    prefix: list[str] = []

    def command(self) -> list[str]:
        return [*self.prefix, *super().command()]


class NsGateway(GatewayProcess):
    """A gateway run inside its network namespace."""

    prefix: list[str] = []

    def command(self) -> list[str]:
        return [*self.prefix, *super().command()]


@dataclass
class ClusterConfig:
    root: Path
    nodes: int = 3
    gateways: int = 2
    gateway_lease_ttl_s: int = 5
    auditor_grace_ms: int = 10_000
    node_args: tuple[str, ...] = ()  # e.g. the controls' --unsafe-no-fsync
    gateway_args: tuple[str, ...] = ()
    sync_lag_ms: int = SYNC_LAG_MS
    partitions: bool = False  # each node, gateway and etcd member in its own network namespace
    etcd_members: int = 1  # with partitions, each in its namespace (else one etcd on loopback)


@dataclass
class FaultCluster:
    config: ClusterConfig
    etcd: EmbeddedEtcd | EtcdCluster | None = None
    nodes: list[NodeProcess] = field(default_factory=list)
    gateways: list[GatewayProcess] = field(default_factory=list)
    auditor: AuditorProcess | None = None
    paused: set[int] = field(default_factory=set)  # PIDs under SIGSTOP
    network: Network | None = None

    @property
    def root(self) -> Path:
        return self.config.root

    def sync_log(self, index: int) -> Path:
        return self.root / f"node{index}.synclog"

    def free_file(self, index: int) -> Path:
        return self.root / f"node{index}.free"

    def disk_delay_file(self, index: int) -> Path:
        return self.root / f"node{index}.diskdelay"

    def loop_block_file(self, index: int) -> Path:
        return self.root / f"gateway{index}.loopblock"

    def clock_step_file(self, process: str) -> Path:
        """``process`` is ``node<i>`` or ``gateway<i>``."""
        return self.root / f"{process}.clockstep"

    def start(self) -> None:
        """Start every process; if one fails to start, stop those started and drop the
        network, so a failed start leaves nothing on the machine behind it."""
        try:
            self._start()
        except BaseException:
            with contextlib.suppress(Exception):
                self.stop()
            raise

    def _start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        net = None
        if self.config.partitions:
            net = self.network = Network()
            net.start()
            names = [f"etcd{i}" for i in range(self.config.etcd_members)]
            hosts = [net.add_etcd_member(name) for name in names]
            initial = ",".join(f"{n}=http://{h}:{ETCD_PEER_PORT}" for n, h in zip(names, hosts, strict=True))
            self.etcd = EtcdCluster(
                [
                    MemberEtcd(
                        host,
                        net.prefix(name),
                        initial,
                        data_dir=self.root / name,
                        name=name,
                        log_path=self.root / f"{name}.log",
                    )
                    for name, host in zip(names, hosts, strict=True)
                ]
            )
        else:
            self.etcd = EmbeddedEtcd(self.root / "etcd", log_path=self.root / "etcd.log")
        self.etcd.start()
        for i in range(self.config.nodes):
            self.free_file(i).write_text(PLENTY_FREE)
            self.clock_step_file(f"node{i}").write_text("0")
            self.disk_delay_file(i).write_text("0")
            env = {
                "FOLIO_TEST_SYNC_LOG": str(self.sync_log(i)),
                "FOLIO_TEST_SYNC_LAG_MS": str(self.config.sync_lag_ms),
                "FOLIO_TEST_FREE_BYTES_FILE": str(self.free_file(i)),
                GRAY_DISK_ENV: str(self.disk_delay_file(i)),
                CLOCK_STEP_ENV: str(self.clock_step_file(f"node{i}")),
                UNSAFE_ENV: "1",  # the clock-step file; unsafe flags only from node_args
            }
            node = NsNode(
                self.root / f"node{i}",
                self.etcd_endpoints(i),
                extra_args=["--min-free-bytes", str(MIN_FREE_BYTES), *self.config.node_args],
                env=env,
                log_path=self.root / f"node{i}.log",
            )
            if net is not None:
                node.prefix = net.prefix(f"node{i}")
                node.extra_args[2:2] = ["--host", net.add(f"node{i}")]
            node.data_dir.mkdir(parents=True, exist_ok=True)
            self.sync_log(i).write_text("")
            node.start()
            self.nodes.append(node)
        self.auditor = AuditorProcess(
            etcd=self.etcd.endpoint, log_path=self.root / "auditor.log", grace_ms=self.config.auditor_grace_ms
        )
        self.auditor.start()
        for i in range(self.config.gateways):
            self.loop_block_file(i).write_text("0")
            self.clock_step_file(f"gateway{i}").write_text("0")
            gateway = NsGateway(
                self.root / f"gateway{i}",
                self.etcd_endpoints(i + 1),
                extra_args=[
                    "--lease-ttl",
                    str(self.config.gateway_lease_ttl_s),
                    "--load-manager-interval",
                    "1",
                    *self.config.gateway_args,
                ],
                env={
                    LOOP_BLOCK_ENV: str(self.loop_block_file(i)),
                    CLOCK_STEP_ENV: str(self.clock_step_file(f"gateway{i}")),
                    UNSAFE_ENV: "1",  # the clock-step file; unsafe flags only from gateway_args
                },
                log_path=self.root / f"gateway{i}.log",
            )
            if net is not None:
                gateway.prefix = net.prefix(f"gateway{i}")
                address = net.add(f"gateway{i}")
                gateway.extra_args += ["--host", address, "--advertise-host", address, "--insecure-open"]
            gateway.start()
            gateway.port = int(gateway.http_url.rsplit(":", 1)[1])  # a restart comes back at the same URL
            self.gateways.append(gateway)

    def etcd_endpoints(self, first: int) -> str:
        """The etcd endpoints a process is given, its first member rotated by ``first``."""
        assert self.etcd is not None
        return self.etcd.endpoints(first) if isinstance(self.etcd, EtcdCluster) else self.etcd.endpoint

    @property
    def urls(self) -> list[str]:
        return [g.http_url for g in self.gateways]

    # ------------------------------------------------------------ process faults

    def pause(self, pid: int) -> None:
        os.kill(pid, signal.SIGSTOP)
        self.paused.add(pid)

    def resume(self, pid: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
        self.paused.discard(pid)

    def restart_node(self, index: int) -> None:
        """Start a killed node again (a fresh sync log: its page cache was written back)."""
        node = self.nodes[index]
        if node.running():
            node.kill9()
        self.sync_log(index).write_text("")
        node.start(timeout_s=60.0)

    def restart_gateway(self, index: int) -> None:
        gateway = self.gateways[index]
        if gateway.running():
            gateway.kill9()
        gateway.start(timeout_s=60.0)

    def restart_etcd(self) -> None:
        assert self.etcd is not None
        self.etcd.start()

    def revive(self) -> list[tuple[str, int | None]]:
        """Start again whatever exited on its own (as ``folio up`` would); returns
        (component, exit code) of each."""
        exits: list[tuple[str, int | None]] = []
        if self.etcd is not None and not self.etcd.running():
            exits.append(("etcd", None))
            self.etcd.start()
        for i, node in enumerate(self.nodes):
            if not node.running():
                exits.append((f"node{i}", node.proc.returncode if node.proc else None))
                self.restart_node(i)
        for i, gateway in enumerate(self.gateways):
            if not gateway.running():
                exits.append((f"gateway{i}", gateway.proc.returncode if gateway.proc else None))
                self.restart_gateway(i)
        auditor = self.auditor
        if auditor is not None and not auditor.running():
            exits.append(("auditor", auditor.proc.returncode if auditor.proc else None))
            auditor.start(timeout_s=60.0)
        return exits

    def stop(self) -> None:
        for pid in list(self.paused):
            self.resume(pid)
        for gateway in self.gateways:
            gateway.stop()
        if self.auditor is not None:
            self.auditor.stop()
        for node in self.nodes:
            node.stop()
        if self.etcd is not None:
            self.etcd.stop()
        if self.network is not None:
            self.network.close()
