"""Membership changes under load: decommission a storage node, add one, restart every process in turn.

Real etcd, four storage nodes (three, then one added), two gateways and the
auditor process; three topics each with a reconnecting at-least-once producer
and consumer (failover_clients) the whole time (docs/membership.md):
1. a fourth node joins, and ``folio node decommission`` (the real command,
   through the admin API) drains one of the first three: from then on every
   new ledger is placed on the new node (three writable nodes, E=3), the
   writers move off the draining node at their next add, the auditor copies
   its older fragments and reports progress (ledgers/bytes done of total) until
   the node is DRAINED, and the node then leaves by itself (exit 0);
2. when it has left, no ledger names it and every entry of every fixed segment
   is on each node of its write set (read over the wire) - only then is its
   data dir deleted;
3. every other process is restarted one by one with SIGTERM (a version
   upgrade's shape): the three storage nodes, the two gateways, the auditor;
4. the producers stop and every acknowledged message is read back from the
   earliest position, in order per producer: 0 lost, 0 order violations, and
   no topic went longer than the gateways' lease without an acknowledgement.
etcd is not restarted here: the cluster shares the session's etcd with every
other component test (tests/component/test_etcd_outage.py restarts one).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import shutil
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from checkers import check_history, id_key
from clusters import GATEWAY_LEASE_TTL_S, MessagingCluster
from failover_clients import AtLeastOnceProducer, Deliveries, ReconnectingConsumer, read_log
from nodeproc import NodeProcess
from wsclient import Consumer, Producer

from coordination import keys
from folio.procs import AuditorProcess, GatewayProcess
from storage.auditor.audit_core import entries_on_node, segment_last_entry
from storage.errors import Status
from storage.types import LedgerMetadata, LedgerState

pytestmark = pytest.mark.component

Cluster = Callable[..., Awaitable[MessagingCluster]]
TOPICS = ("mem-a", "mem-b", "mem-c")
DRAIN_TIMEOUT_S = 60.0
# a restarted node or gateway takes its topics back within the lease TTL; what a
# client sees on top: its reconnect pause and reply timeout (failover_clients)
UNWRITABLE_MAX_S = GATEWAY_LEASE_TTL_S + 2.0


async def until(predicate: Callable[[], Awaitable[bool]], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.1)


async def ledgers_of(cluster: MessagingCluster) -> list[LedgerMetadata]:
    store = cluster.ledgers.stores[0]
    return [LedgerMetadata.from_json(kv.value) for kv in await store.list_prefix(keys.LEDGERS)]


def missing_copies(nodes: dict[str, NodeProcess], metadata: LedgerMetadata) -> list[tuple[int, int, str]]:
    """(ledger, entry, node) for each entry of a fixed segment that a node of its write set
    lacks (members the segment marks ``missing`` are the auditor's to fill, not counted)."""
    missing = []
    for index, segment in enumerate(metadata.segments):
        if index == len(metadata.segments) - 1 and metadata.state is not LedgerState.CLOSED:
            continue  # the open tail: still being written
        last = segment_last_entry(metadata, index)
        for node_id in segment.ensemble:
            if node_id in segment.missing or last < segment.first_entry_id:
                continue
            wanted = set(entries_on_node(metadata, segment, last, node_id))
            got: set[int] = set()
            with nodes[node_id].client() as client:
                first = segment.first_entry_id
                while first <= last:
                    status, entries = client.read_range(metadata.ledger_id, first, last)
                    if status is not Status.OK or not entries:
                        break
                    got.update(e.entry_id for e in entries)
                    first = entries[-1].entry_id + 1
            missing += [(metadata.ledger_id, e, node_id) for e in sorted(wanted - got)]
    return missing


def longest_silence(producer: AtLeastOnceProducer, start: float, end: float) -> tuple[float, float]:
    """The longest time within [start, end] in which ``producer`` got no acknowledgement,
    and when it began."""
    times = sorted(t for t in producer.acked_at.values() if start <= t <= end)
    points = [start, *times, end]
    return max((b - a, a) for a, b in itertools.pairwise(points))


async def folio_node(*args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "folio", "node", *args, stdout=asyncio.subprocess.PIPE
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode()


async def restart_gateway(gateway: GatewayProcess, ws: list[str], index: int) -> None:
    """SIGTERM and start again (on a new port); the clients' shared list of base URLs
    gets the new one (they try the bases in turn)."""
    await asyncio.to_thread(gateway.terminate)
    if "--log-level" not in gateway.extra_args:  # its start-up steps in its log
        gateway.extra_args += ["--log-level", "info"]
    await asyncio.to_thread(gateway.start, 60.0)
    ws[index] = gateway.http_url.replace("http://", "ws://", 1)


async def acks_advance(producers: list[AtLeastOnceProducer], timeout: float = 30.0) -> None:
    """Wait until every producer has had new messages acknowledged."""
    before = [p.acked_count() for p in producers]

    async def advanced() -> bool:
        return all(p.acked_count() >= b + 5 for p, b in zip(producers, before, strict=True))

    await until(advanced, timeout, "every producer to get acknowledgements again")


async def test_decommission_add_and_rolling_restart_under_load(
    messaging_cluster: Cluster, tmp_path: Path
) -> None:
    started = time.monotonic()
    cluster = await messaging_cluster(gateways=2, nodes=3)
    ledgers = cluster.ledgers
    await ledgers.store()
    auditor = AuditorProcess(
        ledgers.endpoint,
        tmp_path / "auditor.log",
        namespace=ledgers.namespace,
        extra_args=["--check-interval-ms", "1000", "--drain-fence-grace-ms", "4000", "--lease-ttl", "3"],
    )
    await asyncio.to_thread(auditor.start)
    phases: list[tuple[str, float]] = [("cluster up", time.monotonic())]
    ws = [cluster.ws(0), cluster.ws(1)]
    for topic in TOPICS:  # a durable subscription that never acks: nothing is trimmed before the read-back
        keep = await Consumer.connect(ws[0], topic, "keep", "subscriptionInitialPosition=Earliest")
        await keep.close()
    stop, stop_consumers = asyncio.Event(), asyncio.Event()
    producers = [AtLeastOnceProducer(ws, t, f"p-{t}", window=4, interval_s=0.05) for t in TOPICS]
    deliveries = Deliveries()
    consumers = [
        ReconnectingConsumer(ws, t, "mem", f"c-{t}", deliveries, query="subscriptionInitialPosition=Earliest")
        for t in TOPICS
    ]
    consumer_tasks = [asyncio.create_task(c.run(stop_consumers)) for c in consumers]
    tasks = [asyncio.create_task(p.run(stop)) for p in producers]
    try:
        await acks_advance(producers)
        faults_from = time.monotonic()
        phases.append(("load running", faults_from))

        # 1. a node joins; one of the first three is decommissioned through the CLI
        (added,) = await ledgers.add_nodes(1)
        leaving = ledgers.nodes[0]
        held_before = [
            m.ledger_id
            for m in await ledgers_of(cluster)
            if any(leaving.address in s.ensemble for s in m.segments)
        ]
        assert held_before, "the node to decommission holds no ledger: nothing would be shown"
        code, out = await folio_node("decommission", leaving.address, "--url", cluster.urls[0])
        assert code == 0, out
        assert f"{leaving.address} draining: ledgers 0/" in out, out
        before_drain = {m.ledger_id for m in await ledgers_of(cluster)}
        print(f"folio node decommission: {out.strip()}")

        # a new topic's ledger goes to the new node (three writable nodes, E=3)
        fresh = await Producer.connect(ws[1], "mem-fresh")
        assert (await fresh.send(b"after the node joined"))["result"] == "ok"
        await fresh.close()

        # progress through the admin API until the node has left by itself
        views: list[dict[str, Any]] = []
        async with httpx.AsyncClient(timeout=10.0) as http:
            url = f"{cluster.urls[1]}/admin/v2/storage/nodes/{leaving.address}/decommission"

            async def left() -> bool:
                response = await http.get(url)
                assert response.status_code == 200, response.text
                views.append(response.json())
                return bool(views[-1]["state"] == "left")

            await until(left, DRAIN_TIMEOUT_S, f"{leaving.address} to drain and leave")
        assert await asyncio.to_thread(leaving.wait, 20) == 0  # it stopped by itself, cleanly
        assert "is drained" in leaving.log_text()
        final = views[-1]
        assert final["ledgersDone"] == final["ledgersTotal"] >= len(held_before), final
        assert final["bytesDone"] == final["bytesTotal"], final

        # 2. nothing names it and every copy is elsewhere, before its data dir goes
        metadata = await ledgers_of(cluster)
        assert not [m.ledger_id for m in metadata if any(leaving.address in s.ensemble for s in m.segments)]
        nodes = {n.address: n for n in ledgers.nodes if n is not leaving}
        gaps = [g for m in metadata for g in await asyncio.to_thread(missing_copies, nodes, m)]
        assert gaps == [], gaps[:10]
        newer = [m for m in metadata if m.ledger_id not in before_drain]
        assert newer, "no ledger was created after the decommission began"
        assert all(added.address in m.segments[0].ensemble for m in newer), [
            (m.ledger_id, m.segments[0].ensemble) for m in newer
        ]
        phases.append(("drained, left, copies checked", time.monotonic()))
        shutil.rmtree(leaving.data_dir)
        await acks_advance(producers)

        # 3. a rolling restart: every storage node, every gateway, the auditor
        for node in ledgers.nodes[1:]:
            await ledgers.restart(node, signal.SIGTERM)  # then start on the same data dir and port
            await acks_advance(producers)
            phases.append((f"node {node.address} restarted", time.monotonic()))
        for index, gateway in enumerate(cluster.gateways):
            await restart_gateway(gateway, ws, index)
            await acks_advance(producers)
            phases.append((f"gateway {gateway.address} restarted", time.monotonic()))
        await asyncio.to_thread(auditor.restart, signal.SIGTERM)
        await acks_advance(producers)
        faults_until = time.monotonic()
        phases.append(("auditor restarted", faults_until))
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 60)
        try:  # the consumers get what was acknowledged last
            sent = [s for p in producers for s in p.history()]
            with contextlib.suppress(AssertionError):
                await until(
                    lambda: _true(not check_history(sent, deliveries.items).lost), 20, "the last deliveries"
                )
        finally:
            stop_consumers.set()
            await asyncio.wait_for(asyncio.gather(*consumer_tasks, return_exceptions=True), 30)
            auditor.stop()
    phases.append(("clients stopped", time.monotonic()))

    # 4. nothing lost, in order, and no topic unwritable for longer than a lease
    sent = [s for p in producers for s in p.history()]
    report = check_history(sent, deliveries.items)
    print(f"live consumers: {report.line()}")
    assert report.ok, report.line()
    for producer in producers:
        acked = {id_key(i) for s in producer.history() for i in s.ok_ids}
        frames = await read_log(ws[0], producer.topic, want_ids=acked, timeout=30)
        log_report = check_history(
            producer.history(),
            [_delivered(i, producer.topic, f) for i, f in enumerate(frames)],
        )
        print(f"{producer.topic} read back from the earliest: {log_report.line()}")
        assert not log_report.lost and not log_report.order_violations, log_report.line()
    phases.append(("read back", time.monotonic()))
    print(" | ".join(f"{what} +{at - started:.1f}s" for what, at in phases))
    progress_seen = [(v["state"], v["ledgersDone"], v["ledgersTotal"]) for v in views]
    silences = {}
    for producer in producers:
        gap, since = longest_silence(producer, faults_from, faults_until)
        during = next((what for what, at in phases if at >= since), "?")
        silences[producer.topic] = gap
        at = since - started
        print(f"{producer.topic}: longest without an ack {gap:.2f}s from +{at:.1f}s (until: {during})")
    print(
        f"longest time without an ack per topic: "
        f"{ {t: round(s, 2) for t, s in silences.items()} } (bound {UNWRITABLE_MAX_S}s); "
        f"drain progress seen: {progress_seen}; "
        f"acked {report.acked}; test took {time.monotonic() - started:.1f}s"
    )
    assert max(silences.values()) <= UNWRITABLE_MAX_S, silences


async def _true(value: bool) -> bool:
    return value


def _delivered(index: int, topic: str, frame: dict[str, Any]) -> Any:
    from checkers import decode_frame

    return decode_frame(index, f"read-{topic}", frame)
