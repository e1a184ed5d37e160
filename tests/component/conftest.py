"""Cluster fixtures for component tests: real etcd + real nodes (+ real gateways).

``ledger_cluster`` (function scope) is a factory: ``await ledger_cluster(n)``
starts ``n`` storage-node processes (tests/component/nodeproc.py) registered in
a fresh etcd namespace on the session etcd (``etcd_endpoint``), and returns a
``LedgerCluster``. Every process is stopped (by PID) and the namespace is
deleted afterwards.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from clusters import LedgerCluster, MessagingCluster
from nodeproc import NodeProcess

_namespaces = itertools.count(1)


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


# ---------------------------------------------------------------- single node processes

_node_namespaces = itertools.count(1)


@pytest.fixture
def ns() -> str:
    """A fresh etcd namespace for tests that start node processes themselves."""
    return f"/nodetest-{os.getpid()}-{next(_node_namespaces):04d}"


@pytest.fixture
def nodes() -> Iterator[list[NodeProcess]]:
    """Node processes a test made (``nodeproc.new_node``); each is stopped after it."""
    started: list[NodeProcess] = []
    yield started
    for node in started:
        node.stop()


# ---------------------------------------------------------------- messaging cluster


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
