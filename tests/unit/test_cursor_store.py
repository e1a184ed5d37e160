"""StoredCursor: every write and the delete compare the key's revision, so a
gateway that lost the topic can neither overwrite nor delete the new owner's
cursor, nor create a subscription another gateway created first."""

from __future__ import annotations

import pytest

from coordination.clock import ManualClock
from coordination.memory_store import MemoryStore
from gateway.broker.cursor_store import StoredCursor

pytestmark = pytest.mark.unit

KEY = "/folio/cursors/public/default/t/s"


async def test_create_write_and_delete_follow_the_last_revision() -> None:
    store = MemoryStore(ManualClock())
    mine = StoredCursor(store, KEY, 0, -1)
    assert not mine.holds(1)
    assert not await mine.delete()  # nothing stored yet: nothing to delete
    assert await mine.write(b"v1", 1)
    assert mine.holds(1) and not mine.holds(2)
    assert await store.get(KEY) is not None
    assert await mine.write(b"v2", 2)
    kv = await store.get(KEY)
    assert kv is not None and kv.value == b"v2"
    assert await mine.delete()
    assert await store.get(KEY) is None


async def test_a_stale_copy_writes_and_deletes_nothing() -> None:
    store = MemoryStore(ManualClock())
    old_owner = StoredCursor(store, KEY, 0, -1)
    assert await old_owner.write(b"old", 1)
    kv = await store.get(KEY)
    assert kv is not None
    new_owner = StoredCursor(store, KEY, kv.mod_revision, 1)  # as a takeover reads it
    assert await new_owner.write(b"new", 2)
    assert not await old_owner.write(b"zombie", 3)
    assert not old_owner.holds(3)
    assert not await old_owner.delete()
    assert not await StoredCursor(store, KEY, 0, -1).write(b"second creator", 1)
    kv = await store.get(KEY)
    assert kv is not None and kv.value == b"new"
