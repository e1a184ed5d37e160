"""What the connector reads from etcd and the ledger client (asyncio I/O).

Owns: ``connect_store`` (an etcd store, connecting retried; the writer's too),
``open_client`` (an etcd store and a ``LedgerClient`` on it),
``snapshot_logs`` (the selected topic partitions and their ledgers, each open
ledger bounded by what its storage nodes hold durably now: plan.durable_prefix) and
``read_entries`` (a range of one ledger, fetched in byte-bounded chunks from any
replica). Rules: metadata comes from etcd (coordination.keys,
storage.formats.log_record); entries come straight from the storage nodes
through storage.client, which verifies checksums and moves to another replica
on failure; nothing here talks to a gateway.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from coordination import keys
from coordination.errors import Unavailable
from coordination.etcd_store import EtcdStore, connect
from pyspark_folio.names import TopicPartition
from pyspark_folio.options import Connection, ReadOptions
from pyspark_folio.plan import LedgerSpan, LogSnapshot, durable_prefix
from storage import wire
from storage.client import LedgerClient, LedgerReader
from storage.errors import NoSuchLedger, Status
from storage.formats.log_record import decode_state

log = logging.getLogger(__name__)

CHUNK_BYTES = 4 * 1024 * 1024  # entry bytes fetched per request round of a task
LAC_TIMEOUT_MS = 5_000
CONNECT_ATTEMPTS = 5
CONNECT_RETRY_S = 1.0


async def connect_store(connection: Connection) -> EtcdStore:
    """An etcd store; connecting is retried (a loaded executor may see etcd time
    out) up to CONNECT_ATTEMPTS times before the task fails."""
    for attempt in range(CONNECT_ATTEMPTS - 1):
        try:
            return await connect(connection.etcd, namespace=connection.etcd_namespace)
        except Unavailable:
            await asyncio.sleep(CONNECT_RETRY_S * (attempt + 1))
    return await connect(connection.etcd, namespace=connection.etcd_namespace)


@asynccontextmanager
async def open_client(connection: Connection) -> AsyncIterator[tuple[EtcdStore, LedgerClient]]:
    """A store (``connect_store``) and a ledger client on it."""
    store = await connect_store(connection)
    client = LedgerClient(store)
    try:
        yield store, client
    finally:
        await client.close()
        await store.close()


async def _partitioned_bases(store: EtcdStore) -> frozenset[str]:
    return frozenset(kv.key[len(keys.PARTITIONED) :] for kv in await store.list_prefix(keys.PARTITIONED))


async def selected_logs(store: EtcdStore, options: ReadOptions) -> list[tuple[TopicPartition, bytes]]:
    """The selected logs and their etcd records, sorted by name (ValueError for a named topic not found)."""
    bases = await _partitioned_bases(store)
    chosen: list[tuple[TopicPartition, bytes]] = []
    for kv in await store.list_prefix(keys.MANAGED_LOGS):
        tp = TopicPartition.from_path(kv.key[len(keys.MANAGED_LOGS) :], bases)
        if options.selects(tp.topic, tp.name):
            chosen.append((tp, kv.value))
    if options.topics:
        found = {tp.topic for tp, _ in chosen} | {tp.name for tp, _ in chosen}
        missing = sorted(options.topics - found)
        if missing:
            raise ValueError(f"topics not found: {', '.join(missing)}; create them or check the names")
    return sorted(chosen)


async def snapshot_logs(store: EtcdStore, client: LedgerClient, options: ReadOptions) -> list[LogSnapshot]:
    """The selected logs (sorted by name) with their readable ledgers now."""
    chosen = await selected_logs(store, options)
    snapshots = await asyncio.gather(*(_snapshot(client, tp, value) for tp, value in chosen))
    return list(snapshots)


async def _snapshot(client: LedgerClient, tp: TopicPartition, value: bytes) -> LogSnapshot:
    ledgers, _, _ = decode_state(value)
    spans = [LedgerSpan(i.ledger_id, i.entries - 1, i.size, i.timestamp_ms) for i in ledgers[:-1]]
    if ledgers:
        last = ledgers[-1]
        try:
            reader = await client.open(last.ledger_id)
        except NoSuchLedger:
            log.warning("%s: ledger %d has no metadata; skipped", tp.name, last.ledger_id)
        else:
            if reader.closed:
                spans.append(
                    LedgerSpan(last.ledger_id, reader.last_add_confirmed, last.size, last.timestamp_ms)
                )
            else:
                spans.append(LedgerSpan(last.ledger_id, await _readable_bound(client, reader)))
    return LogSnapshot(tp, tuple(spans))


async def _readable_bound(client: LedgerClient, reader: LedgerReader) -> int:
    """The last entry of an open ledger a read may return now (plan.durable_prefix)."""
    metadata = reader.metadata
    segment = metadata.segments[-1]
    body = wire.read_lac_body(metadata.ledger_id, -1, 0)
    replies = await asyncio.gather(
        *(client.pool.get(node).request(wire.Op.READ_LAC, body, LAC_TIMEOUT_MS) for node in segment.ensemble),
        return_exceptions=True,
    )
    lac = reader.last_add_confirmed
    last_by_node: dict[str, int] = {}
    for node, reply in zip(segment.ensemble, replies, strict=True):
        if isinstance(reply, BaseException):
            continue
        status, data = reply
        if status is Status.OK:
            node_lac, last_by_node[node] = wire.parse_lac_reply(data)
            lac = max(lac, node_lac)
    return durable_prefix(lac, segment.first_entry_id, metadata.write_set, metadata.ack_quorum, last_by_node)


async def read_entries(
    client: LedgerClient, ledger_id: int, first: int, last: int, chunk_bytes: int = CHUNK_BYTES
) -> AsyncIterator[list[tuple[int, bytes]]]:
    """Entries ``first..last`` of a ledger, a chunk of about ``chunk_bytes`` at a time."""
    reader = await client.open(ledger_id)
    if last > reader.last_add_confirmed and not reader.closed:
        # planned up to the durable prefix, which may pass the LAC the nodes know
        reader = LedgerReader(reader.metadata, client.metadata, client.pool, client.clock, lac=last)
    next_entry = first
    while next_entry <= last:
        got = await reader.read_range_entries(next_entry, last, chunk_bytes)
        if not got:
            raise RuntimeError(f"ledger {ledger_id}: no entries from {next_entry}")
        yield [(entry.entry_id, entry.payload) for entry in got]
        next_entry = got[-1].entry_id + 1
