"""Membership: processes announce themselves under a lease; others list and watch them.

Owns: member registration keys (e.g. ``keys.node(id)`` under ``keys.NODES``,
``keys.gateway(id)`` under ``keys.GATEWAYS``) and the member-map views.
Rule: a member key lives exactly as long as its owner's lease. Registration is
create-if-absent; a key still held under *another* live lease (an earlier
incarnation of the same id that has not expired yet, or a duplicate process)
is waited out, never silently overwritten - unless ``takeover=True``.
Member ids are the key minus the prefix.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

from coordination.errors import AlreadyExists, Compacted, LeaseLost, WatchOverflow
from coordination.prefix_view import follow_prefix
from coordination.session import LeaseSession
from coordination.store import EventKind, MetadataStore
from coordination.watch_stream import close_watch

DEFAULT_REGISTER_WAIT_S = 60.0  # how long to wait for a stale registration of our id to expire


async def register(
    store: MetadataStore,
    prefix_key: str,
    value: bytes,
    session: LeaseSession,
    *,
    takeover: bool = False,
    wait_timeout_s: float = DEFAULT_REGISTER_WAIT_S,
) -> int:
    """Put ``value`` at ``prefix_key`` (the member's full key, e.g. ``keys.node(id)``)
    under ``session``'s lease; returns the write's revision. Calling it again with the
    same session updates the value. Raises ``AlreadyExists`` if the key stays held under
    another lease for ``wait_timeout_s``, ``LeaseLost`` if the session is gone."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_timeout_s
    lease = session.lease_id
    while True:
        if session.lost.is_set():
            raise LeaseLost(f"cannot register {prefix_key}: {session.lost_reason}")
        current = await store.get(prefix_key)
        if current is None:
            expected = 0
        elif current.lease == lease or takeover:
            expected = current.mod_revision
        else:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise AlreadyExists(f"{prefix_key} is held under another lease ({current.lease:x})")
            await _wait_deleted(store, prefix_key, current.mod_revision + 1, remaining)
            continue
        revision = await store.compare_and_swap(prefix_key, value, expected, lease=lease)
        if revision is not None:
            return revision


async def deregister(store: MetadataStore, prefix_key: str, session: LeaseSession) -> bool:
    """Delete the member key if it is still held under ``session``'s lease."""
    current = await store.get(prefix_key)
    if current is None or current.lease != session.lease_id:
        return False
    return await store.compare_and_delete(prefix_key, current.mod_revision)


async def list_members(store: MetadataStore, prefix: str) -> dict[str, bytes]:
    """``{member id: value}`` of the members registered under ``prefix``."""
    return {kv.key[len(prefix) :]: kv.value for kv in await store.list_prefix(prefix)}


async def watch_members(store: MetadataStore, prefix: str) -> AsyncGenerator[dict[str, bytes], None]:
    """Yield the full live ``{member id: value}`` map now and after every change
    (list, then watch from the listing's revision + 1; re-list on Compacted or
    overflow). ``Unavailable`` propagates: restart the iteration to recover."""
    async for entries in follow_prefix(store, prefix):
        yield {key[len(prefix) :]: entry.value for key, entry in entries.items()}


async def _wait_deleted(store: MetadataStore, key: str, from_revision: int, timeout_s: float) -> None:
    watch = store.watch_prefix(key, from_revision)
    try:
        async with asyncio.timeout(timeout_s):
            async for event in watch:
                if event.key == key and event.kind is EventKind.DELETE:
                    return
    except (TimeoutError, Compacted, WatchOverflow):
        return  # the caller looks again
    finally:
        await close_watch(watch)
