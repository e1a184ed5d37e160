"""LedgerClient: the ledger client's façade (create / open / delete / close).

Owns: the client's shared pieces (connection pool, metadata access, seeded
placement RNG) and the writers it created. Rules: a new ledger gets a fresh
id from this client's block of ids (id_block.py), above the id the caller
names (a log's ids increase), and an ensemble from ``placement`` over the live,
writable nodes (E >= Qw >= Qa >= 1); ``open(recover=True)`` fences and closes
the ledger first (recovery.py) so the returned reader sees its final length;
``open(recover=False)`` does not disturb a writer (a tailing reader bounded by
LAC); ``delete`` removes the metadata (nodes reclaim the data).
"""

from __future__ import annotations

import asyncio
import random
import weakref

from coordination.clock import Clock, SystemClock
from coordination.store import MetadataStore
from storage import wire
from storage.client import placement
from storage.client.connection import ConnectionConfig
from storage.client.metadata import LedgerMetadataStore
from storage.client.pool import CONNECTIONS_MAX, ConnectionPool
from storage.client.reader import LedgerReader
from storage.client.recovery import recover_ledger
from storage.client.write_effects import WriterConfig
from storage.client.writer import LedgerWriter
from storage.errors import LedgerClosed, MetadataConflict, Status, StorageError
from storage.ports import ASYNCIO_NETWORK, Network
from storage.types import LedgerMetadata, LedgerState, NodeId, Segment

CREATE_ATTEMPTS_MAX = 16  # ids taken by a racing client before create gives up


class LedgerClient:
    def __init__(
        self,
        store: MetadataStore,
        clock: Clock | None = None,
        seed: int | None = None,
        writer_config: WriterConfig | None = None,
        connection_config: ConnectionConfig | None = None,
        connections_max: int = CONNECTIONS_MAX,
        network: Network = ASYNCIO_NETWORK,
    ) -> None:
        self.store = store
        self.clock: Clock = clock or SystemClock()
        self.metadata = LedgerMetadataStore(store)
        self.pool = ConnectionPool(connection_config, connections_max, self.clock, network)
        self._rng = random.Random(seed)
        self._writer_config = writer_config or WriterConfig()
        self._writers: weakref.WeakSet[LedgerWriter] = weakref.WeakSet()
        self._closed = False

    async def writable_answering(self, timeout_ms: int) -> int:
        """How many live, writable nodes answer a node-info request within
        ``timeout_ms`` now: whether this client reaches a write quorum (a gateway's
        storage reach, gateway/ownership/storage_reach.py)."""
        nodes = [n.node_id for n in await self.metadata.live_nodes() if not n.read_only and not n.draining]

        async def answers(node: NodeId) -> bool:
            request = self.pool.get(node).request(int(wire.Op.NODE_INFO), b"", timeout_ms)
            try:
                status, _ = await asyncio.wait_for(request, timeout_ms / 1000)
            except (StorageError, OSError, TimeoutError):
                return False
            return status is Status.OK

        return sum(await asyncio.gather(*(answers(n) for n in nodes)))

    async def create(
        self,
        ensemble_size: int = 3,
        write_quorum: int = 3,
        ack_quorum: int = 2,
        custom: dict[str, str] | None = None,
        id_above: int = -1,
    ) -> LedgerWriter:
        """A new OPEN ledger; its id is greater than ``id_above`` (a log's last ledger)."""
        if not ensemble_size >= write_quorum >= ack_quorum >= 1:
            raise ValueError(f"need E >= Qw >= Qa >= 1, got {ensemble_size}, {write_quorum}, {ack_quorum}")
        self._check_open()
        nodes = await self.metadata.live_nodes()
        ensemble = placement.choose_ensemble(nodes, ensemble_size, self._rng)
        for _ in range(CREATE_ATTEMPTS_MAX):
            ledger_id = await self.metadata.allocate_ledger_id(id_above)
            id_above = ledger_id
            metadata = LedgerMetadata(
                ledger_id=ledger_id,
                ensemble_size=ensemble_size,
                write_quorum=write_quorum,
                ack_quorum=ack_quorum,
                state=LedgerState.OPEN,
                segments=(Segment(0, ensemble),),
                ctime_ms=self.clock.now_ms(),
                custom=dict(custom or {}),
            )
            if await self.metadata.create(metadata):
                writer = LedgerWriter(
                    metadata,
                    self.metadata,
                    self.pool,
                    self.clock,
                    self._writer_config,
                    random.Random(self._rng.getrandbits(64)),
                )
                self._writers.add(writer)
                return writer
        raise MetadataConflict(f"could not create a ledger after {CREATE_ATTEMPTS_MAX} id collisions")

    async def open(self, ledger_id: int, recover: bool = False) -> LedgerReader:
        """A reader; with ``recover`` the ledger is fenced and closed first."""
        self._check_open()
        if recover:
            metadata = await recover_ledger(self.metadata, self.pool, ledger_id)
        else:
            metadata = await self.metadata.read(ledger_id)
        reader = LedgerReader(metadata, self.metadata, self.pool, self.clock)
        if metadata.state is not LedgerState.CLOSED:
            await reader.read_lac()
        return reader

    async def delete(self, ledger_id: int) -> bool:
        self._check_open()
        return await self.metadata.delete(ledger_id)

    async def list_ledgers(self) -> list[int]:
        return await self.metadata.list_ledgers()

    def _check_open(self) -> None:
        if self._closed:
            raise LedgerClosed("the ledger client is closed")

    async def close(self) -> None:
        """Stop every writer of this client (without closing their ledgers:
        whoever takes over recovers them) and drop the connections."""
        self._closed = True
        for writer in list(self._writers):
            await writer.abandon()
        self._writers.clear()
        await self.pool.close()
