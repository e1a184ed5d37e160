"""Open-with-recovery while the old writer keeps writing, and fence durability.

Three real nodes (E=3, Qw=3, Qa=2) and real etcd. Client A appends pipelined
entries without pause; client B opens the ledger with recovery. Expected
(docs/compatibility.md §6.4-6.5): A's appends end with ``Fenced`` (nothing else), the
closed ledger's last entry is >= every entry confirmed to A, every confirmed
entry reads back intact; after a node restart (kill -9 and SIGTERM, same data
dir) the fence still holds: a normal add from the old writer is refused.
"""

from __future__ import annotations

import asyncio
import signal

import pytest
from ledger_check import check_ledger, make_payload

from storage import wire
from storage.client import LedgerClient
from storage.client.connection import NodeConnection
from storage.errors import Fenced, Status
from storage.types import LedgerState

pytestmark = pytest.mark.component

RECOVER_AFTER = 3_000  # confirmed entries before B starts recovering


async def test_recovery_fences_the_old_writer_and_keeps_every_confirmed_entry(ledger_cluster) -> None:  # type: ignore[no-untyped-def]
    cluster = await ledger_cluster(3)
    client_a = LedgerClient(await cluster.store(), seed=21)
    client_b = LedgerClient(await cluster.store(), seed=22)
    writer = await client_a.create(ensemble_size=3, write_quorum=3, ack_quorum=2)
    ledger_id = writer.ledger_id

    confirmed: dict[int, bytes] = {}
    failures: list[BaseException] = []
    enough = asyncio.Event()

    def on_done(payload: bytes, future: asyncio.Future[int]) -> None:
        error = future.exception()
        if error is not None:
            failures.append(error)
            return
        confirmed[future.result()] = payload
        if len(confirmed) >= RECOVER_AFTER:
            enough.set()

    async def keep_writing() -> None:
        seq = 0
        while writer.error is None:
            payload = make_payload(seq)
            seq += 1
            try:
                future = await writer.submit(payload)
            except Fenced:
                return
            future.add_done_callback(lambda f, p=payload: on_done(p, f))
            if seq % 64 == 0:
                await asyncio.sleep(0)  # let replies in: the writer keeps hundreds in flight

    writing = asyncio.create_task(keep_writing())
    await asyncio.wait_for(enough.wait(), 60)
    reader = await asyncio.wait_for(client_b.open(ledger_id, recover=True), 60)
    await asyncio.wait_for(writing, 60)

    # the old writer was fenced: its outstanding appends failed with Fenced and nothing else
    assert isinstance(writer.error, Fenced)
    assert failures and all(isinstance(e, Fenced) for e in failures), failures[:3]
    with pytest.raises(Fenced):
        writer.append_nowait(b"late")
    with pytest.raises(Fenced):
        await writer.close()

    closed = reader.metadata
    assert closed.state is LedgerState.CLOSED
    assert confirmed and closed.last_entry_id >= max(confirmed)
    assert sorted(confirmed) == list(range(len(confirmed)))  # confirmations were gap-free
    read_back = await asyncio.wait_for(reader.read_range(0, closed.last_entry_id), 60)
    report = check_ledger(confirmed, read_back)
    assert report.ok, report
    assert (await client_b.metadata.read(ledger_id)).last_entry_id == closed.last_entry_id

    # a second recovery converges on the same, final, last entry
    again = await client_a.open(ledger_id, recover=True)
    assert again.metadata.last_entry_id == closed.last_entry_id

    # the fence survives restarts: kill -9 one node, SIGTERM another, same data dirs
    nodes = [cluster.node(address) for address in closed.last_ensemble]
    await cluster.restart(nodes[0], signal.SIGKILL)
    await cluster.restart(nodes[1], signal.SIGTERM)
    next_entry = closed.last_entry_id + 1
    old_writer_add = wire.add_body(wire.encode_entry(ledger_id, next_entry, closed.last_entry_id, b"zombie"))
    for node in nodes:
        connection = NodeConnection(node.address)
        status, _ = await connection.request(wire.Op.ADD, old_writer_add, 10_000)
        await connection.close()
        assert status is Status.FENCED, (node.address, status)

    # CONTROL: the same add to a ledger nobody fenced is accepted, so the check can fail
    connection = NodeConnection(nodes[0].address)
    fresh = wire.add_body(wire.encode_entry(ledger_id + 1000, 0, -1, b"not fenced"))
    status, _ = await connection.request(wire.Op.ADD, fresh, 10_000)
    await connection.close()
    assert status is Status.OK

    await client_a.close()
    await client_b.close()


async def test_recovery_of_an_untouched_empty_ledger_closes_it_empty(ledger_cluster) -> None:  # type: ignore[no-untyped-def]
    cluster = await ledger_cluster(3)
    client = LedgerClient(await cluster.store(), seed=3)
    writer = await client.create()
    reader = await asyncio.wait_for(client.open(writer.ledger_id, recover=True), 30)
    assert reader.metadata.state is LedgerState.CLOSED and reader.metadata.last_entry_id == -1
    with pytest.raises(Fenced):
        await writer.append(b"too late")
    await client.close()
