"""A read-only node (disk nearly full) is replaced and reported until its data is copied.

Real etcd and real storage-node processes; the auditor runs in this process
(``Auditor.run_once``, one pass at a time, so each state is seen for sure) and
``folio status`` as a real command. Two nodes plus one whose free space comes from
a test knob file: a ledger is written on all three (E=Qw=3, Qa=2), then that node
turns read-only. Its writer goes on without an error on the two others; the
ledger counts as under-replicated (``folio status``, the auditor's
``folio_auditor_ledgers_pending``) - with no fourth node nothing can fix it. A
fourth node joins: the writer moves off the read-only node by itself, the
auditor copies the older segment to a writable node and rewrites its ensemble,
and the count goes back to 0, with every entry on every node of its write set.
Before, a read-only node counted as healthy: 0 under-replicated ledgers while
the new entries had two copies.
"""

from __future__ import annotations

import asyncio
import re
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from clusters import LedgerCluster
from prometheus_client import CollectorRegistry, generate_latest

from storage.auditor.auditor import Auditor
from storage.auditor.metrics import AuditorCollector
from storage.client.api import LedgerClient
from storage.errors import Status
from storage.types import LedgerMetadata

pytestmark = pytest.mark.component

ENTRIES = 150


async def folio_status(cluster: LedgerCluster) -> int:
    """Under-replicated ledgers as ``folio status`` prints them."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "folio",
        "status",
        "--etcd",
        cluster.endpoint,
        "--etcd-namespace",
        cluster.namespace,
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0
    found = re.search(r"under-replicated ledgers: (\d+)", out.decode())
    assert found is not None, out.decode()
    return int(found.group(1))


def pending_metric(auditor: Auditor) -> float:
    collector = AuditorCollector()
    collector.progress = auditor.progress
    registry = CollectorRegistry()
    registry.register(collector)
    text = generate_latest(registry).decode()
    found = re.search(r"^folio_auditor_ledgers_pending (\S+)$", text, re.MULTILINE)
    assert found is not None
    return float(found.group(1))


def missing_copies(cluster: LedgerCluster, metadata: LedgerMetadata, last: int) -> list[tuple[int, str]]:
    """(entry, node) pairs where a node of the entry's write set lacks a valid copy."""
    missing = []
    for entry_id in range(last + 1):
        for node_id in metadata.write_set(entry_id):
            with cluster.node(node_id).client() as client:
                status, entry = client.read(metadata.ledger_id, entry_id)
            if status is not Status.OK or entry is None or entry.payload != b"e%d" % entry_id:
                missing.append((entry_id, node_id))
    return missing


async def test_a_read_only_node_is_replaced_and_reported_until_copied(
    ledger_cluster: Callable[[int], Awaitable[LedgerCluster]], tmp_path: Path
) -> None:
    cluster = await ledger_cluster(2)
    tight = await cluster.add_tight_node(tmp_path / "free-bytes")

    store = await cluster.store()
    client = LedgerClient(store, seed=5)
    auditor = Auditor(store, "test-auditor", grace_ms=1500, seed=1)
    try:
        writer = await client.create(3, 3, 2)
        assert tight.address in writer.metadata.last_ensemble
        for i in range(50):
            assert await writer.append(b"e%d" % i) == i

        await tight.fill()  # the disk fills up
        for i in range(50, 100):  # refused by the read-only node: written on the other two
            assert await asyncio.wait_for(writer.append(b"e%d" % i), 30) == i

        assert await auditor.run_once() == 1  # nothing can fix it: no writable node to spare
        assert pending_metric(auditor) == 1
        assert await folio_status(cluster) == 1

        await cluster.add_nodes(1)  # a writable node to spare
        for i in range(100, ENTRIES):
            assert await asyncio.wait_for(writer.append(b"e%d" % i), 30) == i
        for _ in range(200):  # the writer moves off the read-only node on its next replacement try
            if tight.address not in writer.metadata.last_ensemble:
                break
            await asyncio.sleep(0.05)
        assert tight.address not in writer.metadata.last_ensemble
        assert await auditor.run_once() == 0  # the older segment copied to a writable node
        assert pending_metric(auditor) == 0
        assert await folio_status(cluster) == 0

        await writer.close()
        metadata = await client.metadata.read(writer.ledger_id)
        assert all(tight.address not in segment.ensemble for segment in metadata.segments)
        assert missing_copies(cluster, metadata, metadata.last_entry_id) == []
        print(
            f"read-only node replaced: segments {[(s.first_entry_id, s.ensemble) for s in metadata.segments]}"
        )
    finally:
        await client.close()
        await auditor.client.close()
