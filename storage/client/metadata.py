"""Ledger metadata in the metadata store (etcd): read, create, CAS-update, delete.

Owns: every access of the ledger client to ``keys.ledger(id)``,
``keys.LEDGER_ID_COUNTER`` and the node registrations under ``keys.NODES`` (read
with the drain records under ``keys.DRAINS``: a node being decommissioned is
``draining`` from the moment its record exists, docs/decisions/0020).
Rule (BookKeeper ``MetadataUpdateLoop``, coordination/store.py): every change
that depends on what was read goes through ``update_with_retry`` (read,
modify, compare-and-swap on mod_revision, re-read on conflict); a new ledger
is created with "must not exist" (expected revision 0); ids come from blocks
reserved by CAS on one counter (id_block.py), so two clients never get the same
id and the counter is written once per block, not once per ledger.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import replace

from coordination import keys
from coordination.store import MetadataStore, update_with_retry
from storage.client.id_block import ID_BLOCK_SIZE, IdBlock
from storage.errors import MetadataConflict, NoSuchLedger
from storage.types import LedgerMetadata, NodeInfo

log = logging.getLogger(__name__)

Modify = Callable[[LedgerMetadata], LedgerMetadata | None]


class LedgerMetadataStore:
    def __init__(self, store: MetadataStore, id_block_size: int = ID_BLOCK_SIZE) -> None:
        self.store = store
        self._ids = IdBlock(id_block_size)
        self._reserving = asyncio.Lock()  # one block reservation at a time per process

    async def allocate_ledger_id(self, above: int = -1) -> int:
        """A ledger id never handed out before, by anyone (ids start at 0), and
        greater than ``above`` (an id handed out before)."""
        ledger_id = self._ids.take(above)
        if ledger_id is not None:
            return ledger_id
        async with self._reserving:
            ledger_id = self._ids.take(above)  # another task may have reserved meanwhile
            if ledger_id is None:
                value, _ = await update_with_retry(self.store, keys.LEDGER_ID_COUNTER, self._ids.bump)
                assert value is not None
                self._ids.reserved(value)
                ledger_id = self._ids.take(above)
        if ledger_id is None:
            raise MetadataConflict(f"ledger id counter is below id {above}, which was handed out")
        return ledger_id

    async def create(self, metadata: LedgerMetadata) -> bool:
        """Store a new ledger's metadata; False if the id is already taken."""
        revision = await self.store.compare_and_swap(keys.ledger(metadata.ledger_id), metadata.to_json(), 0)
        return revision is not None

    async def read(self, ledger_id: int) -> LedgerMetadata:
        kv = await self.store.get(keys.ledger(ledger_id))
        if kv is None:
            raise NoSuchLedger(f"ledger {ledger_id} has no metadata")
        return LedgerMetadata.from_json(kv.value)

    async def update(self, ledger_id: int, modify: Modify) -> LedgerMetadata:
        """CAS loop. ``modify`` gets the current metadata and returns the new one,
        or None to leave it; it may raise a StorageError to abort. Returns what
        is stored afterwards."""
        key = keys.ledger(ledger_id)

        def step(current: bytes | None) -> bytes | None:
            if current is None:
                raise NoSuchLedger(f"ledger {ledger_id} has no metadata")
            new = modify(LedgerMetadata.from_json(current))
            return None if new is None else new.to_json()

        value, _ = await update_with_retry(self.store, key, step)
        assert value is not None
        return LedgerMetadata.from_json(value)

    async def delete(self, ledger_id: int) -> bool:
        return await self.store.delete(keys.ledger(ledger_id))

    async def list_ledgers(self) -> list[int]:
        return [keys.ledger_id_from_key(kv.key) for kv in await self.store.list_prefix(keys.LEDGERS)]

    async def live_nodes(self) -> list[NodeInfo]:
        """Registered storage nodes (their registration lives under a lease), each
        ``draining`` when it publishes so or a drain record names it."""
        registered, drains = await asyncio.gather(
            self.store.list_prefix(keys.NODES), self.store.list_prefix(keys.DRAINS)
        )
        draining = {kv.key[len(keys.DRAINS) :] for kv in drains}
        nodes: list[NodeInfo] = []
        for kv in registered:
            try:
                node = NodeInfo.from_json(kv.value)
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("ignoring unreadable node registration %s: %r", kv.key, exc)
                continue
            nodes.append(replace(node, draining=True) if node.node_id in draining else node)
        return nodes
