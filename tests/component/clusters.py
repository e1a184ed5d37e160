"""The clusters component tests run: real storage-node and gateway processes.

Owns: ``LedgerCluster`` (an etcd namespace + storage nodes; ``TightNode``, one
whose free space the test sets),
``MessagingCluster`` (that + gateways) and ``started_cluster``/``running_cluster``
(one started for a whole module or session, every process stopped by PID and
the namespace deleted at the end). A plain module (not conftest) so tests
can import the classes by a name no other test directory uses; the fixtures
that build them live in conftest.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from nodeproc import NodeProcess

from coordination import keys
from coordination.etcd_store import EtcdStore, connect
from folio.procs import GatewayProcess
from storage.types import NodeInfo

NODE_START_TIMEOUT_S = 30.0


@dataclass
class LedgerCluster:
    endpoint: str
    namespace: str
    root: Path
    nodes: list[NodeProcess] = field(default_factory=list)
    stores: list[EtcdStore] = field(default_factory=list)

    async def store(self) -> EtcdStore:
        store = await connect(self.endpoint, namespace=self.namespace)
        self.stores.append(store)
        return store

    def node(self, address: str) -> NodeProcess:
        return next(n for n in self.nodes if n.address == address)

    async def add_nodes(self, count: int) -> list[NodeProcess]:
        started = []
        for _ in range(count):
            index = len(self.nodes)
            node = NodeProcess(self.root / f"node{index}", self.endpoint, namespace=self.namespace)
            node.data_dir.mkdir(parents=True, exist_ok=True)
            node.start(expect_ready=False)  # start all, then wait for all
            self.nodes.append(node)
            started.append(node)
        deadline = time.monotonic() + NODE_START_TIMEOUT_S
        while not all(n.address for n in started):
            for n in started:
                if not n.running():
                    raise RuntimeError(f"node exited early:\n{n.log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError("storage nodes did not become ready")
            await asyncio.sleep(0.05)
        return started

    async def restart(self, node: NodeProcess, sig: int) -> None:
        """Stop ``node`` with ``sig`` and start it again on the same data dir and port."""
        await asyncio.to_thread(node.restart, sig)

    async def registered(self) -> set[str]:
        store = self.stores[0] if self.stores else await self.store()
        return {kv.key[len(keys.NODES) :] for kv in await store.list_prefix(keys.NODES)}

    async def forget(self) -> None:
        """Delete the cluster's etcd namespace (over a store of its own)."""
        store = await connect(self.endpoint, namespace=self.namespace)
        try:
            await store.delete_prefix("")
        finally:
            await store.close()

    async def close_stores(self) -> None:
        for store in self.stores:
            with contextlib.suppress(Exception):
                await store.close()

    async def add_tight_node(self, knob: Path) -> TightNode:
        """Start a node whose free space is read from the file ``knob``; returns once it
        is registered writable."""
        await asyncio.to_thread(knob.write_text, str(PLENTY_FREE_BYTES))
        node = NodeProcess(
            self.root / "tight",
            self.endpoint,
            namespace=self.namespace,
            extra_args=["--min-free-bytes", str(TIGHT_MIN_FREE_BYTES)],
            env={"FOLIO_TEST_FREE_BYTES_FILE": str(knob)},
        )
        node.data_dir.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(node.start)
        self.nodes.append(node)
        tight = TightNode(self, node, knob)
        await tight.wait_read_only(False)
        return tight


TIGHT_MIN_FREE_BYTES = 1_000_000
PLENTY_FREE_BYTES = 10**12


@dataclass
class TightNode:
    """A storage node whose free space the test sets (the ``FOLIO_TEST_FREE_BYTES_FILE``
    knob): read-only below ``TIGHT_MIN_FREE_BYTES``, as its registration says."""

    cluster: LedgerCluster
    process: NodeProcess
    knob: Path

    @property
    def address(self) -> str:
        return self.process.address

    async def fill(self) -> None:
        """The disk fills up: wait until the node is registered read-only."""
        await asyncio.to_thread(self.knob.write_text, str(TIGHT_MIN_FREE_BYTES - 1))
        await self.wait_read_only(True)

    async def free(self) -> None:
        """Space again: wait until the node is registered writable."""
        await asyncio.to_thread(self.knob.write_text, str(PLENTY_FREE_BYTES))
        await self.wait_read_only(False)

    async def wait_read_only(self, expected: bool) -> None:
        cluster = self.cluster
        store = cluster.stores[0] if cluster.stores else await cluster.store()
        for _ in range(300):
            kv = await store.get(keys.node(self.address))
            if kv is not None and NodeInfo.from_json(kv.value).read_only is expected:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"{self.address} never became read_only={expected}")


GATEWAY_LEASE_TTL_S = 3  # short, so failure tests see a dead owner's lease expire quickly


@dataclass
class MessagingCluster:
    """etcd namespace + storage nodes + gateway processes (all real)."""

    ledgers: LedgerCluster
    gateways: list[GatewayProcess] = field(default_factory=list)

    @property
    def urls(self) -> list[str]:
        return [g.http_url for g in self.gateways]

    def ws(self, index: int = 0) -> str:
        return self.gateways[index].http_url.replace("http://", "ws://", 1)

    async def start(self, nodes: int, gateways: int, *gateway_args: str) -> None:
        await self.ledgers.add_nodes(nodes)
        for _ in range(gateways):
            await self.add_gateway(*gateway_args)

    def stop(self) -> None:
        """Stop every gateway, then every storage node (by PID)."""
        for gateway in self.gateways:
            gateway.stop()
        for node in self.ledgers.nodes:
            node.stop()

    async def add_gateway(self, *extra: str) -> GatewayProcess:
        index = len(self.gateways)
        gateway = GatewayProcess(
            self.ledgers.root / f"gateway{index}",
            self.ledgers.endpoint,
            namespace=self.ledgers.namespace,
            extra_args=["--lease-ttl", str(GATEWAY_LEASE_TTL_S), "--load-manager-interval", "1", *extra],
            log_path=self.ledgers.root / f"gateway{index}.log",
        )
        await asyncio.to_thread(gateway.start)
        self.gateways.append(gateway)
        return gateway

    async def restart_gateway(self, index: int) -> GatewayProcess:
        gateway = self.gateways[index]
        await asyncio.to_thread(gateway.start)
        return gateway


@contextlib.asynccontextmanager
async def started_cluster(
    endpoint: str, namespace: str, root: Path, *gateway_args: str, gateways: int = 2, nodes: int = 3
) -> AsyncIterator[MessagingCluster]:
    """``nodes`` storage nodes and ``gateways`` gateways (given ``gateway_args``) under
    ``namespace``; on exit every process is stopped and the namespace deleted."""
    cluster = MessagingCluster(LedgerCluster(endpoint, namespace, root))
    try:
        await cluster.start(nodes, gateways, *gateway_args)
        yield cluster
    finally:
        cluster.stop()
        with contextlib.suppress(Exception):
            await cluster.ledgers.forget()
        await cluster.ledgers.close_stores()


@contextlib.contextmanager
def running_cluster(
    endpoint: str, namespace: str, root: Path, gateways: int = 2
) -> Iterator[MessagingCluster]:
    """``started_cluster`` for synchronous fixtures: each step runs in a loop of its own."""
    cluster = MessagingCluster(LedgerCluster(endpoint, namespace, root))
    try:
        asyncio.run(cluster.start(3, gateways))
        yield cluster
    finally:
        cluster.stop()
        asyncio.run(cluster.ledgers.forget())
