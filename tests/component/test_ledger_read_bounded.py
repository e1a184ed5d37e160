"""Byte-bounded range reads against real nodes (the read-ahead's fetch bound).

A ledger whose entries jump from 1 KiB to 256 KiB is read with ``max_bytes`` of
2 MiB, once where one node holds every entry (E=Qw=3: READ_RANGE replies,
each at most ``wire.RANGE_READ_BYTES_MAX``) and once striped (E=3, Qw=2:
pipelined single reads in windows that grow from small and are sized by the
largest entry seen). Each returns a correct prefix that stops soon after the
bound instead of the whole range; the control reads the same range unbounded
and gets all of it (64 MiB).
"""

from __future__ import annotations

import asyncio

import pytest
from ledger_check import make_payload

from storage import wire
from storage.client import LedgerClient
from storage.client.reader import FIRST_BOUNDED_WINDOW

pytestmark = pytest.mark.component

SMALL, LARGE = 1024, 256 * 1024
SMALL_COUNT, LARGE_COUNT = 40, 256
BOUND = 2 * 1024 * 1024


@pytest.mark.parametrize(("write_quorum", "overshoot_max"), [(3, wire.RANGE_READ_BYTES_MAX), (2, 0)])
async def test_a_bounded_range_read_stops_near_the_bound_when_entry_sizes_jump(
    ledger_cluster,  # type: ignore[no-untyped-def]
    write_quorum: int,
    overshoot_max: int,
) -> None:
    cluster = await ledger_cluster(3)
    client = LedgerClient(await cluster.store(), seed=7)
    writer = await client.create(ensemble_size=3, write_quorum=write_quorum, ack_quorum=2)
    sizes = [SMALL] * SMALL_COUNT + [LARGE] * LARGE_COUNT
    payloads = [make_payload(seq, size) for seq, size in enumerate(sizes)]
    for start in range(0, len(payloads), 16):
        await asyncio.gather(*(writer.append_nowait(p) for p in payloads[start : start + 16]))
    closed = await writer.close()
    last = closed.last_entry_id
    reader = await client.open(writer.ledger_id, recover=False)

    bounded = await asyncio.wait_for(reader.read_range(0, last, max_bytes=BOUND), 60)
    assert bounded == payloads[: len(bounded)]  # a prefix, in order, intact
    got = sum(map(len, bounded))
    assert got >= BOUND  # it read up to the bound ...
    # ... and stopped there: past it by at most one node reply (READ_RANGE) or,
    # for single reads, one window (8, 16 then 32 entries: the jump falls in the third)
    assert got <= BOUND + max(overshoot_max, 4 * FIRST_BOUNDED_WINDOW * LARGE)
    assert len(bounded) < len(payloads) // 4

    everything = await asyncio.wait_for(reader.read_range(0, last), 60)  # control: no bound
    assert everything == payloads
    await client.close()
