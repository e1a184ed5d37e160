"""A deleted ledger never takes an add from an old writer again (real processes).

Three real nodes (E=3, Qw=3, Qa=2), real etcd. Client B recovers client A's
empty ledger (fence), closes it empty and deletes it - as a new topic owner does
with an empty inherited ledger. A second ledger is created and deleted before any
node heard of it. Expected: A's next add to either ledger is refused (``Fenced``),
a recovery add is refused (``NO_SUCH_LEDGER``), and both still hold after every
node is killed -9 (the tombstone comes back from the journal) and after a clean
restart (from checkpoint.json). Before tombstones, a deletion made the nodes
forget the fence and A's add was acknowledged.
CONTROL: a ledger that is not deleted still takes adds on the restarted nodes.
"""

from __future__ import annotations

import asyncio
import signal

import pytest
from nodeproc import metric, metrics_text

from storage import wire
from storage.client import LedgerClient
from storage.client.connection import NodeConnection
from storage.errors import Fenced, Status
from storage.types import LedgerState

pytestmark = pytest.mark.component

DELETES = 'folio_node_ledger_ops_total{op="delete"}'


async def raw_add(address: str, ledger_id: int, recovery: bool = False) -> Status:
    connection = NodeConnection(address)
    try:
        body = wire.add_body(wire.encode_entry(ledger_id, 0, -1, b"zombie"), recovery=recovery)
        status, _ = await connection.request(wire.Op.ADD, body, 10_000)
        return status
    finally:
        await connection.close()


async def test_a_deleted_ledger_refuses_the_old_writer_also_after_restarts(ledger_cluster) -> None:  # type: ignore[no-untyped-def]
    cluster = await ledger_cluster(3)
    client_a = LedgerClient(await cluster.store(), seed=31)
    client_b = LedgerClient(await cluster.store(), seed=32)
    writer = await client_a.create(ensemble_size=3, write_quorum=3, ack_quorum=2)
    unseen = await client_a.create(ensemble_size=3, write_quorum=3, ack_quorum=2)

    reader = await asyncio.wait_for(client_b.open(writer.ledger_id, recover=True), 30)
    assert reader.metadata.state is LedgerState.CLOSED and reader.metadata.last_entry_id == -1
    assert await client_b.delete(unseen.ledger_id)  # no node ever held state for it
    assert await client_b.delete(writer.ledger_id)  # fenced on the nodes, then deleted

    def deletions_seen() -> bool:  # the nodes watch etcd's ledger keys
        return all(metric(metrics_text(node), DELETES) >= 2 for node in cluster.nodes)

    # a wait, not a check: a node that does not record deletions of ledgers it never
    # held never gets there, and the adds below tell what it does then
    for _ in range(100):
        if await asyncio.to_thread(deletions_seen):
            break
        await asyncio.sleep(0.05)

    for stale in (writer, unseen):
        with pytest.raises(Fenced):
            await asyncio.wait_for(stale.append(b"zombie write"), 30)

    async def refused_everywhere() -> None:
        for node in cluster.nodes:
            for ledger_id in (writer.ledger_id, unseen.ledger_id):
                assert await raw_add(node.address, ledger_id) is Status.FENCED, (node.address, ledger_id)
                assert await raw_add(node.address, ledger_id, recovery=True) is Status.NO_SUCH_LEDGER

    await refused_everywhere()
    for node in cluster.nodes:  # no checkpoint needed: the DELETE journal record brings it back
        await cluster.restart(node, signal.SIGKILL)
    await refused_everywhere()
    for node in cluster.nodes:  # a clean stop: the tombstones are in checkpoint.json
        await cluster.restart(node, signal.SIGTERM)
    await refused_everywhere()

    # CONTROL: a ledger that is not deleted takes the same add
    live = await client_b.create(ensemble_size=3, write_quorum=3, ack_quorum=2)
    assert await asyncio.wait_for(live.append(b"fine"), 30) == 0
    assert await raw_add(cluster.nodes[0].address, live.ledger_id + 10_000) is Status.OK

    await client_a.close()
    await client_b.close()
