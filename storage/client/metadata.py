"""Ledger metadata in the metadata store (etcd): read, create, CAS-update, delete.

Owns: every access of the ledger client to ``keys.ledger(id)``,
``keys.LEDGER_ID_COUNTER`` and the node registrations under ``keys.NODES``.
Rule (BookKeeper ``MetadataUpdateLoop``, coordination/store.py): every change
that depends on what was read goes through ``update_with_retry`` (read,
modify, compare-and-swap on mod_revision, re-read on conflict); a new ledger
is created with "must not exist" (expected revision 0); ids come from a
CAS-incremented counter so two clients never get the same id.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from coordination import keys
from coordination.store import MetadataStore, update_with_retry
from storage.errors import NoSuchLedger
from storage.types import LedgerMetadata, NodeInfo

log = logging.getLogger(__name__)

Modify = Callable[[LedgerMetadata], LedgerMetadata | None]


class LedgerMetadataStore:
    def __init__(self, store: MetadataStore) -> None:
        self.store = store

    async def allocate_ledger_id(self) -> int:
        def bump(current: bytes | None) -> bytes:
            return str((int(current) if current else 0) + 1).encode()

        value, _ = await update_with_retry(self.store, keys.LEDGER_ID_COUNTER, bump)
        assert value is not None
        return int(value) - 1  # ids start at 0; the counter holds the next free one

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
        """Registered storage nodes (their registration lives under a lease)."""
        nodes: list[NodeInfo] = []
        for kv in await self.store.list_prefix(keys.NODES):
            try:
                nodes.append(NodeInfo.from_json(kv.value))
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("ignoring unreadable node registration %s: %r", kv.key, exc)
        return nodes
