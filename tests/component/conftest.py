"""Cluster fixtures for ledger-client component tests: real etcd + real nodes.

``ledger_cluster`` (function scope) is a factory: ``await ledger_cluster(n)``
starts ``n`` storage-node processes (tests/component/nodeproc.py) registered in
a fresh etcd namespace on the session etcd (``etcd_endpoint``), and returns a
``LedgerCluster``. Every process is stopped (by PID) and the namespace is
deleted afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from nodeproc import NodeProcess

from coordination import keys
from coordination.etcd_store import EtcdStore, connect
from folio.procs import GatewayProcess

_namespaces = itertools.count(1)
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


@pytest.fixture
async def ledger_cluster(
    etcd_endpoint: str, tmp_path: Path
) -> AsyncIterator[Callable[[int], Awaitable[LedgerCluster]]]:
    clusters: list[LedgerCluster] = []

    async def make(count: int) -> LedgerCluster:
        namespace = f"/ledger-test-{os.getpid()}-{next(_namespaces):06d}"
        cluster = LedgerCluster(etcd_endpoint, namespace, tmp_path)
        clusters.append(cluster)
        await cluster.add_nodes(count)
        return cluster

    yield make
    for cluster in clusters:
        for node in cluster.nodes:
            node.stop()
        for store in cluster.stores:
            try:
                await store.delete_prefix("")
            finally:
                await store.close()


# ---------------------------------------------------------------- messaging cluster

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


@pytest.fixture
async def messaging_cluster(
    ledger_cluster: Callable[[int], Awaitable[LedgerCluster]],
) -> AsyncIterator[Callable[..., Awaitable[MessagingCluster]]]:
    """Factory: ``await messaging_cluster(gateways=2, nodes=3)``."""
    made: list[MessagingCluster] = []

    async def make(gateways: int = 2, nodes: int = 3) -> MessagingCluster:
        cluster = MessagingCluster(await ledger_cluster(nodes))
        made.append(cluster)
        for _ in range(gateways):
            await cluster.add_gateway()
        return cluster

    yield make
    for cluster in made:
        for gateway in cluster.gateways:
            if gateway.proc is not None and gateway.proc.poll() is None:
                with contextlib.suppress(Exception):
                    os.kill(gateway.proc.pid, signal.SIGCONT)
            gateway.stop()
