"""Writers that heal: storage nodes killed and back, with real processes.

etcd, 3 storage nodes (E=3, Qw=3, Qa=2: every ledger is on all three) and one
gateway, all real processes; a WebSocket producer that resends whatever was not
acknowledged and a consumer that reads everything (wsclient / failover_clients).
- two nodes killed -9 at once, back 8 s later: the topic's writer loses its
  write quorum; the gateway closes that ledger at its last confirmed entry and
  rolls to a new one as soon as the nodes are writable again - publishing
  resumes within RESUME_BOUND_S of the second node being back, without an
  unload (one gateway: there is nowhere to move the topic);
- one node killed and back, another killed 10 s after the first came back: the
  writer took the first node back into its ensemble, so the second loss leaves
  it two members and publishing goes on. The segment written without the
  first node records it as missing; one auditor pass copies its entries back
  to it, and then every entry of that segment is on every node of its write set.
Every acknowledged message is consumed in both. Before writers healed, a node
that failed once was never used again by that ledger: both runs ended with every
publish failing ("no writable node outside the ensemble") until an unload.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable

import pytest
from checkers import check_history
from clusters import MessagingCluster
from failover_clients import AtLeastOnceProducer, Deliveries, ReconnectingConsumer

from coordination import keys
from storage.auditor.auditor import Auditor
from storage.errors import Status
from storage.types import LedgerMetadata

pytestmark = pytest.mark.component

Cluster = Callable[..., Awaitable[MessagingCluster]]
RESUME_BOUND_S = 10.0  # generous for a loaded 2-core box; the figure is printed


async def until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)


class Workload:
    """One resending producer and one consumer of everything, on one topic."""

    def __init__(self, cluster: MessagingCluster, topic: str) -> None:
        ws = [cluster.ws(0)]
        self.deliveries = Deliveries()
        self.consumer = ReconnectingConsumer(
            ws, topic, "s", "c", self.deliveries, query="subscriptionInitialPosition=Earliest"
        )
        self.producer = AtLeastOnceProducer(ws, topic, "p", window=8, interval_s=0.005)
        self._stop_consumer, self._stop_producer = asyncio.Event(), asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        self._tasks.append(asyncio.create_task(self.consumer.run(self._stop_consumer)))
        await until(lambda: self.consumer.connects > 0, 15, "the consumer to connect")
        self._tasks.append(asyncio.create_task(self.producer.run(self._stop_producer)))
        await until(lambda: self.acked() >= 200, 30, "acks before the faults")

    def acked(self) -> int:
        return len(self.producer.acked_at)

    def first_ack_after(self, moment: float) -> float | None:
        later = [at for at in self.producer.acked_at.values() if at >= moment]
        return min(later) if later else None

    def longest_gap(self, start: float, end: float) -> float:
        times = sorted(at for at in self.producer.acked_at.values() if start <= at <= end)
        edges = [start, *times, end]
        return max(b - a for a, b in itertools.pairwise(edges))

    async def finish(self) -> str:
        """Stop publishing; every acknowledged message must be consumed."""
        self._stop_producer.set()
        await asyncio.wait_for(self._tasks[1], 60)
        sent = self.producer.history()
        deliveries = self.deliveries
        await until(lambda: not check_history(sent, deliveries.items).lost, 30, "every acked message")
        self._stop_consumer.set()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        report = check_history(sent, deliveries.items)
        assert report.ok, report.line()
        return report.line()

    async def cancel(self) -> None:
        self._stop_producer.set()
        self._stop_consumer.set()
        await asyncio.gather(*self._tasks, return_exceptions=True)


async def test_two_nodes_killed_and_back_publishing_resumes_without_an_unload(
    messaging_cluster: Cluster,
) -> None:
    cluster = await messaging_cluster(gateways=1, nodes=3)
    nodes = cluster.ledgers.nodes
    work = Workload(cluster, "heal-two-nodes")
    try:
        await work.start()
        nodes[0].kill9()
        nodes[1].kill9()
        await asyncio.sleep(8)
        await asyncio.gather(asyncio.to_thread(nodes[0].start), asyncio.to_thread(nodes[1].start))
        back_at = time.monotonic()
        acked_before = work.acked()
        await until(
            lambda: work.first_ack_after(back_at) is not None, 60, "a publish after the nodes came back"
        )
        resumed = work.first_ack_after(back_at) - back_at  # type: ignore[operator]
        await until(lambda: work.acked() >= acked_before + 300, 60, "publishing to go on")
        line = await work.finish()
    finally:
        await work.cancel()
    print(f"two nodes down 8 s: publishing resumed {resumed:.2f}s after the second node was back; {line}")
    assert resumed <= RESUME_BOUND_S


async def test_one_node_killed_back_then_another_killed_publishing_goes_on(
    messaging_cluster: Cluster,
) -> None:
    cluster = await messaging_cluster(gateways=1, nodes=3)
    nodes = cluster.ledgers.nodes
    work = Workload(cluster, "heal-one-then-another")
    try:
        await work.start()
        first_kill = time.monotonic()
        nodes[0].kill9()
        await asyncio.sleep(3)
        await asyncio.to_thread(nodes[0].start)
        await asyncio.sleep(10)
        second_kill = time.monotonic()
        nodes[1].kill9()
        acked_before = work.acked()
        await until(lambda: work.acked() >= acked_before + 300, 60, "publishing after the second kill")
        gap = work.longest_gap(first_kill, time.monotonic())
        after_second = work.first_ack_after(second_kill)
        line = await work.finish()
    finally:
        await work.cancel()
    assert after_second is not None

    # the segment written without node 0 says so; the auditor copies its entries back to it
    store = await cluster.ledgers.store()

    async def marked() -> list[tuple[LedgerMetadata, int]]:
        ledgers = [LedgerMetadata.from_json(kv.value) for kv in await store.list_prefix(keys.LEDGERS)]
        return [
            (m, i) for m in ledgers for i, seg in enumerate(m.segments) if nodes[0].address in seg.missing
        ]

    before = await marked()
    assert before, "no segment records the node the writer went on without"
    auditor = Auditor(store, "heal-auditor", grace_ms=600_000, seed=1)
    try:
        await auditor.run_once()
    finally:
        await auditor.client.close()
    assert await marked() == []
    for metadata, index in before:
        segment = metadata.segments[index]
        following = metadata.segments[index + 1 :]
        last = following[0].first_entry_id - 1 if following else metadata.last_entry_id
        with nodes[0].client() as client:
            for entry_id in range(segment.first_entry_id, last + 1):
                status, _ = client.read(metadata.ledger_id, entry_id)
                assert status is Status.OK, (metadata.ledger_id, entry_id, status)
    errors = len(work.producer.errors)
    print(
        f"one node down 3 s, another 10 s after: longest gap between acks {gap:.2f}s, first ack "
        f"{after_second - second_kill:.2f}s after the second kill, send errors {errors}; {line}"
    )
    assert gap <= RESUME_BOUND_S
