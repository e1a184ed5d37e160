"""(c) One storage node removed for good: the elected auditor restores Qw copies.

Real etcd, four real storage-node processes and two real auditor processes
(one leads, one stands by). A closed ledger and an idle open ledger are
written with E=3 Qw=3 Qa=2; one node of their ensembles is killed and never
restarted. Within a bounded time the auditor must have rewritten every
ensemble without the dead node, and every entry must be readable, with a
valid checksum, directly from *each* node of its write set. A control reads
the same way before repair and must find the missing copies. The second test
repairs the older segment of a ledger whose live writer moved off the dead
node by itself (the ledger stays open).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import orjson
import pytest
from clusters import LedgerCluster

from coordination import keys
from coordination.store import MetadataStore
from storage.client.api import LedgerClient
from storage.errors import Status
from storage.types import LedgerMetadata, LedgerState

pytestmark = pytest.mark.component

REPO = Path(__file__).resolve().parents[2]
REPAIR_DEADLINE_S = 60.0
GRACE_MS = 1500


def start_auditor(cluster: LedgerCluster, name: str) -> subprocess.Popen[str]:
    log = open(cluster.root / f"auditor-{name}.log", "w")  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "storage.auditor",
            "--etcd",
            cluster.endpoint,
            "--etcd-namespace",
            cluster.namespace,
            "--id",
            name,
            "--grace-ms",
            str(GRACE_MS),
            "--check-interval-ms",
            "500",
            "--lease-ttl",
            "2",
        ],
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    log.close()
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("FOLIO-AUDITOR READY"), line
    return proc


async def missing_copies(
    store: MetadataStore, cluster: LedgerCluster, ledger_id: int
) -> list[tuple[int, str]]:
    """(entry, node) pairs where a node of the entry's write set lacks a valid copy."""
    kv = await store.get(keys.ledger(ledger_id))
    assert kv is not None
    metadata = LedgerMetadata.from_json(kv.value)
    # a closed ledger's entries; an open one's before its last segment (all confirmed)
    if metadata.state is LedgerState.CLOSED:
        last = metadata.last_entry_id
    else:
        last = metadata.segments[-1].first_entry_id - 1
    missing: list[tuple[int, str]] = []
    clients: dict[str, object] = {}
    for entry_id in range(last + 1):
        for node_id in metadata.write_set(entry_id):
            node = next((n for n in cluster.nodes if n.address == node_id and n.running()), None)
            if node is None:
                missing.append((entry_id, node_id))
                continue
            client = clients.setdefault(node_id, node.client())
            status, entry = client.read(ledger_id, entry_id)  # type: ignore[attr-defined]
            if status is not Status.OK or entry is None or entry.payload != payload_of(ledger_id, entry_id):
                missing.append((entry_id, node_id))
    for client in clients.values():
        client.close()  # type: ignore[attr-defined]
    return missing


def payload_of(ledger_id: int, entry_id: int) -> bytes:
    return f"ledger {ledger_id} entry {entry_id} ".encode() * 8


async def test_auditor_restores_write_quorum_after_node_loss(
    ledger_cluster: Callable[[int], Awaitable[LedgerCluster]],
) -> None:
    cluster = await ledger_cluster(4)
    store = await cluster.store()
    client = LedgerClient(store, seed=7)
    auditors: list[subprocess.Popen[str]] = []
    try:
        # a closed ledger with 600 entries, then an open ledger left idle
        closed = await client.create(3, 3, 2)
        for entry_id in range(600):
            closed.append_nowait(payload_of(closed.ledger_id, entry_id))
        await closed.close()
        idle = await client.create(3, 3, 2)
        await asyncio.gather(*(idle.append_nowait(payload_of(idle.ledger_id, e)) for e in range(200)))

        shared = set(closed.metadata.segments[0].ensemble) & set(idle.metadata.segments[0].ensemble)
        victim_id = sorted(shared)[0]
        victim = cluster.node(victim_id)
        victim.kill9()

        # control: before the auditor runs, the checker sees the lost copies
        assert len(await missing_copies(store, cluster, closed.ledger_id)) == 600

        auditors = [start_auditor(cluster, "auditor-a"), start_auditor(cluster, "auditor-b")]
        started = time.monotonic()
        ledgers = [closed.ledger_id, idle.ledger_id]
        while True:
            metas = [LedgerMetadata.from_json((await store.get(keys.ledger(i))).value) for i in ledgers]  # type: ignore[union-attr]
            named = any(victim_id in s.ensemble for m in metas for s in m.segments)
            # the idle ledger is fenced and closed by the auditor - unless its writer,
            # still waiting for the victim's copy of a last add when it died, moved off the
            # victim itself first (a new segment): then it stays open and only its older
            # segment is the auditor's to repair
            if not named and metas[0].state is LedgerState.CLOSED:
                break
            assert time.monotonic() - started < REPAIR_DEADLINE_S, f"not repaired: {metas}"
            await asyncio.sleep(0.2)
        repaired_after = time.monotonic() - started

        for ledger_id in ledgers:
            assert await missing_copies(store, cluster, ledger_id) == [], ledger_id
        # the idle open ledger was fenced and closed with everything it had confirmed,
        # or its writer moved on past it (a new segment from LAC + 1)
        idle_meta = LedgerMetadata.from_json((await store.get(keys.ledger(idle.ledger_id))).value)  # type: ignore[union-attr]
        if idle_meta.state is LedgerState.CLOSED:
            assert idle_meta.last_entry_id >= 199
        else:
            assert idle_meta.segments[-1].first_entry_id >= 200
        reader = await client.open(closed.ledger_id)
        assert await reader.read_range(0, 599) == [payload_of(closed.ledger_id, e) for e in range(600)]

        progress = await store.get(keys.RECOVERY_STATUS)
        assert progress is not None
        report = orjson.loads(progress.value)
        assert report["entriesCopied"] >= 600 and report["underReplicatedLedgers"] == 0
        assert await store.list_prefix(keys.UNDER_REPLICATED) == []
        print(f"repaired in {repaired_after:.1f}s (grace {GRACE_MS} ms): {report}")
    finally:
        for proc in auditors:
            proc.terminate()
            proc.wait(20)
        await client.close()


async def test_auditor_repairs_the_older_segment_of_a_ledger_still_being_written(
    ledger_cluster: Callable[[int], Awaitable[LedgerCluster]],
) -> None:
    """A writer whose node died with copies of confirmed entries still owed moves to
    a new segment from its LAC + 1 and writes nothing more for now; the entries
    before stay with two copies in the old segment, and the survivors know a LAC
    below its last entry. The auditor copies them while the ledger stays open (it
    read them with the LAC it knew of, -1, and retried for ever before)."""
    cluster = await ledger_cluster(4)
    store = await cluster.store()
    client = LedgerClient(store, seed=11)
    auditors: list[subprocess.Popen[str]] = []
    try:
        ledger = await client.create(3, 3, 2)
        await asyncio.gather(*(ledger.append_nowait(payload_of(ledger.ledger_id, e)) for e in range(100)))
        victim_id = ledger.metadata.segments[0].ensemble[0]
        victim = cluster.node(victim_id)
        os.kill(victim.pid, signal.SIGSTOP)  # it takes the next adds but never answers them
        await asyncio.gather(
            *(ledger.append_nowait(payload_of(ledger.ledger_id, e)) for e in range(100, 110))
        )
        victim.kill9()  # the owed copies fail: the writer replaces the victim from LAC + 1
        deadline = time.monotonic() + 30
        while len(ledger.metadata.segments) < 2:
            assert time.monotonic() < deadline, ledger.metadata
            await asyncio.sleep(0.05)
        segments = ledger.metadata.segments
        assert segments[1].first_entry_id == 110 and victim_id not in segments[1].ensemble, segments
        assert len(await missing_copies(store, cluster, ledger.ledger_id)) > 0  # control

        auditors = [start_auditor(cluster, "auditor-a")]
        started = time.monotonic()
        while True:
            kv = await store.get(keys.ledger(ledger.ledger_id))
            assert kv is not None
            meta = LedgerMetadata.from_json(kv.value)
            if not any(victim_id in s.ensemble for s in meta.segments):
                break
            assert time.monotonic() - started < REPAIR_DEADLINE_S, f"not repaired: {meta}"
            await asyncio.sleep(0.2)
        assert meta.state is LedgerState.OPEN  # nobody fenced the live writer ...
        assert await missing_copies(store, cluster, ledger.ledger_id) == []  # ... and the copies are back
        await ledger.append(payload_of(ledger.ledger_id, 110))  # it still writes
    finally:
        for proc in auditors:
            proc.terminate()
            proc.wait(20)
        await client.close()
