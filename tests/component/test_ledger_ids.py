"""Ledger ids from blocks on a real etcd: no hot counter key.

Two ledger clients (as two gateways would) allocate ids 32 at a time; every id
is unique and the counter key ``/folio/ledger-id`` is written once per block
per client, not once per ledger (before blocks: once per id, and creating
10,000 topics over 2 gateways had 76 creations give up after 64 lost CAS rounds).
"""

from __future__ import annotations

import asyncio

import pytest

from coordination import keys
from coordination.etcd_store import EtcdStore
from storage.client.id_block import ID_BLOCK_SIZE
from storage.client.metadata import LedgerMetadataStore

pytestmark = pytest.mark.component

PER_CLIENT = 1500  # more than one block each
CONCURRENCY = 32


async def test_ledger_ids_are_unique_and_the_counter_is_written_once_per_block(etcd_store: EtcdStore) -> None:
    clients = [LedgerMetadataStore(etcd_store), LedgerMetadataStore(etcd_store)]
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(client: LedgerMetadataStore) -> int:
        async with gate:
            return await client.allocate_ledger_id()

    ids = await asyncio.gather(*(one(clients[i % 2]) for i in range(2 * PER_CLIENT)))
    assert len(set(ids)) == len(ids) == 2 * PER_CLIENT
    counter = await etcd_store.get(keys.LEDGER_ID_COUNTER)
    assert counter is not None
    blocks_per_client = -(-PER_CLIENT // ID_BLOCK_SIZE)
    print(f"{len(ids)} ids allocated; /folio/ledger-id written {counter.version} times")
    assert counter.version <= 2 * blocks_per_client  # one write per block per client
    assert max(ids) < int(counter.value)

    # a third client (a gateway started later) never gets an id handed out before
    later = await LedgerMetadataStore(etcd_store).allocate_ledger_id()
    assert later not in set(ids) and later >= int(counter.value)


async def test_a_log_moving_between_gateways_gets_increasing_ledger_ids(etcd_store: EtcdStore) -> None:
    """Positions order by ledger id, so a topic's next ledger must have a greater id
    than its last, wherever that one was created (another gateway's block)."""
    a, b = LedgerMetadataStore(etcd_store), LedgerMetadataStore(etcd_store)
    first = await a.allocate_ledger_id()  # gateway A owns the topic
    second = await b.allocate_ledger_id(above=first)  # it moves to B
    third = await a.allocate_ledger_id(above=second)  # and back to A
    assert first < second < third
