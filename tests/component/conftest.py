"""Cluster fixtures for ledger-client component tests: real etcd + real nodes.

``ledger_cluster`` (function scope) is a factory: ``await ledger_cluster(n)``
starts ``n`` storage-node processes (tests/component/nodeproc.py) registered in
a fresh etcd namespace on the session etcd (``etcd_endpoint``), and returns a
``LedgerCluster``. Every process is stopped (by PID) and the namespace is
deleted afterwards.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from nodeproc import NodeProcess

from coordination import keys
from coordination.etcd_store import EtcdStore, connect

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
