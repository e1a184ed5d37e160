"""The etcd copy of one durable subscription's cursor.

Owns: the cursor key's etcd revision and which cursor revision that key holds.
Rule (docs/decisions/0005, docs/architecture.md §5): every write is a compare-and-swap on
the revision this gateway last wrote or read (0: the key must not exist yet),
and so is the delete; a lost comparison means another gateway wrote the key -
it owns the topic now - and nothing is written over its cursor.
"""

from __future__ import annotations

from coordination.store import MetadataStore


class StoredCursor:
    def __init__(self, store: MetadataStore, key: str, revision: int, stored: int) -> None:
        """``revision``: the key's etcd mod_revision (0 = not stored yet); ``stored``: the
        cursor revision (``Cursor.revision``) its value holds (-1 = unknown)."""
        self._store = store
        self._key = key
        self._revision = revision
        self._stored = stored

    def holds(self, cursor_revision: int) -> bool:
        """Does the key hold this cursor revision already?"""
        return cursor_revision == self._stored

    async def write(self, state: bytes, cursor_revision: int) -> bool:
        """Store ``state`` (the cursor at ``cursor_revision``); False when another gateway
        wrote the key since (or created it first): then nothing was written."""
        new = await self._store.compare_and_swap(self._key, state, self._revision)
        if new is None:
            return False
        self._revision = new
        self._stored = cursor_revision
        return True

    async def delete(self) -> bool:
        """Delete the key if this gateway's write is still the last one."""
        if not self._revision:
            return False
        return await self._store.compare_and_delete(self._key, self._revision)
