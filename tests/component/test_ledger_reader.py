"""Readers against real nodes: striped ledgers, LAC bound, long-poll, failover.

Four nodes, E=4, Qw=3, Qa=2 (striped: no node holds every entry, so range
reads go entry by entry through the bounded read window). A tailing reader
(no recovery) never returns past LAC; a long-poll wakes when the writer's next
add carries a higher LAC; with a node killed, every entry is still read from
another replica.
"""

from __future__ import annotations

import asyncio

import pytest
from ledger_check import check_ledger, make_payload

from storage.client import LedgerClient
from storage.client.reader import READ_WINDOW
from storage.errors import LedgerClosed, NoSuchEntry
from storage.types import LedgerState

pytestmark = pytest.mark.component

ENTRIES = 3 * READ_WINDOW + 17  # several read windows


async def test_striped_ledger_tailing_reader_long_poll_and_failover(ledger_cluster) -> None:  # type: ignore[no-untyped-def]
    cluster = await ledger_cluster(4)
    writer_client = LedgerClient(await cluster.store(), seed=31)
    reader_client = LedgerClient(await cluster.store(), seed=32)
    writer = await writer_client.create(ensemble_size=4, write_quorum=3, ack_quorum=2)
    payloads = [make_payload(seq, 256) for seq in range(ENTRIES + 1)]
    futures = [writer.append_nowait(p) for p in payloads[:ENTRIES]]
    assert await asyncio.gather(*futures) == list(range(ENTRIES))
    await writer.append(payloads[ENTRIES])  # carries LAC = ENTRIES - 1 to the nodes

    tail = await reader_client.open(writer.ledger_id, recover=False)
    assert tail.metadata.state is LedgerState.OPEN
    lac = tail.last_add_confirmed
    assert ENTRIES - 1 <= lac <= writer.last_add_confirmed
    read_back = await asyncio.wait_for(tail.read_range(0, lac), 60)
    assert check_ledger(dict(enumerate(payloads[: lac + 1])), read_back).ok
    with pytest.raises(NoSuchEntry):
        await tail.read(lac + 5)  # past LAC: refused, even if some node has it

    # long poll: wakes up when a later add carries a higher LAC
    poll = asyncio.create_task(tail.read_lac(previous=lac, timeout_ms=10_000))
    await asyncio.sleep(0.05)
    assert not poll.done()
    await writer.append(b"one more")
    await writer.append(b"and the one that carries its LAC")
    new_lac = await asyncio.wait_for(poll, 15)
    assert new_lac > lac
    assert await tail.read(new_lac) in (b"one more", payloads[ENTRIES])

    closed = await writer.close()
    assert closed.state is LedgerState.CLOSED and closed.last_entry_id == ENTRIES + 2

    # failover: kill -9 one node; every entry is still read from another replica
    cluster.node(closed.last_ensemble[0]).kill9()
    final = await reader_client.open(writer.ledger_id, recover=False)
    assert final.last_add_confirmed == ENTRIES + 2
    everything = await asyncio.wait_for(final.read_range(0, ENTRIES), 60)
    assert check_ledger(dict(enumerate(payloads)), everything).ok
    assert await final.read(ENTRIES + 2) == b"and the one that carries its LAC"
    with pytest.raises(LedgerClosed):
        await final.read(ENTRIES + 3)

    await writer_client.close()
    await reader_client.close()
